"""The extender's WSGI app: thin routes over :mod:`extender.wire` and
:mod:`kube_offload.node_filter`, with no web framework (:mod:`kube_offload.runtime.wsgi`,
as the webhook's: a table of paths and methods, handlers that return the whole answer).

Each verb reads the body, parses ExtenderArgs, looks the namespace policy up, asks the
node filter and answers. What kube-scheduler sees:

- malformed ExtenderArgs: 400 with ``{"Error": message}`` (the scheduler treats any
  non-200 as an error for that pod, which is right for garbage);
- caches not synced yet: ``filter`` answers 200 with ``Error`` set, so the message lands
  in the pod's events and the scheduler retries the pod later, instead of deciding on an
  empty cache; ``prioritize`` answers 503 (kube-scheduler ignores prioritize errors);
- a bug: a logged 500, never a dead worker;
- every other error (404, 405, 413, a bad Content-Length) as ``{"Error": message}`` too,
  so every answer has one shape.

All of it happens inside a reservation of the worker's parse memory budget
(:class:`~kube_offload.runtime.body_limit.ParseBudget`): a request reserves 37 bytes per
body byte before reading; one that finds the budget taken waits up to 2 s, then gets a
503 with ``Retry-After`` (for ``filter`` kube-scheduler fails that pod's scheduling
cycle with the code in its events and retries the pod with backoff; for ``prioritize``
it goes on without our scores); a body larger than the whole budget can parse is a 413.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Callable

from prometheus_client import CollectorRegistry, Counter
from wsgiref.types import WSGIEnvironment

from kube_offload import node_filter
from kube_offload.runtime.body_limit import ParseBudget, read_body
from kube_offload.runtime.gcpause import collector_paused
from kube_offload.runtime.http_metrics import NAMESPACE, HttpMetrics, exposition, state_gauge
from kube_offload.runtime.probes import Check
from kube_offload.runtime.wsgi import (
    BAD_REQUEST,
    ERROR,
    Handler,
    Reply,
    WsgiApp,
    probe_routes,
    within_parse_budget,
)

from extender import wire
from extender.caches import ExtenderCaches
from extender.settings import ExtenderSettings

log = logging.getLogger("extender.app")

COMPONENT = "extender"
OK = "ok"
PASSTHROUGH = "passthrough"  # the pod's namespace is not offloaded: nothing checked
NOT_SYNCED = "not_synced"

FAILURE_REASONS = (
    node_filter.REASON_PLACEMENT,
    node_filter.REASON_NOT_READY,
    node_filter.REASON_CAPACITY,
    node_filter.REASON_UNKNOWN_NODE,
    node_filter.REASON_INVALID_POLICY,
    node_filter.REASON_HANDED_BACK,
)
CAPACITY_UNKNOWN_REASONS = (node_filter.CAPACITY_MISSING, node_filter.CAPACITY_STALE, node_filter.CAPACITY_INVALID)
JSON = "application/json"


class _Rejected(Exception):
    """A request we answer with 400: the message says what is wrong."""


def _json(status: int, body: Any) -> Reply:
    return Reply(status, wire.dumps(body), JSON)


def _error(code: int, _reason: str, message: str) -> Reply:
    """The extender's error answer: ``{"Error": message}`` (what kube-scheduler reads)."""
    return _json(code, wire.bad_request(message))


