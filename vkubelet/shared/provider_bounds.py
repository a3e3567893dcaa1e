"""What the consumer takes back from its provider, and how much of it (pure).

A provider runs our pods and tells us about them: the remote pod's status, which the pod
loop mirrors onto the local pod (vkubelet/pods/status.py), and Events, which reflection
copies onto it (vkubelet/reflection/events.py). Whoever administers the provider writes
those, so the consumer bounds them before its own API server, etcd and users see them:
every text has a size, every list a count, and an address must lie where the peering says
the provider's pods live (docs/security.md, "What a provider can do to a consumer").

The bounds follow Kubernetes' own where it has one (pkg/apis/core/validation, the
kubelet), and are written down in docs/virtual-kubelet.md ("Status mapping"):

- an Event's message 1,024 bytes and its reason 128 (events.k8s.io/v1's ``note`` and
  ``reason``; core/v1 Events are checked for them only when they carry an eventTime);
- a container's state messages (waiting and terminated, in ``state`` and ``lastState``)
  4 KiB each and 12 KiB for the pod's containers together, as a kubelet bounds termination
  messages (MaxContainerTerminationMessageLength, and status_manager's normalizeStatus
  dividing MaxPodTerminationMessageLogLength among the pod's containers);
- the pod's message and each condition's message 4 KiB: the Pod API bounds none of them
  (metav1.Condition allows 32 KiB), and no message a kubelet writes comes near a
  container's 4 KiB; every reason (the pod's, a condition's, a container state's) 128
  bytes, the Event reason's bound, since reasons are copied into Events too;
- any other text in a copied status (images, container IDs, a condition's status...):
  1 KiB;
- conditions: the kubelet's own types (:data:`COPIED_CONDITIONS`), each once: the API
  checks only a condition type's form, and a type of the provider's choosing could pose as
  a local readiness gate;
- container statuses: one per container the local pod declares, by name (the API does
  not check that either: validation.go says so), and a container's ``volumeMounts`` no
  more than the container mounts;
- pod IPs: valid addresses, one per family (validatePodIPs), and inside the remote pod
  range the peering configured (``--remote-pod-cidr``): :func:`shown_pod_ips`.
"""

from __future__ import annotations

import copy
import ipaddress
from typing import Any, Iterable, Mapping

from vkubelet.shared.ip_remapping import Remapping

EVENT_MESSAGE_BYTES = 1024
REASON_BYTES = 128
CONTAINER_MESSAGE_BYTES = 4 * 1024
POD_CONTAINER_MESSAGES_BYTES = 12 * 1024
STATUS_MESSAGE_BYTES = 4 * 1024
OTHER_TEXT_BYTES = 1024

# The conditions a kubelet writes on the pods it runs; what the remote pod says of them is
# what the local pod shows. PodScheduled stays the local scheduler's (status.py), and any
# other type the provider sets is not copied.
COPIED_CONDITIONS = frozenset({"PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready"})

# Where a container's state keeps its free texts.
_STATE_FIELDS = ("state", "lastState")


