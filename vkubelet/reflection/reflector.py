"""The one reconcile loop every reflected resource type shares (local -> remote).

Per type: an informer on the local objects of the offloaded namespaces only (scope.py:
namespace-scoped watches started and stopped as namespaces opt in and out), one on the
remote objects this cluster's reflector of that type wrote (label-selected: origin +
reflector labels, so nobody else's objects are even cached) with its index remote ->
local key (vkubelet/shared/indexes.py, kept by the informer), and a
:class:`~kube_offload.runtime.controller.Controller` keyed by the local ``namespace/name``. What is never exported, and the deny/allow-list, is policy.py.

A reconcile reads the caches and converges:

* the local object is gone, terminating, not selected by the policy, or its namespace is
  not offloaded here -> every remote object of ours standing for it is deleted (UID
  precondition: never one that replaced it meanwhile);
* otherwise the desired object is forged (forge/) and server-side applied as this
  virtual kubelet's field manager (names.field_manager), forced: the local object is the
  only source of truth for every field it sets (someone else's change to one of them is
  taken back), a field it stopped setting is removed, and the fields reflection never
  sets (what the provider's admission defaults, its controllers add) stay as they are.
  No comparison with the remote object: applied.py remembers what was applied, so an
  unchanged object costs no request.

Before it is written, the desired object is fitted to the provider's policy for us
(``Consumer.spec.policy``, vkubelet/shared/policy_fit.py): what its admission would refuse and can
be taken out is (a Service type, external IPs, Ingress annotations), each change one
Warning Event ``ProviderPolicyAdjusted`` on the local object; an object it would refuse
whatever is dropped (an ExternalName Service, an Ingress host or class, a claim's class)
is not reflected, with ``ProviderPolicyRefused`` Events naming the fields (a claim
already reflected is left as it is: deleting it would lose its data). Each note is told
once per object (vkubelet/shared/policy_events.py); a change of the policy re-checks every object.

A remote object of that name that does not carry our labels is never touched: the
local object gets a Warning Event and the loop looks again later. Restart safety: the
remote informer's first list delivers every object of ours, each enqueues its local
key, and a key whose local object is gone deletes it.

Subclasses (one module per type) say which API, how to forge, and what differs. The
caches it reads are made in caches.py, the writes go through remote_ops.py (both shared
with the token and Event reflection).
"""

from __future__ import annotations

import abc
import logging
from typing import Any, ClassVar, Mapping, NoReturn, TYPE_CHECKING

from kube_offload import constants as c
from kube_offload import provider_policy as pp
from kube_offload.runtime.controller import Controller, Requeue
from kube_offload.runtime.cache import Cache
from kube_offload.runtime.manager import Synced
from kube_offload.runtime.kinds import Resource
from kube_offload.runtime.kube import ApiError, Kube, object_key, split_key
from kube_offload.runtime.logs import ObjectLogger
# Reasons of the local Events reflection records: the contract's (docs/reflection.md lists them).
from kube_offload.reasons import REASON_POLICY_REFUSED, REASON_REFLECTION_CONFLICT, REASON_REFLECTION_FAILED
from vkubelet.shared.indexes import BY_ORIGIN
from vkubelet.twins.namespaces import FORBIDDEN_RETRY_SECONDS
from vkubelet.shared.policy_events import PolicyNotices
from vkubelet.shared.policy_fit import Fit
from vkubelet.shared.provider_terms import PolicyReader
from vkubelet.reflection import forge as f
from vkubelet.reflection import metrics
from vkubelet.shared import names as n
from vkubelet.reflection import usage
from vkubelet.reflection.applied import AppliedMemo
from vkubelet.reflection.caches import owned_by_origin, owned_selector, shared_informer
from vkubelet.reflection.policy import Decision, Policy, decide
from vkubelet.reflection.remote_ops import RemoteOps
from vkubelet.reflection.scope import offloaded_namespaces
from vkubelet.shared.origin import origin_key
from vkubelet.shared.peering_nodes import PeeringPods, peering_pods

if TYPE_CHECKING:
    from vkubelet.shared.loops import LoopContext

