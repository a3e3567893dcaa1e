"""Request-body limits of the webhook and the extender: the flag, the 413 wording, and the
chart's memory budget (bench/bench_parse_memory.py measures the figures used here)."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import pytest
import yaml
from werkzeug.exceptions import BadRequest, RequestEntityTooLarge

from extender.settings import BASELINE_BYTES as EXTENDER_BASELINE
from extender.settings import DEFAULT_MAX_BODY_BYTES as EXTENDER_DEFAULT
from extender.settings import DEFAULT_PARSE_MEMORY_BUDGET as EXTENDER_BUDGET
from extender.settings import DEFAULT_THREADS as EXTENDER_THREADS
from extender.settings import DEFAULT_WORKERS as EXTENDER_WORKERS
from extender.settings import MEMORY_LIMIT_BYTES as EXTENDER_MEMORY_LIMIT
from kube_offload.runtime.body_limit import (
    APISERVER_MAX_REQUEST_BODY_BYTES,
    PARSE_AMPLIFICATION,
    READ_SIZE,
    budget_peak_memory,
    fits,
    largest_parseable_body,
    read_body,
    too_large_message,
    worker_parse_budget,
)
from kube_offload.cli import build_parser
from kube_offload.runtime.flags import byte_size, env_name
from webhook.settings import BASELINE_BYTES as WEBHOOK_BASELINE
from webhook.settings import DEFAULT_MAX_BODY_BYTES as WEBHOOK_DEFAULT
from webhook.settings import DEFAULT_PARSE_MEMORY_BUDGET as WEBHOOK_BUDGET
from webhook.settings import MEMORY_LIMIT_BYTES as WEBHOOK_MEMORY_LIMIT
from webhook.settings import DEFAULT_THREADS as WEBHOOK_THREADS
from webhook.settings import DEFAULT_WORKERS as WEBHOOK_WORKERS

MIB = 1024 * 1024
VALUES = Path(__file__).resolve().parents[4] / "charts" / "kube-offload-local" / "values.yaml"
# PSS of the whole server at rest (arbiter + workers) as bench/bench_parse_memory.py
# measured it (67 and 48 MiB), rounded up.
BASELINE = {"webhook": WEBHOOK_BASELINE, "extender": EXTENDER_BASELINE}


@pytest.mark.parametrize(
    "text, expected",
    [("262144", 262144), ("256Ki", 262144), ("3Mi", 3 * MIB), ("1Gi", 1024 * MIB), (" 1408Ki ", 1408 * 1024)],
)
def test_byte_size_reads_bytes_and_binary_suffixes(text: str, expected: int) -> None:
    assert byte_size(text) == expected


@pytest.mark.parametrize("text", ["", "0", "0Ki", "-1", "1.5Mi", "256KB", "256k", "lots", "1Ti"])
def test_byte_size_refuses_what_it_cannot_read(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="size"):
        byte_size(text)


@pytest.mark.parametrize("component", ["webhook", "extender"])
def test_max_body_bytes_flag_parses_and_errors_name_the_flag(component: str, capsys) -> None:
    assert build_parser().parse_args([component, "--max-body-bytes", "512Ki"]).max_body_bytes == 512 * 1024
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args([component, "--max-body-bytes", "half a meg"])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert "--max-body-bytes" in error and "'half a meg' is not a size in bytes" in error and "256Ki" in error


def test_max_body_bytes_defaults_and_environment(monkeypatch) -> None:
    assert build_parser().parse_args(["webhook"]).max_body_bytes == WEBHOOK_DEFAULT
    assert build_parser().parse_args(["extender"]).max_body_bytes == EXTENDER_DEFAULT
    monkeypatch.setenv(env_name("webhook", "--max-body-bytes"), "1Mi")
    assert build_parser().parse_args(["webhook"]).max_body_bytes == MIB
    monkeypatch.setenv(env_name("webhook", "--max-body-bytes"), "1 MB")
    with pytest.raises(SystemExit) as exit_info:
        build_parser()
    assert "KUBE_OFFLOAD_WEBHOOK_MAX_BODY_BYTES" in str(exit_info.value.code)


def test_too_large_message_says_size_limit_and_knob() -> None:
    announced = too_large_message("webhook", 262144, 9 * MIB)
    assert f"of {9 * MIB} bytes" in announced and "limit of 262144 bytes" in announced
    assert "--max-body-bytes" in announced and "webhook.maxBodyBytes" in announced
    assert "(chunked)" in too_large_message("extender", 1024, None)


def test_webhook_chart_budget_admits_the_largest_pod_within_the_memory_limit() -> None:
    """The webhook bounds memory with a parse budget per worker (ParseBudget), not with
    threads x the body limit: the chart's budget must hold one AdmissionReview at the
    apiserver's own request limit reserved at the worst amplification, and every worker's
    budget plus the baseline must stay within the memory limit less the reserve."""
    webhook = yaml.safe_load(VALUES.read_text())["webhook"]
    memory = byte_size(webhook["resources"]["limits"]["memory"])
    budget = byte_size(webhook["parseMemoryBudget"])
    cap = byte_size(webhook["maxBodyBytes"])
    # The chart passes these to --max-body-bytes/--parse-memory-budget: the CLI defaults, and
    # the defaults follow from the chart's memory limit and workers.
    assert (cap, budget, memory) == (WEBHOOK_DEFAULT, WEBHOOK_BUDGET, WEBHOOK_MEMORY_LIMIT)
    assert (webhook["workers"], webhook["threads"]) == (WEBHOOK_WORKERS, WEBHOOK_THREADS)
    assert cap == APISERVER_MAX_REQUEST_BODY_BYTES, "every Pod the apiserver accepts must be read"
    assert budget == worker_parse_budget(memory_limit=memory, baseline=WEBHOOK_BASELINE, workers=webhook["workers"])
    assert budget >= cap * PARSE_AMPLIFICATION, "a body at the cap must be parseable"
    assert budget_peak_memory(baseline=WEBHOOK_BASELINE, workers=webhook["workers"], budget=budget) <= memory * 0.9
    # ... and not by a wide margin: twice the budget would not fit (it is derived, not arbitrary).
    assert budget_peak_memory(baseline=WEBHOOK_BASELINE, workers=webhook["workers"], budget=2 * budget) > memory * 0.9
    # The old 256 Mi limit could not hold a budget for one body at the cap per worker ...
    assert worker_parse_budget(memory_limit=256 * MIB, baseline=WEBHOOK_BASELINE, workers=2) < cap * PARSE_AMPLIFICATION
    # ... and the old model (every thread at the cap) would need ~1.8 GiB for the same cap.
    assert not fits(memory_limit=memory, baseline=WEBHOOK_BASELINE, concurrency=WEBHOOK_WORKERS * WEBHOOK_THREADS, limit=cap)


def test_extender_chart_budget_parses_one_body_at_the_cap_within_the_memory_limit() -> None:
    """The extender bounds memory with a parse budget too (one worker: see
    extender/server.py), not with threads x the body limit: kube-scheduler calls it one
    pod at a time, so the cap is the largest body the budget can parse alone at the worst
    amplification, and the budget plus the baseline stays within the memory limit less
    the reserve."""
    extender = yaml.safe_load(VALUES.read_text())["extender"]
    memory = byte_size(extender["resources"]["limits"]["memory"])
    budget = byte_size(extender["parseMemoryBudget"])
    cap = byte_size(extender["maxBodyBytes"])
    # The chart passes these to --max-body-bytes/--parse-memory-budget: the CLI defaults, and
    # the defaults follow from the chart's memory limit.
    assert (cap, budget, memory) == (EXTENDER_DEFAULT, EXTENDER_BUDGET, EXTENDER_MEMORY_LIMIT)
    assert extender["threads"] == EXTENDER_THREADS and "workers" not in extender and EXTENDER_WORKERS == 1
    assert budget == worker_parse_budget(memory_limit=memory, baseline=EXTENDER_BASELINE, workers=EXTENDER_WORKERS)
    assert cap == largest_parseable_body(budget)
    assert budget >= cap * PARSE_AMPLIFICATION, "a body at the cap must be parseable"
    assert budget_peak_memory(baseline=EXTENDER_BASELINE, workers=EXTENDER_WORKERS, budget=budget) <= memory * 0.9
    # ... and not by a wide margin: the cap is the largest that fits (one MiB more would not),
    # and twice the budget would not fit the memory limit.
    assert (cap + MIB) * PARSE_AMPLIFICATION > budget
    assert budget_peak_memory(baseline=EXTENDER_BASELINE, workers=EXTENDER_WORKERS, budget=2 * budget) > memory * 0.9
    # What it carries without nodeCacheCapable: ExtenderArgs of the benchmark's Nodes (4.6
    # KiB each, bench/bench_extender.py) up to ~2,400 nodes, and 1,000 of the largest
    # (~10 KiB, status.images) ...
    assert cap // (46 * 1024 // 10) >= 2_400 and cap >= 1_000 * 10 * 1024
    # ... where the old per-thread model (8 threads at the cap) carried ~300: 1408 KiB.
    old_cap = 1408 * 1024
    assert fits(memory_limit=memory, baseline=EXTENDER_BASELINE, concurrency=EXTENDER_THREADS, limit=old_cap)
    assert old_cap // (46 * 1024 // 10) < 310 and cap >= 7 * old_cap
    # That model could not hold the new cap: 8 x 11 MiB x 37 is ~3.2 GiB.
    assert not fits(memory_limit=memory, baseline=EXTENDER_BASELINE, concurrency=EXTENDER_THREADS, limit=cap)


# --- read_body: the WSGI edge, with in-memory streams ------------------------------------
class _Unreadable(io.BytesIO):
    def read(self, *args):  # noqa: ARG002 - the point is that nobody calls it
        raise AssertionError("the body was read although Content-Length was over the limit")


def _environ(body: bytes, *, length: str | None, terminated: bool = True, stream=None) -> dict:
    environ = {"wsgi.input": stream if stream is not None else io.BytesIO(body)}
    if length is not None:
        environ["CONTENT_LENGTH"] = length
    if terminated:
        environ["wsgi.input_terminated"] = True
    return environ


def test_read_body_refuses_a_content_length_over_the_limit_without_reading() -> None:
    with pytest.raises(RequestEntityTooLarge):
        read_body(_environ(b"", length="1025", stream=_Unreadable()), 1024)


@pytest.mark.parametrize("size", [0, 1, 1024, READ_SIZE, 3 * READ_SIZE + 7])
def test_read_body_returns_bodies_up_to_the_limit_with_and_without_length(size: int) -> None:
    body = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    assert read_body(_environ(body, length=str(size)), size or 1) == body
    assert read_body(_environ(body, length=None), size or 1) == body  # chunked, exactly at the limit


def test_read_body_stops_a_chunked_body_once_past_the_limit() -> None:
    stream = io.BytesIO(b"x" * (10 * READ_SIZE))
    with pytest.raises(RequestEntityTooLarge):
        read_body(_environ(b"", length=None, stream=stream), READ_SIZE + 1)
    assert stream.tell() <= 2 * READ_SIZE, "read no more than the limit plus one read"


def test_read_body_without_length_on_an_unterminated_stream_is_empty() -> None:
    assert read_body(_environ(b"{}", length=None, terminated=False), 1024) == b""


def test_read_body_refuses_a_malformed_content_length() -> None:
    with pytest.raises(BadRequest, match="Content-Length"):
        read_body(_environ(b"{}", length="two"), 1024)
