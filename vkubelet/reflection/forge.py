"""The remote object reflection wants for a local one, and the checks around it (pure).

Every ``forge_*`` takes the local object as the API serves it (a dict) and a
:class:`ForgeContext`, and returns the desired remote object, or None when this object is
not reflected by design. A local object that must not be reflected because of a conflict
the user can fix raises :class:`Unreflectable` (the reflector turns it into an Event).

What every reflected object gets: the local labels plus the origin label and the
reflector label; the local annotations (minus kubectl's last-applied copy) plus the
origin namespace and name; nothing else of the local metadata (UIDs, owner references,
finalizers and managed fields belong to the local cluster).
"""

from __future__ import annotations

import base64
import copy
import ipaddress
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Iterable, Mapping

from kube_offload import constants as c
from kube_offload.times import format_time, parse_time_or_none
from kube_offload.views import metadata as _meta
from vkubelet.ip_remapping import NO_REMAPPING, Remapping
from vkubelet.reflection import names as n
from vkubelet.reflection.policy import SERVICE_ACCOUNT_TOKEN_TYPE, never_reflected  # noqa: F401  (re-exported)

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
TOKEN_SECRET_TYPE = c.REFLECTED_TOKEN_SECRET_TYPE
# Annotations the PersistentVolume controller and the scheduler write on claims: they
# describe one cluster's binding and provisioning, so they are neither copied from the
# local claim nor taken away from the remote one.
PVC_CONTROLLER_ANNOTATION_PREFIXES = ("pv.kubernetes.io/", "volume.kubernetes.io/", "volume.beta.kubernetes.io/")
# Claim fields that name objects of the local cluster (a volume, a snapshot, a class of
# volume attributes, volumes chosen by label): meaningless remotely.
PVC_LOCAL_FIELDS = ("volumeName", "selector", "dataSource", "dataSourceRef", "volumeAttributesClassName")
_TOP_LEVEL_META = ("apiVersion", "kind", "metadata")


class Unreflectable(Exception):
    """A local object that cannot be reflected as it stands; the message says why."""


@dataclass(frozen=True)
class ForgeContext:
    local_cluster_id: str
    # The twin namespace the object goes to.
    remote_namespace: str
    # The LABEL_REFLECTOR value: the resource type reflecting it.
    reflector: str
    # The virtual node: local endpoints of pods bound to it are the remote pods themselves.
    virtual_node_name: str = ""
    # Local StorageClass -> remote one (see ReflectionSettings.storage_classes).
    storage_classes: Mapping[str, str] = field(default_factory=dict)
    # Local pod addresses -> as the remote cluster reaches them (--local-pod-cidr-remapped).
    endpoint_addresses: Remapping = NO_REMAPPING


# --- metadata -------------------------------------------------------------------------------
def forge_metadata(
    local: Mapping, ctx: ForgeContext, *, name: str | None = None, drop_annotation: Callable[[str], bool] | None = None
) -> dict:
    meta = _meta(local)
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    labels[c.LABEL_ORIGIN_CLUSTER_ID] = ctx.local_cluster_id
    labels[n.LABEL_REFLECTOR] = ctx.reflector
    annotations = {
        str(k): str(v)
        for k, v in (meta.get("annotations") or {}).items()
        if k != LAST_APPLIED and not (drop_annotation and drop_annotation(k))
    }
    annotations[c.ANNOTATION_ORIGIN_NAMESPACE] = str(meta.get("namespace") or "")
    annotations[c.ANNOTATION_ORIGIN_NAME] = str(meta.get("name") or "")
    return {
        "name": name or str(meta.get("name") or ""),
        "namespace": ctx.remote_namespace,
        "labels": labels,
        "annotations": annotations,
    }


def is_owned(remote: Mapping, local_cluster_id: str, reflector: str) -> bool:
    """Written by this cluster's reflector of this type: the only remote objects a
    reflector ever updates or deletes."""
    labels = _meta(remote).get("labels") or {}
    return labels.get(c.LABEL_ORIGIN_CLUSTER_ID) == local_cluster_id and labels.get(n.LABEL_REFLECTOR) == reflector


