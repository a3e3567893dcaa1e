"""The uplinks: connections the vkubelet holds open to the consumer's relay on the provider,
each waiting for one offloaded pod's connection to the home API server.

An uplink is a port-forward to ``pods/<relay>/portforward?ports=HOME_API_RELAY_UPLINK_PORT``
through the provider's API server, as the consumer's identity (its RBAC grants
port-forward in its tenant namespace only), on a WebSocket of our own
(vkubelet/kubeletapi/remote.py, the client the kubelet API's streams use). The
``v4.channel.k8s.io`` port-forward protocol: every message starts with a channel byte, 0
for the port's data and 1 for its errors, and the first message on each channel carries
the port number (2 bytes, little endian) before any data (the kubelet's
``portforward/websocket.go``).

The relay (relay/) writes one go byte on an uplink when a pod connects; the uplink then
dials the **home** API server - the host:port of our local kube configuration, and
nothing else, ever - adds no credential, and splices the TCP connection with the
port-forward channel until either side closes. A replacement is opened at once, so
``--home-api-uplinks`` wait idle per relay pod; at most ``--home-api-max-connections``
are open (idle or piping) in all. Failures back off per relay pod and are logged once
per cause.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from dataclasses import dataclass
from typing import Callable
from urllib.parse import urlsplit

from prometheus_client import Counter, Gauge

from kube_offload import constants as c
from kube_offload.runtime.metrics import REGISTRY
from kube_offload.runtime.sockets import readable
from vkubelet.home_api.discovery import Discovery
from vkubelet.home_api.settings import HomeAPISettings
from vkubelet.kubeletapi import remote
from vkubelet.kubeletapi import websocket as ws

log = logging.getLogger("kube_offload.vkubelet.home_api")

V4 = "v4.channel.k8s.io"
DATA, ERROR = 0, 1
PORT_PREFIX = 2  # bytes of the port number at the start of each channel
GO = b"\x01"  # relay/pairing.py: the one byte the relay adds
CONNECT_TIMEOUT = 10.0
SELECT_SECONDS = 1.0
CHUNK = 32 * 1024  # client-go's port-forward buffer
BACKOFF_FIRST = 1.0
BACKOFF_MAX = 60.0
SHORT_LIVED_SECONDS = 2.0

UPLINKS = Gauge("kube_offload_vkubelet_home_api_uplinks", "Uplinks to the home API relay, by state (idle: waiting "
                "for a pod, or being opened; active: piping a pod's connection)", ["state"], registry=REGISTRY)
CONNECTIONS = Counter("kube_offload_vkubelet_home_api_connections", "Offloaded pods' connections to the home API "
                      "server through the relay, by result (ok, home_unreachable, error)", ["result"], registry=REGISTRY)
UPLINK_FAILURES = Counter("kube_offload_vkubelet_home_api_uplink_failures", "Uplinks that could not be opened or "
                          "failed before a pod came", registry=REGISTRY)


class UplinkError(Exception):
    """The port-forward broke its protocol or reported an error on its error channel."""


# --- pure: the v4 port-forward channels of one port ---------------------------------------------
class ChannelReader:
    """Splits the messages of a one-port ``v4.channel.k8s.io`` port-forward into the port's
    data and its error text, skipping the port number each channel starts with."""

    def __init__(self) -> None:
        self._skip = {DATA: PORT_PREFIX, ERROR: PORT_PREFIX}

    def feed(self, message: bytes) -> tuple[bytes, bytes]:
        """(data, error text) that ``message`` carries."""
        if not message:
            return b"", b""
        channel, payload = message[0], message[1:]
        if channel not in self._skip:
            raise UplinkError(f"port-forward message on channel {channel}: only 0 (data) and 1 (error) exist for one port")
        skip = min(self._skip[channel], len(payload))
        self._skip[channel] -= skip
        payload = payload[skip:]
        return (payload, b"") if channel == DATA else (b"", payload)


def data_message(payload: bytes) -> ws.Message:
    return ws.Message(bytes([DATA]) + payload)


def home_address(server: str) -> tuple[str, int]:
    """host:port of a kube configuration's server URL (https://10.96.0.1:443, https://[::1]:6443)."""
    parts = urlsplit(server)
    if not parts.hostname:
        raise ValueError(f"the local kube configuration's server {server!r} has no host")
    return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)


