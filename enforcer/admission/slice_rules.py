"""The ShadowPod webhook's rules for a pod of a resource slice (pure; docs/slices.md
"Admission").

A ShadowPod labelled ``kube-offload.io/slice=<name>`` belongs to OffloadSlice ``<name>`` in
its consumer's tenant namespace; the enforcer will add that slice's pool patch to its pod.
So, besides every other rule of the webhook (the consumer's quota and provider policy still
judge what the consumer wrote):

1. the label is immutable: an update may neither add, change nor remove it (the pod
   already runs on that pool, and counts against that slice);
2. the slice exists and is Accepted or PartiallyAccepted (403 otherwise, naming the label
   and the fix);
3. its pool still exists in the Consumer's ``spec.pools``;
4. the consumer's pod spec does not contradict the pool's patch: a ``nodeSelector`` key
   the pool sets to another value, or another ``runtimeClassName`` (422);
5. the requests of the slice's ShadowPods plus what this request adds stay within the
   slice's ``status.accepted``, for each resource listed there (``pods`` counted when it
   is). As for the quota, a request that adds nothing to a resource is never refused for it,
   and an update that adds nothing at all passes rules 2-5 (its pod already runs there).

The pool's tolerations and runtime class are the provider's own grant: they are not in
the ShadowPod, so the provider policy's checks (tolerations, runtimeClasses) never see them.
"""

from __future__ import annotations

from typing import Any, Mapping

from kube_offload import constants as c
from kube_offload.admission import AdmissionRequest, Decision
from kube_offload.pools import Pool, patch_conflicts
from kube_offload.resources import QuantityError, ResourceList, format_quantity, resource_sort_key, uses_binary_format
from kube_offload.slices import accepted_of
from kube_offload.views import pod_template

POD_SPEC = "spec.pod.spec"
LABEL_FIELD = f"metadata.labels[{c.LABEL_SLICE}]"


def slice_of(shadowpod: Mapping[str, Any] | None) -> str | None:
    """The slice a ShadowPod's label names (None: not a slice's pod)."""
    labels = ((shadowpod or {}).get("metadata") or {}).get("labels") or {}
    value = labels.get(c.LABEL_SLICE)
    return str(value) if value not in (None, "") else None


def label_change(request: AdmissionRequest) -> Decision | None:
    """Rule 1, before anything else (a label change is metadata, which the webhook would
    otherwise let through)."""
    if request.operation != "UPDATE" or request.old_object is None:
        return None
    old, new = slice_of(request.old_object), slice_of(request.object)
    if old == new:
        return None
    return Decision.deny(422, "Invalid", (
        f"{LABEL_FIELD}: immutable ({_shown(old)} -> {_shown(new)}): a ShadowPod's slice is fixed when it is "
        "created; delete the ShadowPod and create it again in the other slice"
    ))


def template_label(request: AdmissionRequest) -> Decision | None:
    """The pod template may carry the slice label (the consumer's vkubelet selects its
    remote pods by it) only with the ShadowPod's own value: a pod must never claim a slice
    its ShadowPod is not counted against."""
    shadowpod = request.object or {}
    template = pod_template(shadowpod) or {}
    labels = (template.get("metadata") or {}).get("labels")
    if not isinstance(labels, Mapping) or c.LABEL_SLICE not in labels:
        return None
    value = labels.get(c.LABEL_SLICE)
    own = slice_of(shadowpod)
    if value not in (None, "") and str(value) == own:
        return None
    return Decision.deny(422, "Invalid", (
        f"spec.pod.metadata.labels[{c.LABEL_SLICE}]: {_shown(str(value) if value is not None else None)} differs from "
        f"the ShadowPod's {LABEL_FIELD} ({_shown(own)}): the pod's slice label may only repeat the ShadowPod's; "
        "remove it or make them equal"
    ))


def _shown(value: str | None) -> str:
    return repr(value) if value is not None else "absent"


def decide(
    request: AdmissionRequest,
    *,
    slice_name: str,
    tenant: str,
    offload_slice: Mapping[str, Any] | None,
    pool: Pool | None,
    used: Mapping[str, int],
    delta: Mapping[str, int],
) -> Decision | None:
    """Rules 2-5 for a ShadowPod of ``slice_name``: None to admit, else the refusal.

    ``offload_slice``: the OffloadSlice in ``tenant`` (None: none); ``pool``: its pool from
    the Consumer's spec (None: gone); ``used``: the requests of the slice's live
    ShadowPods (this one's old object included on an UPDATE), in milli-units; ``delta``:
    what this request adds (new minus old on an UPDATE)."""
    where = f'OffloadSlice "{slice_name}" in namespace "{tenant}"'
    if request.operation == "UPDATE" and not any(amount > 0 for amount in delta.values()):
        # A running pod's update that adds nothing (an image, a deadline) is never refused for
        # the slice, as for the quota: the slice may have been shrunk or refused since, and
        # its pods keep running until they end. The patch cannot be contradicted: the pod's
        # nodeSelector and runtimeClassName are immutable.
        return None
    if offload_slice is None:
        return _forbidden(
            f"{LABEL_FIELD}={slice_name!r}: there is no {where}; create the OffloadSlice first (the virtual kubelet "
            "does, for each slice of its peering), or remove the label"
        )
    phase = (offload_slice.get("status") or {}).get("phase") or c.SLICE_PHASE_PENDING
    try:
        accepted = accepted_of(offload_slice)
    except QuantityError as exc:
        return _forbidden(f"{where} has an unreadable status.accepted ({exc}); the enforcer rewrites it, retry")
    if accepted is None:
        message = (offload_slice.get("status") or {}).get("message") or ""
        return _forbidden(
            f"{LABEL_FIELD}={slice_name!r}: {where} is {phase}, not Accepted or PartiallyAccepted"
            f"{f' ({message})' if message else ''}; no pod runs in it until the provider accepts it"
        )
    if pool is None:
        pool_name = (offload_slice.get("spec") or {}).get("pool")
        return _forbidden(
            f"{LABEL_FIELD}={slice_name!r}: the pool {pool_name!r} of {where} is no longer among the provider's pools "
            "(Consumer spec.pools); the slice is decided again shortly"
        )
    pod_spec = (pod_template(request.object) or {}).get("spec")
    conflicts = patch_conflicts(pod_spec if isinstance(pod_spec, Mapping) else {}, pool, field_prefix=POD_SPEC)
    if conflicts:
        return Decision.deny(422, "Invalid", "\n".join(conflicts))
    over = []
    for name in sorted(accepted, key=resource_sort_key):
        more = delta.get(name, 0)
        if more <= 0:
            continue
        if used.get(name, 0) + more > accepted[name]:
            over.append(f"{name}: requested {_q(name, more)}, used {_q(name, used.get(name, 0))}, accepted {_q(name, accepted[name])}")
    if over:
        return _forbidden(
            f"exceeded {where}: {'; '.join(over)}; wait until other pods of the slice end, or ask for a larger slice "
            "(the OffloadSlice's spec.resources, within what the provider accepts)"
        )
    return None


def slice_usage(shadowpods: list[Mapping[str, Any]], requests_of: Any) -> ResourceList:
    """The sum of ``requests_of(shadowpod)`` over ``shadowpods``."""
    total: ResourceList = {}
    for shadowpod in shadowpods:
        for name, amount in requests_of(shadowpod).items():
            total[name] = total.get(name, 0) + amount
    return total


def _q(name: str, milli: int) -> str:
    return format_quantity(milli, binary=uses_binary_format(name))


def _forbidden(message: str) -> Decision:
    return Decision.deny(403, "Forbidden", message)