# How soon to look again at an object whose remote name is held by an object not ours,
# or that the remote API server refused.
CONFLICT_RETRY_SECONDS = 60.0
REFUSED_RETRY_SECONDS = 60.0

log = logging.getLogger("kube_offload.vkubelet.reflection")


def is_terminating(obj: Mapping[str, Any]) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


class ReflectionLoop(abc.ABC):
    """What every reflection loop over the offloaded namespaces shares: its resource's
    settings (policy, workers), the twins, the scope of offloaded namespaces, one
    controller, and the Loop protocol's start and stop. The generic :class:`Reflector`
    and the Events of reflected objects (object_events.py) are both one."""

    # The resource type: settings key, LABEL_REFLECTOR value, flag names.
    resource: ClassVar[str]

    def __init__(self, context: "LoopContext", *, name: str | None = None, logger: logging.Logger | None = None) -> None:
        self.context = context
        self.settings = context.settings
        self.name = name or f"reflect-{self.resource}"
        resource_settings = self.settings.reflection.of(self.resource)
        self.policy: Policy = resource_settings.policy
        self._local_id = self.settings.local_cluster_id
        self._twins = context.twins
        self._recorder = context.recorder
        self.log = logger or logging.getLogger(f"kube_offload.vkubelet.reflection.{self.resource}")
        self.scope = offloaded_namespaces(context.informers, context.twins)
        self.controller = Controller(name=self.name, reconcile=self.reconcile, workers=resource_settings.workers, logger=self.log)

    @abc.abstractmethod
    def reconcile(self, key: str) -> None:
        """Converge the object of ``key``; raise Requeue to look again later."""

    def start(self) -> None:
        self.controller.start()

    def stop(self) -> None:
        self.controller.stop()


