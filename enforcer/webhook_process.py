"""The enforcer's webhooks in a process of their own (``--webhook-process=own``).

Why: an admission is a few milliseconds of Python, but in the enforcer's process its
request thread waits for the GIL behind the controllers' workers, informers and the
Consumer status pass (docs/performance.md, "Provider: 10,000 ShadowPods of one consumer":
p99 62-75 ms at 10/s holding 10,000, for a median of 3 ms). In a process of its own no
controller competes for its interpreter.

The model:

- **The parent** (``kube-offload enforcer``, the leader) runs the controllers and, as one
  of its loops (:class:`WebhookProcess`), the child: started when it leads, stopped when
  it stops; if the child exits on its own the loop raises, which stops the whole enforcer
  (kube_offload/runtime/manager.py: half a component must not keep running) and its pod
  is restarted. The parent's ``/readyz`` waits for the child's caches (the child says
  ``ready`` on its stdout once they have listed). The child's stdin is its lifeline:
  when the parent is gone, even killed, the child reads end-of-file and exits, so the
  webhook port is free for the next enforcer.
- **The child** (``kube-offload enforcer webhook``, :func:`serve_alone`) runs the
  webhooks exactly as the parent would (enforcer/admission/webhook_server.py) over its
  own informers, built from the same definitions as the controllers' (the ShadowPods, the
  managed pods and the consumer loops' namespaces, Consumers, nodes, TwinNamespace
  requests and OffloadSlices), under the same identity: same container, same
  ServiceAccount token or --kubeconfig, same environment.
- **The quota ledger stays whole**: every admission happens in the child, so the ledger
  that closes the window between two concurrent admissions (enforcer/admission/ledger.py)
  sees them all, as before. The parent keeps what the controllers need of the admission,
  the pod judge (:class:`PodJudge`: the same validator over the parent's own caches,
  without a server); its ledger is empty, which is safe: the judge counts every cached
  ShadowPod of the consumer, and a ShadowPod reaches the judge only from that cache, so
  of two admitted ShadowPods the one judged second always counts the first (a pod made
  never takes the consumer over its quota as the parent's caches know it).
- **What it costs**: a second copy of the caches the webhooks read (the ShadowPods and
  managed pods most of all), i.e. about the enforcer's memory per ShadowPod once more,
  and a second watch on each of those kinds (docs/performance.md has the figures).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from typing import Any, Sequence

from enforcer.admission.caches import ProviderCaches
from enforcer.admission.shadowpod_webhook import ShadowPodValidator
from enforcer.admission.webhook_server import ShadowPodWebhook, WebhookSettings
from enforcer.consumers.consumer_loops import AdmissionInformers
from enforcer.controller import managed_pod_informer, shadowpod_informer
from kube_offload.runtime.informer import Informer

log = logging.getLogger("kube_offload.enforcer.webhook_process")

# What the child writes on its stdout once every cache it reads has listed.
READY_LINE = b"ready\n"
# How often the child looks at its caches until they have listed.
POLL_SECONDS = 0.1
# How often the parent looks whether its child is still there (a stop is seen at once).
CHILD_POLL_SECONDS = 1.0
# The child's own shutdown (its server and informers) before the parent kills it.
STOP_SECONDS = 5.0


class WebhookProcessExited(RuntimeError):
    """The webhooks' process ended without being told to."""


class _ChildReady:
    """The child's caches, as one entry of the parent's ``/readyz``."""

    name = "webhook-process"

    def __init__(self) -> None:
        self.event = threading.Event()

    def has_synced(self) -> bool:
        return self.event.is_set()


class WebhookProcess:
    """The parent's loop that runs the child (``argv``: its command line)."""

    def __init__(self, argv: Sequence[str], *, stop_seconds: float = STOP_SECONDS) -> None:
        self.argv = list(argv)
        self.stop_seconds = stop_seconds
        self.readiness = _ChildReady()
        self.pid: int | None = None

    def run(self, stop: threading.Event) -> None:
        # stdin: the lifeline (never written; closed to stop the child). stdout: its ready
        # line, anything else passed on. stderr: its log, straight to ours.
        child = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True)
        self.pid = child.pid
        log.info("webhook process %d started", child.pid)
        reader = threading.Thread(target=self._read, args=(child,), name="webhook-process-out", daemon=True)
        reader.start()
        try:
            while not stop.wait(CHILD_POLL_SECONDS):
                code = child.poll()
                if code is not None:
                    raise WebhookProcessExited(f"the webhook process {child.pid} exited with {code}; see its log above")
        finally:
            self._stop(child)
            reader.join(timeout=1.0)

    def _read(self, child: subprocess.Popen[bytes]) -> None:
        assert child.stdout is not None
        for line in child.stdout:
            if line == READY_LINE:
                self.readiness.event.set()
                log.info("webhook process %d: caches synced, serving", child.pid)
            else:
                sys.stdout.buffer.write(line)
                sys.stdout.flush()

    def _stop(self, child: subprocess.Popen[bytes]) -> None:
        if child.stdin is not None:
            try:
                child.stdin.close()
            except OSError:
                pass
        try:
            child.wait(timeout=self.stop_seconds)
        except subprocess.TimeoutExpired:
            log.warning("webhook process %d did not stop in %.0fs; killing it", child.pid, self.stop_seconds)
            child.kill()
            child.wait()


