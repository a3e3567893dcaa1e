"""Custom resources, both ways: the spec of a local object out, the status of its remote
copy back (docs/reflection.md "Custom resources").

The consumer's admin opts a kind in (``--reflect-custom-resource``, settings.py
:class:`~vkubelet.reflection.settings.CustomResource`): which spec paths go out, which
status paths come back. The provider grants the kind per consumer
(``Consumer.spec.policy.customResources``: the kind and the top-level spec fields this
consumer may set); what it does not grant is not sent, with a ``ProviderPolicyRefused``
Event on the local object naming the kind or field and the policy key (the provider's
RBAC and webhook refuse it anyway: this only says why).

Out, local -> remote, by **server-side apply** as ``kube-offload/<virtual node>``: the
local object is the only source of truth for the paths it sends; fields the provider's
controllers or defaulting set on the copy are theirs and left alone, and a path removed
locally is removed remotely (apply drops the fields a manager stops naming). Before the
first write the name is read: an object there that is not ours is never touched
(``ReflectionConflict``), and that first apply is not forced, so it cannot take a field
someone set meanwhile. Every later apply is forced (the local object wins) and carries
the cached resourceVersion, so a copy replaced behind our back fails instead of being
adopted. The copy is compared on the ``out`` paths exactly: a CRD that defaults fields
under them costs one apply that changes nothing per reconcile.

Back, remote -> local: the ``back`` paths of the remote copy's status are applied to the
local object's **status subresource** under the same field manager; a path the remote
status no longer has disappears locally. Nothing else of the local object is ever written.

The pure parts (the object to send, whether the copy is up to date, the status to write
back, the fit to the provider's grant) are functions below, unit-tested on their own; the
reflector wires them to the generic loop (reflector.py) through its hooks.
"""

from __future__ import annotations

import copy
import logging
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping

from kube_offload import provider_policy as pp
from kube_offload.runtime.controller import Requeue
from kube_offload.runtime.kube import ApiError, Kube, object_key
from kube_offload.views import metadata as _meta
from vkubelet.shared.policy_fit import Fit, Note
from vkubelet.reflection import forge as f
from vkubelet.reflection import metrics
from kube_offload.reasons import REASON_REFLECTION_FAILED
from vkubelet.reflection.reflector import Reflector, is_terminating
from vkubelet.reflection.settings import CustomResource

if TYPE_CHECKING:
    from vkubelet.shared.loops import LoopContext

_MISSING = object()
# How a remote write of a custom resource names itself: one manager per virtual node, so
# two consumers (or two virtual nodes of one) never take each other's fields silently.
FIELD_MANAGER_PREFIX = "kube-offload/"


def field_manager(virtual_node_name: str) -> str:
    return f"{FIELD_MANAGER_PREFIX}{virtual_node_name}"


# --- paths ---------------------------------------------------------------------------------
def get_path(obj: Mapping[str, Any], path: str) -> Any:
    """The value at dotted ``path``, or :data:`_MISSING`."""
    node: Any = obj
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return _MISSING
        node = node[part]
    return node


def project(obj: Mapping[str, Any], paths: tuple[str, ...]) -> dict[str, Any]:
    """Only ``paths`` of ``obj``, nested as in ``obj`` (deep copies: never the cache's
    structure); a path ``obj`` lacks (or holds null at) is left out."""
    out: dict[str, Any] = {}
    for path in paths:
        value = get_path(obj, path)
        if value is _MISSING or value is None:
            continue
        parts = path.split(".")
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = copy.deepcopy(value)
    return out


# --- out -----------------------------------------------------------------------------------
def forge_custom_resource(local: Mapping[str, Any], ctx: f.ForgeContext, spec: CustomResource) -> dict[str, Any]:
    """The remote object for ``local``: reflection's metadata and the ``out`` paths."""
    return {
        "apiVersion": spec.api_kind.api_version,
        "kind": spec.kind,
        "metadata": f.forge_metadata(local, ctx),
        **project(local, spec.out),
    }