# --- ConfigMaps and Secrets -------------------------------------------------------------------
def forge_configmap(local: Mapping, ctx: ForgeContext) -> dict | None:
    name = str(_meta(local).get("name") or "")
    if name == n.REFLECTED_ROOT_CA_CONFIGMAP:
        raise Unreflectable(
            f"the name {name} is reserved for the reflected {n.ROOT_CA_CONFIGMAP} (the local cluster's CA): rename it"
        )
    remote_name = n.REFLECTED_ROOT_CA_CONFIGMAP if name == n.ROOT_CA_CONFIGMAP else name
    desired = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": forge_metadata(local, ctx, name=remote_name)}
    _copy_fields(local, desired, ("data", "binaryData", "immutable"))
    return desired


def forge_secret(local: Mapping, ctx: ForgeContext) -> dict | None:
    # The reflector never gets here with one (policy.decide); a second check costs
    # nothing and keeps a credential from leaking through any other caller.
    if never_reflected(local, "Secret") is not None:
        return None
    name = str(_meta(local).get("name") or "")
    if name.startswith(n.TOKEN_SECRET_PREFIX):
        raise Unreflectable(
            f"names starting with {n.TOKEN_SECRET_PREFIX} are reserved for the service-account tokens "
            "of offloaded pods: rename it"
        )
    desired = {"apiVersion": "v1", "kind": "Secret", "metadata": forge_metadata(local, ctx)}
    _copy_fields(local, desired, ("type", "data", "immutable"))
    return desired


# --- Services and EndpointSlices ------------------------------------------------------------------
def without_allocations(spec: Mapping) -> dict:
    """A Service spec without what a cluster allocates for it: cluster IPs and their
    families, node ports, the health-check node port. A headless Service (clusterIP
    None) keeps saying so."""
    spec = copy.deepcopy(dict(spec or {}))
    headless = spec.get("clusterIP") == "None"
    for key in ("clusterIP", "clusterIPs", "ipFamilies", "healthCheckNodePort"):
        spec.pop(key, None)
    if headless:
        spec["clusterIP"] = "None"
        spec["clusterIPs"] = ["None"]
    for port in spec.get("ports") or []:
        port.pop("nodePort", None)
    return spec


def forge_service(local: Mapping, ctx: ForgeContext) -> dict | None:
    """Cluster IPs, node ports and the health-check node port are the local cluster's
    allocations: cleared so the remote cluster allocates its own. The selector is kept:
    remote pods with the same labels (the offloaded ones) back the remote Service."""
    spec = without_allocations(local.get("spec") or {})
    return {"apiVersion": "v1", "kind": "Service", "metadata": forge_metadata(local, ctx), "spec": spec}


def service_remote_view(current: Mapping) -> dict:
    """The remote Service as comparable with a forged one: its allocations left out."""
    return {**current, "spec": without_allocations(current.get("spec") or {})}


