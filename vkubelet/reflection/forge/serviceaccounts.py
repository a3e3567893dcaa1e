"""The remote Secret holding an offloaded pod's service-account tokens (pure): which
tokens the pod mounts, the Secret that carries them, and when it is due for renewal.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from datetime import datetime
from typing import Iterable, Mapping

from kube_offload import constants as c
from kube_offload.times import format_time, parse_time_or_none
from kube_offload.views import metadata as _meta
from vkubelet.reflection import names as n
from vkubelet.reflection.forge import ForgeContext

TOKEN_SECRET_TYPE = c.REFLECTED_TOKEN_SECRET_TYPE


@dataclass(frozen=True)
class TokenSource:
    """One token a pod mounts: the Secret key it is kept under and its audience (None:
    the API server's own, as in the standard service-account volume)."""

    key: str
    audience: str | None


def service_account_name(pod: Mapping) -> str:
    spec = pod.get("spec") or {}
    return str(spec.get("serviceAccountName") or spec.get("serviceAccount") or "default")


def token_sources(pod: Mapping) -> list[TokenSource]:
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
    pod: Mapping,
    ctx: ForgeContext,
    *,
    tokens: Mapping[str, str],
    issued: datetime,
    expires: datetime,
) -> dict:
    """The remote Secret the offloaded pod mounts in place of its projected token:
    ``tokens`` (key -> JWT of the LOCAL API server), and the pod's LOCAL namespace (the
    remote pod's own namespace is the twin's name)."""
    meta = _meta(pod)
    data = {key: _b64(value) for key, value in tokens.items()}
    data[n.NAMESPACE_KEY] = _b64(str(meta.get("namespace") or ""))
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": TOKEN_SECRET_TYPE,
        "metadata": {
            "name": n.token_secret_name(str(meta.get("name") or "")),
            "namespace": ctx.remote_namespace,
            "labels": {c.LABEL_ORIGIN_CLUSTER_ID: ctx.local_cluster_id, n.LABEL_REFLECTOR: ctx.reflector},
            "annotations": {
                c.ANNOTATION_ORIGIN_NAMESPACE: str(meta.get("namespace") or ""),
                c.ANNOTATION_ORIGIN_NAME: str(meta.get("name") or ""),
                c.ANNOTATION_ORIGIN_UID: str(meta.get("uid") or ""),
                n.ANNOTATION_TOKEN_ISSUED: format_time(issued),
                n.ANNOTATION_TOKEN_EXPIRES: format_time(expires),
            },
        },
        "data": data,
    }


def token_refresh_at(secret: Mapping, refresh_fraction: float) -> datetime | None:
    """When the tokens of ``secret`` are due for renewal (None: unknown, now)."""
    annotations = _meta(secret).get("annotations") or {}
    issued = parse_time_or_none(annotations.get(n.ANNOTATION_TOKEN_ISSUED))
    expires = parse_time_or_none(annotations.get(n.ANNOTATION_TOKEN_EXPIRES))
    if issued is None or expires is None or expires <= issued:
        return None
    return issued + (expires - issued) * refresh_fraction


def token_secret_is_current(
    secret: Mapping, pod: Mapping, sources: Iterable[TokenSource], *, now: datetime, refresh_fraction: float
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
