"""The second half of ShadowPod validation: ask the provider's own API server whether it
would accept the very Pod the enforcer is going to create, with a server-side dry run
(``POST .../pods?dryRun=All``: every admission plugin and validation runs, nothing is
stored). Pod Security admission at the namespace's level, LimitRanges, ResourceQuotas,
other admission webhooks and the Pod's own validation then decide everything the static
rules (:mod:`enforcer.admission.validation`) do not spell out, exactly as they will for the real
create. When the ShadowPod already runs a pod, the in-place update the enforcer would make
of that pod is dry-run too (``PATCH .../pods/<name>?dryRun=All``), so a change the
provider would refuse for a running pod is refused with the ShadowPod update itself.

:func:`verdict` turns the API server's answer into the webhook's decision (pure):
a refusal keeps the API server's reason with its own noise stripped and the Pod's field
paths rewritten into the ShadowPod's (``spec.containers[0]`` -> ``spec.pod.spec.containers[0]``);
a failure of the server or the network refuses with "could not verify" (503) rather than
admitting what nobody checked.

With a :class:`Verdicts` (the default in the enforcer), the create's verdict is kept per
pod template (:mod:`enforcer.admission.verdict_cache`) and the next pod of that template
is judged without a request. The GET of a running pod and the dry run of its update happen
only for an UPDATE: a ShadowPod being created has a new UID, which owns no pod yet.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from kubernetes import client

from enforcer.shadowpods.api import pod_message
from enforcer.admission import verdict_cache
from kube_offload import constants as c
from kube_offload.admission import Decision
from kube_offload.pod_resize import pod_resize_patch
from kube_offload.pools import Pool
from kube_offload.runtime.kinds import PODS
from kube_offload.runtime.kube import ApiError, Kube, NO_RETRY, STRATEGIC_MERGE_PATCH
from kube_offload.shadowpod import InvalidShadowPod, PodFate, build_pod, is_owned_by, pod_fate, pod_update
from kube_offload.views import pod_template

# Connect and read timeouts of the dry run. The apiserver gives this webhook 10 s in all
# (timeoutSeconds); the dry run must leave time for the answer to travel back.
DRY_RUN_TIMEOUT: tuple[float, float] = (2.0, 6.0)
_RBAC_PODS = re.compile(r'cannot (?:create|get|patch) resource "pods(?:/resize)?"')


def pod_for(shadowpod: Mapping[str, Any], pool: Pool | None = None) -> dict[str, Any]:
    """The Pod the enforcer would create for ``shadowpod`` (:func:`build_pod`; ``pool``:
    its resource slice's pool, whose patch the pod gets), built from an admission's
    object. The apiserver has set name and UID before it calls a validating webhook; the
    placeholders only keep a malformed review from crashing."""
    obj = copy.deepcopy(dict(shadowpod))
    meta = obj.setdefault("metadata", {})
    meta.setdefault("uid", "00000000-0000-0000-0000-000000000000")
    if not meta.get("name"):
        meta["name"] = f"{meta.get('generateName') or 'shadowpod-'}dry-run"
    return build_pod(obj, pool=pool)


def _kube(api_client: client.ApiClient) -> Kube:
    # One try each: a retry would eat the webhook's time budget, and an unreachable or
    # overloaded server is answered "could not verify, retry later" (verdict) anyway.
    return Kube(api_client, timeout=DRY_RUN_TIMEOUT, retry=NO_RETRY)


def dry_run_create(api_client: client.ApiClient, namespace: str, pod: dict[str, Any]) -> None:
    """Raises :class:`ApiError` when the API server would not create ``pod``."""
    _kube(api_client).create(PODS, pod, namespace=namespace, dry_run=True)


def dry_run_patch(api_client: client.ApiClient, namespace: str, name: str, patch: dict[str, Any]) -> None:
    """Raises :class:`ApiError` when the API server would not apply ``patch`` (a
    strategic merge patch) to the running pod."""
    _kube(api_client).patch(PODS, name, patch, namespace=namespace, content_type=STRATEGIC_MERGE_PATCH, dry_run=True)


def get_pod(api_client: client.ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    return _kube(api_client).get_or_none(PODS, name, namespace=namespace)


@dataclass(frozen=True)
class Verdicts:
    """The verdict cache and what its key reads from the enforcer's caches (each
    ``namespace name -> ...``)."""

    cache: verdict_cache.VerdictCache
    namespace: Callable[[str], Mapping[str, Any] | None]
    limit_ranges: Callable[[str], Iterable[Mapping[str, Any]]]
    resource_quotas: Callable[[str], Iterable[Mapping[str, Any]]]

    def key(self, namespace: str, shadowpod: Mapping[str, Any], pool: Pool | None = None) -> str | None:
        """None: not cacheable here (a ResourceQuota that counts pods)."""
        if any(verdict_cache.quota_binds_pods(quota) for quota in self.resource_quotas(namespace)):
            return None
        pod = pod_for(verdict_cache.normalised_shadowpod(shadowpod), pool)
        slice_name = str(((shadowpod.get("metadata") or {}).get("labels") or {}).get(c.LABEL_SLICE) or "")
        return verdict_cache.template_key(pod, self.namespace(namespace), self.limit_ranges(namespace), slice_name)


def check(
    api_client: client.ApiClient,
    namespace: str,
    shadowpod: Mapping[str, Any],
    *,
    operation: str = "UPDATE",
    verdicts: Verdicts | None = None,
    fresh: bool = False,
    pool: Pool | None = None,
) -> Decision:
    """``fresh``: ask the server even when the cache holds a verdict (and keep its answer).
    ``pool``: the pool of the ShadowPod's resource slice: the Pod judged carries its patch."""
    try:
        pod = pod_for(shadowpod, pool)
    except (InvalidShadowPod, KeyError) as exc:
        return Decision.deny(422, "Invalid", f"{exc}")
    decision = create_verdict(api_client, namespace, shadowpod, pod, verdicts, fresh=fresh, pool=pool)
    if not decision.allowed or operation == "CREATE":
        # A new ShadowPod's UID owns no pod: nothing running to update (check_update
        # would only GET the name to find a pod it does not own).
        return decision
    return check_update(api_client, namespace, shadowpod)


