"""What to do about one TwinNamespace request: the decisions of the TwinNamespace
controller as a pure function of what the caches (or a live read) show.

A request ``T/<name>`` (T: a consumer's tenant namespace) asks for namespace ``<name>``.
The enforcer creates it for the consumer, labelled with the consumer's origin id and Pod
Security level, binds the consumer's twin role into it, and deletes it (with everything
the consumer put in it) when the request goes. A namespace is *ours* only when it carries
all three marks the enforcer writes at creation — managed-by=enforcer, origin=<id> and
twin-request=T/<name> — so a namespace made by anyone else, or for another request, is
never adopted, relabelled or deleted. :mod:`enforcer.consumers.twins` carries a plan out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum
from typing import Callable, Iterable, Mapping

from enforcer.consumers.quota import twin_object_quota
from kube_offload.consumers import ConsumerLookup, consumer_name, pod_security_level, requesting_consumer, service_account_of
from kube_offload import constants as c
from kube_offload.resources import QuantityError, parse_quantity
from kube_offload.views import ObjectMeta
from kube_offload.provider_policy import (
    ALWAYS_RESERVED_NAMESPACES,
    POLICY,
    ProviderPolicyError,
    TwinNamespacePolicy,
    name_matches,
    parse_policy,
)

# The policy keys a refusal names (Consumer spec.policy.twinNamespaces.*).
SAME_NAMES_KEY = f"{POLICY}.twinNamespaces.sameNames"
RESERVED_KEY = f"{POLICY}.twinNamespaces.reserved"
MAX_COUNT_KEY = f"{POLICY}.twinNamespaces.maxCount"

# How soon to look again while waiting for something only time brings (a namespace
# terminating). Its watch event normally comes first; this is the fallback.
TERMINATING_RECHECK_SECONDS = 2.0
# A name held by someone else's namespace may be freed by them; look again now and then.
NAME_TAKEN_RECHECK_SECONDS = 30.0

RBAC_GROUP = "rbac.authorization.k8s.io"

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# Kubernetes' own namespaces exist anyway (and would be refused as not ours); tenant
# namespaces may not exist *yet*, and a consumer must not grab a future consumer's.
_RESERVED_NAMES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})
_RESERVED_PREFIXES = (c.TENANT_NAMESPACE_PREFIX,)


class RoleBindingAction(Enum):
    NONE = "none"
    CREATE = "create"
    UPDATE = "update"  # subjects or marks differ
    RECREATE = "recreate"  # roleRef differs, and roleRef is immutable


class ResourceQuotaAction(Enum):
    NONE = "none"
    CREATE = "create"
    UPDATE = "update"  # spec.hard or marks differ
    DELETE = "delete"  # ours, and the Consumer's spec.quota has no object key any more


@dataclass(frozen=True)
class TwinPlan:
    """The steps of one reconcile, carried out in this order: finalizer, namespace,
    ResourceQuota, RoleBinding, namespace deletion, finalizer removal, status, requeue."""

    status: dict | None = None
    """The desired status (None: leave it as it is)."""
    add_finalizer: bool = False
    create_namespace: dict | None = None
    namespace_patch: dict | None = None
    """A merge patch of our namespace's labels/annotations (Pod Security level changed)."""
    rolebinding: dict | None = None
    rolebinding_action: RoleBindingAction = RoleBindingAction.NONE
    resourcequota: dict | None = None
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


def request_key(request: Mapping) -> str:
    metadata = request.get("metadata") or {}
    return f"{metadata.get('namespace')}/{metadata.get('name')}"


def has_finalizer(request: Mapping) -> bool:
    return c.TWIN_NAMESPACE_FINALIZER in ObjectMeta.of(request).finalizers


def finalizers_with(request: Mapping) -> list[str]:
    current = list(ObjectMeta.of(request).finalizers)
    return current if c.TWIN_NAMESPACE_FINALIZER in current else [*current, c.TWIN_NAMESPACE_FINALIZER]


def finalizers_without(request: Mapping) -> list[str]:
    return [f for f in ObjectMeta.of(request).finalizers if f != c.TWIN_NAMESPACE_FINALIZER]


def name_problem(name: str) -> str:
    """Why ``name`` cannot be a twin namespace, or "" when it can."""
    if len(name) > 63 or not _DNS_LABEL.match(name):
        return (
            f"metadata.name {name!r} is not a valid namespace name: at most 63 lower-case letters, "
            "digits and '-', starting and ending with a letter or digit"
        )
    if name in _RESERVED_NAMES or name.startswith(_RESERVED_PREFIXES):
        return f"metadata.name {name!r} is reserved on this provider; ask for another namespace name"
    return ""


