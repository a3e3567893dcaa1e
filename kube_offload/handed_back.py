"""Handed-back workloads: the record a virtual kubelet keeps on its Node of the workloads
whose pods its remote cluster could not run, and which the scheduler extender reads to
keep their next pods off that node for a while (pure; docs/virtual-kubelet.md#handback,
docs/extender.md).

A pod handed back is evicted; its controller (ReplicaSet, StatefulSet, Job...) makes a
new pod with a new UID, so the record is keyed by the *controller's* UID, which every
pod of the workload carries in its controller ownerReference. Kept on the virtual Node
(annotation ``kube-offload.io/handed-back``) because the vkubelet already writes its own
Node and the extender already caches Nodes: no new object kind, no new RBAC for either.

The annotation is compact JSON::

    {"<controller uid>": {"until": "2026-11-27T03:40:00Z", "count": 2, "pod": "<pod uid>",
                          "reason": "RemoteUnschedulable"}, ...}

``count`` grows each time a new pod of the workload is handed back while the record is
remembered, and the time the node is refused doubles with it (:func:`refusal_seconds`),
so a workload the remote keeps failing to run settles at home instead of flapping. A
record is forgotten once it has been expired for :data:`FORGET_AFTER_SECONDS`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any, Mapping

from kube_offload import constants as c
from kube_offload.times import doubling_delay, format_time, parse_time_or_none

# The first handback refuses the node for 10 minutes; each repeat doubles it, up to 6 hours.
REFUSAL_START_SECONDS = 600.0
REFUSAL_CAP_SECONDS = 6 * 3600.0
# A record expired this long is dropped: the next handback of that workload starts over.
FORGET_AFTER_SECONDS = 6 * 3600.0
# Node annotations share 256 KiB with everything else on the Node: the oldest records go
# first past this many (about 150 bytes each).
MAX_RECORDS = 500



@dataclass(frozen=True)
class Record:
    until: datetime
    count: int
    pod: str  # the UID of the pod last handed back (a retried eviction counts once)
    reason: str


def controller_of(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The pod's controller ownerReference (``controller: true``), or None."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller") is True and ref.get("uid"):
            return ref
    return None


def refusal_seconds(count: int, *, start: float = REFUSAL_START_SECONDS, cap: float = REFUSAL_CAP_SECONDS) -> float:
    """How long the node is refused after the ``count``-th handback (1-based) in a row."""
    return doubling_delay(count, start=start, cap=cap)


@lru_cache(maxsize=64)
def _parse(text: str) -> Mapping[str, Record]:
    try:
        raw = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(raw, dict):
        return {}
    records: dict[str, Record] = {}
    for uid, entry in raw.items():
        if not isinstance(entry, dict):
            continue
        until = parse_time_or_none(entry.get("until"))
        count = entry.get("count")
        if until is None or not isinstance(count, int) or isinstance(count, bool) or count < 1:
            continue  # unreadable: as if absent (the extender must never fail on it)
        records[str(uid)] = Record(until, count, str(entry.get("pod") or ""), str(entry.get("reason") or ""))
    return records


def records_of(node: Mapping[str, Any]) -> Mapping[str, Record]:
    """The records on a Node (read-only; memoized by the annotation's text: the extender
    reads the same few virtual nodes for every pod)."""
    annotations = (node.get("metadata") or {}).get("annotations")
    text = annotations.get(c.ANNOTATION_HANDED_BACK) if isinstance(annotations, Mapping) else None
    return _parse(text) if isinstance(text, str) and text else {}


def refused_until(node: Mapping[str, Any], pod: Mapping[str, Any], now: datetime) -> Record | None:
    """The record that keeps ``pod`` off ``node`` now (its workload was handed back by it
    and the refusal has not expired), or None."""
    owner = controller_of(pod)
    if owner is None:
        return None
    record = records_of(node).get(str(owner["uid"]))
    if record is None or record.until <= now:
        return None
    return record


def with_handback(
    records: Mapping[str, Record],
    controller_uid: str,
    pod_uid: str,
    reason: str,
    now: datetime,
) -> dict[str, Record]:
    """``records`` after a handback of pod ``pod_uid`` of workload ``controller_uid``:
    its count one more (not when the same pod is recorded again, e.g. an eviction tried
    again), its refusal from now for :func:`refusal_seconds`; records expired longer than
    :data:`FORGET_AFTER_SECONDS` dropped, and the oldest past :data:`MAX_RECORDS`."""
    forget = timedelta(seconds=FORGET_AFTER_SECONDS)
    kept = {uid: r for uid, r in records.items() if r.until + forget > now}
    previous = kept.get(controller_uid)
    if previous is not None and previous.pod == pod_uid:
        return kept  # this pod is already recorded: its refusal stands as written
    count = previous.count + 1 if previous is not None else 1
    kept[controller_uid] = Record(now + timedelta(seconds=refusal_seconds(count)), count, pod_uid, reason)
    if len(kept) > MAX_RECORDS:
        newest = sorted(kept.items(), key=lambda item: item[1].until, reverse=True)[:MAX_RECORDS]
        kept = dict(newest)
    return kept


def encode(records: Mapping[str, Record]) -> str:
    return json.dumps(
        {
            uid: {"until": format_time(r.until), "count": r.count, "pod": r.pod, "reason": r.reason}
            for uid, r in sorted(records.items())
        },
        separators=(",", ":"),
    )


def node_patch(node: Mapping[str, Any], records: Mapping[str, Record]) -> dict[str, Any] | None:
    """A merge patch writing ``records`` on ``node`` (conditional on the version read, so
    a record written meanwhile by another worker is not lost); None when unchanged."""
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    text: str | None = encode(records) if records else None
    if annotations.get(c.ANNOTATION_HANDED_BACK) == text:
        return None
    return {
        "metadata": {
            "resourceVersion": (node.get("metadata") or {}).get("resourceVersion"),
            "annotations": {c.ANNOTATION_HANDED_BACK: text},
        }
    }
