"""The charts' Deployments that kwok cannot run, run as local processes.

kwok only *pretends* to run pods: after ``kube-offload peer`` installed the remote chart
(the enforcer Deployment) and the local chart (one vkubelet Deployment per remote), no
process would serve the ShadowPod webhook or make the virtual node Ready. The harness
reads each Deployment back from its cluster and starts its container's exact ``args`` as
a process, with a kubeconfig from a TokenRequest of the ServiceAccount the Deployment runs
as (the pod's own identity, never an admin). Where the container reads a mounted file, the
process gets the same content (the vkubelet's remote kubeconfig is the one ``peer`` stored
in the Secret the Deployment mounts). That file is a copy made at start, where a pod's
mount would follow the Secret within a minute; the vkubelet does not depend on either: it
follows a renewed token by reading the Secret through the API (vkubelet/credentials.py),
as the chart's Role lets it, so the process sees every rotation as a pod would. Only what
a loopback process cannot share with a pod changes, and the pure functions below say
exactly what:

- ``$(POD_IP)`` and container ports become 127.0.0.1 and the harness's ports (the
  health port, 0.0.0.0 in a pod, is any free port on 127.0.0.1 unless one is given);
- the serving certificates are the harness's (for IP 127.0.0.1);
- the CA a pod finds at :data:`SERVICE_ACCOUNT_CA` is given as a file.

The remote chart registers the enforcer's webhooks through a Service, which no loopback
apiserver can reach: :func:`register_enforcer_webhook` points that registration at the
process by URL, as ``kube-offload enforcer configuration --url`` would. A later
``helm upgrade`` of the remote release meets a URL it never wrote and is refused by the
API; put the chart's registration back first (:func:`set_enforcer_webhook_client_config`).

Used by ``kube-offload demo`` and tests/e2e/test_peering.py.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from kube_offload import constants as C
from kube_offload_harness import identities

if TYPE_CHECKING:  # cluster.py imports nothing from here; avoid the cycle at run time
    from kube_offload_harness.cluster import Cluster, Environment

# Mounted into every pod by its ServiceAccount volume.
SERVICE_ACCOUNT_CA = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
POD_IP = "$(POD_IP)"
LOOPBACK = "127.0.0.1"


# --- pure: a Deployment's args -> the process's args -----------------------------------------
def _replace_flag(args: Sequence[str], flag: str, value: str) -> list[str]:
    """``args`` with ``flag=...`` set to ``value``; refuses args that lack it, so a chart
    change that drops or renames the flag fails here instead of running something else."""
    prefix = f"{flag}="
    if not any(a.startswith(prefix) for a in args):
        raise ValueError(f"the chart's container args have no {flag}=...: {' '.join(args)}")
    return [f"{prefix}{value}" if a.startswith(prefix) else a for a in args]


def enforcer_args(
    chart_args: Sequence[str], *, webhook_port: int, tls_cert: Path, tls_key: Path, health_port: int = 0
) -> list[str]:
    """The enforcer container's args for a process: the webhook on 127.0.0.1:``webhook_port``
    with the harness's certificate, the health port on 127.0.0.1:``health_port``."""
    args = _replace_flag(chart_args, "--webhook-bind", f"{LOOPBACK}:{webhook_port}")
    args = _replace_flag(args, "--health-bind", f"{LOOPBACK}:{health_port}")
    args = _replace_flag(args, "--webhook-tls-cert", str(tls_cert))
    return _replace_flag(args, "--webhook-tls-key", str(tls_key))


def vkubelet_args(
    chart_args: Sequence[str],
    *,
    remote_kubeconfig: Path,
    kubelet_port: int,
    service_account_ca: Path,
    tls_cert: Path,
    tls_key: Path,
    health_port: int = 0,
) -> list[str]:
    """A vkubelet container's args for a process: the remote kubeconfig from its Secret,
    the kubelet API on 127.0.0.1:``kubelet_port`` with the harness's certificate, the
    health port on 127.0.0.1:``health_port``, and ``service_account_ca`` wherever the
    container reads the pod's CA file."""
    args = _replace_flag(chart_args, "--remote-kubeconfig", str(remote_kubeconfig))
    args = _replace_flag(args, "--health-bind", f"{LOOPBACK}:{health_port}")
    args = [f"--node-address={LOOPBACK}" if a == f"--node-address={POD_IP}" else a for a in args]
    args = _replace_flag(args, "--kubelet-port", str(kubelet_port))
    args = [a.replace(f"={SERVICE_ACCOUNT_CA}", f"={service_account_ca}") for a in args]
    if any(POD_IP in a for a in args):
        raise ValueError(f"the chart's vkubelet args use {POD_IP} where the harness does not expect it: {' '.join(args)}")
    return [*args, "--kubelet-tls-cert", str(tls_cert), "--kubelet-tls-key", str(tls_key)]


def url_client_config(port: int, ca_pem: bytes, path: str = C.SHADOWPOD_WEBHOOK_PATH) -> dict:
    """A webhook's clientConfig by URL, for the enforcer process on ``port`` (the
    ShadowPod webhook's unless ``path`` says otherwise)."""
    return {"url": f"https://{LOOPBACK}:{port}{path}", "caBundle": base64.b64encode(ca_pem).decode()}