def plan_name_problem(
    name: str,
    consumer_id: str,
    policy: TwinNamespacePolicy,
    *,
    release_namespace: str = "",
    consumers: ConsumerLookup = lambda _name: None,
) -> str:
    """Why the provider's plan has no room for twin ``name`` of ``consumer_id``, or "".

    A twin is either a DefaultName twin, ending in ``-<consumer id>`` (what the virtual
    kubelet asks for by default: vkubelet/naming.py), or a name the provider grants as it
    is (EnforceSameName) in ``sameNames``; never a reserved name (``default``, ``kube-*``,
    ``kube-offload-*``, the enforcer's own namespace, and ``reserved``), whatever is
    granted; and never a DefaultName twin of another consumer whose id ends in this one's
    (consumer ``b`` may not take ``web-a-b``, which is consumer ``a-b``'s twin of ``web``)."""
    if name_matches(name, ALWAYS_RESERVED_NAMESPACES) or (release_namespace and name == release_namespace):
        return (
            f"metadata.name {name!r} is reserved by the provider for itself (default, kube-*, kube-offload-* and "
            "the enforcer's namespace are never given to a consumer); ask for another namespace name"
        )
    if name_matches(name, policy.reserved):
        return (
            f"metadata.name {name!r} is reserved by the provider (Consumer {RESERVED_KEY}); "
            "ask for another namespace name"
        )
    suffix = f"-{consumer_id}"
    if name.endswith(suffix) and len(name) > len(suffix):
        for index, char in enumerate(name[: -len(suffix)]):
            other = name[index + 1:]
            if char == "-" and other != consumer_id and consumers(other) is not None:
                return (
                    f"metadata.name {name!r} ends in \"-{other}\": it belongs to the plan of consumer {other!r}; "
                    f"ask for a name ending in \"{suffix}\" that is not another consumer's"
                )
        return ""
    if name_matches(name, policy.same_names):
        return ""
    return (
        f"metadata.name {name!r}: a twin namespace of consumer {consumer_id!r} must end in \"{suffix}\" (the "
        f"DefaultName mapping); other names (EnforceSameName) only where the provider grants them in Consumer "
        f"{SAME_NAMES_KEY}"
        + (f" (granted: {', '.join(policy.same_names)})" if policy.same_names else " (none granted)")
    )


def count_problem(
    request: Mapping,
    siblings: Iterable[Mapping],
    *,
    max_count: int,
    eligible: Callable[[Mapping], bool],
    served: Callable[[Mapping], bool],
) -> str:
    """Why ``request`` is over its consumer's maximum of twin namespaces, or "".

    ``siblings``: every TwinNamespace of the consumer (``request`` among them, or not yet);
    ``eligible``: whether one passes the name rules (only those compete); ``served``:
    whether its namespace exists already (those keep their place however the maximum
    changes: a twin in use is never refused). The rest are ranked by creationTimestamp,
    then namespace/name: the first ``max_count`` are served. The ranking depends only on
    the requests, so two reconciles running at once agree on who gets the last place,
    and a request being deleted keeps its place until its namespace is gone."""
    key = request_key(request)
    if served(request):
        return ""
    ranked = {request_key(r): r for r in siblings if eligible(r)}
    ranked[key] = request
    order = sorted(
        ranked.values(),
        key=lambda r: (not served(r), str((r.get("metadata") or {}).get("creationTimestamp") or "~"), request_key(r)),
    )
    position = [request_key(r) for r in order].index(key)
    if position < max_count:
        return ""
    return (
        f"consumer has reached its maximum of {max_count} twin namespaces (Consumer {MAX_COUNT_KEY}); "
        "delete a TwinNamespace it no longer needs, or ask the provider to raise the maximum"
    )


def consumer_twin_policy(consumer: Mapping) -> tuple[TwinNamespacePolicy | None, str]:
    """The consumer's twin namespace policy, or None and why (the provider's mistake)."""
    try:
        return parse_policy((consumer.get("spec") or {}).get("policy")).twin_namespaces, ""
    except ProviderPolicyError as exc:
        return None, f"Consumer {consumer_name(consumer)} has a policy that does not parse ({exc}); the provider must fix it"


def is_ours(namespace: Mapping | None, consumer_id: str, key: str) -> bool:
    """Whether the enforcer made ``namespace`` for request ``key`` of ``consumer_id``."""
    if not namespace:
        return False
    metadata = namespace.get("metadata") or {}
    labels = metadata.get("labels") or {}
    annotations = metadata.get("annotations") or {}
    return (
        labels.get(c.LABEL_MANAGED_BY) == c.MANAGED_BY_ENFORCER
        and labels.get(c.LABEL_ORIGIN_CLUSTER_ID) == consumer_id
        and annotations.get(c.ANNOTATION_TWIN_REQUEST) == key
    )