def routable_address(address: str) -> bool:
    """An endpoint address that can mean the same host from another cluster: not
    loopback, link-local, unspecified or multicast (those name "this machine" or "this
    link" wherever they are read)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return True  # FQDN endpoints
    return not (ip.is_loopback or ip.is_link_local or ip.is_unspecified or ip.is_multicast)


def forge_endpointslice(local: Mapping, ctx: ForgeContext) -> dict | None:
    """The local endpoints of a Service that remote pods should reach as well.

    Endpoints of pods bound to the virtual node are left out: those pods run in the
    remote cluster, whose own EndpointSlice controller already lists them. What is left
    are the addresses of pods running locally, as the remote cluster reaches them: as
    the local cluster reports them, or translated into ``--local-pod-cidr-remapped``
    when a remapping is configured (an address outside ``--local-pod-cidr`` is kept as
    it is). Node names, zones, hints and pod references are the local cluster's and are
    dropped. A slice with nothing left is not reflected.
    """
    endpoints = []
    for endpoint in local.get("endpoints") or []:
        if ctx.virtual_node_name and endpoint.get("nodeName") == ctx.virtual_node_name:
            continue
        addresses = [
            ctx.endpoint_addresses.translate(str(a)) for a in endpoint.get("addresses") or [] if routable_address(str(a))
        ]
        if not addresses:
            continue
        kept: dict[str, Any] = {"addresses": addresses}
        for key in ("conditions", "hostname"):
            if key in endpoint:
                kept[key] = copy.deepcopy(endpoint[key])
        endpoints.append(kept)
    if not endpoints:
        return None
    metadata = forge_metadata(local, ctx)
    # The remote EndpointSlice controller deletes slices labelled as its own.
    metadata["labels"][n.ENDPOINTSLICE_MANAGED_BY_LABEL] = n.ENDPOINTSLICE_MANAGER
    desired = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": metadata,
        "addressType": local.get("addressType") or "IPv4",
        "endpoints": endpoints,
    }
    _copy_fields(local, desired, ("ports",))
    return desired


def unremapped_endpoint_addresses(local: Mapping, ctx: ForgeContext) -> list[str]:
    """The addresses :func:`forge_endpointslice` reflects as they are although a remapping
    is configured (outside ``--local-pod-cidr``: a host-network pod's node address, a pod
    offloaded to a third cluster); the remote cluster may not reach them."""
    addresses = [
        str(a)
        for endpoint in local.get("endpoints") or []
        if not (ctx.virtual_node_name and endpoint.get("nodeName") == ctx.virtual_node_name)
        for a in endpoint.get("addresses") or []
        if routable_address(str(a))
    ]
    return ctx.endpoint_addresses.outside(addresses)


def service_name_of_slice(slice_: Mapping) -> str | None:
    return (_meta(slice_).get("labels") or {}).get(n.SERVICE_NAME_LABEL)


# --- Ingresses --------------------------------------------------------------------------------
def forge_ingress(local: Mapping, ctx: ForgeContext) -> dict | None:
    desired = {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": forge_metadata(local, ctx)}
    _copy_fields(local, desired, ("spec",))
    return desired


# --- PersistentVolumeClaims -------------------------------------------------------------------------
def is_pvc_controller_annotation(key: str) -> bool:
    return key.startswith(PVC_CONTROLLER_ANNOTATION_PREFIXES)


def map_storage_class(name: str | None, mapping: Mapping[str, str]) -> str | None:
    """The remote StorageClass for local class ``name`` (None: the remote default)."""
    if not name:
        return None
    if name in mapping:
        return mapping[name] or None
    if "*" in mapping:
        return mapping["*"] or None
    return name


def forge_pvc(local: Mapping, ctx: ForgeContext) -> dict | None:
    """The claim as the user wrote it, for the remote cluster to provision its own
    volume: nothing that names a local volume or snapshot, the class mapped."""
    spec = copy.deepcopy(dict(local.get("spec") or {}))
    legacy_class = (_meta(local).get("annotations") or {}).get("volume.beta.kubernetes.io/storage-class")
    storage_class = map_storage_class(spec.get("storageClassName") or legacy_class, ctx.storage_classes)
    for key in (*PVC_LOCAL_FIELDS, "storageClassName"):
        spec.pop(key, None)
    if storage_class:
        spec["storageClassName"] = storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": forge_metadata(local, ctx, drop_annotation=is_pvc_controller_annotation),
        "spec": spec,
    }


def pvc_requests(pvc: Mapping) -> dict:
    return dict(((pvc.get("spec") or {}).get("resources") or {}).get("requests") or {})


# --- comparison and update ----------------------------------------------------------------------------
def _without(mapping: Mapping | None, foreign: Callable[[str], bool] | None) -> dict:
    return {k: v for k, v in (mapping or {}).items() if not (foreign and foreign(k))}


def is_up_to_date(desired: Mapping, current: Mapping, *, foreign_annotation: Callable[[str], bool] | None = None) -> bool:
    """Whether ``current`` (the remote object, as comparable: see the reflectors'
    ``remote_view``) already is ``desired``: labels equal, annotations equal bar those the
    remote side owns, every other top-level field but status equal (absent, null and
    empty alike). Both sides were defaulted by an API server, so equality is exact: a
    field someone added remotely is drift too."""
    dm, cm = _meta(desired), _meta(current)
    if (dm.get("labels") or {}) != (cm.get("labels") or {}):
        return False
    if _without(dm.get("annotations"), foreign_annotation) != _without(cm.get("annotations"), foreign_annotation):
        return False
    keys = (set(desired) | set(current)) - {*_TOP_LEVEL_META, "status"}
    return all((desired.get(key) or None) == (current.get(key) or None) for key in keys)


def update_body(desired: Mapping, current: Mapping, *, foreign_annotation: Callable[[str], bool] | None = None) -> dict:
    """What to PUT to turn ``current`` into ``desired``: desired's fields and labels and
    annotations on current's metadata (resourceVersion for optimistic concurrency,
    finalizers and owner references that remote controllers may have added, and the
    annotations the remote side owns)."""
    body = copy.deepcopy(dict(desired))
    meta = {k: copy.deepcopy(v) for k, v in _meta(current).items() if k != "managedFields"}
    annotations = dict(_meta(desired).get("annotations") or {})
    if foreign_annotation:
        annotations.update({k: v for k, v in (meta.get("annotations") or {}).items() if foreign_annotation(k)})
    meta["labels"] = dict(_meta(desired).get("labels") or {})
    meta["annotations"] = annotations
    body["metadata"] = meta
    return body


def pvc_update_body(desired: Mapping, current: Mapping) -> dict:
    """A claim's spec is immutable but for its requests (expansion): the remote spec is
    kept, the requests and the metadata follow the local claim."""
    body = update_body(desired, current, foreign_annotation=is_pvc_controller_annotation)
    spec = copy.deepcopy(dict(current.get("spec") or {}))
    requests = pvc_requests(desired)
    if requests:
        spec.setdefault("resources", {})["requests"] = requests
    body["spec"] = spec
    return body


def pvc_is_up_to_date(desired: Mapping, current: Mapping) -> bool:
    metadata_only = {"metadata": current.get("metadata")}
    if not is_up_to_date({"metadata": desired.get("metadata")}, metadata_only, foreign_annotation=is_pvc_controller_annotation):
        return False
    return pvc_requests(desired) == pvc_requests(current)


# --- service-account tokens ----------------------------------------------------------------------------
@dataclass(frozen=True)
class TokenSource:
    """One token a pod mounts: the Secret key it is kept under and its audience (None:
    the API server's own, as in the standard service-account volume)."""

    key: str
    audience: str | None


def service_account_name(pod: Mapping) -> str:
    spec = pod.get("spec") or {}
    return str(spec.get("serviceAccountName") or spec.get("serviceAccount") or "default")


def token_sources(pod: Mapping) -> list[TokenSource]:
    """The tokens ``pod`` mounts (projected serviceAccountToken sources), one per audience."""
    found: dict[str, TokenSource] = {}
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        for source in (volume.get("projected") or {}).get("sources") or []:
            token = source.get("serviceAccountToken")
            if isinstance(token, dict):
                audience = token.get("audience") or None
                key = n.token_key(audience)
                found.setdefault(key, TokenSource(key, audience))
    return sorted(found.values(), key=lambda s: s.key)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def forge_token_secret(
    pod: Mapping,
    ctx: ForgeContext,
    *,
    tokens: Mapping[str, str],
    issued: datetime,
    expires: datetime,
) -> dict:
    """The remote Secret the offloaded pod mounts in place of its projected token:
    ``tokens`` (key -> JWT of the LOCAL API server), and the pod's LOCAL namespace (the
    remote pod's own namespace is the twin's name)."""
    meta = _meta(pod)
    data = {key: _b64(value) for key, value in tokens.items()}
    data[n.NAMESPACE_KEY] = _b64(str(meta.get("namespace") or ""))
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": TOKEN_SECRET_TYPE,
        "metadata": {
            "name": n.token_secret_name(str(meta.get("name") or "")),
            "namespace": ctx.remote_namespace,
            "labels": {c.LABEL_ORIGIN_CLUSTER_ID: ctx.local_cluster_id, n.LABEL_REFLECTOR: ctx.reflector},
            "annotations": {
                c.ANNOTATION_ORIGIN_NAMESPACE: str(meta.get("namespace") or ""),
                c.ANNOTATION_ORIGIN_NAME: str(meta.get("name") or ""),
                c.ANNOTATION_ORIGIN_UID: str(meta.get("uid") or ""),
                n.ANNOTATION_TOKEN_ISSUED: format_time(issued),
                n.ANNOTATION_TOKEN_EXPIRES: format_time(expires),
            },
        },
        "data": data,
    }