def backoff(previous: float) -> float:
    return BACKOFF_FIRST if previous <= 0 else min(previous * 2, BACKOFF_MAX)


# --- I/O: one uplink --------------------------------------------------------------------------
def wait_for_go(peer: ws.Peer, reader: ChannelReader, stop: threading.Event) -> bytes | None:
    """Block until the relay's go byte: the data that came after it (the pod's first
    bytes, maybe none); None when the uplink closed first or we are stopping."""
    data = b""
    messages = peer.pending()
    while True:
        for message in messages:
            chunk, error = reader.feed(message.data)
            if error:
                raise UplinkError(error.decode("utf-8", "replace").strip())
            data += chunk
        if data:
            if data[:1] != GO:
                raise UplinkError(f"the relay sent {data[:1]!r} where the go byte {GO!r} was expected")
            return data[1:]
        if peer.closed or stop.is_set():
            return None
        if not peer.has_pending():
            if not readable([peer.sock], SELECT_SECONDS):
                messages = []
                continue
        messages = peer.receive()


def splice(peer: ws.Peer, reader: ChannelReader, home: socket.socket, stop: threading.Event) -> None:
    """Pipe bytes between the port-forward channel and the home API server until either
    side closes (or we stop)."""
    while not stop.is_set():
        pending = peer.has_pending()
        ready = readable([peer.sock, home], 0 if pending else SELECT_SECONDS)
        if pending or peer.sock in ready:
            for message in peer.receive():
                data, error = reader.feed(message.data)
                if error:
                    raise UplinkError(error.decode("utf-8", "replace").strip())
                if data:
                    home.sendall(data)
            if peer.closed:
                return
        if home in ready:
            data = home.recv(CHUNK)
            if not data:
                return
            peer.send(data_message(data))
            if peer.write_error is not None:
                return


@dataclass
class _PodState:
    idle: int = 0
    delay: float = 0.0
    retry_at: float = 0.0


