"""Twin namespaces: for each local namespace offloaded to this remote cluster, one remote
namespace that holds its pods (loop 1 of ARCHITECTURE.md), asked of the provider.

The consumer cannot create, relabel or delete namespaces on the provider. It writes one
``TwinNamespace`` request per twin into its tenant namespace (``--tenant-namespace``),
named after the namespace it wants; the provider's enforcer creates the namespace (origin
label, Pod Security level, our role bound in it), never adopting one it did not create,
and reports ``status.phase``. A twin is used - pods, ShadowPods and reflected objects go
there, and the remote informers watch there - only while its request is ours and Ready.

* namespace offloaded here -> a request for its twin (created if missing); with
  ``pod-placement=Local`` too (service offloading): the twin then receives the reflected
  objects (Services, EndpointSlices...) but no pods (``pod_twin_for``);
* Refused -> a Warning Event on the local namespace with the provider's message; the
  request is nudged (``kube-offload.io/retry-requested``) with exponential backoff so
  the provider looks again once it has fixed the cause (no hot loop, no recreation);
* namespace no longer offloaded here (or deleted) -> its request is deleted; the enforcer
  then deletes the twin and everything in it.

A request of that name that stands for another local namespace is never taken over: the
local namespace gets a Warning Event and the loop looks again later.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, TYPE_CHECKING

from kube_offload import constants as c
from kube_offload.runtime.controller import Controller, Requeue
from kube_offload.runtime.cache import Cache
from kube_offload.runtime.kinds import TWIN_NAMESPACES
from kube_offload.runtime.kube import ApiError, Kube, MERGE_PATCH
from kube_offload.runtime.logs import ObjectLogger
from kube_offload.opt_in import opts_in, opt_in_policy
from kube_offload.policy import PolicyError, policy_from_namespace
from kube_offload.times import now_time
from kube_offload import reasons
from vkubelet.shared import twin_requests as tr
from vkubelet.shared.events import EventRecorder
from vkubelet.shared.informers import SharedInformers
from vkubelet.twins.naming import twin_namespace_name
from vkubelet.node.forge import node_labels as default_node_labels

if TYPE_CHECKING:
    # The process's settings (the wiring's): handed in, named here for the type checker only.
    from vkubelet.settings import Settings

log = logging.getLogger("kube_offload.vkubelet.namespaces")

# A request the provider has not answered yet is looked at again this often (its status
# change normally brings us back at once).
PENDING_RECHECK_SECONDS = 30.0
# How often work in a twin we may not read (403: the provider revoked our access) is
# looked at again. Access restored brings the twin's objects back as ADDED events at once;
# work that has nothing there yet waits for this.
FORBIDDEN_RETRY_SECONDS = 10.0


# --- pure decisions ------------------------------------------------------------------------
@dataclass(frozen=True)
class TwinPlan:
    """What the remote side of one local namespace should be."""

    twin: str | None  # the remote namespace wanted; None = no twin here
    reason: str  # why (for logs and Events)
    policy_error: PolicyError | None = None  # a bad policy: leave everything as it is
    # Whether the namespace's pods may run in the twin. False for pod-placement=Local:
    # the twin then only carries the reflected objects (Services, EndpointSlices...), so
    # that remote workloads can consume the namespace's services (service offloading).
    pods: bool = True


def plan_twin(
    namespace: Mapping[str, Any] | None,
    *,
    name: str,
    virtual_node_labels: Mapping[str, str],
    local_cluster_id: str,
    opted_in: bool = False,
) -> TwinPlan:
    """Whether local namespace ``name`` (``namespace`` = its object, None when deleted)
    is offloaded to the cluster whose virtual node has ``virtual_node_labels``.
    ``opted_in``: pods of the namespace that opted in with the kube-offload RuntimeClass
    are bound to this virtual node, which extends the namespace here on demand, under the
    policy such a pod is held to (kube_offload/opt_in.py: Remote, the namespace's own
    selector and mapping)."""
    if namespace is None:
        return TwinPlan(None, f"namespace {name} was deleted")
    if (namespace.get("metadata") or {}).get("deletionTimestamp"):
        return TwinPlan(None, f"namespace {name} is being deleted")
    try:
        policy = policy_from_namespace(dict(namespace))
    except PolicyError as exc:
        return TwinPlan(None, str(exc), policy_error=exc)
    if opted_in:
        policy = opt_in_policy(name, policy)
    if not policy.enabled:
        return TwinPlan(None, f"namespace {name} is not offloaded ({c.LABEL_ENABLED} is not {c.ENABLED_VALUE})")
    if not policy.cluster_selector.matches(virtual_node_labels):
        return TwinPlan(None, f"the cluster selector \"{policy.cluster_selector}\" of namespace {name} does not match this cluster")
    twin = twin_namespace_name(name, local_cluster_id, policy.mapping)
    if policy.placement == c.PLACEMENT_LOCAL:
        # Service offloading: the namespace is extended here (twin, reflected objects),
        # its pods stay on the local cluster's own nodes.
        return TwinPlan(
            twin,
            f"namespace {name} has {c.LABEL_POD_PLACEMENT}={c.PLACEMENT_LOCAL}: its pods stay in the local "
            "cluster, only its services and the other reflected objects are offloaded",
            pods=False,
        )
    if policy.opt_in:
        return TwinPlan(
            twin, f"pods of namespace {name} opted in with runtimeClassName {c.RUNTIME_CLASS_OPT_IN}"
        )
    return TwinPlan(twin, "offloaded")


@dataclass(frozen=True)
class RequestState:
    """Where the request for one twin stands, from the consumer's side."""

    usable: bool
    # Why not usable (for logs, Events and the pod loop's "why not running"); "" when usable.
    reason: str
    conflict: bool = False  # the name is held by a request for another local namespace
    refused: bool = False
    waiting: bool = False  # Pending or terminating: the provider's move


