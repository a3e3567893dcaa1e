"""``kube-offload peer`` on the loopback clusters, exactly as a user runs it.

The demo connects its local cluster to each remote one with the real command: the CLI in
a subprocess, the cached Helm, the checkout's charts and the two admin kubeconfigs, its
output printed as it comes. Peer installs the remote chart (CRDs, enforcer, the consumer's
identity and provider-suggested node labels), stores the consumer's kubeconfig as a
Secret, installs the local chart (one vkubelet Deployment) and waits until the virtual
node is Ready.

kwok cannot run the Deployments the two charts create, so while peer waits for them the
harness starts each as a process with its exact args, under the ServiceAccount the chart
made for it (:mod:`kube_offload_harness.chart_processes`); every line the harness adds to
peer's output starts with ``[harness]``. Running it again changes nothing: peer says so,
and processes already running are left as they are.

With ``Topology.chart_pods`` the Deployments run as pods on the real nodes instead
(:mod:`kube_offload_harness.chart_pods`): peer gets the values that place them there and
the remote API server's address as pods reach it (``--remote-server``), and the harness
starts nothing.
"""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import yaml

from kube_offload import constants as C
from kube_offload import peering as p
from kube_offload_harness import chart_processes, identities
from kube_offload_harness.cluster import Cluster, ClusterError, ClusterSpec, Environment, Topology

Say = Callable[[str], None]

# The local chart as the demo installs it. The harness already runs the webhook and the
# extender as processes registered by URL (kwok cannot run their pods, and a registration
# through the chart's Service would be unreachable from a loopback apiserver, so no pod
# of an offloaded namespace could be created); with neither, no certificate needs renewal.
LOCAL_VALUES = {
    "webhook": {"enabled": False},
    "extender": {"enabled": False},
    "scheduler": {"enabled": False},
    "certificates": {"renewal": {"enabled": False}},
    # The per-pod opt-in RuntimeClass goes with the webhook, which the harness runs as a
    # process: `up` applied the class beside the webhook's registration, and the class's
    # name is fixed (pods name it), so this release must not claim it.
    "optIn": {"runtimeClass": False},
}
POLL_SECONDS = 1.0
PEER_TIMEOUT_SECONDS = 420  # peer's own waits are 5 minutes each at most (--timeout)
ENFORCER_DEPLOYMENT = f"{p.chart_fullname(p.DEFAULT_RELEASE)}-enforcer"


def local_values_file(env: Environment) -> Path:
    path = env.state_dir / "peer-local-values.yaml"
    path.write_text("# kube-offload demo: the harness runs the webhook and the extender as processes\n"
                    + yaml.safe_dump(LOCAL_VALUES))
    return path