def token_refresh_at(secret: Mapping, refresh_fraction: float) -> datetime | None:
    """When the tokens of ``secret`` are due for renewal (None: unknown, now)."""
    annotations = _meta(secret).get("annotations") or {}
    issued = parse_time_or_none(annotations.get(n.ANNOTATION_TOKEN_ISSUED))
    expires = parse_time_or_none(annotations.get(n.ANNOTATION_TOKEN_EXPIRES))
    if issued is None or expires is None or expires <= issued:
        return None
    return issued + (expires - issued) * refresh_fraction


def token_secret_is_current(
    secret: Mapping, pod: Mapping, sources: Iterable[TokenSource], *, now: datetime, refresh_fraction: float
) -> bool:
    """Whether ``secret`` serves ``pod`` as it is: made for this pod (UID), holds a token
    for every audience the pod mounts and its namespace, and is not due for renewal."""
    meta, pod_meta = _meta(secret), _meta(pod)
    annotations = meta.get("annotations") or {}
    if annotations.get(c.ANNOTATION_ORIGIN_UID) != pod_meta.get("uid"):
        return False
    data = secret.get("data") or {}
    if data.get(n.NAMESPACE_KEY) != _b64(str(pod_meta.get("namespace") or "")):
        return False
    if set(data) != {s.key for s in sources} | {n.NAMESPACE_KEY}:
        return False
    refresh_at = token_refresh_at(secret, refresh_fraction)
    return refresh_at is not None and now < refresh_at


