"""``kubectl offload explain``, the provider side of a pod already offloaded (pure): the
chain local pod -> ShadowPod -> remote pod -> remote node with each link's state, the
latest events, and where ``kubectl logs`` of the pod is served. :mod:`kubectl_offload.explain`
puts these sections beside its placement verdicts; :mod:`kubectl_offload.gather` reads the
:class:`RemoteChain` from the provider."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Mapping, Sequence

from kube_offload.nodes import is_virtual_node, node_name
from kube_offload.times import parse_time_or_none
from kube_offload.views import metadata as _meta, spec as _spec, status as _status

EVENTS_SHOWN = 5


@dataclass(frozen=True)
class RemoteChain:
    """The provider side of an offloaded pod."""

    cluster_id: str
    twin_namespace: str
    shadowpod: Mapping[str, Any] | None = None
    remote_pod: Mapping[str, Any] | None = None
    events: Sequence[Mapping[str, Any]] = ()
    error: str = ""


def event_time(event: Mapping[str, Any]) -> str:
    return str(
        event.get("lastTimestamp") or event.get("eventTime") or event.get("firstTimestamp")
        or _meta(event).get("creationTimestamp") or ""
    )


def last_events(events: Sequence[Mapping[str, Any]], now: datetime, limit: int = EVENTS_SHOWN) -> list[dict[str, Any]]:
    """The ``limit`` most recent events, oldest first, as {time, age, type, reason, object,
    message, count} (``age`` in seconds, None when the event has no time)."""
    ordered = sorted(events, key=_event_order)
    shown = []
    for event in ordered[-limit:] if limit else []:
        involved = event.get("involvedObject") or event.get("regarding") or {}
        moment = parse_time_or_none(event_time(event))
        shown.append({
            "time": event_time(event),
            "age": None if moment is None else max(0.0, (now - moment).total_seconds()),
            "type": str(event.get("type") or ""),
            "reason": str(event.get("reason") or ""),
            "object": f"{str(involved.get('kind') or '').lower()}/{involved.get('name') or ''}",
            "message": str(event.get("message") or event.get("note") or "").strip(),
            "count": int(event.get("count") or 1),
        })
    return shown


def _event_order(event: Mapping[str, Any]) -> tuple[datetime, int]:
    """Time to the second (eventTime has microseconds, lastTimestamp only seconds), then
    resourceVersion: among events of one second, the one written last comes last."""
    moment = parse_time_or_none(event_time(event)) or datetime.min.replace(tzinfo=timezone.utc)
    version = str(_meta(event).get("resourceVersion") or "0")
    return moment.replace(microsecond=0), int(version) if version.isdigit() else 0


def phase(obj: Mapping[str, Any] | None) -> str:
    return str(_status(obj).get("phase") or "Unknown")


def chain_section(pod: Mapping[str, Any], chain: RemoteChain | None) -> dict[str, Any] | None:
    """local pod -> ShadowPod -> remote pod -> remote node, each with its state."""
    if chain is None:
        return None
    meta = _meta(pod)
    links: list[dict[str, Any]] = [{
        "kind": "Pod (local)", "name": f"{meta.get('namespace')}/{meta.get('name')}",
        "phase": phase(pod), "detail": f"bound to virtual node {_spec(pod).get('nodeName')}",
    }]
    if chain.error:
        links.append({"kind": "ShadowPod", "name": f"{chain.twin_namespace}/{meta.get('name')}", "phase": "?",
                      "detail": f"provider {chain.cluster_id} not readable: {chain.error}"})
        return {"cluster": chain.cluster_id, "twinNamespace": chain.twin_namespace, "links": links, "complete": False}
    if chain.shadowpod is None:
        links.append({"kind": "ShadowPod", "name": f"{chain.twin_namespace}/{meta.get('name')}", "phase": "missing",
                      "detail": "not created (yet): see the local Events (ProviderRefused says why the provider refused it)"})
        return {"cluster": chain.cluster_id, "twinNamespace": chain.twin_namespace, "links": links, "complete": False}
    shp_status = _status(chain.shadowpod)
    detail = []
    if shp_status.get("recreations"):
        detail.append(f"pod recreated {shp_status.get('recreations')} time(s) by the enforcer")
    if shp_status.get("message"):
        detail.append(str(shp_status.get("message")))
    links.append({"kind": "ShadowPod", "name": f"{_meta(chain.shadowpod).get('namespace')}/{_meta(chain.shadowpod).get('name')}",
                  "phase": str(shp_status.get("phase") or "Pending"), "detail": "; ".join(detail)})
    if chain.remote_pod is None:
        links.append({"kind": "Pod (remote)", "name": f"{chain.twin_namespace}/{shp_status.get('podName') or meta.get('name')}",
                      "phase": "missing", "detail": "the enforcer has not (re)created it yet"})
        return {"cluster": chain.cluster_id, "twinNamespace": chain.twin_namespace, "links": links, "complete": False}
    remote_meta = _meta(chain.remote_pod)
    reason = _status(chain.remote_pod).get("reason")
    links.append({"kind": "Pod (remote)", "name": f"{remote_meta.get('namespace')}/{remote_meta.get('name')}",
                  "phase": phase(chain.remote_pod), "detail": str(reason or "")})
    remote_node = _spec(chain.remote_pod).get("nodeName")
    links.append({"kind": "Node (remote)", "name": str(remote_node or "-"),
                  "phase": "" if remote_node else "unscheduled",
                  "detail": "" if remote_node else "the provider's scheduler has not placed the pod"})
    return {"cluster": chain.cluster_id, "twinNamespace": chain.twin_namespace, "links": links, "complete": bool(remote_node)}


def logs_section(pod: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Where ``kubectl logs`` of an offloaded pod is served: the virtual node's kubelet API."""
    bound_to = _spec(pod).get("nodeName")
    node = next((n for n in nodes if node_name(dict(n)) == bound_to), None)
    if node is None or not is_virtual_node(dict(node)):
        return None
    addresses = {a.get("type"): a.get("address") for a in _status(node).get("addresses") or [] if isinstance(a, Mapping)}
    address = addresses.get("InternalIP") or addresses.get("Hostname") or next(iter(addresses.values()), None)
    port = ((_status(node).get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port")
    containers = [str(ct.get("name")) for ct in _spec(pod).get("containers") or [] if isinstance(ct, Mapping)]
    meta = _meta(pod)
    container = containers[0] if containers else ""
    endpoint = f"https://{address}:{port}/containerLogs/{meta.get('namespace')}/{meta.get('name')}/{container}" if address and port else ""
    command = f"kubectl logs -n {meta.get('namespace')} {meta.get('name')}" + (f" -c {container}" if len(containers) > 1 else "")
    return {"node": str(bound_to), "endpoint": endpoint, "command": command}

