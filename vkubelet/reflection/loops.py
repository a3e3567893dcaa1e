"""The reflection loops the virtual kubelet runs: one factory per enabled resource type
(workers > 0), for :class:`vkubelet.runner.VirtualKubelet`'s ``extra_loops``."""

from __future__ import annotations

from typing import Any, Callable

from vkubelet.reflection import settings as s
from vkubelet.reflection.configmaps import ConfigMapReflector
from vkubelet.reflection.custom_resources import reflector_for
from vkubelet.reflection.endpointslices import EndpointSliceReflector
from vkubelet.reflection.events import EventReflector
from vkubelet.reflection.object_events import KINDS as OBJECT_EVENT_KINDS
from vkubelet.reflection.ingresses import IngressReflector
from vkubelet.reflection.object_events import ObjectEventReflector
from vkubelet.reflection.pvcs import PersistentVolumeClaimReflector
from vkubelet.reflection.secrets import SecretReflector
from vkubelet.reflection.serviceaccounts import ServiceAccountTokenReflector
from vkubelet.reflection.services import ServiceReflector
from vkubelet.reflection.settings import ReflectionSettings

REFLECTORS: dict[str, Callable[..., Any]] = {
    s.CONFIGMAPS: ConfigMapReflector,
    s.SECRETS: SecretReflector,
    s.SERVICES: ServiceReflector,
    s.ENDPOINTSLICES: EndpointSliceReflector,
    s.INGRESSES: IngressReflector,
    s.PERSISTENTVOLUMECLAIMS: PersistentVolumeClaimReflector,
    s.SERVICEACCOUNTS: ServiceAccountTokenReflector,
    s.EVENTS: EventReflector,
}


def reflection_loops(settings: ReflectionSettings) -> list[Callable[..., Any]]:
    """LoopFactory per enabled type; each reads its workers and policy from
    ``context.settings.reflection`` (the same settings)."""
    loops = [REFLECTORS[name] for name in s.RESOURCES if settings.enabled(name)]
    # Events of reflected Services, claims and Ingresses: under the events settings, and
    # only while one of those types is reflected (its copies are what they are about).
    if settings.enabled(s.EVENTS) and any(settings.enabled(name) for name in OBJECT_EVENT_KINDS):
        loops.append(ObjectEventReflector)
    # Each opted-in custom resource kind: its own reflector (custom_resources.py).
    loops += [reflector_for(custom) for custom in settings.custom_resources]
    return loops