def is_up_to_date(desired: Mapping[str, Any], current: Mapping[str, Any], spec: CustomResource) -> bool:
    """Whether the remote copy already says what ``desired`` does: labels and annotations
    equal, every ``out`` path equal (absent alike). Fields outside the paths are the
    remote side's (defaults, other managers) and never compared."""
    dm, cm = _meta(desired), _meta(current)
    if (dm.get("labels") or {}) != (cm.get("labels") or {}):
        return False
    if (dm.get("annotations") or {}) != (cm.get("annotations") or {}):
        return False
    return all(_value(desired, path) == _value(current, path) for path in spec.out)


def _value(obj: Mapping[str, Any], path: str) -> Any:
    value = get_path(obj, path)
    return None if value is _MISSING else value


def fit_grant(desired: Mapping[str, Any], spec: CustomResource, policy: pp.ProviderPolicy) -> Fit:
    """``desired`` as the provider's grant admits it: the kind granted
    (``spec.policy.customResources``) and every top-level spec field it sets granted;
    else refused, one note per kind or field (dropping a field would send another object
    than the user wrote, so nothing is taken out)."""
    where = f"Consumer {pp.POLICY}.{pp.CUSTOM_RESOURCES_KEY}"
    grant = policy.custom_resource(spec.group, spec.plural)
    if grant is None:
        granted = ", ".join(g.name for g in policy.custom_resources) or "none"
        return Fit(copy.deepcopy(dict(desired)), refused=(
            Note("kind", f"kind {spec.kind} ({spec.key}) is not granted by the provider ({where}: {granted})"),))
    fields = sorted((desired.get("spec") or {}).keys()) if isinstance(desired.get("spec"), Mapping) else []
    refused = tuple(
        Note(f"spec.{name}", f"spec.{name} is not granted by the provider for {spec.key} "
                             f"({where}[{spec.key}].specFields: {', '.join(grant.spec_fields) or 'none'})")
        for name in fields
        if name not in grant.spec_fields
    )
    return Fit(copy.deepcopy(dict(desired)), refused=refused)


# --- back ----------------------------------------------------------------------------------
def status_back(local: Mapping[str, Any], remote: Mapping[str, Any], spec: CustomResource) -> dict[str, Any] | None:
    """The server-side apply body of the local object's status subresource that brings
    the ``back`` paths of its status to the remote copy's, or None when they already are
    (or nothing comes back). The body names every path the remote status has, so a path
    it no longer has is dropped from what this manager owns, hence from the local status."""
    if not spec.back:
        return None
    wanted = project(remote, spec.back)
    if project(local, spec.back) == wanted:
        return None
    meta = _meta(local)
    return {
        "apiVersion": spec.api_kind.api_version,
        "kind": spec.kind,
        "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")},
        "status": wanted.get("status") or {},
    }


