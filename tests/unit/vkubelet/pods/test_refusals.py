"""A provider's refusal of a ShadowPod: which API errors are refusals, the provider's
words without the apiserver's wrapping, the backoff schedule and its per-pod state, the
pod's waiting status, and when the provider's terms eased."""

import json

import pytest
from kubernetes.client.rest import ApiException

from kube_offload.runtime.kube import ApiError
from vkubelet.pods import refusals as rf

WEBHOOK = "shadowpods.enforcer.kube-offload.io"
PROVIDER_WORDS = "spec.pod.spec.hostNetwork: host namespaces are not allowed by provider remote-1"


def _status(code: int, reason: str, message: str, **details) -> dict:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason, "message": message}
    if details:
        body["details"] = details
    return body


def _error(code: int, reason: str, message: str, **details) -> ApiError:
    """An ApiError made the way kube.call makes it: from the ApiException the client
    raises on the apiserver's Status body."""
    exc = ApiException(status=code, reason=reason)
    exc.body = json.dumps(_status(code, reason, message, **details))
    return ApiError.from_exception(exc)


# --- the provider's words ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "message, words",
    [
        # A validating webhook's denial (k8s.io/apiserver webhook/errors/statuserror.go).
        (f'admission webhook "{WEBHOOK}" denied the request: {PROVIDER_WORDS}', PROVIDER_WORDS),
        # The provider's own words may themselves contain a colon and quotes: kept whole.
        (
            f'admission webhook "{WEBHOOK}" denied the request: quota of consumer "local" exceeded: cpu 3 > 2',
            'quota of consumer "local" exceeded: cpu 3 > 2',
        ),
        # A ValidatingAdmissionPolicy's, with and without a binding name.
        (
            "shadowpods.kube-offload.io \"web-1\" is forbidden: ValidatingAdmissionPolicy 'deny-red' with binding "
            "'deny-red' denied request: red pods are not welcome here",
            "red pods are not welcome here",
        ),
        ("ValidatingAdmissionPolicy 'p' denied request: no", "no"),
        # The apiserver's own refusals are the message: nothing to take off.
        (
            'shadowpods.kube-offload.io is forbidden: User "system:serviceaccount:t:consumer" cannot create resource',
            'shadowpods.kube-offload.io is forbidden: User "system:serviceaccount:t:consumer" cannot create resource',
        ),
        (
            'pods "web-1" is forbidden: violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true)',
            'pods "web-1" is forbidden: violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true)',
        ),
        # A denial without explanation keeps the boilerplate: better than nothing.
        (
            f'admission webhook "{WEBHOOK}" denied the request without explanation',
            f'admission webhook "{WEBHOOK}" denied the request without explanation',
        ),
        (f'admission webhook "{WEBHOOK}" denied the request:   ', f'admission webhook "{WEBHOOK}" denied the request:'),
        ("", ""),
    ],
)
def test_provider_message_drops_only_the_apiservers_wrapping(message, words):
    assert rf.provider_message(message) == words


# --- refusal or not --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "error, refused",
    [
        (_error(403, "Forbidden", f'admission webhook "{WEBHOOK}" denied the request: {PROVIDER_WORDS}'), True),
        (_error(422, "Invalid", f'admission webhook "{WEBHOOK}" denied the request: {PROVIDER_WORDS}'), True),
        (_error(400, "BadRequest", f'admission webhook "{WEBHOOK}" denied the request: malformed'), True),
        (_error(403, "Forbidden", 'shadowpods.kube-offload.io is forbidden: User "x" cannot create resource'), True),
        # A twin namespace on its way out is a state that passes, not a verdict.
        (
            _error(
                403, "Forbidden", "unable to create new content in namespace demo-local because it is being terminated",
                causes=[{"type": "NamespaceTerminating", "message": "namespace demo-local is being terminated"}],
            ),
            False,
        ),
        # The webhook unreachable (failurePolicy Fail), the server overloaded, the network.
        (_error(500, "InternalError", f'Internal error occurred: failed calling webhook "{WEBHOOK}": connection refused'), False),
        (_error(429, "TooManyRequests", "slow down"), False),
        (ApiError(0, "Unreachable", "connection refused"), False),
        (_error(404, "NotFound", 'namespaces "demo-local" not found'), False),
        (_error(409, "AlreadyExists", 'shadowpods "web-1" already exists'), False),
        (_error(409, "Conflict", "the object has been modified"), False),
    ],
)
def test_which_errors_are_refusals(error, refused):
    refusal = rf.refusal_of(error)
    assert (refusal is not None) is refused
    if refusal is not None:
        assert refusal.status == error.status
        assert refusal.message == rf.provider_message(error.message)
        assert "admission webhook" not in refusal.message or "without explanation" in refusal.message


