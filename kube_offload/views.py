"""Typed, read-only views of the API objects the components read by hand (pure): part of the
contract with :mod:`kube_offload.constants`.

Objects stay the dicts the API server sends (the informers cache them so, and writing goes
back as dicts); what is read again and again gets one reader here instead of
``(obj.get("metadata") or {}).get("name")`` walked in every module. A section that is
absent or null reads as empty, so a view never raises on an object the API server accepted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping


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
def pod_template(shadowpod: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """``spec.pod`` of a ShadowPod: the pod's metadata and PodSpec, as the vkubelet sent them
    (kube_offload/shadowpod.py build_shadowpod); {} when absent or not an object. The one
    reader of the template: every component asks it rather than walk ``spec.pod`` by hand."""
    return _section(spec(shadowpod), "pod")
