"""What the virtual kubelet's caches keep of each object (informer transforms; pure).

A vkubelet caches, per offloaded pod: the local pod, its ShadowPod (which embeds the
translated pod), its remote pod, its service-account token Secret and the remote Events
about the pod and the ShadowPod. Kept whole (as the informer stores them, managedFields
aside) that is four copies of the pod; at 5,000 pods per vkubelet it decides the process's
memory (docs/performance.md, "vkubelet memory"). Each transform here keeps exactly the
fields its readers use, plus what the informer itself needs (name, namespace and
resourceVersion); docs/virtual-kubelet.md lists them for each cache, and
tests/unit/vkubelet/shared/test_trim.py runs every reader over trimmed objects. A field a new reader
needs must be added here, or the reader sees it missing.

The local pods are not trimmed: the translation reads nearly all of the spec, the status
sync all of the status, and the metadata goes into the ShadowPod. Every transform (that
one included) interns the strings of what it keeps, keys and values: one ``json.loads``
per watch event gives every cached object its own copy of every key ("metadata",
"containerStatuses", ...) and of every value, and most values repeat across thousands of
pods ("True", "Running", the namespace, the image, the labels, the mount paths).
bench/bench_vkubelet_memory.py measures what each step saves, the cost of the interned
strings that are unique (UIDs, timestamps) included.
"""

from __future__ import annotations

from typing import Any, Mapping

from kube_offload import constants as c
from kube_offload.views import pod_template
from kube_offload.runtime.interning import interned  # the caches share it; the bench swaps it here
from vkubelet.shared import names as reflection_names
from vkubelet.shared.provider_bounds import EVENT_MESSAGE_BYTES, REASON_BYTES, bounded_status_texts, truncate_utf8
from vkubelet.shared.remote_events import says_something_new

# The object identity every cache keeps: the informer keys objects by namespace/name and
# compares resourceVersions on a re-list; uid, creationTimestamp and deletionTimestamp
# are read by the pod loop, the kubelet API's resolver and Event reflection.
_IDENTITY = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp", "deletionTimestamp")
# What says which local pod a remote object stands for (vkubelet/pods/translation.py
# origin_key / origin_uid).
_ORIGIN_ANNOTATIONS = (c.ANNOTATION_ORIGIN_NAMESPACE, c.ANNOTATION_ORIGIN_NAME, c.ANNOTATION_ORIGIN_UID)

# Remote pod status: what vkubelet/pods/status.py desired_status / remote_pod_ips /
# remote_unschedulable read, and so the status fields the local pod takes from the remote
# one (status.MANAGED_FIELDS is this list and the local facts: one list, so the two
# cannot drift). Entries are kept whole, their texts bounded as the local pod will show
# them (provider_bounds.py): a provider's 1 MB message costs no memory here.
REMOTE_POD_STATUS = (
    "phase",
    "conditions",
    "containerStatuses",
    "initContainerStatuses",
    "ephemeralContainerStatuses",
    "podIP",
    "podIPs",
    "startTime",
    "reason",
    "message",
)
# ShadowPod template spec: what kube_offload/pod_updates.py template_patch compares and
# sends. The lists are kept whole: a merge patch replaces a list, so the containers and
# tolerations sent must be the template's own, complete.
SHADOWPOD_TEMPLATE_SPEC = ("containers", "initContainers", "activeDeadlineSeconds", "tolerations",
                           # kubectl debug: what the template has (vkubelet/pods/debugging.py)
                           "ephemeralContainers")
# Event fields vkubelet/reflection/events.py (pod_event_groups and its reflector) reads.
EVENT_FIELDS = (
    "type",
    "reason",
    "count",
    "firstTimestamp",
    "lastTimestamp",
    "eventTime",
    "reportingComponent",
)
EVENT_INVOLVED = ("kind", "namespace", "name", "uid", "fieldPath")



