"""The relay's two listening sockets and its threads.

- **serve** (``0.0.0.0:6443`` in the relay's pod, behind the consumer's home API Service):
  offloaded pods connect here. Each connection gets a thread that takes an idle uplink
  (waiting up to ``pair_timeout``) and pumps bytes; no uplink in time: the pod's
  connection is closed, which its client sees as a connection reset and retries.
- **uplink** (``127.0.0.1:6444`` only): reachable from nowhere but the pod's own network
  namespace, i.e. through a port-forward of the provider's API server, which its RBAC
  grants to the consumer's identity only (docs/home-api.md, "Trust"). No other pod can
  pose as an uplink and receive a pod's (encrypted) traffic.

Threads, not asyncio: one per paired connection, blocking on poll over two plain sockets
(kube_offload/runtime/sockets.py ``readable``: select() refuses descriptors above 1023,
which a relay holding 500 connections already has), as the vkubelet's stream relays do.
An API client keeps one or two connections open; bench/bench_home_api_relay.py measures
1,000 at once, each thread and its sockets, against direct connections
(docs/performance.md, "Home API relay at scale").
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge

from kube_offload.runtime.sockets import close_quietly
from relay.pairing import UplinkPool, pump

log = logging.getLogger("kube_offload.relay")

ACCEPT_BACKLOG = 128
PRUNE_SECONDS = 5.0
WARNING_SECONDS = 60.0
# The outcomes of a pod's connection (the metric's label values).
PAIRED, NO_UPLINK, OVER_LIMIT, OVER_SOURCE_LIMIT = "paired", "no_uplink", "over_limit", "over_source_limit"
RESULTS = (PAIRED, NO_UPLINK, OVER_LIMIT, OVER_SOURCE_LIMIT)


@dataclass(frozen=True)
class RelaySettings:
    serve: tuple[str, int]
    uplink: tuple[str, int]
    # How long a pod's connection waits for an idle uplink before it is closed.
    pair_timeout: float = 10.0
    # Pod connections served at once: the relay is one consumer's, so this bounds what the
    # consumer's pods hold of the provider here (per relay pod); more are closed at once,
    # counted and logged.
    max_connections: int = 1024
    # Pod connections served at once from one source address (one pod): a pod that opens
    # connections without end cannot take the relay from the consumer's other pods.
    max_connections_per_source: int = 64
    # Idle uplinks kept: the consumer's virtual kubelet holds a few per relay pod
    # (--home-api-uplinks, 4); an uplink past this is closed, so a consumer cannot pile up
    # sockets (and port-forward streams through the provider's API server) here.
    max_uplinks: int = 256


class RelayMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.connections = Counter(
            "kube_offload_relay_connections", "Pod connections to the relay, by result: paired "
            "(with an uplink), no_uplink (none within the pair timeout), over_limit (at --max-connections), "
            "over_source_limit (at --max-connections-per-source from that address)",
            ["result"], registry=registry)
        self.uplinks = Counter("kube_offload_relay_uplinks", "Uplinks that arrived on the uplink port", registry=registry)
        self.uplinks_refused = Counter("kube_offload_relay_uplinks_refused",
                                       "Uplinks closed on arrival: --max-uplinks were idle already", registry=registry)
        self.idle = Gauge("kube_offload_relay_idle_uplinks", "Uplinks waiting for a pod", registry=registry)
        self.active = Gauge("kube_offload_relay_active_connections", "Pod connections being piped now", registry=registry)
        self.bytes = Counter("kube_offload_relay_bytes", "Bytes piped, by direction (to_home: from pods)",
                             ["direction"], registry=registry)
        for result in RESULTS:
            self.connections.labels(result)
        for direction in ("to_home", "to_pod"):
            self.bytes.labels(direction)


def listen(address: tuple[str, int]) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in address[0] else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    sock.listen(ACCEPT_BACKLOG)
    return sock


class Relay:
    """Binds both ports when built (a port in use fails at start-up, naming it);
    :meth:`start` accepts, :meth:`stop` closes everything."""

    def __init__(self, settings: RelaySettings, registry: CollectorRegistry | None = None) -> None:
        self.settings = settings
        self.metrics = RelayMetrics(registry or CollectorRegistry())
        self.pool = UplinkPool()
        self._stop = threading.Event()
        self._active = 0
        self._by_source: dict[str, int] = {}
        self._lock = threading.Lock()
        self._serve = listen(settings.serve)
        try:
            self._uplink = listen(settings.uplink)
        except OSError:
            self._serve.close()
            raise
        self._threads: list[threading.Thread] = []
        # When each kind of trouble was last logged (at most one line a minute each).
        self._last_warning: dict[str, float] = {}

    @property
    def serve_port(self) -> int:
        return int(self._serve.getsockname()[1])

    @property
    def uplink_port(self) -> int:
        return int(self._uplink.getsockname()[1])

    def start(self) -> None:
        for name, target in (("relay-serve", self._accept_pods), ("relay-uplink", self._accept_uplinks),
                             ("relay-prune", self._prune)):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        log.info("relay listening: pods on %s:%d, uplinks on %s:%d", self.settings.serve[0], self.serve_port,
                 self.settings.uplink[0], self.uplink_port)

    def stop(self) -> None:
        self._stop.set()
        for sock in (self._serve, self._uplink):
            close_quietly(sock)
        self.pool.close()

    def _accept(self, listener: socket.socket) -> tuple[socket.socket, str] | None:
        while not self._stop.is_set():
            try:
                conn, address = listener.accept()
            except OSError:
                if self._stop.is_set():
                    return None
                continue
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            return conn, str(address[0]) if isinstance(address, tuple) and address else ""
        return None

    def _accept_uplinks(self) -> None:
        while (accepted := self._accept(self._uplink)) is not None:
            conn, _ = accepted
            self.metrics.uplinks.inc()
            if self.pool.idle() >= self.settings.max_uplinks:
                self.metrics.uplinks_refused.inc()
                if self._warn("uplinks"):
                    log.warning("refused an uplink: %d are idle already (--max-uplinks); the consumer's virtual kubelet "
                                "opens more than it needs (its --home-api-uplinks); counted in "
                                "kube_offload_relay_uplinks_refused_total", self.settings.max_uplinks)
                close_quietly(conn)
                continue
            self.pool.add(conn)
            self.metrics.idle.set(self.pool.idle())

    def admit(self, source: str) -> str:
        """Take a slot for a pod's connection from ``source``: :data:`PAIRED` when one is
        free (give it back with :meth:`release`), else why not (:data:`OVER_LIMIT`,
        :data:`OVER_SOURCE_LIMIT`)."""
        with self._lock:
            if self._active >= self.settings.max_connections:
                return OVER_LIMIT
            if self._by_source.get(source, 0) >= self.settings.max_connections_per_source:
                return OVER_SOURCE_LIMIT
            self._active += 1
            self._by_source[source] = self._by_source.get(source, 0) + 1
            return PAIRED

    def release(self, source: str) -> None:
        with self._lock:
            self._active -= 1
            left = self._by_source.get(source, 0) - 1
            if left > 0:
                self._by_source[source] = left
            else:
                self._by_source.pop(source, None)

    def _accept_pods(self) -> None:
        while (accepted := self._accept(self._serve)) is not None:
            conn, source = accepted
            verdict = self.admit(source)
            if verdict != PAIRED:
                self.metrics.connections.labels(verdict).inc()
                self._refused(verdict, source)
                close_quietly(conn)
                continue
            threading.Thread(target=self._serve_pod, args=(conn, source), name="relay-pod", daemon=True).start()

    def _refused(self, verdict: str, source: str) -> None:
        """Say why a pod's connection was closed at once (its client sees only a reset: the
        stream is TLS end to end, the relay cannot answer inside it), once a minute."""
        if not self._warn(verdict):
            return
        if verdict == OVER_LIMIT:
            log.warning("refused a pod's connection from %s: %d connections of this consumer's pods are open already "
                        "(--max-connections); counted in kube_offload_relay_connections_total{result=\"%s\"}",
                        source, self.settings.max_connections, verdict)
        else:
            log.warning("refused a pod's connection from %s: %d connections from that address are open already "
                        "(--max-connections-per-source); counted in kube_offload_relay_connections_total{result=\"%s\"}",
                        source, self.settings.max_connections_per_source, verdict)

    def _serve_pod(self, conn: socket.socket, source: str = "") -> None:
        try:
            uplink = self.pool.take(self.settings.pair_timeout)
            self.metrics.idle.set(self.pool.idle())
            if uplink is None:
                self.metrics.connections.labels(NO_UPLINK).inc()
                if self._warn(NO_UPLINK):
                    log.warning("no uplink within %.0fs: closed a pod's connection (is the consumer's vkubelet "
                                "running and allowed to port-forward here?); counted in "
                                "kube_offload_relay_connections_total{result=\"no_uplink\"}", self.settings.pair_timeout)
                close_quietly(conn)
                return
            self.metrics.connections.labels(PAIRED).inc()
            self.metrics.active.inc()
            try:
                to_home, to_pod = pump(conn, uplink, stop=self._stop)
            finally:
                self.metrics.active.dec()
            self.metrics.bytes.labels("to_home").inc(to_home)
            self.metrics.bytes.labels("to_pod").inc(to_pod)
        finally:
            self.release(source)

    def _warn(self, kind: str) -> bool:
        """At most one warning a minute of each kind: a consumer without a vkubelet, or a
        pod opening connections without end, would otherwise log a line per connection."""
        now = time.monotonic()
        with self._lock:
            if now - self._last_warning.get(kind, -WARNING_SECONDS) < WARNING_SECONDS:
                return False
            self._last_warning[kind] = now
            return True

    def _prune(self) -> None:
        # Uplinks closed while idle (the vkubelet restarted, the port-forward timed out)
        # are dropped here too, not only when a pod comes, so the gauge tells the truth.
        while not self._stop.wait(PRUNE_SECONDS):
            self.metrics.idle.set(self.pool.prune())
