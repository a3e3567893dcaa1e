"""Services local -> remote, with the remote cluster allocating its own cluster IPs and
node ports (forge.forge_service). On update the remote API server keeps the allocations
of the existing Service for the fields we leave empty."""

from __future__ import annotations

from typing import Mapping

from kubernetes import client

from vkubelet.reflection import forge as f
from vkubelet.reflection.reflector import Reflector
from vkubelet.reflection.settings import SERVICES


class ServiceReflector(Reflector):
    resource = SERVICES
    kind = "Service"
    api_class = client.CoreV1Api
    suffix = "service"

    def forge(self, local: Mapping, ctx: f.ForgeContext) -> dict | None:
        return f.forge_service(local, ctx)

    def remote_view(self, current: Mapping) -> Mapping:
        return f.service_remote_view(current)
