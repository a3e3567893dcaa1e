"""The gate every kubelet API request passes before anything else, as the kubelet's auth
filter (``pkg/kubelet/server/server.go``, ``InstallAuthFilter``) is installed in front of
every handler: authenticate (``401 Unauthorized``), build the node attributes from the
method and path, authorize (``403 Forbidden (...)``, or ``500 Authorization error (...)``
when the apiserver cannot be asked). Only then is the path routed, so an unknown path
answers 404 only to a caller allowed to ask.

See ``authn`` and ``authz`` for each half; docs/logs-and-exec.md for the behaviour.
"""

from __future__ import annotations

import logging
from urllib.parse import unquote, urlsplit

from vkubelet.kubeletapi.authn import Authenticator, Credentials, Unauthenticated, UserInfo
from vkubelet.kubeletapi.authz import (
    AuthorizationFailed,
    Authorizer,
    error_message,
    forbidden_message,
    request_attributes,
)
from vkubelet.kubeletapi.paths import RequestError

log = logging.getLogger("kube_offload.vkubelet.kubelet_api")

UNAUTHORIZED = "Unauthorized"


class AccessControl:
    def __init__(self, *, authenticator: Authenticator, authorizer: Authorizer, node_name: str) -> None:
        self.authenticator = authenticator
        self.authorizer = authorizer
        self.node_name = node_name

    def admit(self, method: str, raw_path: str, credentials: Credentials) -> UserInfo:
        """The user, once allowed; RequestError(401/403/500) otherwise."""
        path = unquote(urlsplit(raw_path).path)
        try:
            user = self.authenticator.authenticate(credentials)
        except Unauthenticated as exc:
            log.info("kubelet API: %s %s -> 401: %s", method, path, exc)
            raise RequestError(401, UNAUTHORIZED) from None
        attributes = request_attributes(method, path, self.node_name)
        try:
            decision = self.authorizer.authorize(user, attributes)
        except AuthorizationFailed as exc:
            log.error("kubelet API: %s %s: %s", method, path, exc)
            raise RequestError(500, error_message(user, attributes)) from None
        if not decision.allowed:
            message = forbidden_message(user, attributes)
            log.info("kubelet API: %s %s -> 403 %s%s", method, path, message, f": {decision.reason}" if decision.reason else "")
            raise RequestError(403, message)
        log.debug("kubelet API: %s %s allowed for %s (%s)", method, path, user.name, decision.attributes[0].subresource)
        return user
