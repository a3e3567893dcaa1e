"""Bound service-account tokens (the TokenRequest API), the consumer's identity on a
provider: what `kube-offload peer` asks for, when the virtual kubelet renews it, and
the kubeconfig that carries it.

Pure: no API call here. The token is a JWT signed by the provider's API server; its
claims are read (never verified: only the API server that signed it can, and does, on
every request) to learn when it was issued and when it expires, so a token carries its
own schedule wherever it is stored.
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Mapping

from kube_offload import constants as c

# The kubelet renews a projected token once 80% of its lifetime has passed; so do we.
DEFAULT_RENEW_FRACTION = 0.8
# 24 hours: long enough to survive a day of virtual kubelet downtime, short enough that
# a leaked copy dies on its own. The API server may shorten it (--service-account-max-token-expiration).
DEFAULT_EXPIRATION_SECONDS = 24 * 3600
# The API server refuses a TokenRequest for less than 10 minutes.
MIN_EXPIRATION_SECONDS = 600


@dataclass(frozen=True)
class Lifetime:
    """When a token was issued and when it expires (seconds since the epoch)."""

    issued: float
    expires: float

    @property
    def seconds(self) -> float:
        return self.expires - self.issued

    def renew_at(self, fraction: float) -> float:
        """The moment to renew: ``fraction`` of the lifetime after issue."""
        return self.issued + fraction * self.seconds

    def expired(self, now: float) -> bool:
        return now >= self.expires


@dataclass(frozen=True)
class Grant:
    """A token as the TokenRequest API returned it."""

    token: str
    lifetime: Lifetime


def fraction_problem(flag: str, value: float) -> str | None:
    """Why ``value`` cannot be a renewal fraction, or None. 0 would renew without end,
    1 or more only once the token is already refused."""
    if not 0 < value < 1:
        return f"{flag}={value} must be between 0 and 1 (exclusive), e.g. {DEFAULT_RENEW_FRACTION}: the share of a token's lifetime after which it is renewed"
    return None


def expiration_problem(flag: str, seconds: float) -> str | None:
    if seconds < MIN_EXPIRATION_SECONDS:
        return f"{flag} must be at least {MIN_EXPIRATION_SECONDS // 60}m: the API server refuses shorter tokens"
    return None


def claims(token: str) -> dict[str, Any] | None:
    """The payload of a JWT, unverified; None if ``token`` is not one (a legacy token
    of an old Secret is a JWT too, without ``exp``)."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        decoded = json.loads(base64.urlsafe_b64decode(payload))
    except (binascii.Error, ValueError):
        return None
    return decoded if isinstance(decoded, dict) else None


def lifetime(token: str) -> Lifetime | None:
    """The token's issue and expiry time from its ``iat``/``exp`` claims; None for a
    token that never expires (a long-lived Secret token) or is no JWT."""
    payload = claims(token) or {}
    issued, expires = payload.get("iat"), payload.get("exp")
    if not isinstance(issued, (int, float)) or not isinstance(expires, (int, float)) or expires <= issued:
        return None
    return Lifetime(float(issued), float(expires))


def fresher(current: str, offered: str) -> bool:
    """Whether ``offered`` should replace ``current``: it expires later. Two copies of
    the credentials (the Secret, and the token a renewal just returned) may lag one
    another; the older must never win back."""
    if offered == current or not offered:
        return False
    old, new = lifetime(current), lifetime(offered)
    if new is None:
        return old is None  # a token without expiry only replaces another such
    return old is None or new.expires > old.expires


def request_body(service_account: str, expiration_seconds: int) -> dict[str, Any]:
    """A TokenRequest for ``service_account``: no audience (the API server's own), bound
    to no object (it lives as long as the ServiceAccount, or until it expires)."""
    return {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "metadata": {"name": service_account},
        "spec": {"expirationSeconds": int(expiration_seconds)},
    }


def grant_from_response(response: Mapping[str, Any], now: float) -> Grant:
    """The token and its real lifetime: the API server may have shortened the requested
    one (status.expirationTimestamp says by how much)."""
    status = response.get("status") or {}
    token = status.get("token")
    if not token:
        raise ValueError("the TokenRequest answer holds no status.token")
    found = lifetime(token)
    if found is not None:
        return Grant(token, found)
    stamp = status.get("expirationTimestamp")
    if not stamp:
        raise ValueError("the TokenRequest answer holds no status.expirationTimestamp")
    expires = datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).astimezone(timezone.utc).timestamp()
    return Grant(token, Lifetime(now, expires))


def rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- the kubeconfig that carries it -----------------------------------------------------------
def kubeconfig_token(kubeconfig: Mapping[str, Any] | None) -> str | None:
    """The token of the current context's user (a consumer kubeconfig has one user)."""
    user = _current_user(kubeconfig or {})
    token = (user or {}).get("token")
    return token if isinstance(token, str) and token else None


def with_token(kubeconfig: Mapping[str, Any], token: str) -> dict[str, Any]:
    """``kubeconfig`` with the current context's user holding ``token`` instead."""
    updated = copy.deepcopy(dict(kubeconfig))
    user = _current_user(updated)
    if user is None:
        raise ValueError("the kubeconfig's current context names no user")
    user["token"] = token
    return updated


def _current_user(kubeconfig: Mapping[str, Any]) -> dict[str, Any] | None:
    contexts = {e.get("name"): e.get("context") or {} for e in kubeconfig.get("contexts") or []}
    name = (contexts.get(kubeconfig.get("current-context")) or {}).get("user")
    for entry in kubeconfig.get("users") or []:
        if entry.get("name") == name:
            user = entry.setdefault("user", {}) if isinstance(entry, dict) else None
            return user if isinstance(user, dict) else None
    return None


def secret_annotations(grant: Grant) -> dict[str, str]:
    """What the kubeconfig Secret says of the token it holds (for people and `kubectl
    get -o yaml`; the programs read the token's own claims)."""
    return {
        c.ANNOTATION_TOKEN_ISSUED_AT: rfc3339(grant.lifetime.issued),
        c.ANNOTATION_TOKEN_EXPIRES_AT: rfc3339(grant.lifetime.expires),
    }
