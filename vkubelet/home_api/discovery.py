"""Where the consumer's relay is on the provider: its Service (for offloaded pods) and its
Ready pods (for uplinks), in our tenant namespace, read through the remote Kube.

:class:`Discovery` is polled by the uplink loop (vkubelet/home_api/uplinks.py) every
refresh period; :meth:`Discovery.endpoint` is the ``Callable[[], HomeAPIEndpoint | None]``
the pod translation reads: None while the provider runs no relay for us (the chart's
value off, an older provider) or before the first read.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
from dataclasses import dataclass
from typing import Any, Mapping

from kube_offload import constants as c
from kube_offload.runtime import kinds
from kube_offload.runtime.kube import ApiError, Kube
from vkubelet.home_api import HomeAPIEndpoint

log = logging.getLogger("kube_offload.vkubelet.home_api")


# --- pure -------------------------------------------------------------------------------------
def endpoint_from_service(service: Mapping[str, Any] | None) -> HomeAPIEndpoint | None:
    """The relay Service's ClusterIP and port (the one named by HOME_API_SERVICE_PORT, else
    the first); None without a Service, a ClusterIP (headless, ExternalName) or a port."""
    if not service:
        return None
    spec = service.get("spec") or {}
    ip = spec.get("clusterIP") or ""
    try:
        ipaddress.ip_address(ip)
    except ValueError:
        return None  # "", "None" (headless)
    ports = [p for p in spec.get("ports") or [] if isinstance(p.get("port"), int)]
    if not ports:
        return None
    chosen = next((p for p in ports if p["port"] == c.HOME_API_SERVICE_PORT), ports[0])
    return HomeAPIEndpoint(ip=ip, port=int(chosen["port"]))


def _ready(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    if status.get("phase") != "Running" or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return any(cond.get("type") == "Ready" and cond.get("status") == "True" for cond in status.get("conditions") or [])


def ready_relay_pods(pods: Mapping[str, Any]) -> list[str]:
    """Names of the Running, Ready, not terminating relay pods of a pod list, sorted."""
    return sorted(p["metadata"]["name"] for p in pods.get("items") or [] if _ready(p))


@dataclass(frozen=True)
class RelayView:
    """One read of the tenant namespace."""

    endpoint: HomeAPIEndpoint | None
    pods: tuple[str, ...]


# --- I/O --------------------------------------------------------------------------------------
class Discovery:
    """The relay as last read from the provider (see the module doc)."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self._view = RelayView(endpoint=None, pods=())
        self._lock = threading.Lock()
        self._last_problem = ""
        self._read_once = False  # set by the first refresh, answered or not

    def endpoint(self) -> HomeAPIEndpoint | None:
        # The first pod may be translated before the uplink loop's first read: read now
        # rather than tell that pod "no relay" and fix its address for its whole life.
        if not self._read_once:
            self.refresh()
        with self._lock:
            return self._view.endpoint

    def pods(self) -> tuple[str, ...]:
        with self._lock:
            return self._view.pods

    def refresh(self) -> RelayView:
        """Read the Service and the relay pods again; on an error keep the last view (the
        relay does not move because the API server blinked) and log the cause once."""
        self._read_once = True
        try:
            service = self.kube.get_or_none(kinds.SERVICES, c.HOME_API_SERVICE, namespace=self.namespace)
            pods = self.kube.list(kinds.PODS, namespace=self.namespace, label_selector=c.HOME_API_RELAY_SELECTOR)
        except ApiError as exc:
            problem = f"{exc.code} {exc.reason}"
            if exc.code == 403:
                # The provider grants the relay's reads only while it runs a relay for us
                # (remote chart, homeAPIRelay): refused = no relay, not an outage.
                if problem != self._last_problem:
                    self._last_problem = problem
                    log.info("the provider runs no home API relay for us in %s (reading it is forbidden: %s)",
                             self.namespace, exc.message or exc.reason)
                with self._lock:
                    self._view = RelayView(endpoint=None, pods=())
                    return self._view
            if problem != self._last_problem:
                self._last_problem = problem
                log.warning("cannot read the home API relay in %s on the provider: %s (%s); offloaded pods keep "
                            "the last known address", self.namespace, exc.message or exc.reason, exc.code)
            with self._lock:
                return self._view
        self._last_problem = ""
        view = RelayView(endpoint=endpoint_from_service(service), pods=tuple(ready_relay_pods(pods)))
        with self._lock:
            if view != self._view:
                log.info("home API relay in %s: Service %s, ready pods %s", self.namespace,
                         f"{view.endpoint.ip}:{view.endpoint.port}" if view.endpoint else "absent",
                         ", ".join(view.pods) or "none")
            self._view = view
        return view