def create_verdict(
    api_client: client.ApiClient,
    namespace: str,
    shadowpod: Mapping[str, Any],
    pod: dict[str, Any],
    verdicts: Verdicts | None,
    *,
    fresh: bool = False,
    pool: Pool | None = None,
) -> Decision:
    """The provider's verdict on creating ``pod``: from the cache when a pod of the same
    template was judged within the TTL (unless ``fresh``), else from a dry run (then kept:
    a fresh answer also renews the template's verdict)."""
    key = verdicts.key(namespace, shadowpod, pool) if verdicts is not None else None
    leading = False
    if verdicts is not None and key is not None and not fresh:
        cached = verdicts.cache.get(key)
        if cached is None:
            flight = verdicts.cache.lead(key)
            leading = flight is None
            if flight is not None:
                # Another admission of this template is dry-running: its answer is ours.
                flight.wait(sum(DRY_RUN_TIMEOUT))
                cached = verdicts.cache.get(key)
        if cached is not None:
            verdicts.cache.count("hit")
            return cached
    try:
        try:
            dry_run_create(api_client, namespace, pod)
            decision = Decision.allow()
        except ApiError as exc:
            decision = verdict(exc)
        if verdicts is not None:
            if key is not None and verdict_cache.cacheable(decision):
                verdicts.cache.put(key, decision)
                verdicts.cache.count("miss")
            else:
                verdicts.cache.count("bypass")
    finally:
        if leading and verdicts is not None and key is not None:
            verdicts.cache.landed(key)
    return decision


