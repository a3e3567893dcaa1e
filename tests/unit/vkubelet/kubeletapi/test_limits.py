"""The kubelet API's bounds (vkubelet/kubeletapi/limits.py): flags, validation, slots."""

import argparse
import threading

import pytest

from vkubelet.kubeletapi.limits import Slots, StreamLimits, add_limit_flags, limits_from_args


def parse(*argv):
    parser = argparse.ArgumentParser()
    add_limit_flags(parser, "vkubelet")
    return limits_from_args(parser.parse_args(list(argv)))


def test_defaults_are_the_dataclass_defaults():
    assert parse() == StreamLimits()
    assert StreamLimits().stream_idle_timeout == 4 * 3600  # the kubelet's streaming idle default


def test_flags_and_durations():
    limits = parse("--kubelet-max-connections=64", "--kubelet-max-streams=8", "--kubelet-stream-idle-timeout=90s",
                   "--kubelet-remote-connect-timeout=2s")
    assert limits == StreamLimits(max_connections=64, max_streams=8, stream_idle_timeout=90.0, remote_connect_timeout=2.0)
    assert parse("--kubelet-stream-idle-timeout=0").stream_idle_timeout == 0  # never


@pytest.mark.parametrize("flag", ["--kubelet-max-connections=0", "--kubelet-max-streams=-1", "--kubelet-remote-connect-timeout=0s"])
def test_nonsense_is_refused_by_the_flag_parser(flag, capsys):
    with pytest.raises(SystemExit):
        parse(flag)


def test_more_streams_than_connections_is_a_problem_naming_both_flags():
    (problem,) = StreamLimits(max_connections=10, max_streams=20).problems()
    assert "--kubelet-max-streams=20" in problem and "--kubelet-max-connections=10" in problem
    assert StreamLimits().problems() == []


def test_slots_never_go_past_their_capacity_under_contention():
    slots = Slots(5)
    taken = []

    def grab():
        if slots.acquire():
            taken.append(1)

    threads = [threading.Thread(target=grab) for _ in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(taken) == 5 and slots.used == 5
    assert not slots.acquire()
    slots.release()
    assert slots.acquire()