def peer_flags(env: Environment, topology: Topology, spec: ClusterSpec, values: Path,
               remote_values: Path | None = None) -> list[tuple[str, str, str]]:
    """(flag, value, value as printed) for ``kube-offload peer``: the kubeconfigs print
    as $LOCAL / $REMOTE, the variables the demo sets first."""
    local, remote = env.cluster(topology.local), env.cluster(spec)
    helm = str(env.bins.helm)
    home = str(Path.home())
    flags = [
        ("--local-kubeconfig", str(local.kubeconfig), "$LOCAL"),
        ("--remote-kubeconfig", str(remote.kubeconfig), "$REMOTE"),
        ("--local-cluster-id", topology.local.cluster_id, topology.local.cluster_id),
        ("--remote-cluster-id", spec.cluster_id, spec.cluster_id),
    ]
    server = remote_server(env, topology, spec)
    flags.append(("--remote-server", server, server))
    flags += [("--node-label", f"{k}={v}", f"{k}={v}") for k, v in sorted(spec.labels.items())]
    # A provider admits no consumer without a bound (docs/security.md, "Quota: what counts").
    quota = ",".join(f"{k}={v}" for k, v in sorted((spec.quota or identities.E2E_QUOTA).items()))
    flags.append(("--quota", quota, quota))
    flags.append(("--local-values", str(values), str(values).replace(home, "~", 1)))
    if remote_values is not None:
        flags.append(("--remote-values", str(remote_values), str(remote_values).replace(home, "~", 1)))
    if topology.chart_pods:
        # The remote's real node is tainted like the local one: offloaded pods that
        # tolerate it may run there (the provider grants the toleration, docs/security.md).
        from kube_offload_harness.real_node_config import REAL_NODE_KEY

        flags.append(("--grant-tolerations", REAL_NODE_KEY, REAL_NODE_KEY))
        from kube_offload_harness import chart_pods

        flags += [(flag, value, value) for flag, value in chart_pods.peer_flags(env, topology)]
        from kube_offload_harness.cluster import pods_on_real_node

        if pods_on_real_node(topology, spec) and _release_has_gateway(topology):
            # kube-offload's gateways join the two pod networks (docs/networking.md)
            from kube_offload_harness import fabric_gateways

            flags += [(flag, value, value) for flag, value in fabric_gateways.peer_flags(env, topology, spec)]
    flags.append(("--helm", helm, helm.replace(home, "~", 1)))
    return flags


def _release_has_gateway(topology: Topology) -> bool:
    """Whether the release peer installs has the gateway: the checkout's does; a previous
    release (the day-2 upgrade test's) may be older than it (previous_release.has_gateway)."""
    if not topology.previous_release:
        return True
    from kube_offload_harness import previous_release

    return previous_release.has_gateway(topology.previous_release)


def remote_server(env: Environment, topology: Topology, spec: ClusterSpec) -> str:
    """The remote API server as the vkubelet reaches it: a pod on the local real node
    reaches the remote's apiserver on the machine end of the remote's node link; a
    process of the harness reaches it where the remote kubeconfig says (loopback)."""
    config = yaml.safe_load(env.cluster(spec).kubeconfig.read_text())
    if not topology.chart_pods:
        return config["clusters"][0]["cluster"]["server"]
    from kube_offload_harness import chart_pods, real_node

    return chart_pods.apiserver_url_for_pods(env.real_node(spec).plan.host_ip, real_node.apiserver_port(config))


def peer(env: Environment, topology: Topology, spec: ClusterSpec, *, say: Say, extra: tuple[str, ...] = ()) -> None:
    """Run ``kube-offload peer`` for ``spec`` (``extra``: more switches, e.g.
    ``--rotate-gateway-keys``) and start what kwok cannot run; raises ClusterError if peer
    fails (its output, printed above, says why)."""
    local, remote = env.cluster(topology.local), env.cluster(spec)
    if topology.chart_pods:
        from kube_offload_harness import chart_pods

        flags = peer_flags(env, topology, spec, chart_pods.local_values_file(env, topology),
                           chart_pods.remote_values_file(env, topology))
    else:
        flags = peer_flags(env, topology, spec, local_values_file(env))
    flags += [(switch, "", "") for switch in extra]
    # A flag with an empty value is a switch (--gateway).
    say("$ kube-offload peer " + " ".join(f"{flag} {shown}".rstrip() for flag, _, shown in flags))
    argv = [sys.executable, "-m", "kube_offload.cli", "peer", *(x for flag, value, _ in flags for x in ((flag, value) if value else (flag,)))]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env._process_env())
    lines: queue.Queue[str | None] = queue.Queue()
    reader = threading.Thread(target=_read_lines, args=(process, lines), daemon=True)
    reader.start()
    runner = None if topology.chart_pods else _ChartRunner(env, local, remote, spec, say)
    deadline = time.monotonic() + PEER_TIMEOUT_SECONDS
    finished = False
    try:
        while not finished:
            finished = _forward(lines, say)
            if not finished:
                if runner is not None:
                    runner.step()
                if time.monotonic() > deadline:
                    raise ClusterError(f"kube-offload peer did not finish within {PEER_TIMEOUT_SECONDS}s")
                time.sleep(POLL_SECONDS)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
    if process.returncode != 0:
        raise ClusterError(f"`kube-offload peer` failed (exit {process.returncode}); its output is above. "
                           f"Harness logs: {env.state_dir / 'logs'}")