class PodJudge:
    """What the controllers need of the admission when the webhooks run in their own
    process: the validator's ``judge_pod`` over this process's caches (``namespaces``,
    ``consumers``, ``slices``: the consumer loops' own, shared), without a server, a
    verdict cache or the caches only the dry run reads."""

    def __init__(self, api_client: Any, *, shadowpods: Informer, pods: Informer, namespaces: Informer | None,
                 consumers: Informer | None, slices: Informer | None, resync_seconds: float, cluster_id: str) -> None:
        self.caches = ProviderCaches(api_client, namespaces=namespaces, consumers=consumers, slices=slices,
                                     resync_seconds=resync_seconds)
        self.validator = ShadowPodValidator.for_cluster(api_client, shadowpods=shadowpods, caches=self.caches, pods=pods,
                                                        cluster_id=cluster_id)

    def start(self) -> None:
        self.caches.start()

    def stop(self) -> None:
        self.caches.stop()


def serve_alone(api_client: Any, settings: WebhookSettings, *, resync_seconds: float, stop: threading.Event,
                ready_out: Any = None) -> None:
    """The child: the webhooks over informers of its own until ``stop`` is set; writes
    :data:`READY_LINE` to ``ready_out`` (default: stdout) once every cache has listed.
    Raises :class:`~kube_offload.runtime.https_server.TLSSetupError` as the enforcer would."""
    shadowpods = shadowpod_informer(api_client, namespace=None, resync_seconds=resync_seconds)
    pods = managed_pod_informer(api_client, namespace=None, resync_seconds=resync_seconds)
    shared = AdmissionInformers.build(api_client, resync_seconds)
    webhook = ShadowPodWebhook(
        api_client, settings, shadowpods=shadowpods, pods=pods, namespaces=shared.namespaces, consumers=shared.consumers,
        nodes=shared.nodes, slices=shared.slices, twin_requests=shared.requests, resync_seconds=resync_seconds,
    )
    from kube_offload.runtime.metrics import track_gc_pauses

    # The parent's health port does not see this process: its collector's pauses are
    # served beside the webhooks' own figures, on the webhook port's /metrics.
    webhook.server.metrics.registry.register(track_gc_pauses())
    informers = [shadowpods, pods, *shared.all()]
    for informer in informers:
        informer.start()
    webhook.start()
    try:
        started = time.monotonic()
        waiting = [shadowpods, pods, *webhook.informers()]
        while not stop.is_set() and not (all(i.has_synced() for i in waiting) and webhook.server.ready()):
            stop.wait(POLL_SECONDS)
        if not stop.is_set():
            log.info("webhook caches synced in %.1fs", time.monotonic() - started)
            out = ready_out or sys.stdout.buffer
            try:
                out.write(READY_LINE)
                out.flush()
            except BrokenPipeError:  # the parent is gone: the lifeline says so too
                stop.set()
        stop.wait()
    finally:
        webhook.stop()
        for informer in informers:
            informer.stop()


def watch_lifeline(stop: threading.Event, lifeline: int | None = None) -> threading.Thread:
    """Set ``stop`` when file descriptor ``lifeline`` (default: stdin's, the parent's pipe)
    reaches its end: the parent closed it, or is gone. Read with ``os.read``, never through
    ``sys.stdin``: a thread blocked in a buffered read holds the buffer's lock, and an
    interpreter exiting meanwhile (after SIGTERM) aborts on it."""
    fd = sys.stdin.fileno() if lifeline is None else lifeline

    def read() -> None:
        try:
            while os.read(fd, 4096):
                pass
        except OSError:
            pass
        stop.set()

    thread = threading.Thread(target=read, name="webhook-lifeline", daemon=True)
    thread.start()
    return thread
