"""HTTPS edge of the enforcer's webhooks, inside the enforcer process (so it reads the
controllers' own informers): ``POST`` :data:`~kube_offload.constants.SHADOWPOD_WEBHOOK_PATH`
(ShadowPods), :data:`~kube_offload.constants.ENDPOINTSLICE_WEBHOOK_PATH` (consumers'
EndpointSlices), :data:`~kube_offload.constants.CUSTOM_RESOURCE_WEBHOOK_PATH` (consumers'
custom resource objects), :data:`~kube_offload.constants.TOKEN_WEBHOOK_PATH` (consumers'
TokenRequests) or :data:`~kube_offload.constants.TENANT_OBJECTS_WEBHOOK_PATH` (what consumers
keep in their tenant namespaces) with an AdmissionReview, ``GET /healthz``, ``/readyz`` (caches synced)
and ``/metrics``.

The handler only reads the body, parses it (:func:`kube_offload.admission.parse_review`)
and answers with the path's validator's decision (:meth:`ShadowPodValidator.review`,
:meth:`EndpointSliceValidator.review`, :meth:`CustomResourceValidator.review`). A client's mistake (not
JSON, not an AdmissionReview v1, a missing uid ...) is a 400 whose Status names it; only a
bug of ours is a 500, logged here and answered without a stack trace.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Protocol

import orjson
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from enforcer.admission import endpointslice_webhook
from enforcer.admission.custom_resource_webhook import CustomResourceValidator
from enforcer.admission.caches import ProviderCaches
from enforcer.admission.shadowpod_webhook import ShadowPodValidator
from enforcer.admission.token_webhook import TokenRequestValidator, api_audiences
from enforcer.admission.tenant_objects_webhook import TenantObjectValidator
from enforcer.admission.verdict_cache import DEFAULT_MAX_ENTRIES, DEFAULT_TTL_SECONDS, RESULTS, VerdictCache
from kube_offload import constants as c
from kube_offload.admission import AdmissionRequest, BadRequest, Decision, error_status, parse_review, review_response
from kube_offload.runtime.https_server import (
    BackgroundServing, ServerContext, ServingFiles, ThreadingHTTPSServer, TLSSetupError, parse_bind,
)
from kube_offload.runtime.http_handler import ResponseWriter
from kube_offload.runtime.http_metrics import NAMESPACE, HttpMetrics, exposition, state_gauge
from kube_offload.runtime.probes import Check, probe_answer

log = logging.getLogger("kube_offload.enforcer.webhook")

DEFAULT_BIND = "0.0.0.0:9443"
# AdmissionReviews carry the object and the old object; etcd caps an object at 1.5 MiB.
MAX_BODY_BYTES = 8 * 1024 * 1024
# A kept-alive connection may idle this long between reviews (the apiserver reuses them).
IDLE_TIMEOUT = 120.0
ENDPOINT = "validate_shadowpods"
ENDPOINTSLICE_ENDPOINT = "validate_endpointslices"
CUSTOM_RESOURCE_ENDPOINT = "validate_custom_resources"
TOKEN_ENDPOINT = "validate_tokenrequests"
TENANT_OBJECTS_ENDPOINT = "validate_tenant_objects"


class Validator(Protocol):
    def review(self, request: AdmissionRequest) -> Decision: ...

    def ready(self) -> bool: ...


@dataclass(frozen=True)
class WebhookSettings:
    cluster_id: str = ""
    """This provider's own cluster id (--cluster-id): pods whose offload chain holds it are
    refused (docs/multihop.md); "": no loop check."""
    bind: str = DEFAULT_BIND
    """HOST:PORT to serve HTTPS on."""
    tls_cert: str = ""
    """PEM serving certificate (with its chain); re-read when it changes on disk."""
    tls_key: str = ""
    """PEM private key of tls_cert."""
    verdict_cache_ttl: float = DEFAULT_TTL_SECONDS
    """Seconds a dry run's verdict serves other pods of its template; 0: a dry run for
    every ShadowPod (enforcer/admission/verdict_cache.py)."""
    verdict_cache_entries: int = DEFAULT_MAX_ENTRIES
    """Templates whose verdict is kept (least recently used out first)."""


class WebhookHTTPServer(BackgroundServing, ThreadingHTTPSServer):
    thread_name = "shadowpod-webhook"

    def __init__(self, settings: WebhookSettings, validator: ShadowPodValidator, *, endpointslices: Validator | None = None,
                 custom_resources: Validator | None = None, tokens: Validator | None = None,
                 tenant_objects: Validator | None = None) -> None:
        if not (settings.tls_cert and settings.tls_key):
            raise TLSSetupError("--webhook-tls-cert and --webhook-tls-key must be given together")
        try:
            address = parse_bind(settings.bind)
        except ValueError as exc:
            raise TLSSetupError(f"--webhook-bind: {exc}") from None
        tls = ServerContext(ServingFiles(Path(settings.tls_cert), Path(settings.tls_key)), name="ShadowPod webhook")
        self.validator = validator
        # path -> (validator, metrics endpoint label, what it validates)
        self.routes: dict[str, tuple[Validator, str, str]] = {c.SHADOWPOD_WEBHOOK_PATH: (validator, ENDPOINT, "ShadowPod")}
        if endpointslices is not None:
            self.routes[c.ENDPOINTSLICE_WEBHOOK_PATH] = (endpointslices, ENDPOINTSLICE_ENDPOINT, "EndpointSlice")
        if custom_resources is not None:
            self.routes[c.CUSTOM_RESOURCE_WEBHOOK_PATH] = (custom_resources, CUSTOM_RESOURCE_ENDPOINT, "custom resource")
        if tokens is not None:
            self.routes[c.TOKEN_WEBHOOK_PATH] = (tokens, TOKEN_ENDPOINT, "TokenRequest")
        if tenant_objects is not None:
            self.routes[c.TENANT_OBJECTS_WEBHOOK_PATH] = (tenant_objects, TENANT_OBJECTS_ENDPOINT, "tenant object")
        self.metrics = HttpMetrics.create("shadowpod_webhook")
        state_gauge(
            self.metrics.registry,
            "shadowpod_webhook",
            "caches_synced",
            "1 once every cache the ShadowPod webhook reads has synced (it is ready), else 0.",
            lambda: 1.0 if self.ready() else 0.0,
        )
        state_gauge(
            self.metrics.registry,
            "shadowpod_webhook",
            "ledger_reservations",
            "ShadowPods admitted and not yet seen by the informer (counted against quota meanwhile).",
            lambda: float(len(validator.ledger)),
        )
        verdicts = getattr(validator, "verdicts", None)  # any Validator may stand here (tests)
        if verdicts is not None:
            self.metrics.registry.register(_VerdictCacheCollector(verdicts))
        try:
            super().__init__(address, WebhookRequestHandler, tls)
        except OSError as exc:
            raise TLSSetupError(f"--webhook-bind: cannot listen on {settings.bind}: {exc.strerror or exc}") from None

    def ready(self) -> bool:
        return all(validator.ready() for validator, _, _ in self.routes.values())

    def start(self) -> None:
        super().start()
        log.info("enforcer webhooks serving HTTPS on %s (%s)", self.server_address[0:2], ", ".join(self.routes))


class WebhookRequestHandler(ResponseWriter):
    server: WebhookHTTPServer
    protocol_version = "HTTP/1.1"
    server_version = "kube-offload-enforcer"
    sys_version = ""
    timeout = IDLE_TIMEOUT

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("webhook %s: " + format, self.address_string(), *args)

    def do_POST(self) -> None:
        route = self.server.routes.get(self.path.split("?", 1)[0])
        if route is None:
            self._discard_body()
            self._status(404, "NotFound", f"no such endpoint; AdmissionReviews go to POST {' or '.join(self.server.routes)}")
            return
        validator, endpoint, what = route
        started = time.perf_counter()
        outcome = "error"
        try:
            body = self._read_body()
            if body is None:
                outcome = "bad_request"
                return
            try:
                review = parse_review(body)
            except BadRequest as exc:
                outcome = "bad_request"
                log.info("bad AdmissionReview: %s", exc)
                self._status(400, "BadRequest", str(exc))
                return
            try:
                decision = validator.review(review)
            except Exception:
                log.exception("%s review %s failed unexpectedly", what, review.uid)
                self._status(500, "InternalError", f"the {what} webhook failed unexpectedly; see the enforcer's log")
                return
            outcome = "allowed" if decision.allowed else "denied"
            if not decision.allowed:
                log.info(
                    "denied %s %s %s/%s by %s: %s",
                    review.operation,
                    what,
                    review.namespace,
                    review.name or (review.object or {}).get("metadata", {}).get("generateName", ""),
                    review.user_info.username,
                    decision.message,
                )
            self._json(200, review_response(review, decision))
        finally:
            self.server.metrics.observe(endpoint, outcome, time.perf_counter() - started)

    def do_GET(self) -> None:
        path, _, query = self.path.partition("?")
        server = self.server
        # Answered as every server of the project answers them (kube_offload/runtime/probes.py).
        found = probe_answer(
            path, query, live=[], ready=[Check("informers", lambda: None if server.ready() else "not synced yet")],
            exposition=lambda: exposition(server.metrics.registry),
        )
        if found is None:
            self._status(404, "NotFound", f"no such endpoint (POST {c.SHADOWPOD_WEBHOOK_PATH}, GET /healthz, /readyz, /metrics)")
        else:
            self.send_body(found.status, found.body, found.content_type)

    def _method_not_allowed(self) -> None:
        self._discard_body()
        self._status(405, "MethodNotAllowed", f"{self.command} is not supported; AdmissionReviews are POSTed")

    do_PUT = do_DELETE = do_PATCH = _method_not_allowed

    # --- body ---------------------------------------------------------------------------
    def _content_length(self) -> int | None:
        raw = self.headers.get("Content-Length")
        if raw is None:
            return None
        try:
            length = int(raw)
        except ValueError:
            return -1
        return length if length >= 0 else -1

    def _read_body(self) -> bytes | None:
        """The request body, or None after answering the error that prevents reading it."""
        length = self._content_length()
        if length is None:
            self.close_connection = True
            self._status(411, "LengthRequired", "an AdmissionReview must be sent with a Content-Length")
            return None
        if length < 0:
            self.close_connection = True
            self._status(400, "BadRequest", "invalid Content-Length")
            return None
        if length > MAX_BODY_BYTES:
            self.close_connection = True  # the unread body makes the connection unusable
            self._status(413, "RequestEntityTooLarge", f"request body of {length} bytes exceeds {MAX_BODY_BYTES}")
            return None
        return self.rfile.read(length)

    def _discard_body(self) -> None:
        length = self._content_length()
        if length is None or length < 0 or length > MAX_BODY_BYTES:
            self.close_connection = True
            return
        self.rfile.read(length)

    # --- responses ----------------------------------------------------------------------------
    def _json(self, code: int, payload: Any) -> None:
        self.send_body(code, orjson.dumps(payload), "application/json")

    def _status(self, code: int, reason: str, message: str) -> None:
        self._json(code, error_status(code, reason, message))


class _VerdictCacheCollector(Collector):
    """The dry run's verdict cache: answers by result (a counter) and its size."""

    def __init__(self, cache: VerdictCache) -> None:
        self._cache = cache

    def collect(self) -> Iterator[Metric]:
        results = CounterMetricFamily(
            f"{NAMESPACE}_shadowpod_webhook_verdict_cache",
            "ShadowPod creates' Pod verdicts, by result: hit (from the cache, no dry run), miss "
            "(dry-run, then kept), bypass (dry-run, not cacheable: a pod-counting ResourceQuota "
            "in the namespace, or could not verify).",
            labels=["result"],
        )
        counts = dict(self._cache.counts)
        for result in RESULTS:
            results.add_metric([result], float(counts.get(result, 0)))
        yield results
        size = GaugeMetricFamily(
            f"{NAMESPACE}_shadowpod_webhook_verdict_cache_entries", "Pod templates whose verdict is kept."
        )
        size.add_metric([], float(len(self._cache)))
        yield size


