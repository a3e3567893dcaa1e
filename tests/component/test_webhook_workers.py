"""Several gunicorn workers, one webhook: /metrics and /readyz speak for every worker
whichever one answers (kube_offload.runtime.workers), over real HTTPS with the default worker count.

Requests go over fresh connections, so the kernel hands them to either worker."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import time
from pathlib import Path

import pytest
import requests
from prometheus_client import CollectorRegistry, generate_latest, multiprocess

from kube_offload.admission import build_review
from webhook.namespace_cache import StaticNamespaceSource
from webhook.settings import DEFAULT_WORKERS

NAMESPACES = [
    {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "remote-eu", "labels": {"kube-offload.io/enabled": "true", "kube-offload.io/pod-placement": "Remote"}},
    }
]
POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"generateName": "web-", "namespace": "remote-eu"},
    "spec": {"containers": [{"name": "app", "image": "nginx"}]},
}

PATCHED = re.compile(r'^kube_offload_webhook_requests_total\{endpoint="mutate_pods",outcome="patched"\} (\S+)$', re.M)


@pytest.fixture
def metrics_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The server (a forked process) takes its shared directory from the environment."""
    directory = tmp_path / "metrics"
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(directory))
    return directory


def workers_of(server) -> list[int]:
    arbiter = server.process.process.pid
    return [int(p) for p in Path(f"/proc/{arbiter}/task/{arbiter}/children").read_text().split()]


def fresh_get(server, path: str) -> requests.Response:
    return requests.get(server.base_url + path, verify=str(server.ca_cert), timeout=5)


def mutate(server, uid: str) -> None:
    body = json.dumps(build_review(POD, uid=uid)).encode()
    response = requests.post(server.base_url + "/mutate/pods", data=body, verify=str(server.ca_cert),
                             headers={"Content-Type": "application/json"}, timeout=5)
    assert response.status_code == 200


def patched_total(server) -> float:
    match = PATCHED.search(fresh_get(server, "/metrics").text)
    return float(match.group(1)) if match else 0.0


def patched_by_worker(directory: Path, pid: int, scratch: Path) -> float:
    """One worker's own count, read from its file alone (the public collector, one file)."""
    only = scratch / str(pid)
    only.mkdir(parents=True, exist_ok=True)
    shutil.copy(directory / f"counter_{pid}.db", only)
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(only))
    match = PATCHED.search(generate_latest(registry).decode())
    return float(match.group(1)) if match else 0.0


def wait_ready(server, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while fresh_get(server, "/readyz").status_code != 200:
        assert time.monotonic() < deadline, "/readyz not 200 in time"
        time.sleep(0.05)


def test_default_is_several_workers() -> None:
    assert DEFAULT_WORKERS >= 2


def test_metrics_are_one_set_for_all_workers(start_webhook, metrics_dir: Path, tmp_path: Path) -> None:
    server = start_webhook(lambda: StaticNamespaceSource(NAMESPACES))
    wait_ready(server)
    workers = workers_of(server)
    assert len(workers) == DEFAULT_WORKERS
    sent = 0
    # Until each worker has served some (which one accepts a new connection is the kernel's
    # choice): the merge is only shown when the counts are split.
    while sent < 400 and not all(
        (metrics_dir / f"counter_{pid}.db").exists() and patched_by_worker(metrics_dir, pid, tmp_path / f"s{sent}") > 0
        for pid in workers
    ):
        for _ in range(10):
            mutate(server, f"u{sent}")
            sent += 1
    split = [patched_by_worker(metrics_dir, pid, tmp_path / "final") for pid in workers]
    assert all(count > 0 for count in split) and sum(split) == sent, split
    # Whichever worker answers the scrape, it reports every worker's requests.
    assert {patched_total(server) for _ in range(10)} == {float(sent)}


class ClaimedSource(StaticNamespaceSource):
    """Synced at once in the first worker that builds one, only once ``gate`` exists in
    the others: one worker ready, the other not."""

    def __init__(self, claim: Path, gate: Path) -> None:
        super().__init__(NAMESPACES)
        try:
            os.close(os.open(claim, os.O_CREAT | os.O_EXCL))
            self._gate = None
        except FileExistsError:
            self._gate = gate

    def ready(self) -> bool:
        return self._gate is None or self._gate.exists()


def test_readyz_waits_for_every_worker(start_webhook, metrics_dir: Path, tmp_path: Path) -> None:
    claim, gate = tmp_path / "claim", tmp_path / "gate"
    server = start_webhook(lambda: ClaimedSource(claim, gate))
    deadline = time.monotonic() + 15
    while len(list(metrics_dir.glob("ready-*"))) < 1:  # the claiming worker has booted
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.5)  # both workers booted (the other one cannot mark itself)
    assert len(workers_of(server)) == DEFAULT_WORKERS
    # Any worker, the ready one included, answers for the pod: not ready.
    assert {fresh_get(server, "/readyz").status_code for _ in range(12)} == {503}
    assert "kube_offload_webhook_namespace_cache_synced 0.0" in fresh_get(server, "/metrics").text
    gate.touch()
    wait_ready(server)
    assert {fresh_get(server, "/readyz").status_code for _ in range(12)} == {200}
    assert "kube_offload_webhook_namespace_cache_synced 1.0" in fresh_get(server, "/metrics").text


def test_a_replaced_worker_keeps_counters_and_must_sync_again(start_webhook, metrics_dir: Path) -> None:
    server = start_webhook(lambda: StaticNamespaceSource(NAMESPACES))
    wait_ready(server)
    for i in range(20):
        mutate(server, f"r{i}")
    before = patched_total(server)
    assert before == 20
    victim = workers_of(server)[0]
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 15
    while victim in workers_of(server) or len(workers_of(server)) < DEFAULT_WORKERS:
        assert time.monotonic() < deadline, "gunicorn did not replace the killed worker"
        time.sleep(0.05)
    assert not (metrics_dir / f"ready-{victim}").exists(), "a dead worker's readiness must not count"
    wait_ready(server)
    # The dead worker's requests still count: counters never go backwards.
    assert patched_total(server) == before
    mutate(server, "after")
    assert patched_total(server) == before + 1
