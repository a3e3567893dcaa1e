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

Decoding is typed (msgspec): without nodeCacheCapable the scheduler sends every candidate
Node object for every pod (23 MB for 5,000 nodes), and building them as Python objects
was most of the filter's cost (docs/performance.md). So each Node is kept twice, cheaply:

- as ``msgspec.Raw``, its bytes exactly as they came, which the answer sends back
  unparsed for the nodes kept;
- as a *view*: a plain dict holding only the fields the extender reads
  (:class:`NodeView`: name, labels, annotations, condition types and statuses,
  allocatable), which is what ``kube_offload.node_filter`` and ``kube_offload.nodes`` get.

The Pod (a few KiB) is decoded whole. A body the typed decoder refuses is walked again,
as plain JSON (orjson), by :func:`_explain`, whose messages name the field and the node;
that happens only for malformed input, which kube-scheduler never sends.

What this changes on the wire, none of which Go's encoding/json produces or minds:
NaN/Infinity literals, lone surrogate escapes, invalid UTF-8 and nesting deeper than
Python's recursion limit (about 1,000 levels less the server's own stack; Pods and Nodes
nest under 20) are refused (400) instead of parsed; kept Node objects come back byte for
byte as sent (Go's escapes, spacing, key order, numbers of any size); the rest of the
answer carries non-ASCII characters as UTF-8 rather than ``\\u`` escapes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Iterable, NotRequired, Optional, TypedDict, cast

import msgspec
import orjson

from kube_offload import resources

from kube_offload.node_filter import FilterResult


class WireError(ValueError):
    """A request body that is not ExtenderArgs as kube-scheduler sends it."""


# --- what the extender reads of a Node -----------------------------------------------------
# Every field kube_offload.node_filter and kube_offload.nodes read, with the type they read it as
# (and nothing else: msgspec skips the rest of each Node without building it). A field
# read anywhere in the extender must be added here, or the core will not see it.
# TypedDicts decode to plain dicts, so the core reads views exactly as full Nodes.
class _Condition(TypedDict, total=False):
    type: Any  # node_is_ready compares both with strings: any JSON value is fine
    status: Any


class _NodeStatus(TypedDict, total=False):
    conditions: Optional[list[_Condition]]  # readiness
    allocatable: Optional[dict[str, Any]]  # prioritize most-free-remote; quantities checked where read


class _NodeMetadata(TypedDict):
    name: Annotated[str, msgspec.Meta(min_length=1)]
    labels: NotRequired[Optional[dict[str, str]]]  # type, cluster id, cluster selector
    annotations: NotRequired[Optional[dict[str, str]]]  # remote capacity


class NodeView(TypedDict):
    """The fields of a Node the extender reads (see above), as a plain dict."""

    metadata: _NodeMetadata
    status: NotRequired[Optional[_NodeStatus]]


class _NodeList(msgspec.Struct):
    items: Optional[list[msgspec.Raw]] = None  # Go writes null for an empty list


class _Args(msgspec.Struct):
    Pod: Optional[dict[str, Any]] = None
    Nodes: Optional[_NodeList] = None
    NodeNames: Optional[list[str]] = None


_ARGS = msgspec.json.Decoder(_Args)
_NODE = msgspec.json.Decoder(NodeView)
_ENCODER = msgspec.json.Encoder()


@dataclass(frozen=True)
class ExtenderArgs:
    pod: dict[str, Any]
    nodes: list[dict[str, Any]] | None
    """Views of ``Nodes.items`` (:class:`NodeView`) when the scheduler sent Node objects
    (not nodeCacheCapable)."""
    node_names: list[str] | None
    """``NodeNames`` when it sent names only (nodeCacheCapable)."""
    raw_nodes: list[msgspec.Raw] | None = None
    """``Nodes.items`` as sent, in the order of ``nodes``: what the answer echoes."""

    @property
    def node_cache_mode(self) -> bool:
        return self.node_names is not None

    @property
    def candidates(self) -> list[dict[str, Any]] | list[str]:
        if self.node_names is not None:
            return self.node_names
        return self.nodes or []

    @property
    def namespace(self) -> str:
        namespace: str = self.pod["metadata"]["namespace"]  # a string: validated on decoding
        return namespace

    @property
    def pod_key(self) -> str:
        metadata = self.pod["metadata"]
        return f"{metadata['namespace']}/{metadata.get('name') or metadata.get('generateName') or '?'}"


class _Refused(Exception):
    """The typed decoder refused the body: :func:`_explain` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def parse_extender_args(body: bytes | str) -> ExtenderArgs:
    """ExtenderArgs from a request body; raises :class:`WireError` saying what is wrong."""
    if isinstance(body, str):
        try:
            body = body.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate in a str
            raise WireError("request body is not JSON: it is not valid UTF-8") from None
    try:
        # msgspec checks the UTF-8 of the strings it decodes, not of those it skips or
        # keeps raw: the whole body is checked (ASCII, the usual case, costs ~1 ms at 23 MB).
        if not body.isascii():
            body.decode("utf-8")
        return _decode(body)
    except RecursionError:
        raise WireError("request body is nested too deeply to be ExtenderArgs") from None
    except msgspec.ValidationError as exc:  # before DecodeError, its base class
        reason = _located(str(exc), "ExtenderArgs")
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        reason = f"request body is not JSON: {exc}"
    except _Refused as exc:
        reason = exc.reason
    # Outside the handler, so the traceback no longer holds what was decoded.
    _explain(body)
    raise WireError(reason)  # the typed decoder refused what the explanation accepts


def _decode(body: bytes) -> ExtenderArgs:
    args = _ARGS.decode(body)
    pod = args.Pod
    if pod is None:
        raise WireError(f"ExtenderArgs.Pod must be a Pod object, got {_kind(pod)}")
    _check_pod(pod)
    _check_mode(args.Nodes is not None, args.NodeNames is not None)
    if args.NodeNames is not None:
        _check_names(args.NodeNames)
        return ExtenderArgs(pod=pod, nodes=None, node_names=args.NodeNames)
    raw_nodes = args.Nodes.items or []  # type: ignore[union-attr]  # _check_mode: Nodes is set
    views: list[dict[str, Any]] = []
    decode = _NODE.decode
    for index, raw in enumerate(raw_nodes):
        try:
            views.append(cast(dict[str, Any], decode(raw)))  # a NodeView is a plain dict
        except msgspec.ValidationError as exc:
            raise _Refused(_located(str(exc), _where(index))) from None
    return ExtenderArgs(pod=pod, nodes=views, node_names=None, raw_nodes=raw_nodes)


def _located(message: str, root: str) -> str:
    """msgspec's ``... - at `$.a.b``` with ``$`` named: ``... - at `ExtenderArgs.a.b```."""
    if "`$" in message:
        return message.replace("`$", f"`{root}", 1)
    return f"{root}: {message}"


# --- checks shared by the typed path and the explanation -------------------------------------
def _check_mode(has_nodes: bool, has_names: bool) -> None:
    if has_nodes and has_names:
        raise WireError(
            "ExtenderArgs has both Nodes and NodeNames; kube-scheduler sends Nodes "
            "(nodeCacheCapable: false) or NodeNames (nodeCacheCapable: true), never both"
        )
    if not has_nodes and not has_names:
        raise WireError(
            "ExtenderArgs has neither Nodes nor NodeNames (keys are Go field names: "
            '"Pod", "Nodes", "NodeNames")'
        )


def _check_names(names: Any) -> None:
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise WireError("ExtenderArgs.NodeNames must be a list of non-empty node names")


def _check_pod(pod: dict[str, Any]) -> None:
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


# --- the explanation of a refused body --------------------------------------------------------
def _explain(body: bytes) -> None:
    """Raise a :class:`WireError` naming what is wrong with ``body``, read as plain JSON:
    the same rules as the typed decoder (:class:`NodeView`), worded for a person, with
    the node's index and name. Returns only if it finds nothing wrong."""
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
    _check_mode(raw_nodes is not None, raw_names is not None)
    if raw_names is not None:
        _check_names(raw_names)
        return
    if not isinstance(raw_nodes, dict):
        raise WireError(f"ExtenderArgs.Nodes must be a NodeList object, got {_kind(raw_nodes)}")
    items = raw_nodes.get("items")
    if items is not None and not isinstance(items, list):
        raise WireError(f"ExtenderArgs.Nodes.items must be a list, got {_kind(items)}")
    for index, node in enumerate(items or ()):
        _check_node(node, index)


def _check_node(node: Any, index: int) -> None:
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
def filter_result(args: ExtenderArgs, result: FilterResult) -> dict[str, Any]:
    """ExtenderFilterResult in the request's mode (see the module doc). In nodes mode the
    kept Node objects are the request's own bytes (``msgspec.Raw``): encode the answer
    with :func:`dumps`."""
    if args.node_cache_mode:
        nodes, names = None, list(result.passed)
    else:
        nodes, names = {"metadata": {}, "items": _raw_of(args, result.passed_nodes)}, None
    return {
        "Nodes": nodes,
        "NodeNames": names,
        "FailedNodes": result.failed_nodes,
        "FailedAndUnresolvableNodes": result.unresolvable_nodes,
        "Error": "",
    }


def _raw_of(args: ExtenderArgs, kept: list[dict[str, Any]]) -> list[Any]:
    """The request's bytes of each kept view (the core keeps the very view objects)."""
    if args.raw_nodes is None:  # built by hand, not parsed: the views are all there is
        return kept
    raw_by_view = {id(view): raw for view, raw in zip(args.nodes or (), args.raw_nodes, strict=True)}
    return [raw_by_view[id(view)] for view in kept]


def filter_error(message: str) -> dict[str, Any]:
    """An ExtenderFilterResult that fails the pod's scheduling cycle with ``message``
    (kube-scheduler reports it in the pod's events and retries later)."""
    return {"Nodes": None, "NodeNames": None, "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": message}


def host_priority_list(scores: Iterable[tuple[str, int]]) -> list[dict[str, Any]]:
    return [{"Host": host, "Score": int(score)} for host, score in scores]


def bad_request(message: str) -> dict[str, Any]:
    """Body of a 400 answer (kube-scheduler ignores it; curl users read it)."""
    return {"Error": message}


def dumps(document: Any) -> bytes:
    """Compact JSON of an answer (str keys, JSON types and ``msgspec.Raw`` only); Raw
    values are written as their bytes, unchanged."""
    return _ENCODER.encode(document)
