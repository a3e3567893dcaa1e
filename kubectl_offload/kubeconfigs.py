"""Which clusters ``kubectl offload`` talks to, and as whom.

The local cluster: as kubectl finds it (``--kubeconfig``, else ``$KUBECONFIG``, else
``~/.kube/config``, else the in-cluster service account; ``--context``; the context's
namespace unless ``-n``).

The providers: each remote cluster's kubeconfig, looked up in this order:

1. ``--remote-kubeconfig ID=PATH`` (repeatable);
2. the local chart's virtual-kubelet Deployments (label
   ``app.kubernetes.io/component=vkubelet``): each names its remote cluster
   (``kube-offload.io/cluster-id``) and mounts the kubeconfig Secret it runs with;
3. the Secret ``<id>-kubeconfig`` that ``kube-offload peer`` writes in the release
   namespace (``kube-offload``).

Those Secrets hold the *consumer's* kubeconfig: least privilege, enough for everything
``explain`` and ``status`` read (the Consumer, TwinNamespaces, the twin namespaces).
The local cluster id (twin-namespace names, the Consumer's name) comes from
``--local-cluster-id``, the Deployments' ``--local-cluster-id`` argument, the consumer
identity's own name on a provider (``system:serviceaccount:kube-offload-tenant-<id>:consumer``)
or, with a provider admin's kubeconfig, its only Consumer.
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import yaml
from kubernetes import client, config
from urllib3.util import Retry
from kubernetes.config.config_exception import ConfigException

from kube_offload import constants as c
from kube_offload.runtime import kinds
from kube_offload.runtime.kube import NO_RETRY, ApiError, Kube
from kube_offload.peering import DEFAULT_NAMESPACE, KUBECONFIG_KEY, kubeconfig_secret_name

COMPONENT_LABEL = "app.kubernetes.io/component"
VKUBELET_COMPONENT = "vkubelet"
WEBHOOK_COMPONENT = "webhook"
REMOTE_KUBECONFIG_VOLUME = "remote-kubeconfig"  # the local chart's vkubelet Deployment
IN_CLUSTER_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
DEFAULT_REQUEST_TIMEOUT = 10.0


# The client's urllib3 default retries a GET that timed out three times: against a frozen API
# server every read would cost four request timeouts. One connection retry, no read retry.
RETRIES = Retry(total=1, read=0, redirect=0)


def _api(load: Callable[..., Any], *args: Any, **kwargs: Any) -> client.ApiClient:
    """An ApiClient configured by ``load(..., client_configuration=)`` with :data:`RETRIES`
    (the retries are read when the client's connection pool is made, so set before)."""
    configuration = client.Configuration()
    load(*args, client_configuration=configuration, **kwargs)
    configuration.retries = RETRIES
    return client.ApiClient(configuration)


class PluginError(RuntimeError):
    """Something the user can fix (a flag, a kubeconfig, a permission); the message says how."""


# --- pure parsing ----------------------------------------------------------------------------
def parse_remote_flags(values: Iterable[str]) -> dict[str, str]:
    """``--remote-kubeconfig ID=PATH`` values as {id: path}."""
    found: dict[str, str] = {}
    for value in values:
        cluster_id, sep, path = value.partition("=")
        if not sep or not cluster_id.strip() or not path.strip():
            raise PluginError(
                f"--remote-kubeconfig {value!r}: expected ID=PATH, e.g. --remote-kubeconfig remote-1=./remote-1.yaml"
            )
        found[cluster_id.strip()] = path.strip()
    return found


def _arg_value(args: Iterable[str], flag: str) -> str | None:
    items = list(args)
    for index, arg in enumerate(items):
        if arg.startswith(flag + "="):
            return arg[len(flag) + 1:]
        if arg == flag and index + 1 < len(items):
            return items[index + 1]
    return None


@dataclass(frozen=True)
class VkubeletDeployment:
    """What one virtual-kubelet Deployment of the local chart says about its remote."""

    cluster_id: str
    namespace: str
    secret: str
    key: str
    local_cluster_id: str


def _containers(deployment: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    spec = (((deployment.get("spec") or {}).get("template") or {}).get("spec")) or {}
    return [ct for ct in spec.get("containers") or [] if isinstance(ct, Mapping)]


def parse_vkubelet_deployment(deployment: Mapping[str, Any]) -> VkubeletDeployment | None:
    """None when ``deployment`` is not one the chart renders for a remote cluster."""
    meta = deployment.get("metadata") or {}
    labels = meta.get("labels") or {}
    cluster_id = labels.get(c.LABEL_CLUSTER_ID)
    if labels.get(COMPONENT_LABEL) != VKUBELET_COMPONENT or not cluster_id:
        return None
    pod_spec = (((deployment.get("spec") or {}).get("template") or {}).get("spec")) or {}
    secret, key = "", KUBECONFIG_KEY
    for volume in pod_spec.get("volumes") or []:
        if volume.get("name") == REMOTE_KUBECONFIG_VOLUME and volume.get("secret"):
            secret = str(volume["secret"].get("secretName") or "")
            items = volume["secret"].get("items") or []
            if items:
                key = str(items[0].get("key") or KUBECONFIG_KEY)
    local_id = ""
    for container in _containers(deployment):
        local_id = _arg_value(container.get("args") or [], "--local-cluster-id") or local_id
    return VkubeletDeployment(
        cluster_id=str(cluster_id), namespace=str(meta.get("namespace") or ""), secret=secret, key=key,
        local_cluster_id=local_id,
    )


def webhook_scheduler_name(deployments: Iterable[Mapping[str, Any]]) -> str | None:
    """The ``--scheduler-name`` the local chart's webhook runs with (None: it sets none)."""
    for deployment in deployments:
        if ((deployment.get("metadata") or {}).get("labels") or {}).get(COMPONENT_LABEL) != WEBHOOK_COMPONENT:
            continue
        for container in _containers(deployment):
            name = _arg_value(container.get("args") or [], "--scheduler-name")
            if name:
                return name
    return None


def local_id_from_username(username: str) -> str | None:
    """``system:serviceaccount:kube-offload-tenant-<id>:consumer`` -> ``<id>``."""
    parts = username.split(":")
    if len(parts) != 4 or parts[:2] != ["system", "serviceaccount"] or parts[3] != c.CONSUMER_SERVICE_ACCOUNT:
        return None
    namespace = parts[2]
    if not namespace.startswith(c.TENANT_NAMESPACE_PREFIX):
        return None
    return namespace[len(c.TENANT_NAMESPACE_PREFIX):] or None


def context_namespace(contexts: list[Mapping[str, Any]], active: Mapping[str, Any] | None, wanted: str | None) -> str:
    """The namespace of context ``wanted`` (else the active one), "default" when it sets none."""
    chosen = active
    if wanted:
        chosen = next((ctx for ctx in contexts if ctx.get("name") == wanted), None)
        if chosen is None:
            names = ", ".join(str(ctx.get("name")) for ctx in contexts) or "none"
            raise PluginError(f"--context {wanted!r} is not in the kubeconfig (it has: {names})")
    return str(((chosen or {}).get("context") or {}).get("namespace") or "default")


# --- the local cluster -----------------------------------------------------------------------
@dataclass
class LocalCluster:
    api: client.ApiClient
    namespace: str  # the context's namespace (kubectl's default for -n)
    source: str  # where the credentials came from, for messages
    timeout: float = DEFAULT_REQUEST_TIMEOUT

    @property
    def kube(self) -> Kube:
        return kube_of(self.api, self.timeout)


def kube_of(api: client.ApiClient, timeout: float) -> Kube:
    """The API verbs on ``api`` with the plugin's timeout and one try a request: the
    connection pool retries once already (:data:`RETRIES`), and a frozen server must cost
    one timeout, not one per try."""
    return Kube(api, timeout=(timeout, timeout), retry=NO_RETRY)


def load_local(kubeconfig: str | None, context: str | None, *, timeout: float = DEFAULT_REQUEST_TIMEOUT) -> LocalCluster:
    if kubeconfig:
        if not os.path.exists(kubeconfig):
            raise PluginError(f"--kubeconfig {kubeconfig!r} does not exist; pass a readable kubeconfig file")
        path: str | None = kubeconfig
    else:
        env = os.environ.get("KUBECONFIG", "")
        candidates = [p for p in env.split(os.pathsep) if p] if env else [os.path.expanduser("~/.kube/config")]
        path = env if env else candidates[0]
        if not any(os.path.exists(p) for p in candidates):
            path = None
    if path is None:
        try:
            api = _api(config.load_incluster_config)
        except ConfigException:
            raise PluginError(
                "no kubeconfig: pass --kubeconfig, set KUBECONFIG, or create ~/.kube/config (kubectl config view)"
            ) from None
        namespace = IN_CLUSTER_NAMESPACE_FILE.read_text().strip() if IN_CLUSTER_NAMESPACE_FILE.exists() else "default"
        return LocalCluster(api, namespace, "in-cluster service account", timeout)
    try:
        contexts, active = config.list_kube_config_contexts(config_file=path)
        namespace = context_namespace(contexts, active, context)
        api = _api(config.load_kube_config, config_file=path, context=context)
    except ConfigException as exc:
        raise PluginError(f"kubeconfig {path}: {exc} (check --kubeconfig and --context)") from None
    return LocalCluster(api, namespace, f"kubeconfig {path}", timeout)


# --- the providers -----------------------------------------------------------------------------
@dataclass
class RemoteTarget:
    cluster_id: str
    api: client.ApiClient | None
    source: str  # where its kubeconfig came from
    error: str = ""  # why there is no client


@dataclass
class Remotes:
    """Provider clients by remote cluster id, with what the local chart tells about them."""

    local: LocalCluster
    flags: dict[str, str] = field(default_factory=dict)
    deployments: list[Mapping[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    _targets: dict[str, RemoteTarget] = field(default_factory=dict)

    @classmethod
    def discover(cls, local: LocalCluster, flags: Mapping[str, str]) -> "Remotes":
        remotes = cls(local=local, flags=dict(flags))
        selector = f"{COMPONENT_LABEL} in ({VKUBELET_COMPONENT},{WEBHOOK_COMPONENT})"
        try:
            listed = local.kube.list(kinds.DEPLOYMENTS, label_selector=selector)
            remotes.deployments = list(listed.get("items") or [])
        except ApiError as exc:
            if exc.status == 0:
                raise PluginError(f"the local cluster ({local.source}) is unreachable: {exc.message}") from None
            remotes.notes.append(f"could not list Deployments to find the chart's remote kubeconfigs ({exc.status} {exc.reason})")
        return remotes

    def vkubelet_deployments(self) -> dict[str, VkubeletDeployment]:
        found = {}
        for deployment in self.deployments:
            parsed = parse_vkubelet_deployment(deployment)
            if parsed is not None:
                found[parsed.cluster_id] = parsed
        return found

    def scheduler_name(self) -> str | None:
        return webhook_scheduler_name(self.deployments)

    def target(self, cluster_id: str) -> RemoteTarget:
        if cluster_id not in self._targets:
            self._targets[cluster_id] = self._load(cluster_id)
        return self._targets[cluster_id]

    def _load(self, cluster_id: str) -> RemoteTarget:
        if cluster_id in self.flags:
            path = self.flags[cluster_id]
            if not os.path.exists(path):
                return RemoteTarget(cluster_id, None, f"--remote-kubeconfig {cluster_id}={path}",
                                    f"--remote-kubeconfig {cluster_id}={path}: no such file")
            try:
                return RemoteTarget(cluster_id, _api(config.load_kube_config, config_file=path), f"--remote-kubeconfig {path}")
            except ConfigException as exc:
                return RemoteTarget(cluster_id, None, path, f"--remote-kubeconfig {cluster_id}={path}: {exc}")
        deployment = self.vkubelet_deployments().get(cluster_id)
        if deployment is not None and deployment.secret:
            where = [(deployment.namespace, deployment.secret, deployment.key)]
        else:
            namespaces = list(dict.fromkeys([d.namespace for d in self.vkubelet_deployments().values()] + [DEFAULT_NAMESPACE]))
            where = [(ns, kubeconfig_secret_name(cluster_id), KUBECONFIG_KEY) for ns in namespaces]
        tried = []
        for namespace, name, key in where:
            tried.append(f"Secret {namespace}/{name}")
            try:
                secret = self.local.kube.get(kinds.SECRETS, name, namespace=namespace)
            except ApiError as exc:
                if exc.not_found:
                    continue
                return RemoteTarget(cluster_id, None, f"Secret {namespace}/{name}",
                                    f"cannot read Secret {namespace}/{name} ({exc.status} {exc.reason}); "
                                    f"pass --remote-kubeconfig {cluster_id}=PATH")
            raw = (secret.get("data") or {}).get(key)
            if not raw:
                return RemoteTarget(cluster_id, None, f"Secret {namespace}/{name}",
                                    f"Secret {namespace}/{name} has no key {key!r}; pass --remote-kubeconfig {cluster_id}=PATH")
            try:
                document = yaml.safe_load(base64.b64decode(raw))
                api = _api(config.load_kube_config_from_dict, document)
            except (ValueError, yaml.YAMLError, ConfigException, TypeError) as exc:
                return RemoteTarget(cluster_id, None, f"Secret {namespace}/{name}",
                                    f"the kubeconfig in Secret {namespace}/{name} is unusable ({exc}); "
                                    f"pass --remote-kubeconfig {cluster_id}=PATH")
            return RemoteTarget(cluster_id, api, f"Secret {namespace}/{name}")
        return RemoteTarget(cluster_id, None, "", f"no kubeconfig for remote {cluster_id} (looked for {', '.join(tried)}); "
                                                  f"pass --remote-kubeconfig {cluster_id}=PATH")

    # --- the local cluster id ----------------------------------------------------------------
    def local_cluster_id(self, explicit: str | None, cluster_ids: Iterable[str]) -> str | None:
        """The local cluster's id (see the module doc), None when nothing tells it."""
        if explicit:
            return explicit
        declared = {d.local_cluster_id for d in self.vkubelet_deployments().values() if d.local_cluster_id}
        if len(declared) == 1:
            return declared.pop()
        for cluster_id in cluster_ids:
            target = self.target(cluster_id)
            if target.api is None:
                continue
            found = self._id_from_provider(target.api)
            if found:
                return found
        return None

    def _id_from_provider(self, api: client.ApiClient) -> str | None:
        try:
            kube = kube_of(api, self.local.timeout)
            review = kube.create(kinds.SELF_SUBJECT_REVIEWS, {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
            username = ((review.get("status") or {}).get("userInfo") or {}).get("username") or ""
            found = local_id_from_username(str(username))
            if found:
                return found
            consumers = kube.list(kinds.CONSUMERS)
        except ApiError:
            return None
        names = [str((item.get("metadata") or {}).get("name")) for item in consumers.get("items") or []]
        return names[0] if len(names) == 1 else None
