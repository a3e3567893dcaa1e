"""Ingresses local -> remote, spec as written: its backends name Services and its TLS
section Secrets of the same namespace, which are reflected under the same names."""

from __future__ import annotations

from typing import Mapping

from kubernetes import client

from vkubelet.reflection import forge as f
from vkubelet.reflection.reflector import Reflector
from vkubelet.reflection.settings import INGRESSES


class IngressReflector(Reflector):
    resource = INGRESSES
    kind = "Ingress"
    api_class = client.NetworkingV1Api
    suffix = "ingress"

    def forge(self, local: Mapping, ctx: f.ForgeContext) -> dict | None:
        return f.forge_ingress(local, ctx)
