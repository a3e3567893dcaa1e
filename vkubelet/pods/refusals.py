"""A provider's refusal of a ShadowPod, and how the virtual kubelet waits it out (pure).

The provider (the remote cluster) admits a consumer on its own terms: its ShadowPod
webhook, Pod Security, quotas and RBAC may answer a create or an update with 403 or 422.
That is not an error of ours to retry at once - the same request meets the same answer
until the pod, the provider's terms or the provider's usage change - nor a reason to give
up: a quota frees up when another pod goes. So a refused pod is tried again with a
per-pod exponential backoff (2 s, 4 s ... 5 min), starting over when the pod itself or
the provider's terms for us change, and every attempt in between that an informer event
or a resync would trigger is answered from here without a request.

What the user sees is the provider's own words: the apiserver wraps a webhook's or an
admission policy's message in boilerplate ("admission webhook \\"x\\" denied the
request: "), which :func:`provider_message` takes off.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Mapping

from kube_offload.runtime.kube import ApiError
from kube_offload.resources import QuantityError, parse_resource_list
from kube_offload.times import doubling_delay
from kube_offload.views import ConsumerView
# status.reason of a local pod waiting for its provider to accept it; also the reason of
# its Warning Events (the contract's word).
from kube_offload.reasons import REASON_PROVIDER_REFUSED  # noqa: F401  (re-exported)

# The API does not cap a pod's status.message; a provider's message is kept readable.
MAX_STATUS_MESSAGE = 1024
# Consumer.spec fields that make a refusal worth trying again at once when they change.
# (A changed policy may grant what a pod was refused, or what we dropped from it.)
TERMS_FIELDS = ("quota", "cordoned", "drain", "podSecurityLevel", "policy")

BACKOFF_START_SECONDS = 2.0
BACKOFF_CAP_SECONDS = 300.0

# Status codes with which an apiserver refuses the request itself (not the server's or
# the network's trouble): Forbidden (RBAC, webhook identity checks, quota, Pod Security),
# Invalid (schema, webhook field checks), BadRequest (a webhook answering a code < 400 is
# turned into 400 by the apiserver).
REFUSAL_CODES = frozenset({400, 403, 422})

# The apiserver's wrapping of a webhook's message (k8s.io/apiserver .../webhook/errors/
# statuserror.go: `admission webhook %q denied the request: %s`).
_WEBHOOK_PREFIX = re.compile(r'^admission webhook "[^"]*" denied the request:\s*')
# A ValidatingAdmissionPolicy's (admission.NewForbidden around "ValidatingAdmissionPolicy
# 'p' with binding 'b' denied request: %s"): `<resource> "<name>" is forbidden: ...`.
_POLICY_PREFIX = re.compile(
    r"^(?:\S+ \"[^\"]*\" is forbidden: )?ValidatingAdmissionPolicy '[^']*'(?: with binding '[^']*')? denied request:\s*"
)


@dataclass(frozen=True)
class Refusal:
    """The provider said no to a request as it stands."""

    status: int
    reason: str
    message: str  # the provider's words, without the apiserver's wrapping


def provider_message(message: str) -> str:
    """``message`` without the apiserver's boilerplate around a webhook's or an admission
    policy's own words; any other message (RBAC, Pod Security, schema) is the apiserver's
    own and is kept whole."""
    text = (message or "").strip()
    for prefix in (_WEBHOOK_PREFIX, _POLICY_PREFIX):
        stripped = prefix.sub("", text, count=1)
        if stripped != text:
            return stripped.strip() or text
    return text


def _namespace_terminating(error: ApiError) -> bool:
    causes = ((error.body or {}).get("details") or {}).get("causes") or []
    return any((cause or {}).get("type") == "NamespaceTerminating" for cause in causes)


def refusal_of(error: ApiError) -> Refusal | None:
    """The refusal ``error`` stands for, or None when it is something else (transient,
    a conflict, a missing namespace...) that the caller handles as before."""
    if error.status not in REFUSAL_CODES:
        return None
    # A twin namespace being deleted forbids new content: a state that passes, not a
    # verdict on the pod.
    if _namespace_terminating(error):
        return None
    return Refusal(error.status, error.reason, provider_message(error.message))


def backoff_delay(attempt: int, *, start: float = BACKOFF_START_SECONDS, cap: float = BACKOFF_CAP_SECONDS) -> float:
    """Seconds to wait after the ``attempt``-th refusal in a row (1-based): start,
    2*start, 4*start ... capped."""
    return doubling_delay(attempt, start=start, cap=cap)


def fingerprint(*parts: object) -> str:
    """A short stable digest of what a refusal was about (the pod's labels, annotations
    and spec; the provider's terms): when it changes, waiting longer is pointless."""
    text = json.dumps(parts, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def pod_fingerprint(pod: Mapping[str, Any]) -> str:
    """What of a pod a provider judges: its labels, annotations and spec (not its status,
    which the virtual kubelet itself writes, nor its resourceVersion)."""
    meta = pod.get("metadata") or {}
    return fingerprint(meta.get("uid"), meta.get("labels"), meta.get("annotations"), pod.get("spec"))


@dataclass(frozen=True)
class Attempt:
    """One request about to be sent under its backoff: what :meth:`RefusalBackoff.refused`
    and :meth:`RefusalBackoff.accepted` need of it afterwards."""

    key: Hashable
    fingerprint: str  # of the pod as it is now (pod_fingerprint)
    wait: float  # seconds until the request may be sent; 0: now


@dataclass
class _State:
    fingerprint: str
    attempts: int
    next_at: float


class RefusalBackoff:
    """Per-key backoff after refusals (thread-safe; ``clock`` injectable for tests).

    A key is e.g. ``(pod key, "create")``. :meth:`wait` says how long until the next
    attempt is allowed (0 = now); :meth:`refused` records one more refusal and returns
    (attempt number, delay); :meth:`forget` clears the key after a success or when the
    pod is gone. A changed fingerprint starts the key over at once.
    """

    def __init__(
        self,
        *,
        start: float = BACKOFF_START_SECONDS,
        cap: float = BACKOFF_CAP_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._start = start
        self._cap = cap
        self._clock = clock
        self._lock = threading.Lock()
        self._states: dict[Hashable, _State] = {}

    def wait(self, key: Hashable, print_: str) -> float:
        with self._lock:
            state = self._states.get(key)
            if state is None:
                return 0.0
            if state.fingerprint != print_:
                del self._states[key]  # the pod or the provider's terms changed: try now
                return 0.0
            return max(0.0, state.next_at - self._clock())

    def attempt(self, key: Hashable, pod: Mapping[str, Any]) -> Attempt:
        """Whether ``pod``'s request ``key`` may be sent now (:meth:`wait` on its
        fingerprint), as one value for the step that sends it."""
        print_ = pod_fingerprint(pod)
        return Attempt(key, print_, self.wait(key, print_))

    def accepted(self, key: Hashable, pod: Mapping[str, Any]) -> dict[str, Any] | None:
        """The provider accepted ``pod``'s request ``key``: its backoff is forgotten; the
        status patch that clears the pod's waiting status, if it says it waits
        (:func:`clear_waiting_patch`)."""
        self.forget(key)
        return clear_waiting_patch(pod)

    def refused(self, key: Hashable, print_: str) -> tuple[int, float]:
        with self._lock:
            state = self._states.get(key)
            attempts = state.attempts + 1 if state is not None and state.fingerprint == print_ else 1
            delay = backoff_delay(attempts, start=self._start, cap=self._cap)
            self._states[key] = _State(print_, attempts, self._clock() + delay)
            return attempts, delay

    def allow_now(self, key: Hashable) -> bool:
        """Let the next attempt of ``key`` happen now, keeping its count: the provider's
        terms eased, worth one try, but a pod refused again goes on with its schedule
        (many refused pods and a busy provider must not mean a retry storm each time a
        slot frees). False if the key has no backoff."""
        with self._lock:
            state = self._states.get(key)
            if state is None:
                return False
            state.next_at = min(state.next_at, self._clock())
            return True

    def attempts(self, key: Hashable) -> int:
        with self._lock:
            state = self._states.get(key)
            return state.attempts if state is not None else 0

    def forget(self, key: Hashable) -> None:
        with self._lock:
            self._states.pop(key, None)

    def forget_prefix(self, first: Hashable) -> None:
        """Forget every key whose first element is ``first`` (all operations of a pod)."""
        with self._lock:
            for key in [k for k in self._states if isinstance(k, tuple) and k and k[0] == first]:
                del self._states[key]

    def keys(self) -> list[Hashable]:
        with self._lock:
            return list(self._states)

    def __len__(self) -> int:
        with self._lock:
            return len(self._states)


# --- what the local pod says meanwhile ---------------------------------------------------------
def waiting_message(cluster_id: str, refusal: Refusal) -> str:
    text = f"waiting for cluster {cluster_id} to accept the pod (retried with backoff): {refusal.message}"
    return text[:MAX_STATUS_MESSAGE]


def policy_refusal(cluster_id: str, reasons: list[str]) -> Refusal:
    """The refusal we foresee ourselves: the provider's policy for us (``Consumer
    spec.policy``) refuses the pod whatever we drop (vkubelet/shared/policy_fit.py), so it is
    not sent; ``reasons`` name the fields and the policy keys."""
    return Refusal(
        0,
        "ProviderPolicy",
        f"not sent: the policy of cluster {cluster_id} for this cluster refuses it: {'; '.join(reasons)} "
        "(sent once the pod changes or the provider grants it)",
    )


def not_sent_message(refusal: Refusal) -> str:
    return refusal.message[:MAX_STATUS_MESSAGE]


def waiting_status_patch(pod: Mapping[str, Any], cluster_id: str, refusal: Refusal) -> dict[str, Any] | None:
    """A pods/status merge patch saying the pod waits for the provider (``kubectl get``
    shows ``ProviderRefused`` as its STATUS, ``kubectl describe`` the message); None when
    it already says so, or when the pod is past Pending (a running pod whose update was
    refused keeps its real status). Conditions, PodScheduled included, are left alone:
    the pod *is* scheduled, on the virtual node."""
    status = pod.get("status") or {}
    if status.get("phase") not in (None, "", "Pending"):
        return None
    # A refusal we foresaw (status 0) was never sent: no waiting for the provider's answer.
    message = not_sent_message(refusal) if refusal.status == 0 else waiting_message(cluster_id, refusal)
    if status.get("reason") == REASON_PROVIDER_REFUSED and status.get("message") == message:
        return None
    return {"status": {"reason": REASON_PROVIDER_REFUSED, "message": message}}


def clear_waiting_patch(pod: Mapping[str, Any]) -> dict[str, Any] | None:
    """Undo :func:`waiting_status_patch` once the provider accepted the pod."""
    status = pod.get("status") or {}
    if status.get("reason") != REASON_PROVIDER_REFUSED:
        return None
    return {"status": {"reason": None, "message": None}}


# --- when the provider's terms ease ------------------------------------------------------------
def _used(consumer: Mapping[str, Any] | None) -> dict[str, int] | None:
    try:
        return parse_resource_list(ConsumerView(consumer).used or {})
    except QuantityError:
        return None  # unreadable: says nothing either way


def terms_eased(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> bool:
    """Whether a change of our Consumer object (provider side) is worth trying refused
    pods again at once: its quota, cordon, drain or Pod Security level changed, or the usage
    the provider counts for us went down in some resource (another pod of ours ended)."""
    if old is None or new is None:
        return new is not None
    old_spec, new_spec = ConsumerView(old).spec, ConsumerView(new).spec
    if any(old_spec.get(field) != new_spec.get(field) for field in TERMS_FIELDS):
        return True
    before, after = _used(old), _used(new)
    if before is None or after is None:
        return False
    return any(after.get(name, 0) < amount for name, amount in before.items())
