"""Service-account tokens for offloaded pods (local TokenRequest -> remote Secret).

A pod that mounts its service-account token expects a token of its HOME cluster: the
one its ServiceAccount, RBAC and every in-cluster client it talks to live in. For each
local pod bound to the virtual node that mounts tokens (projected serviceAccountToken
sources), this loop asks the LOCAL TokenRequest API for a token of the pod's service
account, bound to the pod (it dies with the pod), one per audience, and keeps them with
the pod's local namespace in one remote Secret in the twin namespace
(names.token_secret_name), for pods in API server mode ``home`` only (an opted-out pod
holds no home credential on the provider; its token Secret goes when the mode changes).
Translation mounts that Secret where the projected token was; the CA comes from the
reflected kube-root-ca.crt. Tokens are renewed once 80 % of their lifetime has passed
(--reflect-token-renew-after-fraction), from the Secret's own annotations, so a restart
neither re-requests fresh tokens nor lets old ones expire.
"""


from __future__ import annotations

import base64
import logging
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping, TYPE_CHECKING

from kube_offload import constants as c
from kube_offload.constants import API_SERVER_HOME
from kube_offload.runtime import kinds
from kube_offload.runtime.cache import Cache
from kube_offload.runtime.controller import Controller, Requeue
from kube_offload.runtime.kube import ApiError, Kube, object_key, split_key
from kube_offload.runtime.logs import ObjectLogger
from kube_offload.runtime.predicates import only_status_changed
from kube_offload.times import parse_time_or_none, format_time
from kube_offload.views import metadata as _meta
from vkubelet.home_api.pod_access import resolve_mode
from vkubelet.shared.indexes import BY_ORIGIN
from vkubelet.twins.namespaces import FORBIDDEN_RETRY_SECONDS
from vkubelet.reflection import forge as f, metrics
from vkubelet.shared import names as n
from vkubelet.reflection.caches import owned_by_origin, owned_selector, shared_informer
from vkubelet.reflection.forge import ForgeContext
from kube_offload.reasons import REASON_REFLECTION_CONFLICT, REASON_REFLECTION_FAILED
from vkubelet.reflection.reflector import CONFLICT_RETRY_SECONDS, REFUSED_RETRY_SECONDS, is_terminating
from vkubelet.reflection.remote_ops import RemoteOps
from vkubelet.reflection.settings import SECRETS, SERVICEACCOUNTS
from vkubelet.shared.origin import origin_key
from vkubelet.shared.trim import trim_token_secret

if TYPE_CHECKING:
    from vkubelet.shared.loops import LoopContext

# --- the forge (pure): the object to write, from the local one ------------------------------
TOKEN_SECRET_TYPE = c.REFLECTED_TOKEN_SECRET_TYPE


@dataclass(frozen=True)
class TokenSource:
    """One token a pod mounts: the Secret key it is kept under and its audience (None:
    the API server's own, as in the standard service-account volume)."""

    key: str
    audience: str | None


def service_account_name(pod: Mapping[str, Any]) -> str:
    spec = pod.get("spec") or {}
    return str(spec.get("serviceAccountName") or spec.get("serviceAccount") or "default")


def token_sources(pod: Mapping[str, Any]) -> list[TokenSource]:
    """The tokens ``pod`` mounts (projected serviceAccountToken sources), one per audience."""
    found: dict[str, TokenSource] = {}
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        for source in (volume.get("projected") or {}).get("sources") or []:
            token = source.get("serviceAccountToken")
            if isinstance(token, dict):
                audience = token.get("audience") or None
                key = n.token_key(audience)
                found.setdefault(key, TokenSource(key, audience))
    return sorted(found.values(), key=lambda s: s.key)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def forge_token_secret(
    pod: Mapping[str, Any],
    ctx: ForgeContext,
    *,
    tokens: Mapping[str, str],
    issued: datetime,
    expires: datetime,
    slice_name: str = "",
) -> dict[str, Any]:
    """The remote Secret the offloaded pod mounts in place of its projected token:
    ``tokens`` (key -> JWT of the LOCAL API server), and the pod's LOCAL namespace (the
    remote pod's own namespace is the twin's name). ``slice_name``: the slice whose node
    the pod is bound to, labelled so that each slice's vkubelet selects only its own
    pods' Secrets (:func:`token_secret_selector`)."""
    meta = _meta(pod)
    labels = {c.LABEL_ORIGIN_CLUSTER_ID: ctx.local_cluster_id, n.LABEL_REFLECTOR: ctx.reflector}
    if slice_name:
        labels[c.LABEL_SLICE] = slice_name
    data = {key: _b64(value) for key, value in tokens.items()}
    data[n.NAMESPACE_KEY] = _b64(str(meta.get("namespace") or ""))
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": TOKEN_SECRET_TYPE,
        "metadata": {
            "name": n.token_secret_name(str(meta.get("name") or "")),
            "namespace": ctx.remote_namespace,
            "labels": labels,
            "annotations": {
                c.ANNOTATION_ORIGIN_NAMESPACE: str(meta.get("namespace") or ""),
                c.ANNOTATION_ORIGIN_NAME: str(meta.get("name") or ""),
                c.ANNOTATION_ORIGIN_UID: str(meta.get("uid") or ""),
                c.ANNOTATION_TOKEN_ISSUED_AT: format_time(issued),
                c.ANNOTATION_TOKEN_EXPIRES_AT: format_time(expires),
            },
        },
        "data": data,
    }