# --- backoff ----------------------------------------------------------------------------------------
def test_backoff_schedule_doubles_from_two_seconds_to_a_five_minute_cap():
    schedule = [rf.backoff_delay(n) for n in range(1, 12)]
    assert schedule == [2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]
    assert rf.backoff_delay(0) == 0
    assert rf.backoff_delay(10_000) == 300  # no overflow, no surprise
    assert rf.backoff_delay(3, start=1, cap=5) == 4


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_backoff_state_per_key_waits_then_allows_the_next_attempt():
    clock = Clock()
    backoff = rf.RefusalBackoff(clock=clock)
    key = ("demo/web-1", "create")
    assert backoff.wait(key, "p1") == 0  # never refused: go
    assert backoff.refused(key, "p1") == (1, 2.0)
    assert backoff.wait(key, "p1") == pytest.approx(2.0)
    clock.now += 1.5
    assert backoff.wait(key, "p1") == pytest.approx(0.5)
    clock.now += 0.5
    assert backoff.wait(key, "p1") == 0
    assert backoff.refused(key, "p1") == (2, 4.0)
    assert backoff.refused(key, "p1") == (3, 8.0)
    # Another pod has its own schedule.
    assert backoff.wait(("demo/web-2", "create"), "p1") == 0
    assert backoff.attempts(key) == 3


def test_a_changed_pod_or_terms_starts_over_at_once():
    clock = Clock()
    backoff = rf.RefusalBackoff(clock=clock)
    key = ("demo/web-1", "create")
    for _ in range(5):
        backoff.refused(key, "p1")
    assert backoff.wait(key, "p1") == pytest.approx(32.0)
    assert backoff.wait(key, "p2") == 0  # the pod changed: try now
    assert backoff.refused(key, "p2") == (1, 2.0)  # and the schedule restarts


def test_eased_terms_allow_one_attempt_now_without_restarting_the_schedule():
    clock = Clock()
    backoff = rf.RefusalBackoff(clock=clock)
    key = ("demo/web-1", "create")
    for _ in range(4):
        backoff.refused(key, "p")
    assert backoff.wait(key, "p") == pytest.approx(16.0)
    assert backoff.allow_now(key) is True
    assert backoff.wait(key, "p") == 0
    assert backoff.refused(key, "p") == (5, 32.0)  # refused again: the schedule goes on
    assert backoff.allow_now(("demo/other", "create")) is False


def test_forget_after_success_and_per_pod():
    backoff = rf.RefusalBackoff(clock=Clock())
    backoff.refused(("demo/web-1", "create"), "p")
    backoff.refused(("demo/web-1", "update"), "p")
    backoff.refused(("demo/web-2", "create"), "p")
    backoff.forget(("demo/web-2", "create"))
    assert backoff.wait(("demo/web-2", "create"), "p") == 0
    backoff.forget_prefix("demo/web-1")
    assert len(backoff) == 0


def _pod(**status) -> dict:
    return {
        "metadata": {"name": "web-1", "namespace": "demo", "uid": "u1", "resourceVersion": "7", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "app", "image": "nginx"}]},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}], **status},
    }


def test_the_pod_fingerprint_ignores_what_we_write_ourselves():
    pod = _pod()
    same = _pod(reason=rf.REASON_PROVIDER_REFUSED, message="waiting")
    same["metadata"]["resourceVersion"] = "8"
    assert rf.pod_fingerprint(pod) == rf.pod_fingerprint(same)
    relabelled = _pod()
    relabelled["metadata"]["labels"] = {"app": "web", "tier": "small"}
    assert rf.pod_fingerprint(pod) != rf.pod_fingerprint(relabelled)
    recreated = _pod()
    recreated["metadata"]["uid"] = "u2"
    assert rf.pod_fingerprint(pod) != rf.pod_fingerprint(recreated)


