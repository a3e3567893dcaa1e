"""The local copy of a remote Event about an offloaded pod (pure): remote -> local, the one
reflection going that way.
"""

from __future__ import annotations

from typing import Mapping

from kube_offload import constants as c
from kube_offload.reasons import REASON_POD_CREATED
from kube_offload.times import format_time, parse_time_or_none
from kube_offload.views import metadata as _meta
from vkubelet.reflection import names as n


def event_time(event: Mapping, *names: str) -> str | None:
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


# Remote Events (involved kind, type, reason) whose copy would tell the local pod nothing
# it does not say already: PodCreated on a ShadowPod (its first pod was made; today's
# enforcer no longer writes it, an older provider's still does) repeats the vkubelet's
# own Offloaded Event, written when the ShadowPod was
# created. A local Event write per pod for nothing (issue 27). What the provider says
# beyond the routine is copied: recreations, refusals, updates, the remote scheduler's
# and kubelet's Events (Scheduled, Pulled, Created, Started, BackOff...).
ROUTINE_REMOTE_EVENTS = frozenset({(c.SHADOWPOD_KIND, "Normal", REASON_POD_CREATED)})


def says_something_new(remote_event: Mapping) -> bool:
    """Whether a remote Event is worth a local copy (ROUTINE_REMOTE_EVENTS are not)."""
    involved = remote_event.get("involvedObject") or {}
    return (involved.get("kind"), remote_event.get("type") or "Normal", remote_event.get("reason")) not in ROUTINE_REMOTE_EVENTS


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
    first = event_time(remote_event, "firstTimestamp", "eventTime")
    last = event_time(remote_event, "lastTimestamp", "eventTime") or first
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


def event_fingerprint(event: Mapping) -> tuple:
    """What a write of a local copy changes: equal fingerprints, nothing to write."""
    return tuple(event.get(k) for k in ("type", "reason", "message", "count", "lastTimestamp"))
