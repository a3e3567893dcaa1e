"""How ``kubectl offload`` prints: tables, colour and progress on a terminal, and plain,
stable text otherwise (pure, apart from :class:`Progress` writing to its stream).

Colour and progress are decided once from the streams and the environment
(:func:`use_colour`, :func:`show_progress`): never when the output is a pipe or a file, so
scripts and CI logs see the same bytes every run; ``NO_COLOR`` (https://no-color.org) and
``TERM=dumb`` turn colour off on a terminal too. ``-o json|yaml`` prints the same facts
as data, key order fixed.
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping, Sequence, TextIO

import yaml

from kube_offload import resources
from kube_offload.resources import QuantityError
from kubectl_offload.status import describe_age

OUTPUT_FORMATS = ("json", "yaml")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_GIB = 1024**3 * resources.MILLI
_MIB = 1024**2 * resources.MILLI


def use_colour(isatty: bool, env: Mapping[str, str]) -> bool:
    return isatty and "NO_COLOR" not in env and env.get("TERM") != "dumb"


def show_progress(isatty: bool, env: Mapping[str, str], output: str | None) -> bool:
    """Progress lines go to stderr, and only to a terminal: a script never sees them."""
    return isatty and env.get("TERM") != "dumb" and output is None


class Style:
    _CODES = {"ok": "32", "bad": "31;1", "warn": "33", "bold": "1", "dim": "2"}

    def __init__(self, colour: bool) -> None:
        self.colour = colour

    def _paint(self, code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.colour and text else text

    def ok(self, text: str) -> str:
        return self._paint(self._CODES["ok"], text)

    def bad(self, text: str) -> str:
        return self._paint(self._CODES["bad"], text)

    def warn(self, text: str) -> str:
        return self._paint(self._CODES["warn"], text)

    def bold(self, text: str) -> str:
        return self._paint(self._CODES["bold"], text)

    def dim(self, text: str) -> str:
        return self._paint(self._CODES["dim"], text)


class Progress:
    """One self-erasing status line on stderr while the clusters are read."""

    def __init__(self, stream: TextIO, enabled: bool) -> None:
        self.stream = stream
        self.enabled = enabled
        self._shown = False

    def __call__(self, message: str) -> None:
        if self.enabled:
            self.stream.write(f"\r\x1b[K{message}...")
            self.stream.flush()
            self._shown = True

    def done(self) -> None:
        if self._shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._shown = False


def dump(document: Any, output: str) -> str:
    if output == "json":
        return json.dumps(document, indent=2) + "\n"
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=False)


def visible_width(text: str) -> int:
    return len(_ANSI.sub("", text))


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "") -> list[str]:
    """kubectl-style columns: upper-case headers, two spaces apart, no trailing blanks."""
    widths = [len(h) for h in headers]
    for row in rows:
        for index, cell in enumerate(row):
            widths[index] = max(widths[index], visible_width(cell))
    lines = []
    for row in [list(headers), *rows]:
        cells = [cell + " " * (widths[i] - visible_width(cell)) for i, cell in enumerate(row)]
        lines.append((indent + "  ".join(cells)).rstrip())
    return lines


def human_quantity(resource: str, quantity: str) -> str:
    """A canonical quantity made short for a table cell: 7200m -> 7.2, 30Gi stays, 31457280Ki -> 30Gi."""
    try:
        milli = resources.parse_quantity(quantity)
    except QuantityError:
        return quantity
    if resources.uses_binary_format(resource):
        if milli >= _GIB:
            return f"{milli / _GIB:.1f}".rstrip("0").rstrip(".") + "Gi"
        return f"{milli / _MIB:.0f}Mi"
    if resource in ("cpu", "requests.cpu", "limits.cpu"):  # quota names format as their resource
        return f"{milli}m" if milli < resources.MILLI else f"{milli / resources.MILLI:.2f}".rstrip("0").rstrip(".")
    return str(milli // resources.MILLI)


# --- explain -------------------------------------------------------------------------------
def render_explain(doc: Mapping[str, Any], style: Style) -> str:
    pod, policy, webhook = doc["pod"], doc["policy"], doc["webhook"]
    lines = []
    if pod["created"]:
        where = f" on node {pod['node']}" if pod["node"] else ""
        lines.append(style.bold(f"Pod {pod['namespace']}/{pod['name']}: {pod['phase']}{where}"))
    else:
        lines.append(style.bold(f"Pod {pod['namespace']}/{pod['name']} (from file, not created)"))
    lines.append(f"Summary: {doc['summary']}")
    if pod.get("schedulerMessage"):
        lines.append(f"Scheduler: {pod['schedulerMessage']}")

    lines += ["", style.bold(f"Namespace policy ({policy['namespace']})"), f"  {policy['detail']}"]
    if policy.get("offloaded"):
        twin = f", twin namespace {policy['twinNamespace']}" if policy.get("twinNamespace") else ""
        lines.append(f"  placement {policy['placement']}, mapping {policy['mapping']}, "
                     f"cluster selector {policy['clusterSelector']}{twin}")

    lines += ["", style.bold("Webhook"), f"  {webhook['detail']}"]
    for warning in webhook["warnings"]:
        lines.append("  " + style.warn(f"warning: {warning}"))
    carries = webhook["carries"]
    lines.append(
        f"  the pod carries: virtual-node toleration {'yes' if carries['virtualNodeToleration'] else 'no'}; "
        f"required node affinity {carries['requiredNodeAffinity']}; schedulerName {carries['schedulerName'] or 'default-scheduler'}"
    )

    lines += ["", style.bold("Nodes")]
    rows = []
    notes = []
    for node in doc["nodes"]:
        fits = "bound" if node["bound"] else "yes" if node["fits"] else "no"
        painted = style.ok(fits) if node["fits"] else style.bad(fits)
        kind = f"slice {node['slice']}" if node.get("slice") else node["kind"]
        rows.append([node["name"], kind, node["clusterId"] or "-", painted, node["check"] or "-", node["reason"] or "-"])
        notes += [f"  {node['name']}: {note}" for note in node["notes"]]
    lines += table(["NODE", "KIND", "CLUSTER", "FITS", "FIRST FAILING CHECK", "REASON"], rows, indent="  ")
    lines += notes

    chain = doc.get("chain")
    if chain:
        lines += ["", style.bold(f"Offloaded to cluster {chain['cluster']} (twin namespace {chain['twinNamespace']})")]
        lines += table(["OBJECT", "NAME", "PHASE", "DETAIL"],
                       [[link["kind"], link["name"], link["phase"] or "-", link["detail"] or ""] for link in chain["links"]],
                       indent="  ")
    for title, events in (("Events (local)", doc["events"]["local"]), ("Events (remote)", doc["events"]["remote"])):
        if not events and title.endswith("(remote)") and not chain:
            continue
        lines += ["", style.bold(title)]
        if not events:
            lines.append("  <none>")
            continue
        lines += table(["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"],
                       [[describe_age(e["age"]), style.warn(e["type"]) if e["type"] == "Warning" else e["type"], e["reason"], e["object"],
                         e["message"] + (f" (x{e['count']})" if e["count"] > 1 else "")] for e in events],
                       indent="  ")
    logs = doc.get("logs")
    if logs:
        served = f" (served by the virtual node's kubelet API: {logs['endpoint']})" if logs["endpoint"] else ""
        lines += ["", style.bold("Logs"), f"  {logs['command']}{served}"]
    return "\n".join(lines) + "\n"


# --- status --------------------------------------------------------------------------------
def _pair(row: Mapping[str, Any], resource: str) -> str:
    advertised = row["advertised"].get(resource)
    free = row["remoteFree"].get(resource)
    left = human_quantity(resource, advertised) if advertised else "-"
    right = human_quantity(resource, free) if free else "-"
    return f"{left}/{right}"


def quota_cell(quota: Mapping[str, Mapping[str, str]], mode: str = "") -> str:
    limited = [(name, q) for name, q in quota.items() if q["limit"]]
    if not limited:
        return "none"
    figures = " ".join(f"{name} {human_quantity(name, q['used'])}/{human_quantity(name, q['limit'])}" for name, q in limited)
    # The mode says what a plain figure bounds (and, for hard, that limits must equal requests).
    return f"{mode}: {figures}" if mode else figures


def counts_cell(counts: Mapping[str, int]) -> str:
    return " ".join(f"{key}={value}" for key, value in counts.items()) or "0"


def twins_cell(twins: Sequence[Mapping[str, Any]] | None) -> str:
    if not twins:
        return "0"
    phases: dict[str, int] = {}
    for twin in twins:
        phases[twin["phase"]] = phases.get(twin["phase"], 0) + 1
    return " ".join(f"{phase}={count}" for phase, count in sorted(phases.items()))


def _slice_amounts(amounts: Mapping[str, str]) -> str:
    return ",".join(f"{name}={human_quantity(name, quantity)}" for name, quantity in amounts.items()) or "-"


def render_status(doc: Mapping[str, Any], style: Style) -> str:
    rows = []
    for row in doc["remotes"]:
        ready = style.ok(row["ready"]) if row["ready"] == "True" else style.bad(row["ready"])
        ping = describe_age(row["lastPingAge"])
        if row["lastPingAge"] is not None and not row["lastPingExact"]:
            ping = f">{ping}"
        api = row["remoteApi"]
        if api == "reachable" and row["remotePingSeconds"] is not None:
            api = f"ok {int(row['remotePingSeconds'] * 1000)}ms"
        api = style.bad(api) if row["remoteApi"] == "unreachable" else api
        health = style.ok(row["health"]) if row["health"] == "healthy" else style.bad(row["health"].upper())
        reflected = "?" if row["reflected"] is None else str(sum(row["reflected"].values()))
        rows.append([
            row["cluster"], row["node"], ready, describe_age(row["heartbeatAge"]), ping, api,
            _pair(row, "cpu"), _pair(row, "memory"), quota_cell(row["quota"], row.get("quotaMode", "")), counts_cell(row["pods"]),
            twins_cell(row["twins"]), reflected, str(row["reflectionErrors"]), health,
        ])
    lines = [f"Local cluster: {doc['localClusterId'] or 'unknown (pass --local-cluster-id)'}"]
    if rows:
        lines += table(["REMOTE", "VIRTUAL NODE", "READY", "HEARTBEAT", "LAST PING", "REMOTE API", "CPU ADV/FREE",
                        "MEMORY ADV/FREE", "QUOTA USED/LIMIT", "PODS", "TWINS", "REFLECTED", "REFL ERRORS", "HEALTH"], rows)
    slice_rows = []
    for row in doc["remotes"]:
        for item in row.get("slices") or []:
            ready = style.ok(item["ready"]) if item["ready"] == "True" else style.bad(item["ready"])
            phase = item["phase"]
            phase = style.ok(phase) if phase == "Accepted" else style.warn(phase) if phase == "PartiallyAccepted" else style.bad(phase)
            slice_rows.append([
                row["cluster"], item["name"], item["node"] or "-", ready, item["pool"] or "-", phase,
                _slice_amounts(item["asked"]), _slice_amounts(item["accepted"]), item["message"] or "-",
            ])
    if slice_rows:
        lines += ["", "Slices:"]
        lines += table(["REMOTE", "SLICE", "VIRTUAL NODE", "READY", "POOL", "PHASE", "ASKED", "ACCEPTED", "MESSAGE"], slice_rows)
    details = []
    for row in doc["remotes"]:
        details += [f"{row['cluster']}: " + style.bad(f"unhealthy: {p}") for p in row["problems"]]
        details += [f"{row['cluster']}: " + style.warn(f"warning: {w}") for w in row["warnings"]]
    if details:
        lines += [""] + details
    lines += [f"note: {note}" for note in doc["notes"]]
    total = len(doc["remotes"])
    bad = sum(1 for row in doc["remotes"] if row["health"] != "healthy")
    if total:
        verdict = f"{total} remote(s): all healthy" if not bad else f"{total} remote(s): {bad} unhealthy"
        lines.append(style.ok(verdict) if not bad else style.bad(verdict))
    return "\n".join(lines) + "\n"
