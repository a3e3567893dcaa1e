"""Which twin namespaces the consumer may use (and watch), and the backoff on a refusal."""

import pytest

from kube_offload import constants as c
from vkubelet.shared import twin_requests as tr


def _req(name, *, phase=None, origin="local", deleting=False, granted=None):
    req = tr.build_request(name, tenant_namespace="t", local_namespace=name.rsplit("-", 1)[0], local_cluster_id=origin)
    if phase:
        req["status"] = {"phase": phase, **({"namespace": granted} if granted else {})}
    if deleting:
        req["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return req


def test_only_ready_requests_of_ours_are_usable():
    requests = [
        _req("a-local", phase=c.TWIN_PHASE_READY, granted="a-local"),
        _req("b-local", phase=c.TWIN_PHASE_READY),  # namespace not echoed: still the name asked
        _req("c-local", phase=c.TWIN_PHASE_PENDING),
        _req("d-local", phase=c.TWIN_PHASE_REFUSED),
        _req("e-local", phase=c.TWIN_PHASE_READY, deleting=True),
        _req("f-local", phase=c.TWIN_PHASE_TERMINATING),
        _req("g-local", phase=c.TWIN_PHASE_READY, origin="other"),
        _req("h-local", phase=c.TWIN_PHASE_READY, granted="not-h"),
        _req("i-local"),
    ]
    assert tr.usable_twins(requests, "local") == {"a-local", "b-local"}


def test_phase_defaults_to_pending():
    assert tr.phase({}) == c.TWIN_PHASE_PENDING
    assert tr.phase({"status": {"phase": "Ready"}}) == "Ready"


def test_local_namespace_of_malformed_request_is_none():
    assert tr.local_namespace_of({}) is None
    assert tr.local_namespace_of({"spec": {"localNamespace": 3}}) is None


def test_retry_delay_doubles_up_to_the_cap():
    delays = [tr.refused_retry_delay(n) for n in range(8)]
    assert delays[:5] == [10, 20, 40, 80, 160]
    assert delays[5:] == [300, 300, 300]
    assert tr.refused_retry_delay(10_000) == 300  # no overflow


def test_refusal_backoff_tells_once_waits_then_nudges_with_growing_delays():
    first = tr.refusal_step(None, "refused: no Consumer", now=100.0)
    assert first.tell and not first.nudge and first.wait == 10

    # our own nudge's update event, the provider's identical answer, a resync: only wait
    early = tr.refusal_step(first.backoff, "refused: no Consumer", now=105.0)
    assert not early.tell and not early.nudge and early.wait == pytest.approx(5.0)
    assert early.backoff == first.backoff

    due = tr.refusal_step(first.backoff, "refused: no Consumer", now=110.0)
    assert due.tell and due.nudge and due.wait == 20 and due.backoff.attempts == 1

    later = tr.refusal_step(due.backoff, "refused: no Consumer", now=130.0)
    assert later.nudge and later.wait == 40


def test_a_new_refusal_message_is_told_at_once_and_restarts_the_backoff():
    step = tr.refusal_step(None, "refused: A", now=0.0)
    step = tr.refusal_step(step.backoff, "refused: A", now=10.0)
    assert step.backoff.attempts == 1
    step = tr.refusal_step(step.backoff, "refused: B", now=11.0)
    assert step.tell and not step.nudge and step.backoff.attempts == 0 and step.wait == 10


def test_tenant_namespace_defaults_to_the_contract_name_and_is_validated():
    from vkubelet.settings import Settings, SettingsError

    assert Settings(cluster_id="r", local_cluster_id="alpha").tenant_namespace == "kube-offload-tenant-alpha"
    assert Settings(cluster_id="r", local_cluster_id="alpha", tenant_namespace="mine").tenant_namespace == "mine"
    with pytest.raises(SettingsError, match="--tenant-namespace"):
        Settings(cluster_id="r", local_cluster_id="alpha", tenant_namespace="Not_A_Namespace").validate()
