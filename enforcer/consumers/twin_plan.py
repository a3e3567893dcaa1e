"""What to do about one TwinNamespace request: the decisions of the TwinNamespace
controller as a pure function of what the caches (or a live read) show.

A request ``T/<name>`` (T: a consumer's tenant namespace) asks for namespace ``<name>``.
The enforcer creates it for the consumer, bounds it with the consumer's object quota,
binds the consumer's twin role into it, and deletes it (with everything the consumer put
in it) when the request goes; a namespace that is not ours is never adopted, relabelled
or deleted. The rules are in two modules beside this one: which names, and how many, a
consumer may have (:mod:`enforcer.consumers.twin_names`); the objects made for a twin,
what makes one ours, and what brings each to what it should be
(:mod:`enforcer.consumers.twin_objects`). :mod:`enforcer.consumers.twins` carries a plan out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from enforcer.consumers.twin_names import consumer_twin_policy, count_problem, name_problem, plan_name_problem, request_key
from enforcer.consumers.twin_objects import (
    ResourceQuotaAction,
    RoleBindingAction,
    desired_namespace,
    desired_resourcequota,
    desired_rolebinding,
    is_ours,
    made_for,
    namespace_patch,
    resourcequota_action,
    rolebinding_action,
    same_hard,
)
from kube_offload import constants as c
from kube_offload.consumers import ConsumerLookup, consumer_name, further_offloading, pod_security_level, requesting_consumer
from kube_offload.resources import QuantityError
from kube_offload.views import ObjectMeta

# How soon to look again while waiting for something only time brings (a namespace
# terminating). Its watch event normally comes first; this is the fallback.
TERMINATING_RECHECK_SECONDS = 2.0
# A name held by someone else's namespace may be freed by them; look again now and then.
NAME_TAKEN_RECHECK_SECONDS = 30.0


@dataclass(frozen=True)
class TwinPlan:
    """The steps of one reconcile, carried out in this order: finalizer, namespace,
    ResourceQuota, RoleBinding, namespace deletion, finalizer removal, status, requeue."""

    status: dict[str, Any] | None = None
    """The desired status (None: leave it as it is)."""
    add_finalizer: bool = False
    create_namespace: dict[str, Any] | None = None
    namespace_patch: dict[str, Any] | None = None
    """A merge patch of our namespace's labels/annotations (Pod Security level changed)."""
    rolebinding: dict[str, Any] | None = None
    rolebinding_action: RoleBindingAction = RoleBindingAction.NONE
    resourcequota: dict[str, Any] | None = None
    """The twin ResourceQuota to create or update (carried out before the RoleBinding:
    the consumer never has rights in a twin before its bounds exist)."""
    resourcequota_action: ResourceQuotaAction = ResourceQuotaAction.NONE
    resourcequota_uid: str = ""
    """The UID of ours to delete (ResourceQuotaAction.DELETE)."""
    delete_namespace_uid: str | None = None
    remove_finalizer: bool = False
    requeue_after: float | None = None
    notes: list[str] = field(default_factory=list)
    """Why, in words, for the debug log."""


def has_finalizer(request: Mapping[str, Any]) -> bool:
    return c.TWIN_NAMESPACE_FINALIZER in ObjectMeta.of(request).finalizers


def finalizers_with(request: Mapping[str, Any]) -> list[str]:
    current = list(ObjectMeta.of(request).finalizers)
    return current if c.TWIN_NAMESPACE_FINALIZER in current else [*current, c.TWIN_NAMESPACE_FINALIZER]


def finalizers_without(request: Mapping[str, Any]) -> list[str]:
    return [f for f in ObjectMeta.of(request).finalizers if f != c.TWIN_NAMESPACE_FINALIZER]


def status(request: Mapping[str, Any], phase: str, message: str, namespace: str = "") -> dict[str, Any]:
    desired: dict[str, Any] = {"phase": phase, "message": message}
    if namespace:
        desired["namespace"] = namespace
    generation = ObjectMeta.of(request).generation
    if generation is not None:
        desired["observedGeneration"] = generation
    return desired


