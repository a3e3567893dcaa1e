"""What the extender reads besides the request: namespace policies and (nodeCacheCapable
mode) Node objects.

In production both come from informers (list+watch) over the local API server; a request
then costs dictionary lookups only. Namespace policies are parsed once per namespace
change, on the informer thread. Tests and benchmarks use :class:`StaticCaches`, which
needs no API server; the HTTP app only sees the :class:`ExtenderCaches` protocol.
"""

from __future__ import annotations

import logging
from typing import Any, Container, Iterable, Protocol

from kube_offload.runtime.informer import DELETED
from kube_offload.nodes import is_virtual_node, node_name
from kube_offload.namespace_policies import NamespacePolicies
from kube_offload.policy import PolicyError, namespace_name
from kube_offload.node_filter import PolicyLookup, evaluate_policy, policy_lookup

log = logging.getLogger("extender.caches")


class ExtenderCaches(Protocol):
    has_node_cache: bool
    """False when the extender runs without a node cache (not nodeCacheCapable)."""

    def node(self, name: str) -> dict[str, Any] | None: ...

    def virtual_node_names(self) -> Container[str] | None:
        """Names of the virtual nodes in the node cache (None without a node cache): lets
        the filter judge a physical node by its name alone."""

    def namespace_policy(self, namespace: str) -> PolicyLookup:
        """The namespace's policy; None when unknown (treated as not offloaded)."""

    def synced(self) -> bool: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


class StaticCaches:
    """Fixed nodes and namespaces (API-shaped dicts) held in memory; always synced."""

    def __init__(self, *, nodes: Iterable[dict[str, Any]] = (), namespaces: Iterable[dict[str, Any]] = (), node_cache: bool = True):
        self.has_node_cache = node_cache
        self._nodes = {node_name(node): node for node in nodes}
        self._virtual = {name for name, node in self._nodes.items() if is_virtual_node(node)}
        self._policies = {namespace_name(ns): evaluate_policy(ns) for ns in namespaces}

    def node(self, name: str) -> dict[str, Any] | None:
        return self._nodes.get(name)

    def virtual_node_names(self) -> Container[str] | None:
        return self._virtual if self.has_node_cache else None

    def namespace_policy(self, namespace: str) -> PolicyLookup:
        return self._policies.get(namespace)

    def synced(self) -> bool:
        return True

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


def _strip_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    # managedFields can be most of a Node's size and the extender never reads them.
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        metadata.pop("managedFields", None)
    return obj


class InformerCaches:
    """Informers over namespaces and, when ``node_cache``, nodes of the local cluster.

    Start them in the process that serves requests: informer threads do not survive a
    fork (see extender/server.py).
    """

    def __init__(self, api_client: Any, *, node_cache: bool, resync_seconds: float = 300.0) -> None:
        # Imported here so that tests with static caches need neither the client nor a cluster.
        from kube_offload.runtime.informer import Informer
        from kube_offload.runtime.kinds import NAMESPACES, NODES
        from kube_offload.runtime.kube import Kube

        kube = Kube(api_client)
        self.has_node_cache = node_cache
        self._namespaces = Informer(
            name="namespaces",
            list_func=kube.list_func(NAMESPACES),
            resync_seconds=resync_seconds,
            transform=_strip_managed_fields,
        )
        self._policies = NamespacePolicies(self._namespaces, on_invalid=_log_invalid)
        self._nodes = (
            Informer(
                name="nodes",
                list_func=kube.list_func(NODES),
                resync_seconds=resync_seconds,
                transform=_strip_managed_fields,
            )
            if node_cache
            else None
        )
        # Kept by the informer's handler: a node's type label decides which checks it gets,
        # and most candidates are physical nodes (see core.filter_nodes).
        self._virtual: set[str] = set()
        if self._nodes is not None:
            self._nodes.add_handler(self._on_node)

    def _on_node(self, event: str, old: dict[str, Any] | None, new: dict[str, Any]) -> None:
        name = node_name(new)
        if event != DELETED and is_virtual_node(new):
            self._virtual.add(name)
        else:
            self._virtual.discard(name)

    def node(self, name: str) -> dict[str, Any] | None:
        return self._nodes.get(name) if self._nodes is not None else None

    def virtual_node_names(self) -> Container[str] | None:
        return self._virtual if self._nodes is not None else None

    def namespace_policy(self, namespace: str) -> PolicyLookup:
        return policy_lookup(namespace, self._policies.get(namespace))

    def synced(self) -> bool:
        return self._namespaces.has_synced() and (self._nodes is None or self._nodes.has_synced())

    def start(self) -> None:
        self._namespaces.start()
        if self._nodes is not None:
            self._nodes.start()

    def stop(self) -> None:
        self._namespaces.stop()
        if self._nodes is not None:
            self._nodes.stop()


def _log_invalid(name: str, error: PolicyError) -> None:
    log.warning("namespace %s: invalid offloading policy, virtual nodes refused: %s", name, error)