class ExtenderMetrics:
    def __init__(self, registry: CollectorRegistry | None, caches: ExtenderCaches) -> None:
        self.http = HttpMetrics.create(COMPONENT, registry)
        registry = self.http.registry
        filtered = Counter(
            "nodes_filtered_out",
            "Nodes the filter verb removed, by reason.",
            ["reason"],
            namespace=NAMESPACE,
            subsystem=COMPONENT,
            registry=registry,
        )
        unchecked = Counter(
            "capacity_unchecked",
            "Virtual nodes kept without a remote-capacity check, by why the annotation "
            "could not be used (missing, stale, invalid).",
            ["reason"],
            namespace=NAMESPACE,
            subsystem=COMPONENT,
            registry=registry,
        )
        # Children made once: labels() costs a lock and a tuple per call, per node.
        self.filtered = {reason: filtered.labels(reason=reason) for reason in FAILURE_REASONS}
        self.unchecked = {reason: unchecked.labels(reason=reason) for reason in CAPACITY_UNKNOWN_REASONS}
        state_gauge(
            registry,
            COMPONENT,
            "caches_synced",
            "1 once the namespace (and node) caches have synced, else 0.",
            lambda: 1.0 if caches.synced() else 0.0,
        )

    def count_filter(self, result: node_filter.FilterResult) -> None:
        counts: dict[str, int] = {}
        for failure in result.failures.values():
            counts[failure.reason] = counts.get(failure.reason, 0) + 1
        for reason, count in counts.items():
            self.filtered[reason].inc(count)
        counts = {}
        for reason in result.capacity_unknown.values():
            counts[reason] = counts.get(reason, 0) + 1
        for reason, count in counts.items():
            self.unchecked[reason].inc(count)


# The extender's WSGI app (one per worker process): its errors are {"Error": ...} bodies.
ExtenderApp = WsgiApp[ExtenderMetrics]


