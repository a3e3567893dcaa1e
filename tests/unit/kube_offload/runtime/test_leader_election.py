"""The pure decision logic of leader election (kube_offload/runtime/leader_election.py)."""

from __future__ import annotations

import argparse
from datetime import datetime, timezone

import pytest

from kube_offload.runtime import leader_election as le
from kube_offload.runtime.leader_election import Action, LeaseRecord, Timing

ME = "pod-a_1234"
OTHER = "pod-b_5678"


def record(holder: str = OTHER, rv: str = "10", duration: float = 15.0, transitions: int = 3) -> LeaseRecord:
    return LeaseRecord(holder=holder, lease_duration=duration, transitions=transitions, resource_version=rv)


def test_no_lease_is_created():
    assert le.decide(None, ME, observed_at=0.0, now=0.0) is Action.CREATE


def test_own_lease_is_renewed_even_when_it_looks_expired():
    assert le.decide(record(holder=ME), ME, observed_at=0.0, now=1000.0) is Action.RENEW


def test_free_lease_is_taken_at_once():
    assert le.decide(record(holder=""), ME, observed_at=100.0, now=100.0) is Action.TAKE


def test_held_lease_waits_until_unchanged_for_its_duration():
    held = record(duration=15.0)
    assert le.decide(held, ME, observed_at=100.0, now=114.9) is Action.WAIT
    assert le.decide(held, ME, observed_at=100.0, now=115.0) is Action.TAKE


def test_expiry_follows_the_duration_written_in_the_lease_not_ours():
    assert le.decide(record(duration=40.0), ME, observed_at=0.0, now=20.0) is Action.WAIT


def test_observation_restarts_when_the_lease_changes():
    first = record(rv="10")
    assert le.observe(None, 0.0, first, now=5.0) == 5.0
    # Same resourceVersion: the holder has not renewed; the clock keeps running from 5.
    assert le.observe(first, 5.0, record(rv="10"), now=12.0) == 5.0
    # Renewed (new resourceVersion): expiry counts from now again.
    assert le.observe(first, 5.0, record(rv="11"), now=12.0) == 12.0


def test_a_renewing_holder_is_never_taken_over():
    observed_at, previous = 0.0, None
    for step in range(20):  # the holder renews every 2 s, we look every 2 s for 40 s
        now = step * 2.0
        current = record(rv=str(step))
        observed_at = le.observe(previous, observed_at, current, now)
        previous = current
        assert le.decide(current, ME, observed_at, now) is Action.WAIT


def test_a_dead_holder_is_taken_over_after_the_lease_duration():
    current = record(rv="7")
    observed_at = le.observe(None, 0.0, current, now=0.0)
    taken = None
    for step in range(1, 20):
        now = step * 2.0
        observed_at = le.observe(current, observed_at, current, now)
        if le.decide(current, ME, observed_at, now) is Action.TAKE:
            taken = now
            break
    assert taken == 16.0  # the first retry at or after 15 s


def test_leader_gives_up_after_the_renew_deadline():
    timing = Timing()
    assert not le.lost(last_renewed=100.0, now=109.9, timing=timing)
    assert le.lost(last_renewed=100.0, now=110.0, timing=timing)


def test_defaults_are_client_go_s():
    assert Timing() == Timing(lease_duration=15.0, renew_deadline=10.0, retry_period=2.0)
    assert Timing().problem() is None


@pytest.mark.parametrize(
    "timing, words",
    [
        (Timing(lease_duration=10, renew_deadline=10, retry_period=2), "--leader-elect-renew-deadline"),
        (Timing(lease_duration=15, renew_deadline=2, retry_period=2), "--leader-elect-retry-period"),
        (Timing(lease_duration=15, renew_deadline=10, retry_period=0), "must be positive"),
    ],
)
def test_timing_problems_name_the_flag(timing, words):
    assert words in (timing.problem() or "")


def test_create_body_holds_the_lease_from_transition_zero():
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    body = le.lease_body("lease", "ns", ME, Action.CREATE, None, Timing(), now)
    assert "resourceVersion" not in body["metadata"]
    assert body["spec"] == {
        "holderIdentity": ME,
        "leaseDurationSeconds": 15,
        "renewTime": "2026-01-02T03:04:05.000000Z",
        "acquireTime": "2026-01-02T03:04:05.000000Z",
        "leaseTransitions": 0,
    }


def test_take_body_is_conditional_and_counts_a_transition():
    now = datetime(2026, 1, 2, 3, 4, 5, 123, tzinfo=timezone.utc)
    body = le.lease_body("lease", "ns", ME, Action.TAKE, record(rv="42", transitions=3), Timing(), now)
    assert body["metadata"]["resourceVersion"] == "42"  # a conflict means another replica won
    assert body["spec"]["leaseTransitions"] == 4
    assert body["spec"]["acquireTime"] == "2026-01-02T03:04:05.000123Z"


def test_renew_body_keeps_acquire_time_and_transitions():
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    held = LeaseRecord(holder=ME, lease_duration=15, transitions=4, resource_version="43", acquire_time="2026-01-01T00:00:00.000000Z")
    body = le.lease_body("lease", "ns", ME, Action.RENEW, held, Timing(), now)
    assert body["metadata"]["resourceVersion"] == "43"
    assert body["spec"]["leaseTransitions"] == 4
    # An UPDATE replaces the whole spec: the acquisition time is carried over.
    assert body["spec"]["acquireTime"] == "2026-01-01T00:00:00.000000Z"
    assert body["spec"]["renewTime"] == "2026-01-02T03:04:05.000000Z"


def test_flags_give_the_timing():
    parser = argparse.ArgumentParser()
    le.add_leader_election_flags(parser, "test")
    args = parser.parse_args(["--leader-elect-lease-duration", "30s", "--leader-elect-renew-deadline", "20s"])
    assert args.leader_elect is True
    assert le.timing_from_args(args) == Timing(lease_duration=30.0, renew_deadline=20.0, retry_period=2.0)
    assert parser.parse_args(["--leader-elect", "false"]).leader_elect is False


def test_losing_the_lease_starts_the_process_over_with_the_same_pid(tmp_path):
    """_exit_process execs the same command line afresh (a clean standby) instead of
    exiting, so nothing outside has to restart it; the PID stays the same."""
    import subprocess
    import sys
    import textwrap

    record = tmp_path / "runs"
    code = textwrap.dedent(f"""
        import os, pathlib
        from kube_offload.runtime import leader_election
        record = pathlib.Path({str(record)!r})
        runs = record.read_text().split() if record.exists() else []
        record.write_text(" ".join([*runs, str(os.getpid())]))
        if not runs:
            leader_election._exit_process()
        raise SystemExit(0)
    """)
    done = subprocess.run([sys.executable, "-c", code], timeout=60, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    first, second = record.read_text().split()
    assert first == second
