"""Who is calling the kubelet API: authentication as a kubelet does it in webhook mode.

A kubelet (``k8s.io/apiserver`` ``authenticatorfactory/delegating.go``, used by
``pkg/kubelet/server``) tries, in order:

1. a **client certificate** verified against ``--client-ca-file``: user = the subject's
   common name, groups = its organizations (``x509.CommonNameUserConversion``). This is
   how the kube-apiserver itself calls (``--kubelet-client-certificate``);
2. a **bearer token** (``Authorization: Bearer ...``, or for a WebSocket the
   ``base64url.bearer.authorization.k8s.io.<token>`` subprotocol) checked with a
   **TokenReview** on the apiserver, answers cached;
3. **anonymous** (``system:anonymous`` in ``system:unauthenticated``) only if allowed;
   otherwise ``401 Unauthorized``.

Every authenticated user also gets the group ``system:authenticated``
(``group.AuthenticatedGroupAdder``). A presented but invalid token is a 401 even when
anonymous requests are allowed, as with the kubelet (the token authenticator's error is
final). Here the certificate is verified during the TLS handshake (Python's ``ssl`` cannot
ask for a certificate without verifying it), so a certificate from another CA ends the
connection before any HTTP answer, where a kubelet would answer 401.

Pure functions at the top; :class:`TokenReviewer` is the thin I/O edge.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from kubernetes import client

from kube_offload.runtime import kinds
from kube_offload.runtime.kube import NO_RETRY, ApiError, Kube
from vkubelet.kubeletapi.decision_cache import CacheTTL, DecisionCache

log = logging.getLogger("kube_offload.vkubelet.kubelet_api")

ANONYMOUS_USER = "system:anonymous"
UNAUTHENTICATED_GROUP = "system:unauthenticated"
AUTHENTICATED_GROUP = "system:authenticated"
# k8s.io/apiserver pkg/authentication/request/websocket/protocol.go
WEBSOCKET_TOKEN_PROTOCOL_PREFIX = "base64url.bearer.authorization.k8s.io."
# Defaults of the kubelet's --authentication-token-webhook-cache-ttl for a valid token;
# an invalid one is remembered for less, so a token fixed a moment ago works soon.
DEFAULT_TOKEN_TTL = CacheTTL(allowed=120.0, denied=30.0)
# A TokenReview is one small request to the local apiserver; a kubectl call waits on it.
REVIEW_TIMEOUT: tuple[float, float] = (5.0, 10.0)


@dataclass(frozen=True)
class UserInfo:
    """The authenticated user, in the shape a SubjectAccessReview takes. Hashable (a
    cache key): ``extra`` is a sorted tuple of (key, values)."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = field(default=())

    def extra_dict(self) -> dict[str, list[str]]:
        return {key: list(values) for key, values in self.extra}


ANONYMOUS = UserInfo(ANONYMOUS_USER, groups=(UNAUTHENTICATED_GROUP,))


class Unauthenticated(Exception):
    """The request carries no usable credentials: answered ``401 Unauthorized``. The
    message is for the vkubelet's log only (the kubelet tells the client nothing more)."""