class ShadowPodWebhook:
    """The webhooks as one of the enforcer's loops: the caches they read beyond the
    ShadowPod informer, the validators and the HTTPS server. ``namespaces``/``consumers``/
    ``nodes``/``slices``: informers another loop of this process already runs, to share rather than
    duplicate; ``pods``: the enforcer's managed pods (without them, no EndpointSlice
    webhook is served)."""

    def __init__(
        self,
        api_client: Any,
        settings: WebhookSettings,
        *,
        shadowpods: Any,
        pods: Any = None,
        namespaces: Any = None,
        consumers: Any = None,
        nodes: Any = None,
        slices: Any = None,
        twin_requests: Any = None,
        resync_seconds: float = 300.0,
    ) -> None:
        cached = settings.verdict_cache_ttl > 0
        self.caches = ProviderCaches(
            api_client, namespaces=namespaces, consumers=consumers, slices=slices, resync_seconds=resync_seconds,
            admission_inputs=cached,
        )
        verdicts = (
            VerdictCache(max_entries=settings.verdict_cache_entries, ttl=settings.verdict_cache_ttl) if cached else None
        )
        self.validator = ShadowPodValidator.for_cluster(
            api_client, shadowpods=shadowpods, caches=self.caches, pods=pods, verdicts=verdicts,
            cluster_id=settings.cluster_id,
        )
        self.endpointslices: endpointslice_webhook.EndpointSliceValidator | None = None
        self._owned: list[Any] = []
        if pods is not None:
            self.endpointslices, self._owned = endpointslice_webhook.for_cluster(
                api_client, caches=self.caches, pods=pods, nodes=nodes, resync_seconds=resync_seconds
            )
        self.custom_resources = CustomResourceValidator(self.caches)
        self.tokens = TokenRequestValidator(self.caches, api_audiences(api_client))
        # Without the consumer loops' informers (one namespace watched) there is nothing to count.
        self.tenant_objects = (
            TenantObjectValidator(self.caches, {c.TWIN_NAMESPACE_PLURAL: twin_requests, c.SLICE_PLURAL: slices})
            if twin_requests is not None and slices is not None else None
        )
        self.server = WebhookHTTPServer(settings, self.validator, endpointslices=self.endpointslices,
                                        custom_resources=self.custom_resources, tokens=self.tokens,
                                        tenant_objects=self.tenant_objects)

    def informers(self) -> list[Any]:
        """Every cache the webhooks read (for /readyz), shared ones included."""
        found = list(self.caches.informers())
        if self.endpointslices is not None:
            found += self.endpointslices.informers()
        return found

    def start(self) -> None:
        """Listen at once (``/healthz`` answers, ``/readyz`` is 503 until the caches sync)."""
        self.caches.start()
        for informer in self._owned:
            informer.start()
        self.server.start()

    def stop(self) -> None:
        self.server.stop()
        for informer in self._owned:
            informer.stop()
        self.caches.stop()