def request_state(request: Mapping[str, Any] | None, *, twin: str, local_namespace: str, local_cluster_id: str, cluster_id: str) -> RequestState:
    """The state of ``request`` (the cached TwinNamespace named ``twin``; None: none)."""
    if request is None:
        return RequestState(False, f"twin namespace {twin} not requested from cluster {cluster_id} yet", waiting=True)
    read = tr.TwinRequest.of(request, local_cluster_id)
    if not read.ours or read.local_namespace != local_namespace:
        other = read.local_namespace
        return RequestState(
            False,
            f"cannot offload to cluster {cluster_id}: twin namespace {twin} is already requested "
            + (f"for local namespace {other}" if other and read.ours else "by someone else")
            + "; it is never taken over (use another name or the DefaultName mapping)",
            conflict=True,
        )
    if read.deleting:
        return RequestState(False, f"twin namespace {twin} is being deleted in cluster {cluster_id}", waiting=True)
    if read.phase == c.TWIN_PHASE_REFUSED:
        detail = read.message or "no reason given"
        return RequestState(False, f"cluster {cluster_id} refused twin namespace {twin}: {detail}", refused=True)
    if not read.usable:
        return RequestState(False, f"twin namespace {twin} is {read.phase} in cluster {cluster_id}", waiting=True)
    return RequestState(True, "")


# --- the loop --------------------------------------------------------------------------------
# Index of the local pods bound to our node: the namespace of each one that opted in.
OPTED_IN = "opted-in"


def _opted_in_namespace(pod: dict[str, Any]) -> list[str]:
    namespace = (pod.get("metadata") or {}).get("namespace")
    return [namespace] if namespace and opts_in(pod) else []


def _opted_in_key(pod: dict[str, Any]) -> str | None:
    keys = _opted_in_namespace(pod)
    return keys[0] if keys else None