# --- pure: credentials out of a request -------------------------------------------------------
def user_from_certificate(peercert: Mapping[str, Any] | None) -> UserInfo | None:
    """The user of a client certificate the TLS layer verified (``ssl.getpeercert()``
    form): CN as the name, every O as a group; None without a certificate or a CN."""
    if not peercert:
        return None
    common_name = ""
    organizations: list[str] = []
    for rdn in peercert.get("subject") or ():
        for attribute, value in rdn:
            if attribute == "commonName" and not common_name:
                common_name = value
            elif attribute == "organizationName":
                organizations.append(value)
    if not common_name:
        return None
    return UserInfo(common_name, groups=tuple(organizations))


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header; None when the header is
    absent or another scheme. Unauthenticated for ``Bearer`` with an empty token, as
    ``k8s.io/apiserver`` ``request/bearertoken`` does."""
    value = (authorization or "").strip()
    if not value:
        return None
    parts = value.split(" ", 2)
    if len(parts) < 2 or parts[0].lower() != "bearer":
        return None
    if not parts[1]:
        raise Unauthenticated("empty bearer token")
    return parts[1]


def websocket_protocol_token(protocol_headers: Iterable[str]) -> str | None:
    """A bearer token a WebSocket client (a browser cannot set headers) sent as the
    subprotocol ``base64url.bearer.authorization.k8s.io.<base64url token>``."""
    for header in protocol_headers:
        for protocol in header.split(","):
            protocol = protocol.strip()
            if not protocol.startswith(WEBSOCKET_TOKEN_PROTOCOL_PREFIX):
                continue
            encoded = protocol[len(WEBSOCKET_TOKEN_PROTOCOL_PREFIX):]
            try:
                token = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode("utf-8")
            except (binascii.Error, ValueError):
                raise Unauthenticated("invalid base64url bearer token in the WebSocket protocol") from None
            if not token:
                raise Unauthenticated("empty bearer token in the WebSocket protocol")
            return token
    return None


def with_authenticated_group(user: UserInfo) -> UserInfo:
    if AUTHENTICATED_GROUP in user.groups or UNAUTHENTICATED_GROUP in user.groups:
        return user
    return UserInfo(user.name, user.uid, user.groups + (AUTHENTICATED_GROUP,), user.extra)


def token_review(token: str) -> dict[str, Any]:
    return {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": token},
    }


def user_from_token_review(review: Mapping[str, Any]) -> tuple[UserInfo | None, str]:
    """(the user, "") when the apiserver authenticated the token, else (None, why)."""
    status = review.get("status") or {}
    if not status.get("authenticated"):
        return None, str(status.get("error") or "token not authenticated")
    user = status.get("user") or {}
    name = str(user.get("username") or "")
    if not name:
        return None, "TokenReview authenticated the token but named no user"
    extra = tuple(sorted((str(k), tuple(str(v) for v in (values or ()))) for k, values in (user.get("extra") or {}).items()))
    return UserInfo(name, str(user.get("uid") or ""), tuple(str(g) for g in user.get("groups") or ()), extra), ""


# --- I/O: TokenReview with a cache ------------------------------------------------------------
ReviewCall = Callable[[dict[str, Any]], dict[str, Any]]


def token_review_call(api_client: client.ApiClient) -> ReviewCall:
    """POST a TokenReview to the local apiserver, as the vkubelet's own identity (which
    needs ``create`` on ``authentication.k8s.io/tokenreviews``). One short try: a kubectl
    call waits on it (a failure is its 401)."""
    kube = Kube(api_client, timeout=REVIEW_TIMEOUT, retry=NO_RETRY)
    return lambda body: kube.create(kinds.TOKEN_REVIEWS, body)


class TokenReviewer:
    def __init__(self, review: ReviewCall, ttl: CacheTTL = DEFAULT_TOKEN_TTL, **cache_options: Any) -> None:
        self._review = review
        self.cache: DecisionCache[UserInfo | None] = DecisionCache(ttl, **cache_options)

    def authenticate(self, token: str) -> UserInfo:
        # Keyed by a digest: the cache never holds a usable token.
        key = hashlib.sha256(token.encode("utf-8")).digest()
        hit, cached = self.cache.get(key)
        if hit:
            if cached is None:
                raise Unauthenticated("token refused by the apiserver (cached)")
            return cached
        try:
            review = self._review(token_review(token))
        except ApiError as exc:
            hint = " (the vkubelet's identity needs create on tokenreviews.authentication.k8s.io)" if exc.status == 403 else ""
            raise Unauthenticated(f"TokenReview failed: {exc}{hint}") from None
        user, why = user_from_token_review(review)
        self.cache.put(key, user, positive=user is not None)
        if user is None:
            raise Unauthenticated(f"token refused by the apiserver: {why}")
        return user


# --- the chain -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Credentials:
    """What a request presented, read off the connection and the headers."""

    peercert: Mapping[str, Any] | None = None
    authorization: str | None = None
    websocket_protocols: tuple[str, ...] = ()


class Authenticator:
    """Certificate, then token, then (if allowed) anonymous; see the module docstring."""

    def __init__(self, *, tokens: TokenReviewer | None, anonymous: bool = False) -> None:
        self.tokens = tokens
        self.anonymous = anonymous

    def authenticate(self, credentials: Credentials) -> UserInfo:
        user = user_from_certificate(credentials.peercert)
        if user is not None:
            return with_authenticated_group(user)
        token = bearer_token(credentials.authorization)
        if token is None:
            token = websocket_protocol_token(credentials.websocket_protocols)
        if token is not None:
            if self.tokens is None:
                raise Unauthenticated("bearer tokens are not accepted (no TokenReview configured)")
            return with_authenticated_group(self.tokens.authenticate(token))
        if self.anonymous:
            return ANONYMOUS
        raise Unauthenticated("no client certificate and no bearer token; anonymous requests are refused")