# --- the reflector -------------------------------------------------------------------------
class CustomResourceReflector(Reflector):
    """Reflection of one opted-in custom resource kind; made per kind by
    :func:`reflector_for` (the base reads the kind from class attributes)."""

    custom: ClassVar[CustomResource]
    # A custom resource may hold anything, data included: never deleted to follow a change
    # the remote API server refuses in place (the claim's rule, reflector.py).
    recreate_on_invalid = False

    def __init__(self, context: "LoopContext") -> None:
        super().__init__(context)
        self._manager = field_manager(self.settings.node_name)
        self._remote_kube = Kube(context.informers.remote_client)
        self._local_kube = Kube(context.informers.local_client)

    def forge(self, local: Mapping[str, Any], ctx: f.ForgeContext) -> dict[str, Any] | None:
        return forge_custom_resource(local, ctx, self.custom)

    def fit(self, desired: dict[str, Any], policy: pp.ProviderPolicy) -> Fit:
        return fit_grant(desired, self.custom, policy)

    def is_up_to_date(self, desired: Mapping[str, Any], current: Mapping[str, Any]) -> bool:
        return is_up_to_date(desired, current, self.custom)

    def reconcile(self, key: str) -> None:
        if self._refused_kind(key):
            return
        super().reconcile(key)
        self._status_back(key)

    def _refused_kind(self, key: str) -> bool:
        """A kind the provider does not grant has no Role in the twin either, so the
        twin's list is forbidden and the generic loop would only wait on it: the local
        object is told why instead (ProviderPolicyRefused, once), and nothing is sent.
        A change of the grant re-checks every object (the base's Consumer handler)."""
        if self._policy().custom_resource(self.custom.group, self.custom.plural) is not None:
            return False
        local = self.local.get(key)
        if local is None or is_terminating(local) or not self.selection(local).reflect:
            return False  # the generic loop cleans up what is left
        twin, _ = self._twins.twin_for(str(_meta(local).get("namespace") or ""))
        if twin is None:
            return False
        self._forge(local, twin, logging.LoggerAdapter(self.log, {"key": f"{self.kind} {key}"}))
        return True

    def _apply(self, local: Mapping[str, Any], desired: dict[str, Any], logger: logging.LoggerAdapter[logging.Logger]) -> None:
        meta = desired["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        current = self.remote.get(f"{namespace}/{name}")
        if current is None:
            # Not one of ours (the cache holds only ours): one that is not ours may
            # stand there, and an apply would merge into it. Read first.
            existing = self._remote_kube.get_or_none(self.api_kind, name, namespace=namespace)
            if existing is not None:
                if not self.owns(existing):
                    self._conflict(local, existing, logger)
                raise Requeue(1.0, "ours already; waiting for the cache to show it")
        elif not self.owns(current):
            self._conflict(local, current, logger)
        elif self.is_up_to_date(desired, current):
            return
        # The first write is an apply too, so that every field we send is this manager's
        # alone and a path dropped locally is dropped remotely. Without force it cannot
        # take a field someone else set meanwhile (409); later, the cached
        # resourceVersion makes the forced apply conditional: a copy replaced behind our
        # back is a 409, never adopted.
        body = desired
        if current is not None:
            body = {**desired, "metadata": {**meta, "resourceVersion": _meta(current).get("resourceVersion")}}
        try:
            self._remote_kube.apply(self.api_kind, body, namespace=namespace, force=current is not None,
                                    field_manager=self._manager)
        except ApiError as exc:
            if exc.not_found:
                raise Requeue(2.0, f"twin namespace {namespace} not found yet") from exc
            if exc.transient or exc.conflict:
                raise
            self._refused(local, f"refused {self.kind} {namespace}/{name}: {exc.message}", logger)
        metrics.wrote(self.resource, metrics.OPERATION_CREATE if current is None else metrics.OPERATION_UPDATE)
        logger.info("%s remote %s %s/%s", "created" if current is None else "applied", self.kind, namespace, name)

    def _status_back(self, key: str) -> None:
        local = self.local.get(key)
        if local is None or is_terminating(local):
            return
        remote = next((r for r in self.remote_of(key) if self.owns(r)), None)
        if remote is None:
            return
        body = status_back(local, remote, self.custom)
        if body is None:
            return
        namespace = str(_meta(local).get("namespace") or "")
        try:
            self._local_kube.apply(self.api_kind, body, namespace=namespace, subresource="status", force=True,
                                   field_manager=self._manager)
        except ApiError as exc:
            if exc.transient or exc.conflict:
                raise
            logger = logging.LoggerAdapter(self.log, {"key": f"{self.kind} {key}"})
            message = (
                f"cluster {self.settings.cluster_id}: the status of {self.kind} {key} could not be written back "
                f"({exc.message}); the kind needs a status subresource and the virtual kubelet patch on "
                f"{self.custom.plural}/status"
            )
            logger.warning(message)
            self._recorder.warning(local, REASON_REFLECTION_FAILED, message)
            metrics.failed(self.resource, REASON_REFLECTION_FAILED)
            return
        metrics.wrote(self.resource, OPERATION_STATUS)
        self.log.info("wrote back the status of %s %s", self.kind, object_key(local))


# The local status writes, counted beside the remote ones (metrics.py).
OPERATION_STATUS = "status"


def reflector_for(custom: CustomResource) -> Callable[["LoopContext"], CustomResourceReflector]:
    """The loop factory of one opted-in kind: a subclass whose class attributes name it."""
    return type(
        f"CustomResourceReflector[{custom.key}]",
        (CustomResourceReflector,),
        {"resource": custom.key, "kind": custom.kind, "api_kind": custom.api_kind, "custom": custom},
    )
