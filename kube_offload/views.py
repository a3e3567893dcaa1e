"""Typed, read-only views of the API objects the components read by hand (pure): part of the
contract with :mod:`kube_offload.constants`.

Objects stay the dicts the API server sends (the informers cache them so, and writing goes
back as dicts); what is read again and again gets one reader here instead of
``(obj.get("metadata") or {}).get("name")`` walked in every module. A section that is
absent or null reads as empty, so a view never raises on an object the API server accepted.

- any object: :func:`metadata`, :func:`spec`, :func:`status`, and :class:`ObjectMeta`;
- a ShadowPod: :func:`pod_template`, the one reader of ``spec.pod``, and
  :class:`ShadowPodView`;
- a Consumer (the provider's record of a consumer): :class:`ConsumerView`;
- an OffloadSlice: :class:`OffloadSliceView`;
- a Node: :class:`NodeView` (its facts are :mod:`kube_offload.nodes`', which the
  extender's filter calls on thousands of nodes without a view).

A view wraps the object, it copies nothing: it is made per use, and each property reads
the object when asked. What a field's value means (a quantity, a policy, a drain record)
is its domain module's to parse; a view hands the raw value of such a field (``Any``)
and types the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from kube_offload import constants as c
from kube_offload import nodes


def _section(obj: Mapping[str, Any] | None, name: str) -> Mapping[str, Any]:
    value = (obj or {}).get(name)
    return value if isinstance(value, Mapping) else {}


def metadata(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """``obj.metadata``, or {} when ``obj`` or its metadata is absent."""
    return _section(obj, "metadata")


def spec(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """``obj.spec``, or {}."""
    return _section(obj, "spec")


def status(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """``obj.status``, or {}."""
    return _section(obj, "status")


def _strings(value: object) -> Mapping[str, str]:
    if not isinstance(value, Mapping):
        return {}
    return {str(k): str(v) for k, v in value.items()}


@dataclass(frozen=True)
class ObjectMeta:
    """The metadata fields the loops read, with the API's absent values made explicit
    ("" for an absent string, None for an absent number or time)."""

    name: str = ""
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    generation: int | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    finalizers: tuple[str, ...] = ()
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None

    @classmethod
    def of(cls, obj: Mapping[str, Any] | None) -> ObjectMeta:
        meta = metadata(obj)
        generation = meta.get("generation")
        return cls(
            name=str(meta.get("name") or ""),
            namespace=str(meta.get("namespace") or ""),
            uid=str(meta.get("uid") or ""),
            resource_version=str(meta.get("resourceVersion") or ""),
            generation=generation if isinstance(generation, int) and not isinstance(generation, bool) else None,
            labels=_strings(meta.get("labels")),
            annotations=_strings(meta.get("annotations")),
            finalizers=tuple(str(f) for f in meta.get("finalizers") or ()),
            creation_timestamp=meta.get("creationTimestamp") or None,
            deletion_timestamp=meta.get("deletionTimestamp") or None,
        )

    @property
    def key(self) -> str:
        """``namespace/name`` (the work queues' key), or ``name`` for a cluster-scoped object."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    @property
    def deleting(self) -> bool:
        """Whether the object is being deleted (a deletionTimestamp is set)."""
        return self.deletion_timestamp is not None


# --- ShadowPod ------------------------------------------------------------------------------
def pod_template(shadowpod: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """``spec.pod`` of a ShadowPod: the pod's metadata and PodSpec, as the vkubelet sent them
    (kube_offload/shadowpod.py build_shadowpod), the very object (a caller that owns a copy
    may change it); None when the ShadowPod has none (absent, null, or not an object: the
    CRD's schema refuses that, the validation says so). The one reader of the template:
    every component asks it rather than walk ``spec.pod`` by hand."""
    pod = spec(shadowpod).get("pod")
    return pod if isinstance(pod, Mapping) else None



def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class _View:
    """An API object (a dict as the API server sends it), read through typed properties."""

    __slots__ = ("obj",)

    def __init__(self, obj: Mapping[str, Any] | None) -> None:
        self.obj: Mapping[str, Any] = obj or {}

    @property
    def meta(self) -> ObjectMeta:
        return ObjectMeta.of(self.obj)

    @property
    def name(self) -> str:
        return str(metadata(self.obj).get("name") or "")

    @property
    def spec(self) -> Mapping[str, Any]:
        return spec(self.obj)

    @property
    def status(self) -> Mapping[str, Any]:
        return status(self.obj)


class ShadowPodView(_View):
    """A ShadowPod (kube_offload/manifests/shadowpod-crd.yaml): the template of its pod, and
    what the enforcer reports of that pod."""

    __slots__ = ()

    @property
    def template(self) -> Mapping[str, Any] | None:
        return pod_template(self.obj)

    @property
    def template_spec(self) -> Mapping[str, Any]:
        """The template's PodSpec, {} when there is none."""
        return _section(self.template, "spec")

    @property
    def phase(self) -> str:
        return str(self.status.get("phase") or "")

    @property
    def recreations(self) -> int:
        """``status.recreations`` (pods the enforcer made again), 0 when absent or unreadable."""
        try:
            return max(0, int(self.status.get("recreations") or 0))
        except (TypeError, ValueError):
            return 0

    @property
    def run_completed(self) -> bool | None:
        """``status.runCompleted`` as recorded, None when the status says nothing of it."""
        value = self.status.get("runCompleted")
        return value if isinstance(value, bool) else None

    @property
    def deletion_grace_request(self) -> object:
        """The vkubelet's annotation asking for the pod's end with a grace period (raw:
        :func:`kube_offload.shadowpod.deletion_grace` reads it)."""
        return (metadata(self.obj).get("annotations") or {}).get(c.ANNOTATION_DELETION_GRACE)


class ConsumerView(_View):
    """A Consumer (kube_offload/manifests/consumer-crd.yaml): the provider's terms for one
    consumer (spec) and what it counts of it (status). The terms are the provider's to
    write; their parsing is :mod:`kube_offload.consumers`', :mod:`kube_offload.provider_policy`'
    and the vkubelet's ``provider_terms``."""

    __slots__ = ()

    @property
    def quota(self) -> Any:
        """``spec.quota`` (resource -> quantity), raw."""
        return self.spec.get("quota")

    @property
    def cordoned(self) -> bool:
        return bool(self.spec.get("cordoned"))

    @property
    def drain(self) -> Any:
        """``spec.drain``, raw (present at all: the provider is taking the consumer's pods back)."""
        return self.spec.get("drain")

    @property
    def node_labels(self) -> Any:
        """``spec.nodeLabels``: the labels the provider suggests for the virtual node, raw."""
        return self.spec.get("nodeLabels")

    @property
    def pod_security_level(self) -> Any:
        return self.spec.get("podSecurityLevel")

    @property
    def further_offloading(self) -> Any:
        return self.spec.get("furtherOffloading")

    @property
    def service_account(self) -> Mapping[str, Any]:
        """``spec.serviceAccount`` (namespace, name), {} when unset."""
        return _section(self.spec, "serviceAccount")

    @property
    def used(self) -> Any:
        """``status.used``: what the provider counts of the consumer's pods, raw quantities."""
        return self.status.get("used")

    @property
    def capacity(self) -> Any:
        """``status.capacity``: the provider's capacity summary, raw."""
        return self.status.get("capacity")


class OffloadSliceView(_View):
    """An OffloadSlice (kube_offload/manifests/offloadslice-crd.yaml): what a consumer asks
    of one pool (spec), what the provider decided (status)."""

    __slots__ = ()

    @property
    def created(self) -> str:
        return str(metadata(self.obj).get("creationTimestamp") or "")

    @property
    def generation(self) -> int | None:
        return _int_or_none(metadata(self.obj).get("generation"))

    @property
    def pool(self) -> Any:
        """``spec.pool``, raw (a name is required: the decision says so)."""
        return self.spec.get("pool")

    @property
    def resources(self) -> Any:
        """``spec.resources`` (resource -> quantity), raw."""
        return self.spec.get("resources")

    @property
    def phase(self) -> str:
        return str(self.status.get("phase") or "")

    @property
    def accepted(self) -> Any:
        """``status.accepted`` (resource -> quantity), raw."""
        return self.status.get("accepted")

    @property
    def node_labels(self) -> Any:
        return self.status.get("nodeLabels")

    @property
    def reason(self) -> str:
        return str(self.status.get("reason") or "")

    @property
    def message(self) -> str:
        return str(self.status.get("message") or "")

    @property
    def observed_generation(self) -> int | None:
        return _int_or_none(self.status.get("observedGeneration"))

    @property
    def first_decided(self) -> str:
        """``status.firstDecided`` (metav1.MicroTime text), "" when never decided."""
        value = self.status.get("firstDecided")
        return value if isinstance(value, str) else ""


class NodeView(_View):
    """A Node, its facts read by :mod:`kube_offload.nodes` (one place for each)."""

    __slots__ = ()

    @property
    def name(self) -> str:
        return nodes.node_name(self.obj)

    @property
    def labels(self) -> Mapping[str, str]:
        return ObjectMeta.of(self.obj).labels

    @property
    def annotations(self) -> Mapping[str, str]:
        return ObjectMeta.of(self.obj).annotations

    @property
    def virtual(self) -> bool:
        return nodes.is_virtual_node(self.obj)

    @property
    def cluster_id(self) -> str | None:
        return nodes.cluster_id_of(self.obj)

    @property
    def slice(self) -> str | None:
        return nodes.slice_of(self.obj)

    @property
    def ready(self) -> bool:
        return nodes.node_is_ready(self.obj)

    @property
    def taints(self) -> tuple[Mapping[str, Any], ...]:
        return tuple(t for t in self.spec.get("taints") or () if isinstance(t, Mapping))

    @property
    def allocatable(self) -> Any:
        """``status.allocatable`` (resource -> quantity), raw."""
        return self.status.get("allocatable")