def _pick(source: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(source, Mapping):
        return {}
    return {k: source[k] for k in keys if source.get(k) is not None}


def _metadata(obj: Mapping[str, Any], *, labels: tuple[str, ...] = (), annotations: tuple[str, ...] = ()) -> dict[str, Any]:
    source = obj.get("metadata") or {}
    metadata = _pick(source, _IDENTITY)
    picked_labels = _pick(source.get("labels"), labels)
    if picked_labels:
        metadata["labels"] = picked_labels
    picked_annotations = _pick(source.get("annotations"), annotations)
    if picked_annotations:
        metadata["annotations"] = picked_annotations
    return metadata


def _type_meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    return _pick(obj, ("apiVersion", "kind"))


def keep_whole(obj: dict[str, Any]) -> dict[str, Any]:
    """For the local pods: everything (managedFields are already gone), keys interned."""
    return interned(obj)


def trim_remote_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """The consumer's remote pods (remote-pods), read by the pod loop (vkubelet/pods/:
    origin index, owner check, status sync, termination), the kubelet API's resolver
    (vkubelet/kubeletapi/resolver.py) and Event reflection. Keeps: identity; the origin
    label (is_ours); the origin annotations (origin_key / origin_uid); the owner
    references (the ShadowPod controlling it: name, UID); the status fields copied to the
    local pod (:data:`REMOTE_POD_STATUS`). Drops the spec (nobody reads it: logs and
    exec name the remote pod, the remote apiserver knows its containers), the other
    labels and annotations (the template's, and the enforcer's applied-template record)."""
    trimmed = _type_meta(pod)
    # The ephemeral containers a recreated pod never runs: their local status says so (status.py).
    metadata = _metadata(pod, labels=(c.LABEL_ORIGIN_CLUSTER_ID, c.LABEL_SLICE),
                         annotations=(*_ORIGIN_ANNOTATIONS, c.ANNOTATION_EPHEMERAL_NOT_RUN))
    owners = (pod.get("metadata") or {}).get("ownerReferences")
    if owners:
        metadata["ownerReferences"] = owners
    trimmed["metadata"] = metadata
    trimmed["status"] = bounded_status_texts(_pick(pod.get("status"), REMOTE_POD_STATUS))
    return interned(trimmed)


def trim_shadowpod(shadowpod: dict[str, Any]) -> dict[str, Any]:
    """The consumer's ShadowPods (remote-shadowpods), read by the pod loop (origin index,
    which one is current, deletion, the termination request, the template update, the
    recreations count in restartCount), the resolver and Event reflection. Keeps:
    identity; the origin and slice labels; the origin annotations and the deletion-grace request
    (termination.grace_request_patch); of the template, its labels and annotations
    whole and the fields a running pod may change (:data:`SHADOWPOD_TEMPLATE_SPEC`,
    whole: pod_updates.template_patch); ``status.recreations``. Drops the rest of the
    template (volumes, affinity, security context...: written once at creation, never
    read back) and the rest of the status (the enforcer's conditions and messages)."""
    trimmed = _type_meta(shadowpod)
    trimmed["metadata"] = _metadata(
        shadowpod,
        labels=(c.LABEL_ORIGIN_CLUSTER_ID, c.LABEL_SLICE),
        annotations=(*_ORIGIN_ANNOTATIONS, c.ANNOTATION_DELETION_GRACE),
    )
    template = pod_template(shadowpod)
    if template is not None:
        kept: dict[str, Any] = {"metadata": _pick(template.get("metadata"), ("labels", "annotations"))}
        kept["spec"] = _pick(template.get("spec"), SHADOWPOD_TEMPLATE_SPEC)
        trimmed["spec"] = {"pod": kept}
    status = _pick(shadowpod.get("status"), ("recreations",))
    if status:
        trimmed["status"] = status
    return interned(trimmed)


def trim_event(event: dict[str, Any]) -> dict[str, Any]:
    """Remote Events about Pods and ShadowPods, and about reflected Services, claims and
    Ingresses, in the twin namespaces, read by Event reflection
    (vkubelet/reflection/events.py, object_events.py and their forge/ modules). Keeps:
    identity; the involved object's kind, namespace, name, UID and fieldPath; type,
    reason (up to the 128 bytes a copy takes), count, the timestamps, the series' count and
    last time, the source component and reportingComponent; the message up to the 1,024
    bytes a copy takes.
    An Event never copied (the enforcer's routine PodCreated, one per pod:
    remote_events.ROUTINE_REMOTE_EVENTS) keeps only what says so and what the informer
    needs: name, namespace, resourceVersion, the involved kind, type and reason."""
    if not says_something_new(event):
        stub = _type_meta(event)
        stub["metadata"] = _pick(event.get("metadata"), ("name", "namespace", "resourceVersion"))
        stub["involvedObject"] = _pick(event.get("involvedObject"), ("kind",))
        stub.update(_pick(event, ("type", "reason")))
        return interned(stub)
    trimmed = _type_meta(event)
    trimmed["metadata"] = _metadata(event)
    trimmed["involvedObject"] = _pick(event.get("involvedObject"), EVENT_INVOLVED)
    trimmed.update(_pick(event, EVENT_FIELDS))
    # A copy takes no more of them (provider_bounds.py); keeping more is never read.
    if isinstance(trimmed.get("reason"), str):
        trimmed["reason"] = truncate_utf8(trimmed["reason"], REASON_BYTES)
    message = event.get("message")
    if message is not None:
        trimmed["message"] = truncate_utf8(str(message), EVENT_MESSAGE_BYTES)
    series = _pick(event.get("series"), ("count", "lastObservedTime"))
    if series:
        trimmed["series"] = series
    component = _pick(event.get("source"), ("component",))
    if component:
        trimmed["source"] = component
    return interned(trimmed)


def trim_token_secret(secret: dict[str, Any]) -> dict[str, Any]:
    """The token Secrets of offloaded pods (service-account reflection), read by
    vkubelet/reflection/serviceaccounts.py: token_secret_is_current (origin UID,
    issue and expiry annotations, which data keys exist and the namespace entry) and the
    ownership check before an apply (labels). Keeps the metadata whole, the type,
    and the data keys with only the namespace entry's value: a token's value (a JWT,
    about 1.5 KiB) is written, never read back, and a renewal replaces all of data."""
    trimmed = _type_meta(secret)
    trimmed["metadata"] = dict(secret.get("metadata") or {})
    if secret.get("type") is not None:
        trimmed["type"] = secret["type"]
    data = secret.get("data")
    if isinstance(data, Mapping):
        trimmed["data"] = {k: (v if k == reflection_names.NAMESPACE_KEY else "") for k, v in data.items()}
    return interned(trimmed)


def trim_to_identity(obj: dict[str, Any]) -> dict[str, Any]:
    """Objects of which only the name is read (the remote PriorityClasses: the
    translation keeps a pod's priorityClassName only if one of that name exists)."""
    trimmed = _type_meta(obj)
    trimmed["metadata"] = _metadata(obj)
    return interned(trimmed)


def trim_to_labels(obj: dict[str, Any]) -> dict[str, Any]:
    """Objects of which only the name and labels are read (the local nodes of a peering's
    slices: vkubelet/shared/peering_nodes.py)."""
    trimmed = _type_meta(obj)
    metadata = _metadata(obj)
    labels = (obj.get("metadata") or {}).get("labels")
    if isinstance(labels, Mapping) and labels:
        metadata["labels"] = dict(labels)
    trimmed["metadata"] = metadata
    return interned(trimmed)