def made_for(namespace: Mapping | None, key: str) -> bool:
    """Whether the enforcer made ``namespace`` for request ``key``, whichever consumer it
    was for (the deletion path, where the Consumer may be gone already)."""
    if not namespace:
        return False
    metadata = namespace.get("metadata") or {}
    return (metadata.get("labels") or {}).get(c.LABEL_MANAGED_BY) == c.MANAGED_BY_ENFORCER and (
        metadata.get("annotations") or {}
    ).get(c.ANNOTATION_TWIN_REQUEST) == key


def desired_labels(consumer_id: str, level: str) -> dict[str, str]:
    return {
        c.LABEL_ORIGIN_CLUSTER_ID: consumer_id,
        c.LABEL_MANAGED_BY: c.MANAGED_BY_ENFORCER,
        c.LABEL_PSA_ENFORCE: level,
        c.LABEL_PSA_ENFORCE_VERSION: "latest",
    }


def desired_annotations(request: Mapping) -> dict[str, str]:
    return {
        c.ANNOTATION_TWIN_OF: str((request.get("spec") or {}).get("localNamespace") or ""),
        c.ANNOTATION_TWIN_REQUEST: request_key(request),
    }


def desired_namespace(request: Mapping, consumer_id: str, level: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": (request.get("metadata") or {}).get("name"),
            "labels": desired_labels(consumer_id, level),
            "annotations": desired_annotations(request),
        },
    }


def namespace_patch(namespace: Mapping, request: Mapping, consumer_id: str, level: str) -> dict | None:
    """A merge patch bringing our namespace's labels and annotations to what they should
    be (only the keys that differ), or None when they already are."""
    metadata = namespace.get("metadata") or {}
    patch: dict = {}
    for section, desired in (("labels", desired_labels(consumer_id, level)), ("annotations", desired_annotations(request))):
        current = metadata.get(section) or {}
        changed = {k: v for k, v in desired.items() if current.get(k) != v}
        if changed:
            patch.setdefault("metadata", {})[section] = changed
    return patch or None


def desired_rolebinding(namespace: str, request: Mapping, consumer: Mapping, twin_role: str) -> dict:
    account_namespace, account_name = service_account_of(consumer)
    return {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": "RoleBinding",
        "metadata": {
            "name": c.TWIN_ROLEBINDING_NAME,
            "namespace": namespace,
            "labels": {c.LABEL_MANAGED_BY: c.MANAGED_BY_ENFORCER, c.LABEL_ORIGIN_CLUSTER_ID: consumer_name(consumer)},
            "annotations": {c.ANNOTATION_TWIN_REQUEST: request_key(request)},
        },
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": twin_role},
        "subjects": [{"kind": "ServiceAccount", "name": account_name, "namespace": account_namespace}],
    }


def rolebinding_action(existing: Mapping | None, desired: Mapping) -> RoleBindingAction:
    if existing is None:
        return RoleBindingAction.CREATE
    if existing.get("roleRef") != desired["roleRef"]:
        return RoleBindingAction.RECREATE
    metadata = existing.get("metadata") or {}
    wanted = desired["metadata"]
    marks_ok = all((metadata.get("labels") or {}).get(k) == v for k, v in wanted["labels"].items()) and all(
        (metadata.get("annotations") or {}).get(k) == v for k, v in wanted["annotations"].items()
    )
    if _subjects(existing) != _subjects(desired) or not marks_ok:
        return RoleBindingAction.UPDATE
    return RoleBindingAction.NONE


def desired_resourcequota(namespace: str, request: Mapping, consumer: Mapping) -> dict | None:
    """The ResourceQuota of twin ``namespace``: the object-count and storage keys of the
    Consumer's ``spec.quota``, each bounding this twin (enforcer/consumers/quota.py
    :func:`~enforcer.consumers.quota.twin_object_quota`); None when it has none (no ResourceQuota:
    nothing is limited). Raises QuantityError naming the key of a figure that does not
    parse (the provider's mistake)."""
    hard = twin_object_quota((consumer.get("spec") or {}).get("quota"))
    if not hard:
        return None
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {
            "name": c.TWIN_RESOURCEQUOTA_NAME,
            "namespace": namespace,
            "labels": {c.LABEL_MANAGED_BY: c.MANAGED_BY_ENFORCER, c.LABEL_ORIGIN_CLUSTER_ID: consumer_name(consumer)},
            "annotations": {c.ANNOTATION_TWIN_REQUEST: request_key(request)},
        },
        "spec": {"hard": hard},
    }


