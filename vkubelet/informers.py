"""The informers of one virtual kubelet, shared by every loop that needs them.

Each kind of object is listed and watched once per process however many loops read it:
a loop asks this registry for ``remote_pods()`` and gets the same cache as every other
loop. Loops added later (resource reflection, the kubelet API) ask for their own kinds
through :meth:`SharedInformers.shared` before the runner starts them all.
"""

from __future__ import annotations

import threading
from typing import Callable

from kubernetes import client

from kube_offload import constants as c
from kube_offload.informer import Informer
from vkubelet.settings import Settings

LOCAL = "local"
REMOTE = "remote"


class SharedInformers:
    def __init__(self, settings: Settings, local: client.ApiClient, remote: client.ApiClient) -> None:
        self.settings = settings
        self.local_client = local
        self.remote_client = remote
        self._informers: dict[str, Informer] = {}
        self._lock = threading.Lock()
        self._started = False

    # --- registry ------------------------------------------------------------------------
    def shared(self, name: str, factory: Callable[[], Informer]) -> Informer:
        """The informer registered as ``name``, created by ``factory`` the first time.
        Names start with ``local-`` or ``remote-`` to say which API server they watch."""
        with self._lock:
            informer = self._informers.get(name)
            if informer is None:
                informer = factory()
                self._informers[name] = informer
                if self._started:
                    informer.start()
            return informer

    def start(self) -> None:
        with self._lock:
            self._started = True
            informers = list(self._informers.values())
        for informer in informers:
            informer.start()

    def stop(self) -> None:
        with self._lock:
            informers = list(self._informers.values())
        for informer in informers:
            informer.stop()

    def wait_for_sync(self, informers: list[Informer], stop: threading.Event, poll: float = 0.2) -> bool:
        """Block until every informer listed once (True) or ``stop`` is set (False)."""
        while not stop.is_set():
            if all(informer.has_synced() for informer in informers):
                return True
            stop.wait(poll)
        return False

    def remote_last_contact(self) -> float:
        """Monotonic time of the last answer any remote informer got (0: never)."""
        with self._lock:
            remote = [inf for name, inf in self._informers.items() if name.startswith(REMOTE)]
        return max((inf.last_contact for inf in remote), default=0.0)

    def _new(self, name: str, list_func: Callable, **list_kwargs) -> Informer:
        return Informer(
            name=name, list_func=list_func, list_kwargs=list_kwargs, resync_seconds=self.settings.resync_period
        )

    # --- the kinds the core loops use ----------------------------------------------------------
    def local_node(self) -> Informer:
        """Our own Node only (to notice it being deleted or edited)."""
        api = client.CoreV1Api(self.local_client)
        selector = f"metadata.name={self.settings.node_name}"
        return self.shared("local-node", lambda: self._new("local-node", api.list_node, field_selector=selector))

    def local_pods(self) -> Informer:
        """Local pods bound to the virtual node, in every namespace."""
        api = client.CoreV1Api(self.local_client)
        selector = f"spec.nodeName={self.settings.node_name}"
        return self.shared(
            "local-pods", lambda: self._new("local-pods", api.list_pod_for_all_namespaces, field_selector=selector)
        )

    def local_namespaces(self) -> Informer:
        api = client.CoreV1Api(self.local_client)
        return self.shared("local-namespaces", lambda: self._new("local-namespaces", api.list_namespace))

    def remote_nodes(self) -> Informer:
        api = client.CoreV1Api(self.remote_client)
        return self.shared("remote-nodes", lambda: self._new("remote-nodes", api.list_node))

    def remote_pods(self) -> Informer:
        """Every remote pod: the capacity computation needs the pods of other tenants
        too; ours are found in the same cache by their origin label."""
        api = client.CoreV1Api(self.remote_client)
        return self.shared("remote-pods", lambda: self._new("remote-pods", api.list_pod_for_all_namespaces))

    def remote_namespaces(self) -> Informer:
        """Remote namespaces that carry our origin label (our twins, nobody else's)."""
        api = client.CoreV1Api(self.remote_client)
        selector = f"{c.LABEL_ORIGIN_CLUSTER_ID}={self.settings.local_cluster_id}"
        return self.shared(
            "remote-namespaces", lambda: self._new("remote-namespaces", api.list_namespace, label_selector=selector)
        )

    def remote_shadowpods(self) -> Informer:
        api = client.CustomObjectsApi(self.remote_client)
        selector = f"{c.LABEL_ORIGIN_CLUSTER_ID}={self.settings.local_cluster_id}"

        def list_shadowpods(**kwargs):
            return api.list_custom_object_for_all_namespaces(
                c.SHADOWPOD_GROUP, c.SHADOWPOD_VERSION, c.SHADOWPOD_PLURAL, **kwargs
            )

        return self.shared(
            "remote-shadowpods", lambda: self._new("remote-shadowpods", list_shadowpods, label_selector=selector)
        )

    def remote_priority_classes(self) -> Informer:
        api = client.SchedulingV1Api(self.remote_client)
        return self.shared(
            "remote-priorityclasses", lambda: self._new("remote-priorityclasses", api.list_priority_class)
        )