class TwinNamespaces:
    """Reconciles twin requests, and answers the pod loop's question "where do this
    namespace's pods go?" from the same caches and the same rule."""

    # How soon to look again at a twin name held by a request for another namespace.
    CONFLICT_RETRY_SECONDS = 60.0

    def __init__(
        self,
        settings: Settings,
        informers: SharedInformers,
        recorder: EventRecorder,
        *,
        labels: Callable[[], Mapping[str, str]] | None = None,
        node_labels: Callable[[], Mapping[str, str]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self._kube = Kube(informers.remote_client)
        self._recorder = recorder
        # The virtual node's labels now (the provider may change the ones it suggests):
        # cluster selectors are matched against exactly what the node carries.
        self._labels = labels or (lambda: default_node_labels(settings))
        # The labels of the node pods are bound to (what translation strips from their node
        # affinity). A slice's node carries its slice's labels on top of the peering's
        # (``labels``), which alone decide the twins: every node of a peering must agree on
        # them, or one would delete the twin requests another made (docs/slices.md).
        self._node_labels = node_labels or self._labels
        self._clock = clock
        self._refusals: dict[str, tr.RefusalBackoff] = {}
        self._refusals_lock = threading.Lock()
        self.local_namespaces = informers.local_namespaces()
        # SharedInformers keeps the twin-scoped remote informers on the Ready set of
        # these requests (its handler runs before any controller hears of a change).
        self.requests = informers.remote_twin_requests()
        self.consumer = informers.remote_consumer()
        # Pods bound to our node that opted in with the kube-offload RuntimeClass extend
        # their namespace here on demand, labelled or not: the namespaces that have one.
        self.local_pods = informers.local_pods()
        self.local_pods.add_indexer(OPTED_IN, _opted_in_namespace)
        self.controller = Controller(name="twin-namespaces", reconcile=self.reconcile, workers=max(1, settings.workers // 2))
        self.controller.watch(self.local_namespaces)
        self.controller.watch(self.requests, self.local_namespace_of)
        # Added (bound here) or deleted is what counts: a pod's runtime class and node
        # never change, so updates are skipped.
        self.controller.watch(self.local_pods, _opted_in_key, skip=lambda _old, _new: True)

    def informers(self) -> list[Cache]:
        # The Consumer too: its suggested node labels take part in cluster selectors, and
        # a plan made without them would delete twins that are wanted. The local pods too:
        # a plan made before they are listed would withdraw the twin of a namespace that
        # only opted-in pods extend here, with those pods running in it.
        return [self.local_namespaces, self.requests, self.consumer, self.local_pods]

    def node_labels(self) -> dict[str, str]:
        return dict(self._node_labels())

    def plan(self, name: str) -> TwinPlan:
        return plan_twin(
            self.local_namespaces.get(name),
            name=name,
            virtual_node_labels=self._labels(),
            local_cluster_id=self.settings.local_cluster_id,
            opted_in=bool(self.local_pods.index_keys(OPTED_IN, name)),
        )

    def local_namespace_of(self, request: Mapping[str, Any]) -> str | None:
        """The local namespace a cached TwinNamespace request of ours stands for."""
        return tr.local_namespace_of(request) if tr.is_ours(request, self.settings.local_cluster_id) else None

    def _state(self, name: str, twin: str, request: Mapping[str, Any] | None = None) -> RequestState:
        if request is None:
            request = self.requests.get(f"{self.settings.tenant_namespace}/{twin}")
        return request_state(
            request,
            twin=twin,
            local_namespace=name,
            local_cluster_id=self.settings.local_cluster_id,
            cluster_id=self.settings.cluster_id,
        )

    def twin_for(self, name: str) -> tuple[str | None, str]:
        """The remote namespace for objects of local namespace ``name`` if it is ready to
        take them (offloaded here, requested, and the provider's answer is Ready); else
        None and why (the provider's refusal message included). Pods ask
        :meth:`pod_twin_for`."""
        return self._usable_twin(name, self.plan(name))

    def pod_twin_for(self, name: str) -> tuple[str | None, str]:
        """Like :meth:`twin_for`, for the namespace's pods: None (and why) as well when the
        twin only carries reflected objects (pod-placement=Local)."""
        plan = self.plan(name)
        if plan.twin is not None and not plan.pods:
            return None, plan.reason
        return self._usable_twin(name, plan)

    def _usable_twin(self, name: str, plan: TwinPlan) -> tuple[str | None, str]:
        if plan.twin is None:
            return None, plan.reason
        state = self._state(name, plan.twin)
        if not state.usable:
            return None, state.reason
        return plan.twin, ""

    def resync_all(self) -> None:
        for name in self.local_namespaces.keys():
            self.controller.enqueue(name)
        for request in self.requests.list():
            key = self.local_namespace_of(request)
            if key:
                self.controller.enqueue(key)

    def reconcile(self, name: str) -> None:
        logger = ObjectLogger(log, {"key": f"namespace {name}"})
        plan = self.plan(name)
        if plan.policy_error is not None:
            # A typo in a label must not delete a twin full of running pods: keep things
            # as they are until the policy reads again (the webhook refuses most typos).
            logger.warning("invalid offloading policy, leaving the twin namespace as it is: %s", plan.reason)
            self._warn(name, reasons.REASON_POLICY_INVALID, plan.reason)
            return

        request: dict[str, Any] | None  # each request in turn, then the one for the planned twin
        for request in self.requests.list():
            if self.local_namespace_of(request) == name and request["metadata"]["name"] != plan.twin:
                self._delete(request, logger, plan.reason)

        if plan.twin is None:
            self._forget_refusal(name)
            return
        request = self.requests.get(f"{self.settings.tenant_namespace}/{plan.twin}")
        if request is None:
            self._create(name, plan.twin, logger)
            return
        state = self._state(name, plan.twin, request)
        if state.usable:
            if self._forget_refusal(name):
                logger.info("cluster %s now grants twin namespace %s", self.settings.cluster_id, plan.twin)
            return
        if state.conflict:
            logger.warning(state.reason)
            self._warn(name, reasons.REASON_TWIN_CONFLICT, state.reason)
            raise Requeue(self.CONFLICT_RETRY_SECONDS, state.reason)
        if state.refused:
            self._refused(name, state.reason, logger, request)
        if tr.is_deleting(request):
            raise Requeue(2.0, state.reason)  # re-offloaded while the old twin goes: ask again once it is gone
        raise Requeue(PENDING_RECHECK_SECONDS, state.reason)  # the provider's answer brings us back sooner

    # --- steps ---------------------------------------------------------------------------------
    def _create(self, name: str, twin: str, logger: logging.LoggerAdapter[logging.Logger]) -> None:
        tenant = self.settings.tenant_namespace
        body = tr.build_request(
            twin, tenant_namespace=tenant, local_namespace=name, local_cluster_id=self.settings.local_cluster_id
        )
        try:
            self._kube.create(TWIN_NAMESPACES, body, namespace=tenant)
            logger.info("requested twin namespace %s from cluster %s", twin, self.settings.cluster_id)
            return
        except ApiError as exc:
            if exc.transient or (exc.conflict and not exc.already_exists):
                raise
            if not exc.already_exists:
                # 403: we are not (or no longer) admitted; 404: no tenant namespace or no
                # TwinNamespace API; 422: the provider refuses the request itself.
                self._refused(
                    name,
                    f"cluster {self.settings.cluster_id} refused the request for twin namespace {twin} "
                    f"in {tenant}: {exc.message or exc.reason}",
                    logger,
                    None,
                )
        current = self._kube.get(TWIN_NAMESPACES, twin, namespace=tenant)
        state = self._state(name, twin, current)
        if state.conflict:
            logger.warning(state.reason)
            self._warn(name, reasons.REASON_TWIN_CONFLICT, state.reason)
            raise Requeue(self.CONFLICT_RETRY_SECONDS, state.reason)
        # Ours: the cache had not seen it yet; its events bring us back.

    def _refused(self, name: str, reason: str, logger: logging.LoggerAdapter[logging.Logger], request: Mapping[str, Any] | None) -> None:
        """Tell the user (Warning Event on the local namespace), then look again with
        exponential backoff, nudging the provider at each look (twin_requests.refusal_step)."""
        with self._refusals_lock:
            step = tr.refusal_step(self._refusals.get(name), reason, self._clock())
            self._refusals[name] = step.backoff
        if step.tell:
            logger.warning("%s (looking again in %.0fs)", reason, step.wait)
            self._warn(name, reasons.REASON_TWIN_REFUSED, reason)
        if step.nudge and request is not None:
            self._nudge(request, logger)
        raise Requeue(max(0.5, step.wait), f"{reason} (look {step.backoff.attempts + 1})")

    def _forget_refusal(self, name: str) -> bool:
        with self._refusals_lock:
            return self._refusals.pop(name, None) is not None

    def _nudge(self, request: Mapping[str, Any], logger: logging.LoggerAdapter[logging.Logger]) -> None:
        meta = request.get("metadata") or {}
        stamp = now_time()
        try:
            self._kube.patch(
                TWIN_NAMESPACES,
                meta["name"],
                {"metadata": {"annotations": {c.ANNOTATION_TWIN_RETRY: stamp}}},
                namespace=meta["namespace"],
                content_type=MERGE_PATCH,
            )
            logger.info("asked cluster %s to look again at twin namespace %s", self.settings.cluster_id, meta["name"])
        except ApiError as exc:
            if not exc.not_found:
                raise

    def _delete(self, request: Mapping[str, Any], logger: logging.LoggerAdapter[logging.Logger], why: str) -> None:
        meta = request.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            return
        try:
            self._kube.delete(TWIN_NAMESPACES, meta["name"], namespace=meta["namespace"], uid=meta.get("uid"))
            logger.info("withdrew the request for twin namespace %s (%s)", meta["name"], why)
        except ApiError as exc:
            if exc.not_found or exc.conflict:
                return  # gone, or another request of that name now: not the one we meant
            raise

    def _warn(self, name: str, reason: str, message: str) -> None:
        namespace = self.local_namespaces.get(name)
        if namespace is not None:
            self._recorder.warning(_with_kind(namespace), reason, message)


def _with_kind(namespace: Mapping[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", **namespace}
