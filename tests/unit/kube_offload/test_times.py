"""The contract's one reader and writer of API times and durations (kube_offload/times.py)."""

import argparse
from datetime import datetime, timedelta, timezone

import pytest

from kube_offload import times
from kube_offload.runtime.flags import non_negative_int, positive_int

UTC = timezone.utc


@pytest.mark.parametrize(("text", "expected"), [
    ("2026-11-26T18:40:00Z", datetime(2026, 11, 26, 18, 40, tzinfo=UTC)),
    ("2026-11-26T18:40:00z", datetime(2026, 11, 26, 18, 40, tzinfo=UTC)),
    ("2026-11-26T18:40:00.123456Z", datetime(2026, 11, 26, 18, 40, 0, 123456, tzinfo=UTC)),
    ("2026-11-26T19:40:00+01:00", datetime(2026, 11, 26, 18, 40, tzinfo=UTC)),
    ("2026-11-26T18:40:00", datetime(2026, 11, 26, 18, 40, tzinfo=UTC)),  # no offset: the API means UTC
])
def test_parse_time_reads_every_api_form_into_utc(text, expected):
    parsed = times.parse_time(text)
    assert parsed == expected
    assert parsed.tzinfo == UTC


@pytest.mark.parametrize("text", ["", "yesterday", "2026-13-01T00:00:00Z", None, 42])
def test_parse_time_refuses_what_is_not_a_time(text):
    with pytest.raises(ValueError):
        times.parse_time(text)
    assert times.parse_time_or_none(text) is None


def test_a_document_of_ours_can_require_the_offset():
    with pytest.raises(times.MissingOffset):
        times.parse_time("2026-11-26T18:40:00", require_offset=True)
    assert times.parse_time("2026-11-26T18:40:00Z", require_offset=True).tzinfo == UTC


def test_formats_are_metav1_time_and_micro_time():
    moment = datetime(2026, 11, 26, 19, 40, 5, tzinfo=timezone(timedelta(hours=1)))
    assert times.format_time(moment) == "2026-11-26T18:40:05Z"
    assert times.format_micro_time(moment) == "2026-11-26T18:40:05.000000Z"  # six digits even at zero
    assert times.format_epoch(moment.timestamp() + 0.9) == "2026-11-26T18:40:05Z"  # fraction dropped
    assert times.parse_time(times.format_time(moment)) == moment


@pytest.mark.parametrize(("text", "seconds"), [
    ("30", 30.0), ("1.5", 1.5), ("500ms", 0.5), ("1m0.5s", 60.5), ("1h30m", 5400.0), ("30d", 2592000.0), ("1d12h", 129600.0),
])
def test_parse_duration(text, seconds):
    assert times.parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["30", "1.5", "", "0"])
def test_parse_duration_unit_required_refuses_bare_numbers(text):
    with pytest.raises(ValueError):
        times.parse_duration(text, unit_required=True)


@pytest.mark.parametrize("text", ["-1s", "+1s", "abc", "30d-1h"])
def test_parse_duration_refuses_negative_and_garbage(text):
    with pytest.raises(ValueError):
        times.parse_duration(text)


def test_positive_and_non_negative_int_are_distinct_ranges():
    assert non_negative_int("0") == 0 and positive_int("1") == 1
    with pytest.raises(argparse.ArgumentTypeError):
        positive_int("0")
    with pytest.raises(argparse.ArgumentTypeError):
        non_negative_int("-1")
    with pytest.raises(argparse.ArgumentTypeError, match="whole number"):
        non_negative_int("many")


def test_doubling_delay_doubles_from_start_up_to_the_cap() -> None:
    assert [times.doubling_delay(n, start=5, cap=60) for n in range(0, 7)] == [0.0, 5.0, 10.0, 20.0, 40.0, 60.0, 60.0]
    assert times.doubling_delay(10_000, start=1, cap=300) == 300.0  # no overflow past the cap
