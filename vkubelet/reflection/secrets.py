"""Secrets local -> remote, except the local cluster's own credentials: legacy
service-account token Secrets (type kubernetes.io/service-account-token) stay home.
Names starting with names.TOKEN_SECRET_PREFIX are reserved for the per-pod token Secrets
of serviceaccounts.py."""

from __future__ import annotations

from typing import Mapping

from kube_offload.runtime import kinds
from vkubelet.reflection import forge as f
from vkubelet.reflection.forge.secrets import forge_secret
from vkubelet.reflection.reflector import Reflector
from vkubelet.reflection.settings import SECRETS


class SecretReflector(Reflector):
    resource = SECRETS
    kind = "Secret"
    api_kind = kinds.SECRETS

    def forge(self, local: Mapping, ctx: f.ForgeContext) -> dict | None:
        return forge_secret(local, ctx)