def _same_hard(existing: Mapping, desired: Mapping) -> bool:
    """Whether two ``spec.hard`` say the same: compared as quantities, since the API
    server writes them back in its canonical form ("1000m" comes back as "1")."""
    if set(existing) != set(desired):
        return False
    try:
        return all(parse_quantity(existing[k]) == parse_quantity(desired[k]) for k in desired)
    except QuantityError:
        return False


def resourcequota_action(existing: Mapping | None, desired: Mapping | None) -> ResourceQuotaAction:
    """What brings the twin's ResourceQuota (``existing``, by its name) to ``desired``.
    One of that name without our mark (made by the provider's admin: the consumer has no
    rights on ResourceQuotas) is replaced when one is desired, else left alone."""
    if desired is None:
        if existing is None:
            return ResourceQuotaAction.NONE
        labels = (existing.get("metadata") or {}).get("labels") or {}
        ours = labels.get(c.LABEL_MANAGED_BY) == c.MANAGED_BY_ENFORCER
        return ResourceQuotaAction.DELETE if ours else ResourceQuotaAction.NONE
    if existing is None:
        return ResourceQuotaAction.CREATE
    metadata = existing.get("metadata") or {}
    wanted = desired["metadata"]
    marks_ok = all((metadata.get("labels") or {}).get(k) == v for k, v in wanted["labels"].items()) and all(
        (metadata.get("annotations") or {}).get(k) == v for k, v in wanted["annotations"].items()
    )
    hard = (existing.get("spec") or {}).get("hard") or {}
    if not marks_ok or not _same_hard(hard, desired["spec"]["hard"]):
        return ResourceQuotaAction.UPDATE
    return ResourceQuotaAction.NONE


def _subjects(binding: Mapping) -> list[tuple]:
    return sorted(
        (s.get("kind"), s.get("name"), s.get("namespace") or "", s.get("apiGroup") or "")
        for s in binding.get("subjects") or []
    )


def status(request: Mapping, phase: str, message: str, namespace: str = "") -> dict:
    desired: dict = {"phase": phase, "message": message}
    if namespace:
        desired["namespace"] = namespace
    generation = ObjectMeta.of(request).generation
    if generation is not None:
        desired["observedGeneration"] = generation
    return desired


def status_changed(request: Mapping, desired: Mapping) -> bool:
    return (request.get("status") or {}) != desired


def _terminating(obj: Mapping | None) -> bool:
    return ObjectMeta.of(obj).deleting


def plan_twin(
    request: Mapping,
    *,
    tenant_namespace: Mapping | None,
    consumers: ConsumerLookup,
    namespace: Mapping | None,
    rolebinding: Mapping | None,
    twin_role: str,
    resourcequota: Mapping | None = None,
    siblings: Callable[[Mapping], list[Mapping]] = lambda _consumer: [],
    namespace_of: Callable[[str], Mapping | None] = lambda _name: None,
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

    # The provider's plan (Consumer spec.policy.twinNamespaces): names and count. A twin
    # already served is never refused by a later policy change (its pods run on; the
    # provider deletes the TwinNamespace if it wants it gone).
    served_already = namespace is not None and is_ours(namespace, consumer_id, key)
    policy, bad_policy = consumer_twin_policy(consumer)
    if policy is None:
        return TwinPlan(status=status(request, c.TWIN_PHASE_REFUSED, bad_policy))
    if not served_already:

        def fits_plan(other: Mapping) -> bool:
            other_name = str((other.get("metadata") or {}).get("name") or "")
            return not name_problem(other_name) and not plan_name_problem(
                other_name, consumer_id, policy, release_namespace=release_namespace, consumers=consumers
            )

        def is_served(other: Mapping) -> bool:
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
            create_namespace=desired_namespace(request, consumer_id, level),
            notes=["namespace absent: create it"],
        )

    if _terminating(namespace):
        # Ours but going away (deleted by hand): once gone it is created afresh.
        return TwinPlan(
            status=status(request, c.TWIN_PHASE_PENDING, f"namespace {name} is terminating; it will be created again"),
            add_finalizer=add_finalizer,
            requeue_after=TERMINATING_RECHECK_SECONDS,
        )

    patch = namespace_patch(namespace, request, consumer_id, level)
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
    counted = quota is None or quota_action is not ResourceQuotaAction.NONE or _same_hard(
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


def _plan_deletion(request: Mapping, namespace: Mapping | None) -> TwinPlan:
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
