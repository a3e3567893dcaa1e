"""Second replicas of the leader-elected components (the vkubelet of one remote cluster,
the enforcer of one remote cluster), started as the charts' second replica runs: the
same flags as the harness's own process, with ports of their own. Used by
tests/e2e/test_leader_election.py and bench/bench_scale.py --failover; the processes
are recorded in the environment's process table, so ``down`` stops them too.

A Service sends the ShadowPod webhook's calls to whichever enforcer replica is Ready
(the leader). The harness registers the webhook by URL instead, at one port:
:func:`route_shadowpod_webhook` re-registers it at another replica's port, which is what
the Service's endpoints do when the Ready replica changes.
"""

from __future__ import annotations

import dataclasses
import urllib.error
import urllib.request
from dataclasses import dataclass

from kube_offload_harness import identities
from kube_offload_harness.cluster import ClusterSpec, Environment, Topology, free_port


@dataclass(frozen=True)
class Standby:
    name: str  # in the process table
    health_port: int
    kubelet_port: int = 0  # vkubelet: its kubelet API
    webhook_port: int = 0  # enforcer: its ShadowPod webhook


def vkubelet_name(spec: ClusterSpec) -> str:
    """The harness's own vkubelet of ``spec`` in the process table."""
    return f"vkubelet-{spec.cluster_id}"


def enforcer_name(spec: ClusterSpec) -> str:
    """The harness's own enforcer of ``spec`` in the process table."""
    return f"enforcer-{spec.cluster_id}"


def start_vkubelet_standby(env: Environment, topology: Topology, spec: ClusterSpec) -> Standby:
    standby = Standby(name=f"{vkubelet_name(spec)}-standby", health_port=free_port(), kubelet_port=free_port())
    argv = env.vkubelet_argv(topology, spec) + [
        # argparse keeps the last occurrence: these override the harness's ports.
        "--kubelet-port", str(standby.kubelet_port), "--health-bind", f"127.0.0.1:{standby.health_port}",
    ]
    env.processes.start(standby.name, argv, log=env.log_path(standby.name), env=env._process_env())
    return standby


def start_enforcer_standby(env: Environment, spec: ClusterSpec) -> Standby:
    standby = Standby(name=f"{enforcer_name(spec)}-standby", health_port=free_port(), webhook_port=free_port())
    argv = env._component_argv(
        "enforcer", "--kubeconfig", str(env.component_kubeconfig(env.cluster(spec), identities.ENFORCER_SA)),
        "--consumer-twin-role", identities.CONSUMER_TWIN_ROLE,
        "--webhook-bind", f"127.0.0.1:{standby.webhook_port}",
        "--webhook-tls-cert", str(env.pki_dir / "tls.crt"), "--webhook-tls-key", str(env.pki_dir / "tls.key"),
        "--health-bind", f"127.0.0.1:{standby.health_port}",
    )
    env.processes.start(standby.name, argv, log=env.log_path(standby.name), env=env._process_env())
    return standby


def route_shadowpod_webhook(env: Environment, spec: ClusterSpec, port: int) -> None:
    """Register the ShadowPod webhook of ``spec``'s cluster at ``port`` on loopback."""
    env._register_enforcer_webhook(dataclasses.replace(spec, enforcer_webhook_port=port))


def readyz(port: int, *, timeout: float = 3.0) -> tuple[int, str]:
    """(status, body) of ``/readyz?verbose`` on a health port; (0, reason) when nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz?verbose", timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, str(exc)
