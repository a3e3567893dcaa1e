"""Which remote Events are worth a local copy (pure): read by the remote Event cache's
transform (trim.py), which keeps no more of a routine Event than its identity, and by the
Event reflector (vkubelet/reflection/events.py), which copies only the others."""

from __future__ import annotations

from typing import Any, Mapping

from kube_offload import constants as c
from kube_offload.reasons import REASON_POD_CREATED


# Remote Events (involved kind, type, reason) whose copy would tell the local pod nothing
# it does not say already: PodCreated on a ShadowPod (its first pod was made; today's
# enforcer no longer writes it, an older provider's still does) repeats the vkubelet's
# own Offloaded Event, written when the ShadowPod was
# created. A local Event write per pod for nothing (issue 27). What the provider says
# beyond the routine is copied: recreations, refusals, updates, the remote scheduler's
# and kubelet's Events (Scheduled, Pulled, Created, Started, BackOff...).
ROUTINE_REMOTE_EVENTS = frozenset({(c.SHADOWPOD_KIND, "Normal", REASON_POD_CREATED)})


def says_something_new(remote_event: Mapping[str, Any]) -> bool:
    """Whether a remote Event is worth a local copy (ROUTINE_REMOTE_EVENTS are not)."""
    involved = remote_event.get("involvedObject") or {}
    return (involved.get("kind"), remote_event.get("type") or "Normal", remote_event.get("reason")) not in ROUTINE_REMOTE_EVENTS