def _read_lines(process: subprocess.Popen, lines: "queue.Queue[str | None]") -> None:
    assert process.stdout is not None
    for line in process.stdout:
        lines.put(line.rstrip("\n"))
    lines.put(None)


def _forward(lines: "queue.Queue[str | None]", say: Say) -> bool:
    """Print what peer wrote so far; True once it closed its output."""
    while True:
        try:
            line = lines.get_nowait()
        except queue.Empty:
            return False
        if line is None:
            return True
        say(line)


class _ChartRunner:
    """Starts the enforcer once the remote release has its Deployment and webhook
    registration, and the vkubelet once the local release has its Deployment."""

    def __init__(self, env: Environment, local: Cluster, remote: Cluster, spec: ClusterSpec, say: Say) -> None:
        self.env, self.local, self.remote, self.spec, self.say = env, local, remote, spec, say
        self.enforcer = f"enforcer-{spec.cluster_id}"
        self.vkubelet = f"vkubelet-{spec.cluster_id}"
        self.vkubelet_deployment = p.vkubelet_deployment_name(p.DEFAULT_RELEASE, spec.cluster_id)
        self.enforcer_started = self.vkubelet_started = False

    def step(self) -> None:
        if not self.enforcer_started and self._exists(self.remote, "deployment", ENFORCER_DEPLOYMENT, "-n", p.DEFAULT_NAMESPACE) \
                and self._exists(self.remote, "validatingwebhookconfiguration", C.SHADOWPOD_WEBHOOK_CONFIGURATION):
            self._start_enforcer()
        if not self.vkubelet_started and self._exists(self.local, "deployment", self.vkubelet_deployment, "-n", p.DEFAULT_NAMESPACE):
            self._start_vkubelet()

    @staticmethod
    def _exists(cluster: Cluster, *what: str) -> bool:
        return cluster.kubectl("get", *what, "-o", "name", check=False).returncode == 0

    def _start_enforcer(self) -> None:
        port = self.spec.enforcer_webhook_port
        chart_processes.start_enforcer(self.env, self.remote, namespace=p.DEFAULT_NAMESPACE, deployment=ENFORCER_DEPLOYMENT,
                                       process=self.enforcer, webhook_port=port)
        chart_processes.register_enforcer_webhook(self.env, self.remote, port)
        self.enforcer_started = True
        self.say(f"  [harness] kwok only pretends to run Deployment {p.DEFAULT_NAMESPACE}/{ENFORCER_DEPLOYMENT}: its args run "
                 f"as a process under its ServiceAccount; the ShadowPod webhook now points at https://127.0.0.1:{port}")

    def _start_vkubelet(self) -> None:
        # The loopback apiserver's kubelet client certificate is signed by a CA of the
        # harness (kwokctl gives it none); on kubeadm and kind the cluster CA a pod finds
        # at the chart's kubeletClientCA path signs it.
        chart_processes.start_vkubelet(
            self.env, self.local, namespace=p.DEFAULT_NAMESPACE, deployment=self.vkubelet_deployment, process=self.vkubelet,
            kubelet_port=self.spec.kubelet_port, service_account_ca=self.env.pki_dir / "kubelet-client-ca.crt",
        )
        self.vkubelet_started = True
        self.say(f"  [harness] kwok only pretends to run Deployment {p.DEFAULT_NAMESPACE}/{self.vkubelet_deployment}: its args "
                 f"run as a process under its ServiceAccount, with the kubeconfig peer stored in its Secret")