def token_secret_selector(local_cluster_id: str, slice_name: str) -> str:
    """The remote token Secrets one vkubelet owns: a slice's process (docs/slices.md) those
    of its slice, the peering's own process those of no slice. Each process knows only the
    pods bound to its own node, and deletes the token Secrets of pods it does not know as
    orphans: with one selector for all, each would delete the others'."""
    owned = owned_selector(local_cluster_id, SERVICEACCOUNTS)
    return f"{owned},{c.LABEL_SLICE}={slice_name}" if slice_name else f"{owned},!{c.LABEL_SLICE}"


def token_refresh_at(secret: Mapping[str, Any], refresh_fraction: float) -> datetime | None:
    """When the tokens of ``secret`` are due for renewal (None: unknown, now)."""
    annotations = _meta(secret).get("annotations") or {}
    issued = parse_time_or_none(annotations.get(c.ANNOTATION_TOKEN_ISSUED_AT))
    expires = parse_time_or_none(annotations.get(c.ANNOTATION_TOKEN_EXPIRES_AT))
    if issued is None or expires is None or expires <= issued:
        return None
    return issued + (expires - issued) * refresh_fraction


def token_secret_is_current(
    secret: Mapping[str, Any], pod: Mapping[str, Any], sources: Iterable[TokenSource], *, now: datetime, refresh_fraction: float
) -> bool:
    """Whether ``secret`` serves ``pod`` as it is: made for this pod (UID), holds a token
    for every audience the pod mounts and its namespace, and is not due for renewal."""
    meta, pod_meta = _meta(secret), _meta(pod)
    annotations = meta.get("annotations") or {}
    if annotations.get(c.ANNOTATION_ORIGIN_UID) != pod_meta.get("uid"):
        return False
    data = secret.get("data") or {}
    if data.get(n.NAMESPACE_KEY) != _b64(str(pod_meta.get("namespace") or "")):
        return False
    if set(data) != {s.key for s in sources} | {n.NAMESPACE_KEY}:
        return False
    refresh_at = token_refresh_at(secret, refresh_fraction)
    return refresh_at is not None and now < refresh_at


# --- the reflector ------------------------------------------------------------
log = logging.getLogger("kube_offload.vkubelet.reflection.serviceaccounts")