def check_update(api_client: client.ApiClient, namespace: str, shadowpod: Mapping[str, Any]) -> Decision:
    """When the ShadowPod already has a running pod, the change must also be one the
    provider accepts for that pod in place (kube_offload.pod_updates): the patch the
    enforcer would send is dry-run. Refused here, the consumer hears it at once and the
    ShadowPod keeps a template its pod can follow (and that a recreated pod would be
    made from)."""
    name = str((shadowpod.get("metadata") or {}).get("name") or "")
    if not name:
        return Decision.allow()
    try:
        existing = get_pod(api_client, namespace, name)
    except ApiError as exc:
        return verdict(exc)
    if existing is None or not is_owned_by(existing, shadowpod) or pod_fate(existing) is not PodFate.ACTIVE:
        return Decision.allow()  # nothing running to update: the create dry run decided
    try:
        patch = pod_update(shadowpod, existing)
    except InvalidShadowPod as exc:
        return Decision.deny(422, "Invalid", f"{exc}")
    if patch is not None:
        # The resourceVersion was read just now; a dry run conditional on it would only
        # fail on a status update of the pod racing this check.
        patch["metadata"].pop("resourceVersion", None)
        try:
            dry_run_patch(api_client, namespace, name, patch)
        except ApiError as exc:
            return verdict(exc, update=True)
    return check_resize(api_client, namespace, shadowpod, existing)


def check_resize(api_client: client.ApiClient, namespace: str, shadowpod: Mapping[str, Any], pod: Mapping[str, Any]) -> Decision:
    """A template that resizes the running ``pod`` (kube_offload.pod_resize): the resize the
    enforcer would ask of ``pods/resize`` is dry-run, so what the provider's API server
    refuses of it (a QoS class changed, a figure over its node's allocatable, a resource
    that cannot be resized) is refused with the ShadowPod update itself."""
    patch = pod_resize_patch(pod.get("spec") or {}, (pod_template(shadowpod) or {}).get("spec") or {})
    if patch is None:
        return Decision.allow()
    name = str((pod.get("metadata") or {}).get("name") or "")
    try:
        _kube(api_client).patch(PODS, name, patch, namespace=namespace, subresource="resize",
                                content_type=STRATEGIC_MERGE_PATCH, dry_run=True)
    except ApiError as exc:
        decision = verdict(exc, update=True)
        if decision.code == 403:
            # Not a matter of waiting (as the quota's 403 is): the running pod cannot take
            # this resize at all (its node's allocatable, say), what a kubelet calls Infeasible.
            return Decision.deny(422, "Invalid", decision.message)
        return decision
    return Decision.allow()


def verdict(error: ApiError, *, update: bool = False) -> Decision:
    """The webhook's answer for a dry run that failed with ``error`` (``update``: the dry
    run of the in-place update of the running pod)."""
    if error.already_exists:
        # Storage checks the name last, after admission and validation passed: the Pod is
        # acceptable, and its name is the enforcer's business (an old pod still
        # terminating, typically), not the consumer's.
        return Decision.allow()
    if error.status in (0, 401, 408, 429) or error.status >= 500 or error.status == 403 and _rbac_refusal(error):
        return Decision.deny(
            503,
            "ServiceUnavailable",
            f"could not verify the ShadowPod with a dry run of its Pod ({_describe(error)}); retry later",
        )
    code, reason = (403, "Forbidden") if error.status == 403 else (422, "Invalid")
    what = "this update of the running Pod" if update else "this Pod"
    return Decision.deny(code, reason, f"the provider would refuse {what}: {pod_message(error)}")


def _rbac_refusal(error: ApiError) -> bool:
    """A 403 for the enforcer's own missing permission (its RBAC), not the Pod's fault."""
    return _RBAC_PODS.search(error.message or "") is not None


def _describe(error: ApiError) -> str:
    return f"{error.status} {error.reason}: {error.message}" if error.status else f"API server unreachable: {error.message}"
