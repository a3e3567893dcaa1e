"""The home API access as a :data:`vkubelet.shared.loops.LoopFactory`: endpoint discovery and
the uplink pool of this vkubelet's remote cluster (docs/home-api.md)."""

from __future__ import annotations

import threading
from typing import Callable, Sequence

from kube_offload.runtime.kube import Kube
from kube_offload.runtime.manager import Synced
from vkubelet.home_api import HomeAPIEndpoint
from vkubelet.home_api.discovery import Discovery
from vkubelet.home_api.settings import HomeAPISettings
from vkubelet.home_api.uplinks import Uplinks, home_address
from vkubelet.kubeletapi import remote
from vkubelet.shared.loops import LoopContext

STOP_SECONDS = 5.0


class HomeAPILoop:
    """Reads the relay on the provider and keeps the uplinks open. :meth:`endpoint` is
    what the pod translation asks (None: no relay for us, or ``--home-api-uplinks=0``)."""

    name = "home-api-uplinks"

    def __init__(self, context: LoopContext, settings: HomeAPISettings, discovery: Discovery | None = None) -> None:
        self.settings = settings
        remote_client = context.informers.remote_client
        local_client = context.informers.local_client
        # Given when something built before the loops (the pod translation) reads it too.
        self.discovery = discovery or Discovery(Kube(remote_client), context.settings.tenant_namespace)
        # The home API server: where our own local kube configuration points, nothing else.
        self.uplinks = Uplinks(settings, self.discovery, remote.endpoint_from(remote_client.configuration),
                               home_address(local_client.configuration.host))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def endpoint(self) -> HomeAPIEndpoint | None:
        return self.discovery.endpoint() if self.settings.uplinks > 0 else None

    def informers(self) -> Sequence[Synced]:
        return ()

    def start(self) -> None:
        if self.settings.uplinks == 0:
            return
        self._thread = threading.Thread(target=self.uplinks.run, args=(self._stop,), name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(STOP_SECONDS)

    def resync_all(self) -> None:
        pass  # the loop reads the relay again every refresh period anyway


def home_api_loop(settings: HomeAPISettings, discovery: Discovery | None = None) -> Callable[[LoopContext], HomeAPILoop]:
    """The factory; ``discovery`` (built by the caller with the remote client and the tenant
    namespace) lets the pod translation share it: see :func:`endpoint_source`."""

    def factory(context: LoopContext) -> HomeAPILoop:
        return HomeAPILoop(context, settings, discovery)

    return factory


def endpoint_source(settings: HomeAPISettings, discovery: Discovery) -> Callable[[], HomeAPIEndpoint | None]:
    """What the pod translation asks: the relay's endpoint, None with ``--home-api-uplinks=0``
    (no uplink would carry the pods' connections)."""
    if settings.uplinks == 0:
        return lambda: None
    return discovery.endpoint