def truncate_utf8(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` bytes of UTF-8, never inside a character."""
    if len(text) * 4 <= limit:
        return text  # at most 4 bytes a character: no need to encode (the common case)
    encoded = text.encode("utf-8", errors="replace")
    if len(encoded) <= limit:
        return text
    return encoded[:limit].decode("utf-8", errors="ignore")


def _bounded(value: Any, limit: int) -> Any:
    """Every string in ``value`` (nested) cut to ``limit`` bytes; a copy."""
    if isinstance(value, str):
        return truncate_utf8(value, limit)
    if isinstance(value, Mapping):
        return {key: _bounded(item, limit) for key, item in value.items()}
    if isinstance(value, list):
        return [_bounded(item, limit) for item in value]
    return copy.deepcopy(value)


def _with_texts(value: Mapping[str, Any], *, message: int) -> dict[str, Any]:
    """``value``'s strings bounded, its ``reason`` to :data:`REASON_BYTES` and its
    ``message`` to ``message`` bytes, the rest to :data:`OTHER_TEXT_BYTES`."""
    bounded: dict[str, Any] = _bounded({k: v for k, v in value.items() if k not in ("reason", "message")}, OTHER_TEXT_BYTES)
    for key, limit in (("reason", REASON_BYTES), ("message", message)):
        if isinstance(value.get(key), str):
            bounded[key] = truncate_utf8(value[key], limit)
    return bounded


def container_message_bytes(containers: int) -> int:
    """The bound of each state message of a pod with ``containers`` containers (init and
    ephemeral ones included): 4 KiB, less when 12 KiB shared among them is less."""
    return min(CONTAINER_MESSAGE_BYTES, POD_CONTAINER_MESSAGES_BYTES // max(1, containers))


def bounded_container_status(status: Mapping[str, Any], message_bytes: int = CONTAINER_MESSAGE_BYTES,
                             mounts: int | None = None) -> dict[str, Any]:
    """One container status with its texts bounded: each state's reason and message,
    every other string; at most ``mounts`` ``volumeMounts`` (None: as many as given)."""
    bounded = _with_texts({k: v for k, v in status.items() if k not in _STATE_FIELDS}, message=OTHER_TEXT_BYTES)
    for field in _STATE_FIELDS:
        state = status.get(field)
        if isinstance(state, Mapping):
            bounded[field] = {
                kind: _with_texts(detail, message=message_bytes) if isinstance(detail, Mapping) else copy.deepcopy(detail)
                for kind, detail in state.items()
            }
    if mounts is not None and isinstance(bounded.get("volumeMounts"), list):
        bounded["volumeMounts"] = bounded["volumeMounts"][:mounts]
    return bounded


def bounded_condition(condition: Mapping[str, Any]) -> dict[str, Any]:
    return _with_texts(condition, message=STATUS_MESSAGE_BYTES)


CONTAINER_STATUS_FIELDS = ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses")


def bounded_status_texts(status: Mapping[str, Any]) -> dict[str, Any]:
    """A remote pod's status with every text bounded (the pod's reason and message, each
    condition's, each container state's at the largest per-container bound) and nothing
    else changed: what the remote pod cache keeps (trim.py). The counts, which need the
    local pod, are :func:`copied_conditions` and :func:`copied_container_statuses`."""
    bounded = _with_texts(
        {k: v for k, v in status.items() if k not in ("conditions", *CONTAINER_STATUS_FIELDS)},
        message=STATUS_MESSAGE_BYTES,
    )
    if isinstance(status.get("conditions"), list):
        bounded["conditions"] = [bounded_condition(c) for c in status["conditions"] if isinstance(c, Mapping)]
    for field in CONTAINER_STATUS_FIELDS:
        if isinstance(status.get(field), list):
            bounded[field] = [bounded_container_status(s) for s in status[field] if isinstance(s, Mapping)]
    return bounded


def copied_conditions(remote: Iterable[Any]) -> list[dict[str, Any]]:
    """The remote pod's conditions the local pod shows: those of :data:`COPIED_CONDITIONS`,
    the first of each type, texts bounded."""
    seen: set[str] = set()
    kept = []
    for condition in remote or ():
        if not isinstance(condition, Mapping):
            continue
        kind = condition.get("type")
        if kind in COPIED_CONDITIONS and kind not in seen:
            seen.add(kind)
            kept.append(bounded_condition(condition))
    return kept


def copied_container_statuses(remote: Iterable[Any], declared: Iterable[Mapping[str, Any]], message_bytes: int) -> list[dict[str, Any]]:
    """The remote statuses of the containers ``declared`` (the local pod's spec list of
    that kind), the first for each name, in the remote's order, texts bounded."""
    mounts = {str(c.get("name")): len(c.get("volumeMounts") or []) for c in declared if isinstance(c, Mapping)}
    kept = []
    for status in remote or ():
        if not isinstance(status, Mapping):
            continue
        name = status.get("name")
        if name in mounts:
            kept.append(bounded_container_status(status, message_bytes, mounts.pop(name)))
    return kept


def shown_pod_ips(reported: Iterable[str], remapping: Remapping) -> tuple[list[str], list[str]]:
    """(what the local pod shows of the addresses the remote pod reports, those it does
    not show because they lie outside the configured remote range). Shown: valid
    addresses, translated into the remapped range, at most one per family (the first).
    With no range configured every valid address is inside."""
    outside = remapping.outside(list(reported))
    shown: list[str] = []
    families: set[int] = set()
    for address in reported:
        if address in outside:
            continue
        try:
            family = ipaddress.ip_address(address).version
        except ValueError:
            continue  # not an address: the local API server would refuse the whole status
        if family not in families:
            families.add(family)
            shown.append(remapping.translate(address))
    return shown, outside