def create_app(
    caches: ExtenderCaches,
    settings: ExtenderSettings | None = None,
    *,
    registry: CollectorRegistry | None = None,
) -> ExtenderApp:
    settings = settings or ExtenderSettings()
    if settings.strategy not in node_filter.STRATEGIES:
        raise ValueError(f"unknown strategy {settings.strategy!r}; use one of {', '.join(node_filter.STRATEGIES)}")
    metrics = ExtenderMetrics(registry, caches)
    # One per worker process: create_app runs in the worker after the fork.
    budget = ParseBudget(
        component=COMPONENT,
        capacity=settings.parse_memory_budget,
        max_body=settings.max_body_bytes,
        wait_seconds=settings.parse_budget_wait_seconds,
    )

    def parse(environ: WSGIEnvironment) -> wire.ExtenderArgs:
        try:
            args = wire.parse_extender_args(read_body(environ, settings.max_body_bytes))
        except wire.WireError as exc:
            raise _Rejected(str(exc)) from None
        if args.node_cache_mode and not caches.has_node_cache:
            raise _Rejected(
                "kube-scheduler sent NodeNames (nodeCacheCapable: true) but this extender runs "
                "without a node cache; start it with --node-cache-capable or set "
                "nodeCacheCapable: false in the scheduler configuration"
            )
        return args

    def respond(
        environ: WSGIEnvironment,
        verb: str,
        not_synced: Callable[[], Reply],
        decide: Callable[[wire.ExtenderArgs], tuple[str, Reply]],
    ) -> tuple[str, Reply]:
        # Everything parsed from the body lives in this frame, so it is freed when this
        # returns: before the parse budget's reservation is given back.
        try:
            # The parsed ExtenderArgs can be a few hundred thousand objects (a view of every
            # candidate Node): keep the cyclic collector from walking them while they are
            # built and read.
            with collector_paused():
                args = parse(environ)
                if not caches.synced():
                    return NOT_SYNCED, not_synced()
                return decide(args)
        except _Rejected as exc:
            log.info("%s: bad request: %s", verb, exc)
            return BAD_REQUEST, _json(400, wire.bad_request(str(exc)))

    def answer(
        environ: WSGIEnvironment,
        verb: str,
        not_synced: Callable[[], Reply],
        failure: dict[str, Any],
        decide: Callable[[wire.ExtenderArgs], tuple[str, Reply]],
    ) -> Reply:
        """The shape every verb shares: reserve the body's parse memory, parse, wait for the
        caches, decide; a client's mistake is a 400 with a message, and every call is
        counted and timed."""
        started = time.perf_counter()
        outcome = ERROR
        failed = _json(500, failure)
        try:
            outcome, reply = within_parse_budget(
                environ, budget=budget, component=COMPONENT, endpoint=verb, max_body=settings.max_body_bytes,
                error=_error, answer=lambda: respond(environ, verb, not_synced, decide), failed=failed,
            )
            return reply
        finally:
            metrics.http.observe(verb, outcome, time.perf_counter() - started)

    def decide_filter(args: wire.ExtenderArgs) -> tuple[str, Reply]:
        policy = caches.namespace_policy(args.namespace)
        result = node_filter.filter_nodes(
            args.pod,
            args.candidates,
            policy,
            caches.node,
            capacity_max_age=settings.capacity_max_age,
            virtual_names=caches.virtual_node_names(),
        )
        metrics.count_filter(result)
        if result.failures and log.isEnabledFor(logging.DEBUG):
            log.debug(
                "filter %s: %d kept, %d filtered out: %s",
                args.pod_key, len(result.passed), len(result.failures),
                "; ".join(f"{n}: {f.message}" for n, f in result.failures.items()),
            )
        outcome = PASSTHROUGH if result.passthrough else OK
        return outcome, Reply(200, wire.dumps(wire.filter_result(args, result)), JSON)

    def decide_prioritize(args: wire.ExtenderArgs) -> tuple[str, Reply]:
        # A pod that opted in with the kube-offload RuntimeClass is not a passthrough.
        policy = node_filter.pod_lookup(args.pod, caches.namespace_policy(args.namespace))
        scores = node_filter.prioritize(
            args.pod,
            args.candidates,
            policy,
            settings.strategy,
            node_lookup=caches.node,
            capacity_max_age=settings.capacity_max_age,
        )
        outcome = PASSTHROUGH if node_filter.is_passthrough(policy) else OK
        return outcome, Reply(200, wire.dumps(wire.host_priority_list(scores)), JSON)

    def filter_route(environ: WSGIEnvironment) -> Reply:
        # Not synced: 200 with Error set, so the message reaches the pod's events.
        return answer(
            environ,
            "filter",
            lambda: _json(200, wire.filter_error("kube-offload extender: caches not synced yet, retry later")),
            wire.filter_error("kube-offload extender failed unexpectedly; see its log"),
            decide_filter,
        )

    def prioritize_route(environ: WSGIEnvironment) -> Reply:
        # Not synced: 503, which kube-scheduler ignores for prioritize.
        return answer(
            environ,
            "prioritize",
            lambda: _json(503, wire.bad_request("kube-offload extender: caches not synced yet")),
            wire.bad_request("kube-offload extender failed unexpectedly; see its log"),
            decide_prioritize,
        )

    routes: dict[str, dict[str, Handler]] = {
        "/filter": {"POST": filter_route},
        "/prioritize": {"POST": prioritize_route},
        # Answered as every server of the project answers them (kube_offload/runtime/probes.py).
        **probe_routes(
            ready=[Check("caches", lambda: None if caches.synced() else "not synced yet")],
            exposition=lambda: exposition(metrics.http.registry),
        ),
    }

    if settings.bench_passthrough:

        def bench_passthrough(environ: WSGIEnvironment) -> Reply:
            # The HTTP benchmark's baseline: the same server stack and the stdlib-json work
            # on the same payload (loads + compact dumps), as the extender did before it
            # moved to orjson; none of the extender's decisions.
            started = time.perf_counter()
            try:
                document = json.loads(read_body(environ, settings.max_body_bytes))
                return Reply(200, json.dumps(document, separators=(",", ":")).encode(), JSON)
            except ValueError as exc:
                return _json(400, wire.bad_request(str(exc)))
            finally:
                metrics.http.observe("bench_passthrough", OK, time.perf_counter() - started)

        routes["/bench/passthrough"] = {"POST": bench_passthrough}

    return ExtenderApp(routes, component=COMPONENT, error=_error, metrics=metrics, parse_budget=budget)