# --- Events (remote -> local) --------------------------------------------------------------------------
def _event_time(event: Mapping, *names: str) -> str | None:
    """The first of ``names`` the Event has, at second precision (what a core/v1 Event's
    timestamps carry; Events written through events.k8s.io have only eventTime)."""
    for name in names:
        moment = parse_time_or_none(event.get(name))
        if moment is not None:
            return format_time(moment)
    moment = parse_time_or_none((event.get("series") or {}).get("lastObservedTime")) or parse_time_or_none(
        _meta(event).get("creationTimestamp")
    )
    return format_time(moment) if moment is not None else None


def event_count(event: Mapping) -> int:
    return int(event.get("count") or (event.get("series") or {}).get("count") or 1)


def forge_local_event(remote_event: Mapping, local_pod: Mapping, *, host: str, component: str, reporting_controller: str) -> dict:
    """The local copy of a remote Event about the remote pod (or ShadowPod) standing for
    ``local_pod``: same type, reason, message and count, about the local pod; named after
    the remote Event's UID so it is made once."""
    pod_meta = _meta(local_pod)
    involved_remote = remote_event.get("involvedObject") or {}
    involved = {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": pod_meta.get("namespace"),
        "name": pod_meta.get("name"),
        "uid": pod_meta.get("uid"),
    }
    if involved_remote.get("kind") == "Pod" and involved_remote.get("fieldPath"):
        involved["fieldPath"] = involved_remote["fieldPath"]
    source = remote_event.get("source") or {}
    remote_source = source.get("component") or remote_event.get("reportingComponent") or ""
    first = _event_time(remote_event, "firstTimestamp", "eventTime")
    last = _event_time(remote_event, "lastTimestamp", "eventTime") or first
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": n.local_event_name(str(pod_meta.get("name") or ""), str(_meta(remote_event).get("uid") or "")),
            "namespace": pod_meta.get("namespace"),
            "annotations": {n.ANNOTATION_REMOTE_SOURCE: str(remote_source)},
        },
        "involvedObject": {k: v for k, v in involved.items() if v},
        "type": remote_event.get("type") or "Normal",
        "reason": remote_event.get("reason") or "",
        "message": str(remote_event.get("message") or "")[:1024],
        "count": event_count(remote_event),
        "source": {"component": component, "host": host},
        "reportingComponent": reporting_controller,
        "reportingInstance": host,
    }
    if first:
        event["firstTimestamp"] = first
    if last:
        event["lastTimestamp"] = last
    return event


def local_event_is_current(desired: Mapping, current: Mapping) -> bool:
    return all(current.get(k) == desired.get(k) for k in ("type", "reason", "message", "count", "lastTimestamp"))


# --- helpers --------------------------------------------------------------------------------------
def _copy_fields(source: Mapping, target: dict, keys: Iterable[str]) -> None:
    for key in keys:
        if key in source and source[key] is not None:
            target[key] = copy.deepcopy(source[key])