def status_changed(request: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    return (request.get("status") or {}) != desired


def _terminating(obj: Mapping[str, Any] | None) -> bool:
    return ObjectMeta.of(obj).deleting


def plan_twin(
    request: Mapping[str, Any],
    *,
    tenant_namespace: Mapping[str, Any] | None,
    consumers: ConsumerLookup,
    namespace: Mapping[str, Any] | None,
    rolebinding: Mapping[str, Any] | None,
    twin_role: str,
    resourcequota: Mapping[str, Any] | None = None,
    siblings: Callable[[Mapping[str, Any]], list[Mapping[str, Any]]] = lambda _consumer: [],
    namespace_of: Callable[[str], Mapping[str, Any] | None] = lambda _name: None,
    release_namespace: str = "",
) -> TwinPlan:
    """The plan for ``request`` given the tenant namespace it lives in, the Consumers,
    the namespace it asks for, that namespace's twin RoleBinding and its twin
    ResourceQuota (each None if absent).
    ``siblings(consumer)``: that consumer's TwinNamespaces (for its maximum);
    ``namespace_of``: a namespace by name (whether a sibling is served already);
    ``release_namespace``: the enforcer's own namespace (never a twin)."""
    if _terminating(request):
        return _plan_deletion(request, namespace)

    key = request_key(request)
    meta = ObjectMeta.of(request)
    name, request_namespace = meta.name, meta.namespace

    problem = name_problem(name)
    if problem:
        return TwinPlan(status=status(request, c.TWIN_PHASE_REFUSED, problem))

    consumer, why_not = requesting_consumer(request_namespace, tenant_namespace, consumers)
    if consumer is None:
        # A namespace served earlier stays (its pods keep running) until the request is
        # deleted; nothing new is done for a request nobody admitted.
        return TwinPlan(status=status(request, c.TWIN_PHASE_REFUSED, why_not))
    consumer_id = consumer_name(consumer)
    level = pod_security_level(consumer)
    further = further_offloading(consumer)

    # The provider's plan (Consumer spec.policy.twinNamespaces): names and count. A twin
    # already served is never refused by a later policy change (its pods run on; the
    # provider deletes the TwinNamespace if it wants it gone).
    served_already = namespace is not None and is_ours(namespace, consumer_id, key)
    policy, bad_policy = consumer_twin_policy(consumer)
    if policy is None:
        return TwinPlan(status=status(request, c.TWIN_PHASE_REFUSED, bad_policy))
    if not served_already:

        def fits_plan(other: Mapping[str, Any]) -> bool:
            other_name = str((other.get("metadata") or {}).get("name") or "")
            return not name_problem(other_name) and not plan_name_problem(
                other_name, consumer_id, policy, release_namespace=release_namespace, consumers=consumers
            )

        def is_served(other: Mapping[str, Any]) -> bool:
            other_name = str((other.get("metadata") or {}).get("name") or "")
            return is_ours(namespace_of(other_name), consumer_id, request_key(other))

        problem = plan_name_problem(name, consumer_id, policy, release_namespace=release_namespace, consumers=consumers)
        if not problem:
            problem = count_problem(
                request, siblings(consumer), max_count=policy.max_count, eligible=fits_plan, served=is_served
            )
        if problem:
            return TwinPlan(status=status(request, c.TWIN_PHASE_REFUSED, problem))

    if namespace is not None and not is_ours(namespace, consumer_id, key):
        return TwinPlan(
            status=status(
                request,
                c.TWIN_PHASE_REFUSED,
                f"namespace {name} exists and is not yours: it was not created by the enforcer for "
                f"request {key}; ask for another name (it is never adopted)",
            ),
            requeue_after=NAME_TAKEN_RECHECK_SECONDS,
        )

    add_finalizer = not has_finalizer(request)
    if namespace is None:
        # The finalizer goes on first, so a namespace never exists without the request
        # holding on to it until it is cleaned up.
        return TwinPlan(
            status=status(request, c.TWIN_PHASE_PENDING, f"creating namespace {name}"),
            add_finalizer=add_finalizer,
            create_namespace=desired_namespace(request, consumer_id, level, further),
            notes=["namespace absent: create it"],
        )

    if _terminating(namespace):
        # Ours but going away (deleted by hand): once gone it is created afresh.
        return TwinPlan(
            status=status(request, c.TWIN_PHASE_PENDING, f"namespace {name} is terminating; it will be created again"),
            add_finalizer=add_finalizer,
            requeue_after=TERMINATING_RECHECK_SECONDS,
        )

    patch = namespace_patch(namespace, request, consumer_id, level, further)
    binding = desired_rolebinding(name, request, consumer, twin_role)
    action = rolebinding_action(rolebinding, binding)
    notes: list[str] = []
    try:
        quota = desired_resourcequota(name, request, consumer)
        quota_action = resourcequota_action(resourcequota, quota)
    except QuantityError as exc:
        # The provider's mistake: the ResourceQuota stays as it is (never dropped on a
        # typo); the ShadowPod webhook names the key to every pod meanwhile.
        quota, quota_action = None, ResourceQuotaAction.NONE
        notes.append(f"Consumer {consumer_id}: {exc}; twin ResourceQuota left as it is")
    # Until the quota controller has counted a ResourceQuota (status.hard), the API
    # server refuses every object it limits ("status unknown for quota"): Ready means usable.
    counted = quota is None or quota_action is not ResourceQuotaAction.NONE or same_hard(
        ((resourcequota or {}).get("status") or {}).get("hard") or {}, quota["spec"]["hard"]
    )
    active = (namespace.get("status") or {}).get("phase", "Active") == "Active"
    if patch is None and action is RoleBindingAction.NONE and quota_action is ResourceQuotaAction.NONE and counted and active:
        desired_status = status(request, c.TWIN_PHASE_READY, f"namespace {name} is ready", name)
    else:
        waiting = []
        if patch is not None:
            waiting.append("labels")
        if action is not RoleBindingAction.NONE:
            waiting.append(f"RoleBinding {c.TWIN_ROLEBINDING_NAME}")
        if quota_action is not ResourceQuotaAction.NONE:
            waiting.append(f"ResourceQuota {c.TWIN_RESOURCEQUOTA_NAME}")
        elif not counted:
            waiting.append(f"the quota controller to count ResourceQuota {c.TWIN_RESOURCEQUOTA_NAME}")
        if not active:
            waiting.append("the namespace to become Active")
        desired_status = status(request, c.TWIN_PHASE_PENDING, f"namespace {name}: waiting for {', '.join(waiting)}", name)
    return TwinPlan(
        status=desired_status,
        add_finalizer=add_finalizer,
        namespace_patch=patch,
        rolebinding=binding if action is not RoleBindingAction.NONE else None,
        rolebinding_action=action,
        resourcequota=quota if quota_action in (ResourceQuotaAction.CREATE, ResourceQuotaAction.UPDATE) else None,
        resourcequota_action=quota_action,
        resourcequota_uid=str(((resourcequota or {}).get("metadata") or {}).get("uid") or "")
        if quota_action is ResourceQuotaAction.DELETE
        else "",
        notes=notes,
    )


def _plan_deletion(request: Mapping[str, Any], namespace: Mapping[str, Any] | None) -> TwinPlan:
    """The request is being deleted: our namespace goes first (everything in it with it),
    then the finalizer. ``namespace`` must come from a live read here: a cache that has
    not seen the namespace yet must not let the finalizer go while it exists."""
    if not has_finalizer(request):
        return TwinPlan(notes=["deleting, not ours to finalize"])
    name = ObjectMeta.of(request).name
    key = request_key(request)
    if not made_for(namespace, key):
        # Gone already, or someone else's (never touched): nothing to clean up.
        return TwinPlan(remove_finalizer=True, notes=["namespace gone or not ours: release the request"])
    assert namespace is not None
    terminating = status(request, c.TWIN_PHASE_TERMINATING, f"deleting namespace {name} and everything in it", name)
    if _terminating(namespace):
        return TwinPlan(status=terminating, requeue_after=TERMINATING_RECHECK_SECONDS)
    uid = ObjectMeta.of(namespace).uid
    return TwinPlan(status=terminating, delete_namespace_uid=uid, requeue_after=TERMINATING_RECHECK_SECONDS)