class Reflector(ReflectionLoop):
    """Local -> remote reflection of one resource type (subclassed per type)."""

    kind: ClassVar[str]
    # The kind in the API (kube_offload.runtime.kinds: CONFIG_MAPS, ENDPOINT_SLICES...).
    api_kind: ClassVar[Resource]
    # When the remote API refuses an update as invalid (an immutable field changed):
    # delete and create it again. False for kinds whose deletion loses data.
    recreate_on_invalid: ClassVar[bool] = True

    def __init__(self, context: "LoopContext") -> None:
        super().__init__(context)
        informers = context.informers
        self.ops = RemoteOps(Kube(informers.remote_client), self.api_kind, resource=self.resource,
                             field_manager=n.field_manager(self.settings.node_name))
        self._applied = AppliedMemo()
        self.local = self.scope.local_informer(self.resource, self.api_kind)
        self.remote = shared_informer(
            informers,
            "remote",
            self.resource,
            self.api_kind,
            label_selector=owned_selector(self._local_id, self.resource),
        )
        # Remote objects by local key, kept by the informer before any handler runs.
        self.remote.add_indexer(BY_ORIGIN, owned_by_origin(self._local_id, self.resource))
        self.controller.watch(self.local, self._local_key)
        self.controller.watch(self.remote, self._remote_key)
        self.controller.watch(self._twins.requests, self._keys_of_twin)
        # The provider's policy for us (our Consumer's spec.policy), read at each use; a
        # change of it re-checks every object.
        self._policy = PolicyReader(lambda: self._twins.consumer.get(self._local_id))
        self._notices = PolicyNotices(self._recorder)
        self._twins.consumer.add_handler(self._on_consumer)
        # By-use: which objects the offloaded pods reference, from the pods bound to every
        # node of the peering: its own and its slices' (objects are the peering's: docs/slices.md).
        self.pods: PeeringPods | None = None
        if self.policy is Policy.BY_USE:
            self.pods = peering_pods(context.informers)
            self.pods.add_indexer(usage.USES_INDEX[self.kind], usage.index_func(self.kind))
            self.controller.watch(self.pods, self._keys_used_by, skip=lambda old, new: not usage.use_changed(old, new))

    # --- the Loop protocol ------------------------------------------------------------------
    def informers(self) -> list[Synced]:
        # The scope first: it is synced only once the offloaded namespaces are known and
        # listed, which the scoped local informers alone cannot say (an empty set of
        # namespaces is "synced" before the namespaces were even read).
        pods = [self.pods] if self.pods is not None else []
        return [self.scope, self.local, self.remote, *pods, *self._twins.informers(), *self.extra_informers()]

    def resync_all(self) -> None:
        keys = {key for key in self.local.keys() if self._offloaded(key)} | set(self.reflected_keys())
        for key in keys:
            self.controller.enqueue(key)

    # --- what subclasses say ------------------------------------------------------------------
    @abc.abstractmethod
    def forge(self, local: Mapping[str, Any], ctx: f.ForgeContext) -> dict[str, Any] | None:
        """The remote object ``local`` should be reflected as, or None for none."""

    def selection(self, local: Mapping[str, Any]) -> Decision:
        """Whether ``local`` is reflected (policy.py: never-exported kinds, skip
        annotation, deny-list or allow-list), and why."""
        return decide(local, self.policy, kind=self.kind, in_use=self.in_use(object_key(local)))

    def in_use(self, key: str) -> bool:
        """Whether a running pod bound to a node of the peering (its own or a slice's)
        references local object ``key`` (by-use policy; False under the others, which do
        not ask)."""
        if self.pods is None:
            return False
        return bool(self.pods.index_keys(usage.USES_INDEX[self.kind], key))

    def apply_body(self, desired: dict[str, Any], current: Mapping[str, Any] | None) -> dict[str, Any]:
        """What to apply for ``desired`` over the remote object ``current`` (None: none
        yet): ``desired`` itself, but for kinds whose remote copy has immutable fields
        that the local object cannot be followed in (a claim)."""
        return desired

    def extra_informers(self) -> list[Cache]:
        return []

    def fit(self, desired: dict[str, Any], policy: pp.ProviderPolicy) -> Fit:
        """``desired`` as the provider's policy admits it (vkubelet/shared/policy_fit.py); kinds the
        policy says nothing about are sent as forged."""
        return Fit(desired)

    # --- event -> key ------------------------------------------------------------------------
    def owns(self, remote: Mapping[str, Any]) -> bool:
        return f.is_owned(remote, self._local_id, self.resource)

    def remote_of(self, key: str) -> list[dict[str, Any]]:
        """Our remote objects standing for local object ``key``."""
        return self.remote.by_index(BY_ORIGIN, key)

    def reflected_keys(self) -> list[str]:
        """Every local key some remote object of ours stands for."""
        return self.remote.index_values(BY_ORIGIN)

    def _offloaded(self, key: str) -> bool:
        namespace, _ = split_key(key)
        return bool(namespace) and self._twins.plan(namespace or "").twin is not None

    def _local_key(self, obj: dict[str, Any]) -> str | None:
        key = object_key(obj)
        # Objects of namespaces that are not offloaded here cost nothing, unless a remote
        # copy of ours is left to clean up.
        if self._offloaded(key) or self.remote_of(key):
            return key
        return None

    def _remote_key(self, obj: dict[str, Any]) -> str | None:
        return origin_key(obj) if self.owns(obj) else None

    def export_pending(self, pod: Mapping[str, Any]) -> list[str]:
        """By-use: what of this kind ``pod`` references that is to be exported and has
        no remote copy yet (``ConfigMap name``...). The pod loop holds the pod's ShadowPod
        back while any is (an optional reference would otherwise start the remote pod
        without it). Objects that do not exist locally or are not selected are nothing
        to wait for: the remote kubelet waits for a missing required one itself."""
        if self.pods is None:
            return []
        namespace = str((pod.get("metadata") or {}).get("namespace") or "")
        if not namespace or self._twins.twin_for(namespace)[0] is None:
            return []
        pending = []
        for name in sorted(usage.references(pod).of(self.kind)):
            key = f"{namespace}/{name}"
            local = self.local.get(key)
            if local is None or is_terminating(local) or not self.selection(local).reflect:
                continue
            if not self.remote_of(key):
                pending.append(f"{self.kind} {name}")
        return pending

    def _keys_used_by(self, pod: dict[str, Any]) -> list[str]:
        # Every reference, finished pod or not: a pod that finished or dropped a
        # reference must bring the object back to be withdrawn.
        namespace = (pod.get("metadata") or {}).get("namespace") or ""
        return [f"{namespace}/{name}" for name in sorted(usage.references(pod).of(self.kind))] if namespace else []

    def _on_consumer(self, _event: str, old: dict[str, Any] | None, new: dict[str, Any]) -> None:
        if ((old or {}).get("spec") or {}).get("policy") != ((new or {}).get("spec") or {}).get("policy"):
            self.resync_all()

    def _keys_of_twin(self, request: dict[str, Any]) -> list[str]:
        local_ns = self._twins.local_namespace_of(request)
        if not local_ns:
            return []
        prefix = f"{local_ns}/"
        keys = {key for key in self.local.keys() if key.startswith(prefix)}
        keys.update(key for key in self.reflected_keys() if key.startswith(prefix))
        return sorted(keys)

    # --- reconcile ---------------------------------------------------------------------------
    def forge_context(self, twin: str) -> f.ForgeContext:
        return f.ForgeContext(
            local_cluster_id=self._local_id,
            remote_namespace=twin,
            reflector=self.resource,
            virtual_node_name=self.settings.node_name,
            storage_classes=dict(self.settings.reflection.storage_classes),
            endpoint_addresses=self.settings.remapping.local_pod_ips,
        )

    def reconcile(self, key: str) -> None:
        logger = ObjectLogger(self.log, {"key": f"{self.kind} {key}"})
        namespace, _ = split_key(key)
        local = self.local.get(key)
        desired: dict[str, Any] | None = None
        keep_remote = False
        why = "its local object no longer exists"
        if local is None and namespace and not self.local.namespace_synced(namespace) and self._offloaded(key):
            # Offloaded, but its namespace's local watch has not listed yet: "gone" would
            # only mean "not read yet", and would cost a remote copy a pod may use.
            raise Requeue(1.0, f"namespace {namespace} not listed yet")
        if local is not None:
            twin, not_here = self._twins.twin_for(namespace or "")
            if twin is not None and twin in self.remote.forbidden_namespaces():
                # The provider revoked our access to the twin (403): nothing can be written
                # there and the cache cannot say what is. The pod loop reports it, once
                # (TwinNamespaceForbidden); a ReflectionFailed per object every 30 s would
                # only repeat it. Look again later; access restored brings the twin's
                # objects back as events at once.
                raise Requeue(FORBIDDEN_RETRY_SECONDS, f"twin namespace {twin} forbidden")
            selection = self.selection(local)
            if twin is None:
                why = not_here
            elif is_terminating(local):
                why = "its local object is being deleted"
            elif not selection.reflect:
                why = f"not reflected: {selection.why}"
            else:
                desired, refused = self._forge(local, twin, logger)
                why = "the local object is not reflected"
                if refused:
                    why = "the provider's policy refuses it"
                    # A data-bearing copy (a claim) stays: deleting it would lose its data.
                    keep_remote = not self.recreate_on_invalid
        for remote in self.remote_of(key):
            if keep_remote:
                break
            if desired is None or object_key(remote) != object_key(desired):
                self._delete(remote, logger, why)
        if desired is not None and local is not None:
            self._apply(local, desired, logger)

    def _forge(self, local: Mapping[str, Any], twin: str, logger: logging.LoggerAdapter[logging.Logger]) -> tuple[dict[str, Any] | None, bool]:
        """The remote object to write (None: none) and whether the provider's policy
        refuses it."""
        try:
            desired = self.forge(local, self.forge_context(twin))
        except f.Unreflectable as exc:
            message = f"not reflected to cluster {self.settings.cluster_id}: {exc}"
            logger.warning(message)
            self._recorder.warning(local, REASON_REFLECTION_FAILED, message)
            metrics.failed(self.resource, REASON_REFLECTION_FAILED)
            return None, False
        if desired is None:
            self._notices.forget(local)
            return None, False
        fit = self.fit(desired, self._policy())
        told = self._notices.tell(local, adjusted=fit.adjusted, refused=fit.refused)
        for _reason, note in told:
            logger.warning("cluster %s's policy: %s", self.settings.cluster_id, note.message)
        if fit.refused:
            metrics.failed(self.resource, REASON_POLICY_REFUSED)
            return None, True
        return fit.obj, False

    def _delete(self, remote: Mapping[str, Any], logger: logging.LoggerAdapter[logging.Logger], why: str) -> None:
        meta = remote.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            return
        self._applied.forget(f"{meta['namespace']}/{meta['name']}")
        if self.ops.delete(meta["namespace"], meta["name"], meta.get("uid")):
            logger.info("deleted remote %s %s/%s: %s", self.kind, meta["namespace"], meta["name"], why)

    def _apply(self, local: Mapping[str, Any], desired: dict[str, Any], logger: logging.LoggerAdapter[logging.Logger]) -> None:
        meta = desired["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        key = f"{namespace}/{name}"
        current = self.remote.get(key)
        if current is None:
            # Our cache holds only objects with our labels: one of that name may be there
            # that is not ours, and an apply would take it over. Read it first (this is
            # the one extra request of a creation; a race with a foreign create in
            # between is the only way we could write over one).
            try:
                current = self.ops.read(namespace, name)
            except ApiError as exc:
                if exc.transient or exc.conflict:
                    raise
                self._refused(local, f"refused reading {self.kind} {namespace}/{name}: {exc.message}", logger)
            if current is not None and not self.owns(current):
                self._conflict(local, current, logger)
        body = self.apply_body(desired, current)
        if self._applied.unchanged(key, body, current):
            return
        try:
            answer = self.ops.apply(namespace, body, creates=current is None)
        except ApiError as exc:
            if exc.not_found:
                raise Requeue(2.0, f"twin namespace {namespace} not found yet") from exc
            if exc.status == 422 and self.recreate_on_invalid and current is not None:
                # An immutable field changed locally (an immutable ConfigMap's data, a
                # Secret's type, a Service's type...): only a new object can follow it.
                self.ops.delete(namespace, name, (current.get("metadata") or {}).get("uid"))
                self._applied.forget(key)
                logger.info(
                    "remote %s %s/%s cannot be updated in place (%s): recreating it", self.kind, namespace, name, exc.message
                )
                raise Requeue(0.5, "recreating") from exc
            if exc.transient or exc.conflict:
                raise
            self._refused(local, f"refused {self.kind} {namespace}/{name}: {exc.message}", logger)
        self._applied.remember(key, body, answer)
        logger.info("%s remote %s %s/%s", "created" if current is None else "applied", self.kind, namespace, name)

    def _conflict(self, local: Mapping[str, Any], current: Mapping[str, Any], logger: logging.LoggerAdapter[logging.Logger]) -> None:
        meta = current.get("metadata") or {}
        owner = (meta.get("labels") or {}).get(c.LABEL_ORIGIN_CLUSTER_ID)
        message = (
            f"not reflected to cluster {self.settings.cluster_id}: the remote {self.kind} "
            f"{meta.get('namespace')}/{meta.get('name')} "
            + (
                f"belongs to cluster {owner}"
                if owner and owner != self._local_id
                else "was not created by kube-offload reflection"
            )
            + " and is left alone"
        )
        logger.warning(message)
        self._recorder.warning(local, REASON_REFLECTION_CONFLICT, message)
        metrics.failed(self.resource, REASON_REFLECTION_CONFLICT)
        raise Requeue(CONFLICT_RETRY_SECONDS, message)

    def _refused(self, local: Mapping[str, Any], what: str, logger: logging.LoggerAdapter[logging.Logger]) -> NoReturn:
        message = f"cluster {self.settings.cluster_id} {what}"
        logger.warning(message)
        self._recorder.warning(local, REASON_REFLECTION_FAILED, message)
        metrics.failed(self.resource, REASON_REFLECTION_FAILED)
        raise Requeue(REFUSED_RETRY_SECONDS, message)

