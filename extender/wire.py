"""The scheduler extender wire format (k8s.io/kube-scheduler/extender/v1), pure.

The extender types carry no json tags, so their keys are the Go field names
(``Pod``, ``Nodes``, ``NodeNames``, ``FailedNodes``, ``Host``, ``Score`` ...), while the
Pod and Node objects inside use the API's camelCase. kube-scheduler sends::

    nodeCacheCapable: false  {"Pod": {...}, "Nodes": {"metadata": {}, "items": [...]}, "NodeNames": null}
    nodeCacheCapable: true   {"Pod": {...}, "Nodes": null, "NodeNames": ["n1", ...]}

and reads the answer in the same mode: in nodeCacheCapable mode it takes ``NodeNames``,
otherwise ``Nodes.items`` (a NodeNames-only answer to a scheduler that is not
nodeCacheCapable would filter out every node). So the answer mirrors the request.

Malformed input raises :class:`WireError`; the HTTP layer turns it into a 400. The
validation covers every field the core reads, with the type it reads it as, so no
malformed request can reach the core and fail there.

JSON goes through orjson both ways: without nodeCacheCapable the scheduler sends every
candidate Node object for every pod, and parsing and dumping them was almost all of the
filter's cost (docs/performance.md). What that changes on the wire, none of which Go's
encoding/json produces or minds: NaN/Infinity literals, lone surrogate escapes and
nesting deeper than 1,024 levels are refused (400) instead of parsed; integers beyond
64 bits come back as floats; the answer carries non-ASCII characters as UTF-8 rather
than ``\\u`` escapes. Key order, and Node objects passed through, are kept as they came.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import orjson

from kube_offload import resources

from extender.core import FilterResult


class WireError(ValueError):
    """A request body that is not ExtenderArgs as kube-scheduler sends it."""


@dataclass(frozen=True)
class ExtenderArgs:
    pod: dict
    nodes: list[dict] | None
    """``Nodes.items`` when the scheduler sent Node objects (not nodeCacheCapable)."""
    node_names: list[str] | None
    """``NodeNames`` when it sent names only (nodeCacheCapable)."""

    @property
    def node_cache_mode(self) -> bool:
        return self.node_names is not None

    @property
    def candidates(self) -> list[dict] | list[str]:
        if self.node_names is not None:
            return self.node_names
        return self.nodes or []

    @property
    def namespace(self) -> str:
        return self.pod["metadata"]["namespace"]

    @property
    def pod_key(self) -> str:
        metadata = self.pod["metadata"]
        return f"{metadata['namespace']}/{metadata.get('name') or metadata.get('generateName') or '?'}"


def parse_extender_args(body: bytes | str) -> ExtenderArgs:
    """ExtenderArgs from a request body; raises :class:`WireError` saying what is wrong."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:  # also invalid UTF-8 and too deep a nesting
        if "depth limit" in str(exc):  # orjson refuses more than 1,024 levels
            raise WireError("request body is nested too deeply to be ExtenderArgs") from None
        raise WireError(f"request body is not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise WireError(f"ExtenderArgs must be a JSON object, got {_kind(document)}")

    pod = document.get("Pod")
    if not isinstance(pod, dict):
        raise WireError(f"ExtenderArgs.Pod must be a Pod object, got {_kind(pod)}")
    _check_pod(pod)

    raw_nodes = document.get("Nodes")
    raw_names = document.get("NodeNames")
    if raw_nodes is not None and raw_names is not None:
        raise WireError(
            "ExtenderArgs has both Nodes and NodeNames; kube-scheduler sends Nodes "
            "(nodeCacheCapable: false) or NodeNames (nodeCacheCapable: true), never both"
        )
    if raw_names is not None:
        if not isinstance(raw_names, list) or not all(isinstance(n, str) and n for n in raw_names):
            raise WireError("ExtenderArgs.NodeNames must be a list of non-empty node names")
        return ExtenderArgs(pod=pod, nodes=None, node_names=raw_names)
    if raw_nodes is None:
        raise WireError(
            "ExtenderArgs has neither Nodes nor NodeNames (keys are Go field names: "
            '"Pod", "Nodes", "NodeNames")'
        )
    if not isinstance(raw_nodes, dict):
        raise WireError(f"ExtenderArgs.Nodes must be a NodeList object, got {_kind(raw_nodes)}")
    items = raw_nodes.get("items")
    if items is None:
        items = []  # Go's NodeList with no items serialises items as null
    if not isinstance(items, list):
        raise WireError(f"ExtenderArgs.Nodes.items must be a list, got {_kind(items)}")
    for index, node in enumerate(items):
        _check_node(node, index)
    return ExtenderArgs(pod=pod, nodes=items, node_names=None)


def _check_pod(pod: dict) -> None:
    metadata = pod.get("metadata")
    if not isinstance(metadata, dict):
        raise WireError("ExtenderArgs.Pod.metadata must be an object")
    namespace = metadata.get("namespace")
    if not isinstance(namespace, str) or not namespace:
        raise WireError("ExtenderArgs.Pod.metadata.namespace must be a non-empty string")
    for key in ("name", "generateName"):
        if metadata.get(key) is not None and not isinstance(metadata[key], str):
            raise WireError(f"ExtenderArgs.Pod.metadata.{key} must be a string")
    spec = pod.get("spec")
    if spec is not None and not isinstance(spec, dict):
        raise WireError("ExtenderArgs.Pod.spec must be an object")
    try:
        resources.pod_requests(pod)
    except resources.QuantityError as exc:
        raise WireError(f"ExtenderArgs.Pod has invalid resource requests: {exc}") from None


def _check_node(node: Any, index: int) -> None:
    # Runs for every candidate of every pod (5,000 Node objects per call on a large
    # cluster): plain loops, and the error location is only formatted for an error.
    if not isinstance(node, dict):
        raise WireError(f"{_where(index)} must be a Node object, got {_kind(node)}")
    metadata = node.get("metadata")
    if not isinstance(metadata, dict):
        raise WireError(f"{_where(index)}.metadata must be an object")
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        raise WireError(f"{_where(index)}.metadata.name must be a non-empty string")
    for key in ("labels", "annotations"):
        mapping = metadata.get(key)
        if mapping is None:
            continue
        if not isinstance(mapping, dict):
            raise WireError(f"{_where(index)}.metadata.{key} must be an object (node {name})")
        for value in mapping.values():
            if not isinstance(value, str):
                raise WireError(f"{_where(index)}.metadata.{key} values must be strings (node {name})")
    status = node.get("status")
    if status is None:
        return
    if not isinstance(status, dict):
        raise WireError(f"{_where(index)}.status must be an object (node {name})")
    conditions = status.get("conditions")
    if conditions is not None:
        if not isinstance(conditions, list):
            raise WireError(f"{_where(index)}.status.conditions must be a list of objects (node {name})")
        for entry in conditions:
            if not isinstance(entry, dict):
                raise WireError(f"{_where(index)}.status.conditions must be a list of objects (node {name})")
    allocatable = status.get("allocatable")
    if allocatable is not None and not isinstance(allocatable, dict):
        raise WireError(f"{_where(index)}.status.allocatable must be an object (node {name})")


def _where(index: int) -> str:
    return f"ExtenderArgs.Nodes.items[{index}]"


def _kind(value: object) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )


