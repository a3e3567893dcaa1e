"""The threaded HTTPS server of the kubelet endpoint, and the state its request handler
(vkubelet/kubeletapi/handler.py) serves from.

Built on :class:`kube_offload.runtime.https_server.ThreadingHTTPSServer` (shared with the
enforcer's ShadowPod webhook). Why not gunicorn and WSGI like the local webhook: an exec
turns the HTTP connection into a WebSocket, and the relay needs the raw TLS socket after
the ``101`` - the standard library hands it over as ``self.connection``, a WSGI server
does not (WSGI has no upgrade). A followed log is one long response per request, which a
thread per connection serves simply; the requests come from one client (the local
apiserver), a few at a time, so a thread each is cheap. And the server lives inside the
vkubelet process, next to the informers it reads, where gunicorn's pre-fork model would
not fit. The TLS handshake runs in the connection's thread.

Bounded (vkubelet/kubeletapi/limits.py): at most ``max_connections`` connections are
served at once - past that a few extra threads answer ``503`` with ``Retry-After``
before authentication (it costs the apiserver no review), and beyond those the socket is
closed - and at most ``max_streams`` exec/attach/port-forward/followed-log streams
(``429``).
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
from typing import Any, Callable, Mapping, Sequence

from kubernetes import client

from kube_offload.runtime.https_server import ThreadingHTTPSServer
from vkubelet.kubeletapi import remote as remote_api
from vkubelet.kubeletapi import podlists, stats
from vkubelet.kubeletapi.access import AccessControl
from vkubelet.kubeletapi.handler import KubeletRequestHandler, OverCapacityHandler
from vkubelet.kubeletapi.limits import REJECT_TIMEOUT, REJECTING_CONNECTIONS, Slots, StreamLimits
from vkubelet.kubeletapi.paths import PODS, STATS_SUMMARY, KubeletRequest, RequestError
from vkubelet.kubeletapi.resolver import PodResolver, RemotePod
from vkubelet.kubeletapi.sampler import UsageSampler
from vkubelet.kubeletapi.tls import ServerContext

log = logging.getLogger("kube_offload.vkubelet.kubelet_api")


class KubeletApi:
    """What the endpoints share, apart from HTTP: the gate every caller passes first
    (authentication and authorization), the pod resolver, the remote API server, the
    limits and their stream slots; and the stats endpoints' documents. Each endpoint's
    own work is in its module (logs.py, upgrades.py)."""

    def __init__(
        self,
        *,
        resolver: PodResolver,
        remote: client.ApiClient,
        cluster_id: str,
        access: AccessControl,
        usage: UsageSampler | None = None,
        limits: StreamLimits | None = None,
        list_pods: Callable[[], Sequence[Mapping[str, Any]]] | None = None,
    ) -> None:
        self.access = access
        # The local pods bound to the node, from the vkubelet's informer (no API call
        # per request): /pods and /runningpods/.
        self.list_pods = list_pods
        self.usage = usage
        self.resolver = resolver
        self.remote = remote
        # Streams open connections of their own from the same kubeconfig (remote.py).
        self.endpoint = _remote_endpoint(remote)
        self.cluster_id = cluster_id
        self.limits = limits or StreamLimits()
        self.streams = Slots(self.limits.max_streams)
        self.stopping = threading.Event()

    def resolve(self, request: KubeletRequest) -> RemotePod:
        return self.resolver.resolve(request.namespace, request.pod, request.pod_uid)

    def usage_document(self, request: KubeletRequest) -> tuple[str, bytes]:
        """(content type, body) of ``/stats/summary`` or ``/metrics/resource``, from the
        usage sampled from the remote metrics API (vkubelet/kubeletapi/sampler.py)."""
        if self.usage is None or not self.usage.enabled:
            raise RequestError(
                404, f"/{request.endpoint} is not served: resource metrics are off on this virtual node "
                "(--kubelet-metrics-interval=0)"
            )
        if request.endpoint == STATS_SUMMARY:
            # A running pod is listed at once, with zeros until its first sample.
            snapshot = self.usage.snapshot(with_unsampled=True)
            return stats.JSON_CONTENT_TYPE, stats.summary_json(snapshot, node_name=self.usage.node_name, now=self.usage.now())
        return stats.PROMETHEUS_CONTENT_TYPE, stats.resource_metrics(self.usage.snapshot()).encode("utf-8")

    def pods_document(self, request: KubeletRequest) -> tuple[str, bytes]:
        """(content type, body) of ``/pods`` or ``/runningpods/`` (podlists.py)."""
        if self.list_pods is None:
            raise RequestError(404, f"/{request.endpoint} is not served by this kubelet API")
        pods = self.list_pods()
        if request.endpoint == PODS:
            document = podlists.pod_list(pods)
        else:
            # The runtime's view is the remote pods, as the status sync reads them (podlists.py).
            document = podlists.running_pod_list(pods, self.resolver.remote_pods_of_one_pass())
        return podlists.JSON_CONTENT_TYPE, podlists.encode(document)

    def busy_message(self) -> str:
        return (
            f"the virtual kubelet of remote cluster {self.cluster_id} is serving its maximum of "
            f"{self.limits.max_streams} streams (exec, attach, port-forward, followed logs; "
            "--kubelet-max-streams); try again shortly"
        )


def _remote_endpoint(api_client: client.ApiClient) -> remote_api.Endpoint:
    return remote_api.endpoint_from(api_client.configuration)


class KubeletHTTPServer(ThreadingHTTPSServer):
    def __init__(self, address: tuple[str, int], app: KubeletApi, tls: ServerContext) -> None:
        self.app = app
        self._closers: dict[int, Callable[[], None]] = {}
        self._closers_lock = threading.Lock()
        self.connections = Slots(app.limits.max_connections)
        self.rejecting = Slots(REJECTING_CONNECTIONS)
        super().__init__(address, KubeletRequestHandler, tls)

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.exception("kubelet API: request from %s failed", client_address)

    # --- the connection cap -----------------------------------------------------------------
    def process_request(self, request: Any, client_address: Any) -> None:
        if self.connections.acquire():
            try:
                super().process_request(request, client_address)
            except BaseException:  # no thread: the slot is ours to give back
                self.connections.release()
                raise
            return
        if self.rejecting.acquire():
            threading.Thread(target=self._reject, args=(request, client_address), name="kubelet-api-reject", daemon=True).start()
            return
        log.warning(
            "kubelet API: %d connections and %d refusals in progress; closing a new one from %s unanswered",
            self.connections.capacity,
            self.rejecting.capacity,
            client_address,
        )
        self.shutdown_request(request)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.connections.release()

    def _reject(self, request: socket.socket, client_address: Any) -> None:
        """Answer one connection over the cap with a 503, within a short time."""
        try:
            request.settimeout(REJECT_TIMEOUT)
            try:
                conn = self.tls.get().wrap_socket(request, server_side=True)
            except (ssl.SSLError, OSError):
                return
            try:
                OverCapacityHandler(conn, client_address, self)
            except Exception:  # the client went away meanwhile
                pass
            finally:
                try:
                    conn.close()
                except OSError:
                    pass
        finally:
            self.shutdown_request(request)
            self.rejecting.release()

    def over_capacity_message(self) -> str:
        return (
            f"the virtual kubelet of remote cluster {self.app.cluster_id} is serving its maximum of "
            f"{self.connections.capacity} connections (--kubelet-max-connections); try again shortly"
        )

    # --- shutdown of long-lived requests ----------------------------------------------------
    def register_closer(self, close: Callable[[], None]) -> int:
        with self._closers_lock:
            token = id(close)
            self._closers[token] = close
            return token

    def unregister_closer(self, token: int) -> None:
        with self._closers_lock:
            self._closers.pop(token, None)

    def close_streams(self) -> None:
        """End every followed log and exec relay (the server is stopping)."""
        self.app.stopping.set()
        with self._closers_lock:
            closers = list(self._closers.values())
        for close in closers:
            try:
                close()
            except Exception:  # a stream that ended meanwhile
                pass