def url_client_configs(registration: dict, port: int, ca_pem: bytes) -> list[dict]:
    """The clientConfig by URL of each webhook of the enforcer's registration, each to
    the path its Service reference names."""
    configs = []
    for webhook in registration.get("webhooks") or []:
        service = (webhook.get("clientConfig") or {}).get("service") or {}
        configs.append(url_client_config(port, ca_pem, service.get("path") or C.SHADOWPOD_WEBHOOK_PATH))
    return configs


# --- I/O: read the Deployment, start the process ----------------------------------------------
def pod_template(cluster: "Cluster", namespace: str, deployment: str) -> dict:
    return cluster.kubectl_json("get", "deployment", deployment, "-n", namespace)["spec"]["template"]["spec"]


def deployment_identity(template: dict, namespace: str) -> tuple[list[str], identities.ServiceAccountRef]:
    """The first container's args and the ServiceAccount the pods run as."""
    args = list(template["containers"][0].get("args") or [])
    return args, identities.ServiceAccountRef(namespace, template.get("serviceAccountName") or "default")


def start_enforcer(env: "Environment", remote: "Cluster", *, namespace: str, deployment: str, process: str, webhook_port: int) -> None:
    """Start the remote chart's enforcer Deployment as process ``process`` (already running:
    left as it is) and wait until its webhook answers."""
    chart_args, account = deployment_identity(pod_template(remote, namespace, deployment), namespace)
    args = enforcer_args(chart_args, webhook_port=webhook_port,
                         tls_cert=env.pki_dir / "tls.crt", tls_key=env.pki_dir / "tls.key")
    argv = env._component_argv(*args, "--kubeconfig", str(env.identity_kubeconfig(remote, account)))
    env.processes.start(process, argv, log=env.log_path(process), env=env._process_env())
    env._wait_https_ready(process, webhook_port)


def register_enforcer_webhook(env: "Environment", remote: "Cluster", webhook_port: int) -> list[dict]:
    """Point the chart's registration of the enforcer's webhooks (ShadowPods,
    EndpointSlices) at the enforcer process; returns the clientConfigs they had (to put
    back before a ``helm upgrade``)."""
    current = remote.kubectl_json("get", "validatingwebhookconfiguration", C.SHADOWPOD_WEBHOOK_CONFIGURATION)
    before = [webhook["clientConfig"] for webhook in current["webhooks"]]
    set_enforcer_webhook_client_config(remote, url_client_configs(current, webhook_port, (env.pki_dir / "ca.crt").read_bytes()))
    return before


def set_enforcer_webhook_client_config(remote: "Cluster", client_configs: list[dict]) -> None:
    """Set the clientConfig of each webhook of the enforcer's registration, in order."""
    patch = [{"op": "replace", "path": f"/webhooks/{i}/clientConfig", "value": config} for i, config in enumerate(client_configs)]
    remote.kubectl("patch", "validatingwebhookconfiguration", C.SHADOWPOD_WEBHOOK_CONFIGURATION,
                   "--type=json", "-p", json.dumps(patch))


def start_vkubelet(
    env: "Environment",
    local: "Cluster",
    *,
    namespace: str,
    deployment: str,
    process: str,
    kubelet_port: int,
    service_account_ca: Path,
) -> None:
    """Start a local chart's vkubelet Deployment as process ``process`` (already running:
    left as it is), with the kubeconfig in the Secret its pod mounts."""
    template = pod_template(local, namespace, deployment)
    chart_args, account = deployment_identity(template, namespace)
    remote_kubeconfig = env.state_dir / "identities" / f"{process}-remote-kubeconfig.yaml"
    remote_kubeconfig.parent.mkdir(parents=True, exist_ok=True)
    remote_kubeconfig.write_bytes(_mounted_kubeconfig(local, namespace, template))
    remote_kubeconfig.chmod(0o600)
    args = vkubelet_args(chart_args, remote_kubeconfig=remote_kubeconfig, kubelet_port=kubelet_port,
                         service_account_ca=service_account_ca,
                         tls_cert=env.pki_dir / "tls.crt", tls_key=env.pki_dir / "tls.key")
    argv = env._component_argv(*args, "--local-kubeconfig", str(env.identity_kubeconfig(local, account)))
    env.processes.start(process, argv, log=env.log_path(process), env=env._process_env())


def _mounted_kubeconfig(local: "Cluster", namespace: str, template: dict) -> bytes:
    """The kubeconfig file the vkubelet pod sees: the Secret volume the chart mounts."""
    [volume] = [v for v in template.get("volumes") or [] if v.get("name") == "remote-kubeconfig"]
    secret = local.kubectl_json("get", "secret", volume["secret"]["secretName"], "-n", namespace)
    [item] = volume["secret"].get("items") or [{"key": "kubeconfig"}]
    return base64.b64decode(secret["data"][item["key"]])


def service_account_ca(env: "Environment", local: "Cluster", namespace: str) -> Path:
    """What a pod of ``namespace`` finds at SERVICE_ACCOUNT_CA: its kube-root-ca.crt."""
    config_map = local.kubectl_json("get", "configmap", "kube-root-ca.crt", "-n", namespace)
    path = env.state_dir / "identities" / f"{local.name}--{namespace}--ca.crt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(config_map["data"]["ca.crt"])
    return path
