"""The kubelet API of the virtual node as a virtual-kubelet loop (``kubectl logs``,
``exec`` and ``attach`` on offloaded pods; ``kubectl top`` through metrics-server).

:func:`kubelet_api_loop` is the :data:`vkubelet.shared.loops.LoopFactory`. It binds the HTTPS
port at once (a port in use or an unreadable certificate stops the vkubelet at start-up,
not silently later), serves once the pod caches have listed, and keeps
``ExtendWebSocketsToKubelet`` in the node's ``status.declaredFeatures``: that is what
makes the local kube-apiserver (>= 1.36) proxy ``kubectl exec`` to us as a WebSocket
instead of translating it to SPDY (see vkubelet/kubeletapi/streams.py). Every request is
authenticated (client certificate from ``--kubelet-client-ca``, TokenReview) and
authorized (SubjectAccessReview) on the local apiserver, as by a kubelet. The machinery is
in the modules beside this one; docs/logs-and-exec.md describes the behaviour.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Mapping, TYPE_CHECKING

from kubernetes import client

from kube_offload.runtime.controller import Controller
from kube_offload.runtime.manager import Synced
from kube_offload.runtime import kinds
from kube_offload.runtime.kube import ApiError, Kube, MERGE_PATCH
from vkubelet.kubeletapi.access import AccessControl
from vkubelet.kubeletapi.authn import Authenticator, TokenReviewer, token_review_call
from vkubelet.kubeletapi.authz import Authorizer, subject_access_review_call
from vkubelet.kubeletapi.decision_cache import CacheTTL
from vkubelet.kubeletapi.resolver import PodResolver
from vkubelet.kubeletapi.sampler import UsageSampler, metrics_lister
from vkubelet.kubeletapi import serving_csr
from vkubelet.kubeletapi.server import KubeletApi, KubeletHTTPServer
from vkubelet.kubeletapi.serving_cert import ServingCertificate, csr_kube
from vkubelet.kubeletapi.tls import ServerContext, ServingFiles, TLSSetupError, serving_files, subject_names
from vkubelet.shared.loops import LoopContext
from vkubelet.shared.settings_error import SettingsError

if TYPE_CHECKING:
    # The process's settings (the wiring's): handed in, named here for the type checker only.
    from vkubelet.settings import Settings

log = logging.getLogger("kube_offload.vkubelet.kubelet_api")

# The node feature the apiserver looks for before proxying exec/attach/port-forward
# WebSockets to a kubelet (kubernetes v1.37 pkg/registry/core/pod/rest/subresources.go,
# checkNodeSupportsWebsockets).
WEBSOCKET_FEATURE = "ExtendWebSocketsToKubelet"
# How long a token the apiserver refused is remembered (at most the allowed TTL): short,
# so a token that starts working (a new ServiceAccount's) is not refused for long.
TOKEN_DENIED_TTL = 30.0


def declared_features_patch(node: Mapping[str, Any] | None, feature: str = WEBSOCKET_FEATURE) -> dict[str, Any] | None:
    """The nodes/status merge patch adding ``feature`` to ``status.declaredFeatures``, or
    None when it is there (or the node does not exist yet). A merge patch replaces the
    whole list, so the others are kept; the API wants it sorted and without duplicates."""
    if node is None:
        return None
    current = list((node.get("status") or {}).get("declaredFeatures") or [])
    if feature in current:
        return None
    return {"status": {"declaredFeatures": sorted(set(current) | {feature})}}


def access_control(settings: Settings, local: client.ApiClient) -> AccessControl:
    """Authentication and authorization of every request, as a kubelet in webhook mode
    (vkubelet/kubeletapi/access.py): client certificates from ``--kubelet-client-ca``,
    bearer tokens by TokenReview and every request by SubjectAccessReview, both on the
    LOCAL apiserver and as the vkubelet's own identity."""
    tokens = TokenReviewer(
        token_review_call(local),
        CacheTTL(allowed=settings.kubelet_authn_cache_ttl, denied=min(settings.kubelet_authn_cache_ttl, TOKEN_DENIED_TTL)),
    )
    authorizer = Authorizer(
        subject_access_review_call(local),
        CacheTTL(allowed=settings.kubelet_authz_cache_authorized_ttl, denied=settings.kubelet_authz_cache_unauthorized_ttl),
    )
    return AccessControl(
        authenticator=Authenticator(tokens=tokens, anonymous=settings.kubelet_anonymous_auth),
        authorizer=authorizer,
        node_name=settings.node_name,
    )


def bind_address(settings: Settings) -> str:
    """Where to listen: ``--kubelet-bind-address``, by default the node address the
    apiserver is told to connect to."""
    return settings.kubelet_bind_address or settings.node_address