class Uplinks:
    """The pool of uplinks of one remote cluster (see the module doc); :meth:`run` is the
    loop the process manager runs (leader only: one replica holds the uplinks)."""

    def __init__(self, settings: HomeAPISettings, discovery: Discovery, provider: remote.Endpoint, home: tuple[str, int],
                 *, dial: Callable[[tuple[str, int]], socket.socket] | None = None) -> None:
        self.settings = settings
        self.discovery = discovery
        self.provider = provider
        self.home = home
        self._dial = dial or (lambda address: socket.create_connection(address, timeout=CONNECT_TIMEOUT))
        self._pods: dict[str, _PodState] = {}
        self._active = 0
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._logged: set[str] = set()
        self._peers: set[ws.Peer] = set()
        self._threads: set[threading.Thread] = set()

    # --- the loop ---
    def run(self, stop: threading.Event) -> None:
        log.info("home API uplinks: %d per relay pod in %s, at most %d connections, to the home API server at %s:%d",
                 self.settings.uplinks, self.discovery.namespace, self.settings.max_connections, *self.home)
        next_refresh = 0.0
        try:
            while not stop.is_set():
                if time.monotonic() >= next_refresh:
                    next_refresh = time.monotonic() + self.settings.refresh_period
                    try:
                        self.discovery.refresh()
                    except Exception as exc:  # noqa: BLE001 - an odd answer must not stop the vkubelet
                        self._log_once(f"refresh:{exc.__class__.__name__}", "reading the home API relay failed: %s", exc)
                self.top_up(self.discovery.pods())
                self._wake.wait(SELECT_SECONDS)
                self._wake.clear()
        finally:
            self._stop.set()
            with self._lock:
                peers = list(self._peers)
            for peer in peers:
                peer.shutdown()  # wakes their threads; each then closes its home socket

    def top_up(self, pods: tuple[str, ...]) -> None:
        """Open uplinks until each Ready relay pod has its idle ones (within the cap)."""
        now = time.monotonic()
        with self._lock:
            for gone in set(self._pods) - set(pods):
                if self._pods[gone].idle == 0:
                    del self._pods[gone]  # its open uplinks end on their own
            for pod in pods:
                state = self._pods.setdefault(pod, _PodState())
                if now < state.retry_at:
                    continue
                while state.idle < self.settings.uplinks and self._open_count() < self.settings.max_connections:
                    state.idle += 1
                    thread = threading.Thread(target=self._uplink, args=(pod,), name=f"home-api-uplink-{pod}", daemon=True)
                    self._threads.add(thread)
                    thread.start()
            UPLINKS.labels("idle").set(sum(s.idle for s in self._pods.values()))
            UPLINKS.labels("active").set(self._active)

    def _open_count(self) -> int:
        return self._active + sum(s.idle for s in self._pods.values())

    # --- one uplink ---
    def _uplink(self, pod: str) -> None:
        went_active = False
        peer: ws.Peer | None = None
        try:
            target = remote.pod_path(self.provider, "portforward", self.discovery.namespace, pod,
                                     [("ports", str(c.HOME_API_RELAY_UPLINK_PORT))])
            peer = remote.open_websocket(self.provider, target, [V4], timeout=CONNECT_TIMEOUT, name=f"home API uplink {pod}")
            with self._lock:
                self._peers.add(peer)
            reader = ChannelReader()
            opened = time.monotonic()
            first = wait_for_go(peer, reader, self._stop)
            if first is None:
                if not self._stop.is_set() and time.monotonic() - opened < SHORT_LIVED_SECONDS:
                    # Closed at once (nothing listens on the uplink port: the kubelet then
                    # closes the stream): a failure, backed off, not a tight reopen loop.
                    raise UplinkError(f"the relay closed the uplink at once (is it listening on 127.0.0.1:"
                                      f"{c.HOME_API_RELAY_UPLINK_PORT}?)")
                return  # closed while idle (the relay restarted, an idle timeout): replaced below
            went_active = True
            self._activate(pod)
            self._serve(peer, reader, first)
        except (remote.RemoteError, UplinkError, OSError, ws.ProtocolError) as exc:
            if not went_active:
                self._failed(pod, exc)
        except Exception as exc:  # noqa: BLE001 - see below
            # Anything else (a bug, an answer no one foresaw) must back off too: a thread that
            # died of it would be replaced at once by top_up, a tight reopen loop.
            if went_active:
                log.warning("home API connection through relay pod %s ended on an unexpected error: %r", pod, exc)
            else:
                self._failed(pod, exc)
        finally:
            if peer is not None:
                peer.send_close(ws.CLOSE_NORMAL)
                peer.shutdown()
            with self._lock:
                if peer is not None:
                    self._peers.discard(peer)
                self._threads.discard(threading.current_thread())
                if went_active:
                    self._active -= 1
                else:
                    state = self._pods.get(pod)
                    if state is not None:
                        state.idle -= 1
            self._wake.set()

    def _activate(self, pod: str) -> None:
        with self._lock:
            state = self._pods.get(pod)
            if state is not None:
                state.idle -= 1
                state.delay = 0.0  # this relay pod works
            self._active += 1
        self._wake.set()  # a replacement, at once

    def _serve(self, peer: ws.Peer, reader: ChannelReader, first: bytes) -> None:
        try:
            home = self._dial(self.home)
        except OSError as exc:
            CONNECTIONS.labels("home_unreachable").inc()
            self._log_once(f"home:{exc.__class__.__name__}:{exc.strerror or exc}",
                           "cannot reach the home API server at %s:%d for an offloaded pod: %s", *self.home, exc)
            return
        try:
            home.settimeout(None)
            if first:
                home.sendall(first)
            splice(peer, reader, home, self._stop)
            CONNECTIONS.labels("ok").inc()
        except (OSError, UplinkError, ws.ProtocolError) as exc:
            CONNECTIONS.labels("error").inc()
            log.debug("home API connection ended: %s", exc)
        finally:
            try:
                home.close()
            except OSError:
                pass

    def _failed(self, pod: str, exc: Exception) -> None:
        UPLINK_FAILURES.inc()
        with self._lock:
            state = self._pods.get(pod)
            if state is not None:
                state.delay = backoff(state.delay)
                state.retry_at = time.monotonic() + state.delay
        cause = f"{getattr(exc, 'status', '')} {exc}"
        self._log_once(f"uplink:{cause}", "cannot open a home API uplink to relay pod %s/%s on the provider: %s "
                       "(retrying with backoff)", self.discovery.namespace, pod, exc)

    def _log_once(self, cause: str, message: str, *args: object) -> None:
        with self._lock:
            if cause in self._logged:
                return
            if len(self._logged) > 100:
                self._logged.clear()
            self._logged.add(cause)
        log.warning(message, *args)