# --- the waiting pod's status ------------------------------------------------------------------------
REFUSAL = rf.Refusal(403, "Forbidden", PROVIDER_WORDS)


def test_a_refused_pending_pod_says_it_waits_for_the_provider():
    patch = rf.waiting_status_patch(_pod(), "remote-1", REFUSAL)
    assert patch == {
        "status": {
            "reason": "ProviderRefused",
            "message": f"waiting for cluster remote-1 to accept the pod (retried with backoff): {PROVIDER_WORDS}",
        }
    }
    # Conditions (PodScheduled True) and phase are not touched.
    assert set(patch["status"]) == {"reason", "message"}
    # Written once: the same refusal again needs no write.
    assert rf.waiting_status_patch(_pod(**patch["status"]), "remote-1", REFUSAL) is None
    # A running pod (an update refused) keeps its real status.
    assert rf.waiting_status_patch(_pod(phase="Running"), "remote-1", REFUSAL) is None
    # Long provider messages are cut to a readable size.
    long = rf.Refusal(422, "Invalid", "x" * 5000)
    assert len(rf.waiting_status_patch(_pod(), "remote-1", long)["status"]["message"]) == rf.MAX_STATUS_MESSAGE


def test_accepted_pod_loses_the_waiting_reason_only_if_it_is_ours():
    assert rf.clear_waiting_patch(_pod(reason="ProviderRefused", message="m")) == {"status": {"reason": None, "message": None}}
    assert rf.clear_waiting_patch(_pod()) is None
    assert rf.clear_waiting_patch(_pod(reason="Evicted", message="m")) is None


# --- the provider's terms ------------------------------------------------------------------------------
def _consumer(quota=None, cordoned=False, used=None, level="baseline", drain=None) -> dict:
    return {
        "metadata": {"name": "local"},
        "spec": {"quota": quota or {"cpu": "2"}, "cordoned": cordoned, "podSecurityLevel": level,
                 **({"drain": drain} if drain else {})},
        "status": {"used": used or {"cpu": "1500m", "pods": "3"}},
    }


DRAIN = {"startedAt": "2026-11-27T03:00:00Z", "gracePeriodSeconds": 60}


@pytest.mark.parametrize(
    "old, new, eased",
    [
        (_consumer(), _consumer(), False),
        (_consumer(), _consumer(quota={"cpu": "4"}), True),
        (_consumer(cordoned=True), _consumer(cordoned=False), True),
        (_consumer(drain=DRAIN), _consumer(), True),  # undrained: pods refused for the drain go again at once
        (_consumer(level="restricted"), _consumer(level="baseline"), True),
        (_consumer(), _consumer(used={"cpu": "1", "pods": "2"}), True),  # a pod of ours ended
        (_consumer(), _consumer(used={"cpu": "2", "pods": "4"}), False),  # only more used
        (_consumer(), _consumer(used={"cpu": "1500m", "pods": "3", "memory": "1Gi"}), False),
        (_consumer(), _consumer(used={"cpu": "not-a-quantity"}), False),  # garbage is no news
        (None, _consumer(), True),
        (_consumer(), None, False),
    ],
)
def test_terms_eased(old, new, eased):
    assert rf.terms_eased(old, new) is eased


# --- a refusal foreseen by the provider's policy ----------------------------------------------------------
def test_a_pod_the_policy_refuses_says_it_was_not_sent_and_why():
    refusal = rf.policy_refusal("remote-1", ["spec.volumes[0] (share): volume type nfs is not granted (...)"])
    patch = rf.waiting_status_patch(_pod(), "remote-1", refusal)
    assert patch["status"]["reason"] == "ProviderRefused"
    message = patch["status"]["message"]
    assert message.startswith("not sent: the policy of cluster remote-1 for this cluster refuses it: spec.volumes[0] (share)")
    assert "retried with backoff" not in message  # nothing was sent, nothing is retried blindly


def test_a_changed_policy_is_worth_trying_refused_pods_again():
    old = _consumer()
    new = _consumer()
    new["spec"]["policy"] = {"pods": {"volumeTypes": ["nfs"]}}
    assert rf.terms_eased(old, new)