# --- answers -----------------------------------------------------------------------------
def filter_result(args: ExtenderArgs, result: FilterResult) -> dict:
    """ExtenderFilterResult in the request's mode (see the module doc)."""
    if args.node_cache_mode:
        nodes, names = None, list(result.passed)
    else:
        nodes, names = {"metadata": {}, "items": result.passed_nodes}, None
    return {
        "Nodes": nodes,
        "NodeNames": names,
        "FailedNodes": result.failed_nodes,
        "FailedAndUnresolvableNodes": result.unresolvable_nodes,
        "Error": "",
    }


def filter_error(message: str) -> dict:
    """An ExtenderFilterResult that fails the pod's scheduling cycle with ``message``
    (kube-scheduler reports it in the pod's events and retries later)."""
    return {"Nodes": None, "NodeNames": None, "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": message}


def host_priority_list(scores: Iterable[tuple[str, int]]) -> list[dict]:
    return [{"Host": host, "Score": int(score)} for host, score in scores]


def bad_request(message: str) -> dict:
    """Body of a 400 answer (kube-scheduler ignores it; curl users read it)."""
    return {"Error": message}


def dumps(document: Any) -> bytes:
    """Compact JSON of an answer (everything in it came from :func:`parse_extender_args`
    or is built here: str keys, JSON types only)."""
    return orjson.dumps(document)