class KubeletApiLoop:
    name = "kubelet-api"

    def __init__(self, context: LoopContext) -> None:
        settings = context.settings
        self._settings = settings
        self._local_pods = context.informers.local_pods()
        self._remote_pods = context.informers.remote_pods()
        self._shadowpods = context.informers.remote_shadowpods()
        self._twins = context.twins
        self._node = context.informers.local_node()
        self._local = Kube(context.informers.local_client)
        resolver = PodResolver(
            local_pods=self._local_pods,
            remote_pods=self._remote_pods,
            shadowpods=self._shadowpods,
            twins=context.twins,
            node_name=settings.node_name,
            cluster_id=settings.cluster_id,
            local_cluster_id=settings.local_cluster_id,
        )
        # /stats/summary and /metrics/resource (kubectl top): the offloaded pods' usage,
        # read from the remote metrics.k8s.io API through the same resolver.
        self.usage = UsageSampler(
            local_pods=self._local_pods,
            resolve_pass=resolver.for_one_pass,
            list_metrics=metrics_lister(context.informers.remote_client),
            cluster_id=settings.cluster_id,
            node_name=settings.node_name,
            interval=settings.kubelet_metrics_interval,
        )
        # --kubelet-serving-cert-mode=csr: from the local CSR API, renewed in a thread
        # (serving_cert.py); otherwise the given files or a generated pair (tls.py).
        self.serving_cert: ServingCertificate | None = None
        self._files: ServingFiles
        if settings.kubelet_serving_cert_mode == serving_csr.MODE_CSR:
            dns, ips = subject_names(settings.node_address, settings.node_name)
            self.serving_cert = ServingCertificate(
                csr_kube(context.informers.local_client),
                node_name=settings.node_name,
                dns_names=dns,
                ip_addresses=ips,
                approval=settings.kubelet_serving_cert_approval,
                expiration_seconds=int(settings.kubelet_serving_cert_expiration),
                rotation_fraction=settings.kubelet_serving_cert_rotation,
            )
            self._files = self.serving_cert.files
        else:
            try:
                self._files = serving_files(
                    settings.kubelet_tls_cert,
                    settings.kubelet_tls_key,
                    node_address=settings.node_address,
                    node_name=settings.node_name,
                )
            except TLSSetupError as exc:
                raise SettingsError(str(exc)) from None
        address = (bind_address(settings), settings.kubelet_port)
        try:
            # A client without a certificate may still connect: it may have a bearer token.
            tls = ServerContext(self._files, settings.kubelet_client_ca, require_client_certificate=False)
            app = KubeletApi(
                resolver=resolver,
                remote=context.informers.remote_client,
                cluster_id=settings.cluster_id,
                access=access_control(settings, context.informers.local_client),
                usage=self.usage,
                limits=settings.kubelet_limits,
                list_pods=self._local_pods.list,
            )
            self.server = KubeletHTTPServer(address, app, tls)
        except TLSSetupError as exc:
            self._cleanup_files()
            raise SettingsError(str(exc)) from None
        except OSError as exc:
            self._cleanup_files()
            raise SettingsError(f"--kubelet-port: cannot listen on {address[0]}:{address[1]}: {exc.strerror or exc}") from None
        self._thread: threading.Thread | None = None
        self._declared = False
        self.features = Controller(name="kubelet-api-features", reconcile=self._reconcile_features, workers=1)
        self.features.watch(self._node)

    def _cleanup_files(self) -> None:
        self._files.cleanup()
        if self.serving_cert is not None:
            self.serving_cert.stop()

    @property
    def port(self) -> int:
        """The port really bound (``--kubelet-port`` unless that was 0 in a test)."""
        return self.server.server_address[1]

    def informers(self) -> list[Synced]:
        return [self._local_pods, self._remote_pods, self._shadowpods, self._node, *self._twins.informers()]

    def start(self) -> None:
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.5}, name="kubelet-api", daemon=True)
        self._thread.start()
        self.features.start()
        self.features.enqueue(self._settings.node_name)
        self.usage.start()
        if self.serving_cert is not None:
            self.serving_cert.start()
        log.info("kubelet API serving on https://%s:%d", *self.server.server_address[:2])
        if not self._settings.kubelet_client_ca:
            log.warning(
                "kubelet API: no --kubelet-client-ca: client certificates are not accepted, so the local "
                "apiserver (which calls with its --kubelet-client-certificate) is refused with 401 and "
                "kubectl logs/exec on offloaded pods fail; give the CA of that certificate"
            )

    def stop(self) -> None:
        self.features.stop()
        self.usage.stop()
        if self._thread is not None:
            self.server.shutdown()
        self.server.close_streams()
        self.server.server_close()
        self._cleanup_files()

    def resync_all(self) -> None:
        self.features.enqueue(self._settings.node_name)

    def _reconcile_features(self, key: str) -> None:
        if key != self._settings.node_name:
            return
        patch = declared_features_patch(self._node.get(key))
        if patch is None:
            return
        try:
            self._local.patch(kinds.NODES, key, patch, subresource="status", content_type=MERGE_PATCH)
        except ApiError as exc:
            if exc.not_found:
                return  # the node loop creates it; its ADDED event brings us back
            raise
        # The node's next watch event may predate this patch and run it once more
        # (harmless: same merge patch); say it once.
        if not self._declared:
            self._declared = True
            log.info("node %s: declared %s (kubectl exec reaches this kubelet API as a WebSocket)", key, WEBSOCKET_FEATURE)


def kubelet_api_loop(context: LoopContext) -> KubeletApiLoop:
    """The :data:`vkubelet.shared.loops.LoopFactory` of the kubelet API."""
    return KubeletApiLoop(context)
