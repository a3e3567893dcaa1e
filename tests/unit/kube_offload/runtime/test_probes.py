"""The answers to /healthz, /readyz and /metrics (kube_offload/runtime/probes.py), the same
for the health port, the webhook's and the extender's apps and the ShadowPod webhook."""

from __future__ import annotations

import sys
import subprocess

import pytest

from kube_offload.runtime.probes import Answer, Check, probe_answer

TEXT = "text/plain; charset=utf-8"
LIVE = [Check("controllers", lambda: None)]
READY = [Check("informers", lambda: "not synced yet: pods"), Check("remote", lambda: None)]


def answer(path: str, query: str = "") -> Answer | None:
    return probe_answer(path, query, live=LIVE, ready=READY, exposition=lambda: (b"x_total 1.0\n", "text/plain; version=0.0.4"))


@pytest.mark.parametrize(
    ("path", "query", "expected"),
    [
        ("/healthz", "", Answer(200, b"ok\n", TEXT)),
        ("/healthz", "verbose", Answer(200, b"[+]controllers ok\nhealthz check passed\n", TEXT)),
        ("/readyz", "", Answer(503, b"[-]informers failed: not synced yet: pods\n[+]remote ok\nreadyz check failed\n", TEXT)),
        ("/readyz", "verbose=1", Answer(503, b"[-]informers failed: not synced yet: pods\n[+]remote ok\nreadyz check failed\n", TEXT)),
        ("/metrics", "", Answer(200, b"x_total 1.0\n", "text/plain; version=0.0.4")),
        ("/", "", None),
        ("/healthz/extra", "", None),
    ],
)
def test_probe_answers(path: str, query: str, expected: Answer | None) -> None:
    assert answer(path, query) == expected


def test_no_checks_is_ok() -> None:
    assert probe_answer("/readyz", "", live=[], ready=[], exposition=lambda: (b"", "")) == Answer(200, b"ok\n", TEXT)


def test_the_answers_import_no_process_wide_metric() -> None:
    # The webhook's gunicorn workers switch prometheus-client to multiprocess values after
    # import: the probe answers themselves must create no metric on the way. (The apps do
    # import kube_offload.runtime.metrics, through the API layer their caches use: those
    # metrics are created at import, before the switch, so they stay process-local values
    # of the runtime's own registry and never reach the shared directory.)
    code = "import sys, kube_offload.runtime.probes; print('kube_offload.runtime.metrics' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"