class ServiceAccountTokenReflector:
    resource = SERVICEACCOUNTS
    kind = "Secret"

    def __init__(self, context: "LoopContext") -> None:
        self.settings = context.settings
        self.name = f"reflect-{self.resource}"
        self._local_id = self.settings.local_cluster_id
        self._twins = context.twins
        self._recorder = context.recorder
        self._token_seconds = self.settings.reflection.token_seconds
        self._renew_fraction = self.settings.reflection.token_renew_fraction
        informers = context.informers
        self._local = Kube(informers.local_client)
        self.ops = RemoteOps(Kube(informers.remote_client), kinds.SECRETS, resource=self.resource,
                             field_manager=n.field_manager(self.settings.node_name))
        self.local_pods = informers.local_pods()
        self.remote = shared_informer(
            informers, "remote", SECRETS, kinds.SECRETS,
            label_selector=token_secret_selector(self._local_id, self.settings.slice_name),
            transform=trim_token_secret,  # the tokens themselves are never read back
        )
        # Token Secrets by the local pod they serve, kept by the informer.
        self.remote.add_indexer(BY_ORIGIN, owned_by_origin(self._local_id, self.resource))
        self._lock = threading.Lock()
        # Local pod key -> when its next renewal is already scheduled.
        self._scheduled: dict[str, datetime] = {}
        workers = self.settings.reflection.of(self.resource).workers
        self.controller = Controller(name=self.name, reconcile=self.reconcile, workers=workers, logger=log)
        # A pod status change (the pod loop mirrors every remote one) is skipped: which
        # tokens a pod needs, for which UID and until when, is its spec and metadata;
        # the reconcile never reads its status.
        self.controller.watch(self.local_pods, skip=only_status_changed)
        self.controller.watch(self.remote, self._remote_key)
        self.controller.watch(self._twins.requests, self._pods_of_twin)
        # The API server mode (kube-offload.io/api-server) may come from the pod's namespace.
        self.controller.watch(self._twins.local_namespaces, self._pods_of_namespace)

    # --- the Loop protocol -------------------------------------------------------------------
    def informers(self) -> list[Cache]:
        return [self.local_pods, self.remote, *self._twins.informers()]

    def start(self) -> None:
        self.controller.start()

    def stop(self) -> None:
        self.controller.stop()

    def resync_all(self) -> None:
        for key in set(self.local_pods.keys()) | set(self.remote.index_values(BY_ORIGIN)):
            self.controller.enqueue(key)

    # --- event -> key ------------------------------------------------------------------------
    def owns(self, remote: Mapping[str, Any]) -> bool:
        return f.is_owned(remote, self._local_id, self.resource)

    def _remote_key(self, obj: dict[str, Any]) -> str | None:
        return origin_key(obj) if self.owns(obj) else None

    def _pods_of_twin(self, request: dict[str, Any]) -> list[str]:
        local_ns = self._twins.local_namespace_of(request)
        if not local_ns:
            return []
        return [key for key in self.local_pods.keys() if key.startswith(f"{local_ns}/")]

    def _pods_of_namespace(self, namespace: dict[str, Any]) -> list[str]:
        name = (namespace.get("metadata") or {}).get("name")
        return [key for key in self.local_pods.keys() if key.startswith(f"{name}/")] if name else []

    def _home_mode(self, pod: Mapping[str, Any], namespace: str) -> bool:
        """Only a pod in API server mode ``home`` gets its home token: ``disabled`` and
        ``remote`` pods (and an unknown value, which runs as disabled) hold no home
        credential on the provider (vkubelet/home_api/pod_access.py)."""
        return resolve_mode(pod, self._twins.local_namespaces.get(namespace)).mode == API_SERVER_HOME

    # --- the pod loop's gate ------------------------------------------------------------------
    def export_pending(self, pod: Mapping[str, Any]) -> list[str]:
        """The token Secret ``pod`` mounts, while the remote cache has none made for it (this
        UID). The pod loop holds the pod's ShadowPod back meanwhile (bounded, as for by-use
        exports: usage.hold_for_exports): the same pod event started the mint here, and a
        remote pod started first waits for its volume, its kubelet recording a FailedMount
        Warning that comes back to the local pod (seen on every offloaded pod on a real node)."""
        meta = _meta(pod)
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        if not namespace or not token_sources(pod):
            return []
        twin, _ = self._twins.pod_twin_for(namespace)
        if twin is None or not self._home_mode(pod, namespace):
            return []
        secret = self.remote.get(f"{twin}/{n.token_secret_name(name)}")
        if secret is not None and (_meta(secret).get("annotations") or {}).get(c.ANNOTATION_ORIGIN_UID) == meta.get("uid"):
            return []
        return [f"token Secret {n.token_secret_name(name)}"]

    # --- reconcile ---------------------------------------------------------------------------
    def reconcile(self, key: str) -> None:
        logger = ObjectLogger(log, {"key": f"pod {key}"})
        namespace, name = split_key(key)
        pod = self.local_pods.get(key)
        twin: str | None = None
        sources: list[TokenSource] = []
        if pod is not None:
            twin, _ = self._twins.pod_twin_for(namespace or "")
            if twin is not None and self._home_mode(pod, namespace or ""):
                sources = token_sources(pod)
        wanted = f"{twin}/{n.token_secret_name(name)}" if sources else None
        for secret in self.remote.by_index(BY_ORIGIN, key):
            if object_key(secret) != wanted:
                meta = secret["metadata"]
                if self.ops.delete(meta["namespace"], meta["name"], meta.get("uid")):
                    logger.info("deleted token Secret %s/%s", meta["namespace"], meta["name"])
        if pod is None or wanted is None or twin is None:
            with self._lock:
                self._scheduled.pop(key, None)
            return
        if is_terminating(pod):
            # The remote pod may still use its token while it stops; the Secret goes
            # with the local pod, which goes only once the remote pod is gone.
            return
        if twin in self.remote.forbidden_namespaces():
            # The provider revoked our access to the twin (403): a token minted now could
            # not be written there, and the cache cannot say what is. The pod loop reports
            # it (TwinNamespaceForbidden); look again later, mint nothing meanwhile.
            raise Requeue(FORBIDDEN_RETRY_SECONDS, f"twin namespace {twin} forbidden")

        now = datetime.now(timezone.utc)
        current = self.remote.get(wanted)
        if current is not None and token_secret_is_current(
            current, pod, sources, now=now, refresh_fraction=self._renew_fraction
        ):
            self._schedule(key, token_refresh_at(current, self._renew_fraction), now)
            return

        answers = {source.key: self._request_token(pod, source, logger) for source in sources}
        tokens = {key: token for key, (token, _) in answers.items()}
        expires = min(expiry for _, expiry in answers.values())
        desired = forge_token_secret(pod, self._forge_context(twin), tokens=tokens, issued=now, expires=expires,
                                     slice_name=self.settings.slice_name)
        self._apply(pod, desired, current, logger)
        self._schedule(key, token_refresh_at(desired, self._renew_fraction), now)

    def _forge_context(self, twin: str) -> f.ForgeContext:
        return f.ForgeContext(local_cluster_id=self._local_id, remote_namespace=twin, reflector=self.resource)

    def _schedule(self, key: str, at: datetime | None, now: datetime) -> None:
        if at is None:
            return
        with self._lock:
            if self._scheduled.get(key) == at:
                return  # pod updates would otherwise pile up timers for the same renewal
            self._scheduled[key] = at
        self.controller.enqueue_after(key, max(1.0, (at - now).total_seconds()))

    def _request_token(self, pod: Mapping[str, Any], source: TokenSource, logger: logging.LoggerAdapter[logging.Logger]) -> tuple[str, datetime]:
        meta = pod["metadata"]
        spec: dict[str, Any] = {
            "expirationSeconds": self._token_seconds,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]},
        }
        if source.audience:
            spec["audiences"] = [source.audience]
        account = service_account_name(pod)
        # The name is the service account's: the token subresource of that object.
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "metadata": {"name": account}, "spec": spec}
        try:
            answer = self._local.create(kinds.SERVICE_ACCOUNTS, body, namespace=meta["namespace"], subresource="token")
        except ApiError as exc:
            if exc.transient or exc.conflict:
                raise
            message = (
                f"cannot get a token of service account {meta['namespace']}/{account} for the offloaded pod: {exc.message}"
            )
            logger.warning(message)
            self._recorder.warning(pod, REASON_REFLECTION_FAILED, message)
            metrics.failed(self.resource, REASON_REFLECTION_FAILED)
            raise Requeue(5.0 if exc.not_found else REFUSED_RETRY_SECONDS, message) from exc
        status = answer.get("status") or {}
        expiry = parse_time_or_none(status.get("expirationTimestamp"))
        if not status.get("token") or expiry is None:
            raise Requeue(REFUSED_RETRY_SECONDS, "the TokenRequest answer carried no token")
        return str(status["token"]), expiry

    def _apply(self, pod: Mapping[str, Any], desired: dict[str, Any], current: Mapping[str, Any] | None, logger: logging.LoggerAdapter[logging.Logger]) -> None:
        meta = desired["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        if current is None:
            # Our cache holds only Secrets with our labels, so a Secret of that name that
            # is not ours may stand there. The first write is an apply WITHOUT force, and
            # no read before it (one request per offloaded pod): it cannot take over a
            # Secret that is not ours, since every field it sets, the Secret's type
            # (REFLECTED_TOKEN_SECRET_TYPE, ours alone, and immutable) first, would be
            # another manager's with another value: a 409 Conflict or a 422, after which
            # the Secret is read and judged. A Secret of ours the cache has not shown yet
            # is simply applied again (same manager, no conflict).
            try:
                self.ops.apply(namespace, desired, creates=True, force=False)
                logger.info("created token Secret %s/%s", namespace, name)
                return
            except ApiError as exc:
                if exc.not_found:
                    raise Requeue(2.0, f"twin namespace {namespace} not found yet") from exc
                if not (exc.conflict or exc.status == 422):
                    raise
            current = self.ops.read(namespace, name)
            if current is not None and not self.owns(current):
                message = (
                    f"the remote Secret {namespace}/{name} was not created by kube-offload and is left alone; "
                    "the pod gets no token"
                )
                logger.warning(message)
                self._recorder.warning(pod, REASON_REFLECTION_CONFLICT, message)
                metrics.failed(self.resource, REASON_REFLECTION_CONFLICT)
                raise Requeue(CONFLICT_RETRY_SECONDS, message)
        try:
            self.ops.apply(namespace, desired, creates=current is None)
        except ApiError as exc:
            if exc.not_found:
                raise Requeue(2.0, f"twin namespace {namespace} not found yet") from exc
            raise
        logger.info("%s token Secret %s/%s", "created" if current is None else "renewed", namespace, name)
