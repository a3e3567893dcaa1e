"""The virtual nodes of one peering, and the local pods bound to any of them (docs/slices.md).

A peering is one virtual node, plus one per slice, each served by its own process. What a
namespace holds (ConfigMaps, Secrets, claims...) is reflected by the peering's own process
only, so that process must see the pods of its slices' nodes too: the objects they use
(by-use reflection), the claims selected for their nodes (the virtual storage class). It
finds its slices' nodes among the local Nodes: those labelled with its cluster id and a
slice, and named as the contract names a slice's node (``slice_node_name``), so a node
labelled by hand under another name is not taken for one.

:func:`slice_node_names` is the rule (pure); :class:`PeeringPods` is the local pods bound to
the peering's nodes: the process's own node's informer (the pod loop's) beside one
field-selected list+watch per slice node, started and stopped as slice nodes come and go
(a node that goes delivers its pods as deletions, so what only they used is withdrawn).
"""

from __future__ import annotations

import builtins
import functools
import logging
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from kube_offload import constants as c
from kube_offload.runtime.cache import poll_synced
from kube_offload.runtime.indexer import IndexFunc
from kube_offload.runtime.informer import Handler, Informer
from kube_offload.runtime.kinds import NODES, PODS
from kube_offload.runtime.kube import Kube, object_key
from kube_offload.runtime.namespaced_informer import MultiNamespaceInformer
from vkubelet.shared import trim

if TYPE_CHECKING:
    from vkubelet.shared.informers import SharedInformers

log = logging.getLogger("kube_offload.vkubelet.peering")

SLICE_NODES = "local-slice-nodes"
PEERING_PODS = "local-peering-pods"


def slice_node_selector(cluster_id: str) -> str:
    """The label selector of the local virtual nodes of ``cluster_id``'s slices."""
    return f"{c.LABEL_TYPE}={c.TYPE_VIRTUAL_NODE},{c.LABEL_CLUSTER_ID}={cluster_id},{c.LABEL_SLICE}"


def slice_node_names(nodes: Iterable[Mapping[str, Any]], *, base_node: str, cluster_id: str) -> frozenset[str]:
    """The names of the nodes of the peering whose own node is ``base_node`` that stand for
    one of its slices: labelled with ``cluster_id`` and a slice, and named for that slice."""
    names = set()
    for node in nodes:
        meta = node.get("metadata") or {}
        labels = meta.get("labels") or {}
        slice_name = labels.get(c.LABEL_SLICE)
        if not slice_name or labels.get(c.LABEL_CLUSTER_ID) != cluster_id:
            continue
        if meta.get("name") == c.slice_node_name(base_node, str(slice_name)):
            names.add(str(meta["name"]))
    return frozenset(names)


def slice_nodes(informers: "SharedInformers") -> Informer:
    """The local Nodes of this peering's slices (their names and labels only)."""
    list_nodes = Kube(informers.local_client).list_func(NODES)
    selector = slice_node_selector(informers.settings.cluster_id)
    return informers.shared(SLICE_NODES, lambda: Informer(
        name=SLICE_NODES, list_func=list_nodes, list_kwargs={"label_selector": selector},
        resync_seconds=informers.settings.resync_period, transform=trim.trim_to_labels))


class PeeringNodes:
    """Whether a local node is one of this peering's: its own, or one of its slices'."""

    def __init__(self, informers: "SharedInformers") -> None:
        self.own = informers.settings.node_name
        self._cluster_id = informers.settings.cluster_id
        self.nodes = slice_nodes(informers)

    def slices(self) -> frozenset[str]:
        return slice_node_names(self.nodes.list(), base_node=self.own, cluster_id=self._cluster_id)

    def __contains__(self, node: object) -> bool:
        return bool(node) and (node == self.own or node in self.slices())


