"""Which ConfigMaps and Secrets offloaded pods use (pure): the "by-use" export policy.

Under ``--reflect-configmaps-policy=by-use`` (or ``secrets``) a ConfigMap or Secret is
exported only while a pod bound to this virtual node references it, and withdrawn once
none does. What counts as a reference is what the kubelet itself would fetch for the pod:

* ``env[].valueFrom.configMapKeyRef`` / ``secretKeyRef`` and ``envFrom[].configMapRef`` /
  ``secretRef`` of every container, init container and ephemeral container;
* volumes ``configMap`` / ``secret``, ``projected`` sources ``configMap`` / ``secret``,
  and the Secret references of volume plugins (``csi.nodePublishSecretRef``,
  ``azureFile.secretName``, ``secretRef`` of cephfs, cinder, flexVolume, iscsi, rbd,
  scaleIO, storageos);
* ``imagePullSecrets``.

``optional: true`` references count too: the pod reads the object if it exists, so it is
exported when it does. The service-account token (projected ``serviceAccountToken``) is
not a Secret reference; its own loop (serviceaccounts.py) makes it.

A pod uses its references until it is gone from the informer or has finished (phase
``Succeeded`` or ``Failed``): a finished pod never reads them again. The "in use" answer
is an informer index on the local pods (:func:`index_func`, values ``namespace/name``),
kept by the informer before any handler hears of a change and rebuilt from its first
list after a restart, so nothing of it is kept anywhere else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from kube_offload.runtime.indexer import IndexFunc

CONFIGMAP = "ConfigMap"
SECRET = "Secret"
KINDS = (CONFIGMAP, SECRET)
FINISHED_PHASES = frozenset({"Succeeded", "Failed"})

# Index of the local pods: ``namespace/name`` of each ConfigMap (Secret) an active pod uses.
USES_INDEX = {CONFIGMAP: "uses-configmap", SECRET: "uses-secret"}

# Volume plugins that name a Secret, by the field holding the reference: an object with
# a ``name`` (``secretRef``, ``nodePublishSecretRef``) or a plain name (``secretName``).
_VOLUME_SECRET_REFS: tuple[tuple[str, str], ...] = (
    ("csi", "nodePublishSecretRef"),
    ("cephfs", "secretRef"),
    ("cinder", "secretRef"),
    ("flexVolume", "secretRef"),
    ("iscsi", "secretRef"),
    ("rbd", "secretRef"),
    ("scaleIO", "secretRef"),
    ("storageos", "secretRef"),
)
_VOLUME_SECRET_NAMES: tuple[tuple[str, str], ...] = (("azureFile", "secretName"),)


@dataclass(frozen=True)
class References:
    """The names (in the pod's namespace) of the ConfigMaps and Secrets a pod reads."""

    configmaps: frozenset[str] = frozenset()
    secrets: frozenset[str] = frozenset()

    def of(self, kind: str) -> frozenset[str]:
        if kind == CONFIGMAP:
            return self.configmaps
        if kind == SECRET:
            return self.secrets
        raise KeyError(f"no references of kind {kind!r} (known: {', '.join(KINDS)})")


def _dicts(value: Any) -> Iterable[Mapping[str, Any]]:
    return [item for item in (value or []) if isinstance(item, Mapping)]


def _name(ref: Any, field: str = "name") -> str:
    return str(ref.get(field) or "") if isinstance(ref, Mapping) else ""


def _containers(spec: Mapping[str, Any]) -> Iterable[Mapping[str, Any]]:
    for field in ("initContainers", "containers", "ephemeralContainers"):
        yield from _dicts(spec.get(field))


def references(pod: Mapping[str, Any]) -> References:
    """Every ConfigMap and Secret ``pod`` references (see the module docstring)."""
    spec = pod.get("spec") or {}
    configmaps: set[str] = set()
    secrets: set[str] = set()
    for container in _containers(spec):
        for env in _dicts(container.get("env")):
            source = env.get("valueFrom") or {}
            configmaps.add(_name(source.get("configMapKeyRef")))
            secrets.add(_name(source.get("secretKeyRef")))
        for env_from in _dicts(container.get("envFrom")):
            configmaps.add(_name(env_from.get("configMapRef")))
            secrets.add(_name(env_from.get("secretRef")))
    for volume in _dicts(spec.get("volumes")):
        configmaps.add(_name(volume.get("configMap")))
        secrets.add(_name(volume.get("secret"), "secretName"))
        for source in _dicts((volume.get("projected") or {}).get("sources")):
            configmaps.add(_name(source.get("configMap")))
            secrets.add(_name(source.get("secret")))
        for plugin, field in _VOLUME_SECRET_REFS:
            secrets.add(_name((volume.get(plugin) or {}).get(field)))
        for plugin, field in _VOLUME_SECRET_NAMES:
            secrets.add(_name(volume.get(plugin), field))
    for pull in _dicts(spec.get("imagePullSecrets")):
        secrets.add(_name(pull))
    configmaps.discard("")
    secrets.discard("")
    return References(configmaps=frozenset(configmaps), secrets=frozenset(secrets))


def is_using(pod: Mapping[str, Any]) -> bool:
    """Whether ``pod`` still reads what it references: until it has finished."""
    return str((pod.get("status") or {}).get("phase") or "") not in FINISHED_PHASES


def used_keys(pod: Mapping[str, Any], kind: str) -> list[str]:
    """``namespace/name`` of each object of ``kind`` that ``pod`` uses now (none once
    it has finished), sorted."""
    namespace = str((pod.get("metadata") or {}).get("namespace") or "")
    if not namespace or not is_using(pod):
        return []
    return sorted(f"{namespace}/{name}" for name in references(pod).of(kind))


def _index_configmaps(pod: dict[str, Any]) -> list[str]:
    return used_keys(pod, CONFIGMAP)


def _index_secrets(pod: dict[str, Any]) -> list[str]:
    return used_keys(pod, SECRET)


# One function object per kind, so every reflector sharing the pod informer registers
# the same index (kube_offload/runtime/indexer.py takes an equal function as a no-op).
_INDEX_FUNCS: dict[str, IndexFunc] = {CONFIGMAP: _index_configmaps, SECRET: _index_secrets}


def index_func(kind: str) -> IndexFunc:
    """The index function of :data:`USES_INDEX` ``[kind]``."""
    try:
        return _INDEX_FUNCS[kind]
    except KeyError:
        raise KeyError(f"no use index of kind {kind!r} (known: {', '.join(KINDS)})") from None


def use_changed(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """Whether a pod update can change what it uses (its spec, or it finishing): the
    by-use reflectors skip every other pod update (status changes the pod loop mirrors)."""
    if old is None or old is new:
        return True
    return (old.get("spec") != new.get("spec")) or (is_using(old) != is_using(new))


# How long a new pod's ShadowPod waits for the by-use export of what it references
# (reflector.py export_pending); past it the pod goes anyway: an object the provider will
# not take (a conflict, its policy) must not hold the pod for ever, and the remote
# kubelet waits for a missing required reference itself.
EXPORT_WAIT_SECONDS = 30.0
EXPORT_WAIT_RETRY_SECONDS = 0.5


def hold_for_exports(pending: list[str], waited_seconds: float | None, limit: float = EXPORT_WAIT_SECONDS) -> str | None:
    """Why a pod's ShadowPod is not created yet (None: create it). ``pending``: what it
    references that is not exported yet; ``waited_seconds``: since the pod was created
    (None: unknown, so no waiting)."""
    if not pending or waited_seconds is None or waited_seconds >= limit:
        return None
    return f"waiting for {', '.join(pending)} to be exported (by-use policy, service-account tokens; at most {limit:g}s)"