class PeeringPods:
    """The local pods bound to any node of this peering (see the module docstring), with
    the read interface the by-use reflectors use of a pod informer: handlers, indexes,
    ``has_synced`` (registered in the shared registry, which starts and stops it)."""

    name = PEERING_PODS

    def __init__(self, informers: "SharedInformers") -> None:
        self._own = informers.local_pods()
        self._nodes = PeeringNodes(informers)
        kube = Kube(informers.local_client)

        def list_for_node(node: str) -> Callable[..., Any]:
            return functools.partial(kube.list_func(PODS), field_selector=f"spec.nodeName={node}")

        # Partitioned by node, not by namespace: its handlers, indexes, lists and lifecycle
        # serve here; its get() routes by namespace, which means nothing for these.
        self._slices = MultiNamespaceInformer(
            name=f"{PEERING_PODS}[slices]", list_for_namespace=list_for_node,
            resync_seconds=informers.settings.resync_period, transform=trim.keep_whole,
            sync_gate=self._nodes.nodes.has_synced,
        )
        self._nodes.nodes.add_handler(lambda _event, _old, _new: self._follow_nodes())
        self._follow_nodes()

    def _follow_nodes(self) -> None:
        wanted = self._nodes.slices()
        if set(self._slices.namespaces()) != wanted:
            log.info("the pods of slice nodes %s count for what the peering reflects", ", ".join(sorted(wanted)) or "(none)")
        self._slices.set_namespaces(wanted)

    # --- what the registry and the runner need -------------------------------------------------
    @property
    def last_contact(self) -> float:
        return max(self._own.last_contact, self._slices.last_contact)

    def start(self) -> None:
        # The own node's informer and the nodes' are the registry's; the slices' are ours.
        self._slices.start()

    def stop(self) -> None:
        self._slices.stop()

    def has_synced(self) -> bool:
        return self._own.has_synced() and self._nodes.nodes.has_synced() and self._slices.has_synced()

    def wait_for_sync(self, timeout: float, poll: float = 0.1) -> bool:
        return poll_synced(self.has_synced, timeout, poll)

    # --- what a pod informer offers (kube_offload.runtime.cache.Cache) --------------------------
    def add_handler(self, handler: Handler) -> None:
        self._own.add_handler(handler)
        self._slices.add_handler(handler)

    def get(self, key: str) -> dict[str, Any] | None:
        found = self._own.get(key)
        if found is not None:
            return found
        # The slices' informer is partitioned by node: its get() would look for a namespace.
        return next((pod for pod in self._slices.list() if object_key(pod) == key), None)

    def list(self) -> builtins.list[dict[str, Any]]:
        return [*self._own.list(), *self._slices.list()]

    def keys(self) -> builtins.list[str]:
        return [*self._own.keys(), *self._slices.keys()]

    def apply(self, kind: str, obj: dict[str, Any]) -> None:
        """:meth:`Informer.apply` on the informer of the pod's node, as its watch would."""
        node = str((obj.get("spec") or {}).get("nodeName") or "")
        if node and node != self._nodes.own:
            self._slices.apply(kind, obj, partition=node)
        else:
            self._own.apply(kind, obj)

    def add_indexer(self, name: str, func: IndexFunc) -> None:
        self._own.add_indexer(name, func)
        self._slices.add_indexer(name, func)

    def by_index(self, name: str, value: str) -> builtins.list[dict[str, Any]]:
        return [*self._own.by_index(name, value), *self._slices.by_index(name, value)]

    def index_keys(self, name: str, value: str) -> builtins.list[str]:
        return [*self._own.index_keys(name, value), *self._slices.index_keys(name, value)]

    def index_values(self, name: str) -> builtins.list[str]:
        return sorted({*self._own.index_values(name), *self._slices.index_values(name)})

    def slice_nodes(self) -> builtins.list[str]:
        """The slice nodes whose pods are watched now."""
        return self._slices.namespaces()


def peering_pods(informers: "SharedInformers") -> PeeringPods:
    """The process's one :class:`PeeringPods` (created on first use)."""
    return informers.shared(PEERING_PODS, lambda: PeeringPods(informers))
