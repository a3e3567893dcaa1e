"""The API work per pod: requests each kube-apiserver served, counted by the apiserver
itself, between two snapshots, and the CPU seconds of the processes the harness started.

Two sources, each saying what the other cannot:

- ``apiserver_request_total`` (the apiserver's ``/metrics``, read with the admin
  kubeconfig): every request the apiserver served, by verb, resource, subresource and
  dry-run, *whoever sent it*. It has no client label: it cannot say whether a pod's
  status write came from kwok, the vkubelet or the controller-manager.
- our components' ``kube_offload_api_requests_total`` (each one's ``/metrics`` on its
  health port): what each of our processes sent, by cluster (local, remote) and verb; no
  resource, and nothing about the clients that are not ours.
- the **audit log** (when the harness started the apiserver with
  :data:`kube_offload_harness.cluster.AUDIT_POLICY`, ``ClusterSpec.audit``): one line per
  request at ResponseComplete with the authenticated user and the User-Agent, so each
  request is attributed to a client (:func:`client_of`): our components by the
  ServiceAccount the chart gives them, the control plane's and kwok's by their
  User-Agent (in kwokctl's binary runtime they share one admin certificate), the
  benchmark's own kubectl likewise. Costs the apiserver a JSON line per request, so it is
  opt-in where timing matters.

The pure functions (parsing the Prometheus text and the audit lines, diffing, per-pod
tables) are unit-tested in tests/unit/bench/test_apirequests.py; :class:`Meter` is the
thin I/O around them.
"""

from __future__ import annotations

import json
import math
import re
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

REQUEST_METRIC = "apiserver_request_total"
# Our components' own count of the requests they send (kube_offload/runtime/metrics.py
# API_REQUESTS), by cluster ("local"/"remote") and verb, no resource: cheap (no audit
# log), per process, and a check on the audit log's attribution.
COMPONENT_METRIC = "kube_offload_api_requests_total"

# (verb, resource): verb as the API names it (create, get, list, watch, update, patch,
# delete, deletecollection, apply, connect), resource with its subresource
# ("pods/status") and " (dry run)" for dry-run requests, which the apiserver serves but
# does not persist (the enforcer's Pod dry-run on each ShadowPod admission).
RequestKey = tuple[str, str]
# (client, verb, resource), from the audit log.
ClientKey = tuple[str, str, str]

# The apiserver's metric verbs are HTTP-ish (POST, PUT, WATCHLIST); the audit log uses the
# API's verbs. One vocabulary for both tables: the API's.
_METRIC_VERBS = {
    "POST": "create", "PUT": "update", "PATCH": "patch", "APPLY": "apply", "DELETE": "delete",
    "DELETECOLLECTION": "deletecollection", "GET": "get", "LIST": "list", "WATCH": "watch",
    "WATCHLIST": "watch", "CONNECT": "connect",
}

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}

Labels = tuple[tuple[str, str], ...]


class MetricsFormatError(ValueError):
    """A line of Prometheus text that is neither a comment nor a sample; names the line."""


def parse_labels(text: str) -> Labels:
    labels = []
    pos = 0
    while pos < len(text):
        match = _LABEL.match(text, pos)
        if match is None:
            if text[pos:].strip() in ("", ","):
                break
            raise MetricsFormatError(f"bad label set at {text[pos:pos + 40]!r}")
        value = re.sub(r"\\[\\\"n]", lambda m: _UNESCAPE[m.group(0)], match.group(2))
        labels.append((match.group(1), value))
        pos = match.end()
    return tuple(sorted(labels))


def parse_prometheus(text: str, *, names: Iterable[str] | None = None) -> dict[tuple[str, Labels], float]:
    """The samples of a Prometheus text exposition, ``(name, sorted labels) -> value``;
    only the metrics in ``names`` if given (an apiserver's /metrics is ~10 MB: the
    histograms are skipped without parsing their labels)."""
    wanted = set(names) if names is not None else None
    samples: dict[tuple[str, Labels], float] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line or line.startswith("#"):
            continue
        if wanted is not None:
            name_end = min((i for i in (line.find("{"), line.find(" ")) if i >= 0), default=len(line))
            if line[:name_end] not in wanted:
                continue
        match = _SAMPLE.match(line)
        if match is None:
            raise MetricsFormatError(f"line {number} is not a sample: {line[:120]!r}")
        name, labels, value = match.groups()
        try:
            number_value = float(value)  # also +Inf, -Inf, NaN
        except ValueError:
            raise MetricsFormatError(f"line {number}: value {value!r} is not a number") from None
        samples[(name, parse_labels(labels or ""))] = number_value
    return samples


def metric_verb(verb: str) -> str:
    return _METRIC_VERBS.get(verb.upper(), verb.lower())


def resource_name(resource: str, subresource: str = "", *, dry_run: bool = False) -> str:
    if not resource:
        # Non-resource requests: the apiserver puts the path in subresource for the few
        # it names (/readyz, /livez, /healthz), nothing for the rest.
        name = subresource or "(non-resource)"
    else:
        name = f"{resource}/{subresource}" if subresource else resource
    return name + (" (dry run)" if dry_run else "")


def request_counts(samples: Mapping[tuple[str, Labels], float]) -> Counter[RequestKey]:
    """``apiserver_request_total`` summed over code, scope, group, version and component,
    by (verb, resource)."""
    counts: Counter[RequestKey] = Counter()
    for (name, labels), value in samples.items():
        if name != REQUEST_METRIC:
            continue
        label = dict(labels)
        key = (metric_verb(label.get("verb", "")),
               resource_name(label.get("resource", ""), label.get("subresource", ""), dry_run=bool(label.get("dry_run"))))
        counts[key] += int(value)
    return counts


def component_counts(samples: Mapping[tuple[str, Labels], float]) -> Counter[tuple[str, str]]:
    """``kube_offload_api_requests_total`` summed over codes, by (cluster, verb)."""
    counts: Counter[tuple[str, str]] = Counter()
    for (name, labels), value in samples.items():
        if name != COMPONENT_METRIC:
            continue
        label = dict(labels)
        counts[(label.get("cluster", ""), metric_verb(label.get("verb", "")))] += int(value)
    return counts


def delta(before: Mapping[tuple, float], after: Mapping[tuple, float]) -> Counter:
    """What the counters grew by. A counter that went down means its process restarted
    (the figures of the window are then wrong): refuse, naming the counter."""
    grown: Counter = Counter()
    for key, value in after.items():
        change = value - before.get(key, 0)
        if change < 0:
            raise ValueError(f"counter {key} went down from {before[key]} to {value}: the apiserver restarted "
                             "during the window, measure again")
        if change:
            grown[key] = change
    return grown


# Our components' ServiceAccounts (charts: release kube-offload in namespace kube-offload,
# harness identities.py), and the consumer's, which the vkubelet uses on a remote.
_OURS_PREFIX = "system:serviceaccount:kube-offload:kube-offload-"
_CONSUMER_PREFIX = "system:serviceaccount:kube-offload-tenant-"
_KCM_SA_PREFIX = "system:serviceaccount:kube-system:"
_CONTROL_PLANE_PROGRAMS = {"kube-controller-manager", "kube-scheduler", "kube-apiserver"}


def client_of(username: str, user_agent: str) -> str:
    """Who sent a request, from its audit record: ``ours/<component>``,
    ``control-plane/<program>[/<controller>]``, ``kwok``, ``bench/kubectl`` or
    ``other/<user>``. By user where the identity is ours (each component has its own
    ServiceAccount), by User-Agent where it is not (kwokctl's binary runtime gives kwok,
    the scheduler, the controller-manager and the admin kubectl one certificate)."""
    if username.startswith(_OURS_PREFIX):
        return "ours/" + username[len(_OURS_PREFIX):]
    if username.startswith(_CONSUMER_PREFIX):
        return "ours/vkubelet (as consumer)"
    if username == "system:apiserver":
        return "control-plane/kube-apiserver"
    program, _, rest = user_agent.partition("/")
    if program in _CONTROL_PLANE_PROGRAMS or username.startswith(("system:kube-", _KCM_SA_PREFIX)):
        program = program if program in _CONTROL_PLANE_PROGRAMS else username.removeprefix("system:")
        # client-go appends the controller's name to the User-Agent:
        # "kube-controller-manager/v1.37.2 (linux/amd64) kubernetes/abc1234/replicaset-controller"
        parts = rest.split(" kubernetes/", 1)
        controller = parts[1].split("/", 1)[1] if len(parts) == 2 and "/" in parts[1] else ""
        controller = controller.removeprefix(_KCM_SA_PREFIX)
        return f"control-plane/{program}" + (f"/{controller}" if controller else "")
    # kwokctl's binary runtime runs kwok as "kwok-controller", the User-Agent's program.
    if program in ("kwok", "kwok-controller"):
        return "kwok"
    if program == "kubectl":
        return "bench/kubectl"
    if program.startswith("kube-offload"):
        return f"ours/{program.removeprefix('kube-offload-')} (admin)"
    return f"other/{username or 'anonymous'}"


def audit_record_key(event: Mapping) -> ClientKey | None:
    """(client, verb, resource) of one audit event; None for stages other than
    ResponseComplete/Panic (a request logs each stage its policy keeps)."""
    if event.get("stage") not in ("ResponseComplete", "Panic"):
        return None
    user = event.get("user") or {}
    ref = event.get("objectRef") or {}
    uri = str(event.get("requestURI", ""))
    dry_run = "dryRun=" in uri
    if ref:
        resource = resource_name(str(ref.get("resource", "")), str(ref.get("subresource", "")), dry_run=dry_run)
    else:
        resource = "(non-resource)"
    return client_of(str(user.get("username", "")), str(event.get("userAgent", ""))), str(event.get("verb", "")), resource


def audit_counts(lines: Iterable[str]) -> Counter[ClientKey]:
    """Requests by (client, verb, resource) in audit log lines (JSON, one event a line). A
    torn last line (the apiserver still writing it) is skipped."""
    counts: Counter[ClientKey] = Counter()
    for line in lines:
        line = line.strip()
        if not line:
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue
        key = audit_record_key(event)
        if key is not None:
            counts[key] += 1
    return counts


def by_client(counts: Mapping[ClientKey, float]) -> Counter[str]:
    totals: Counter[str] = Counter()
    for (client, _, _), n in counts.items():
        totals[client] += n
    return totals


def client_group(client: str) -> str:
    """ours / control-plane / kwok / bench / other."""
    return client.split("/", 1)[0]


# --- one measured window ------------------------------------------------------------------


@dataclass
class Window:
    """What one window cost: per cluster the requests by (verb, resource) from the
    apiserver's metrics and, with audit, by (client, verb, resource); CPU seconds per
    process (``ours/<name>`` or ``<cluster>/<component>``); the window's length."""

    pods: int
    seconds: float
    requests: dict[str, Counter[RequestKey]]
    clients: dict[str, Counter[ClientKey]] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)
    # our process -> (cluster, verb) -> requests, from its own metrics
    components: dict[str, Counter[tuple[str, str]]] = field(default_factory=dict)

    def per_pod(self, value: float) -> float:
        return value / self.pods if self.pods else math.nan

    def to_json(self) -> dict:
        return {
            "pods": self.pods, "seconds": round(self.seconds, 3),
            "requests": {c: {f"{v} {r}": n for (v, r), n in sorted(k.items())} for c, k in self.requests.items()},
            "clients": {c: {f"{cl} {v} {r}": n for (cl, v, r), n in sorted(k.items())} for c, k in self.clients.items()},
            "cpu_s": {k: round(v, 3) for k, v in sorted(self.cpu.items())},
            "components": {p: {f"{c} {v}": n for (c, v), n in sorted(k.items())} for p, k in self.components.items()},
        }


def _cell(window: Window, value: float) -> str:
    return f"{window.per_pod(value):.2f}"


def request_table(phases: Mapping[str, Window], *, min_per_pod: float = 0.05) -> list[str]:
    """Requests per pod by cluster, verb and resource, one column per phase; rows under
    ``min_per_pod`` in every phase are folded into "(other)". Totals per cluster and for
    all clusters but the first (the remotes) at the end of each block."""
    names = list(phases)
    clusters: list[str] = []
    for window in phases.values():
        clusters += [c for c in window.requests if c not in clusters]
    header = f"{'cluster':<20} {'verb':<17} {'resource':<34}" + "".join(f" {n:>14}" for n in names)
    lines = [header]
    for cluster in clusters:
        keys = sorted({k for w in phases.values() for k in w.requests.get(cluster, {})})
        other = {n: 0.0 for n in names}
        for key in keys:
            values = {n: phases[n].requests.get(cluster, Counter())[key] for n in names}
            if all(phases[n].per_pod(values[n]) < min_per_pod for n in names):
                for n in names:
                    other[n] += values[n]
                continue
            lines.append(f"{cluster:<20} {key[0]:<17} {key[1]:<34}" + "".join(f" {_cell(phases[n], values[n]):>14}" for n in names))
        if any(other.values()):
            lines.append(f"{cluster:<20} {'(other)':<17} {'':<34}" + "".join(f" {_cell(phases[n], other[n]):>14}" for n in names))
        totals = {n: sum(phases[n].requests.get(cluster, Counter()).values()) for n in names}
        lines.append(f"{cluster:<20} {'all':<17} {'':<34}" + "".join(f" {_cell(phases[n], totals[n]):>14}" for n in names))
    return lines


def totals_table(phases: Mapping[str, Window], local: str) -> list[str]:
    """All requests per pod: the local cluster, the remotes together, everything."""
    names = list(phases)
    lines = [f"{'where':<20}" + "".join(f" {n:>14}" for n in names)]
    for label, predicate in (("local apiserver", lambda c: c == local), ("remote apiservers", lambda c: c != local),
                             ("all apiservers", lambda c: True)):
        cells = []
        for n in names:
            window = phases[n]
            total = sum(sum(k.values()) for c, k in window.requests.items() if predicate(c))
            cells.append(f" {_cell(window, total):>14}")
        lines.append(f"{label:<20}" + "".join(cells))
    return lines


def client_table(phases: Mapping[str, Window], *, min_per_pod: float = 0.05) -> list[str]:
    """Requests per pod by cluster and client (audit log), then by client, verb and
    resource for the rows of at least ``min_per_pod`` in some phase."""
    names = list(phases)
    clusters: list[str] = []
    for window in phases.values():
        clusters += [c for c in window.clients if c not in clusters]
    if not clusters:
        return []
    lines = [f"{'cluster':<20} {'client':<52}" + "".join(f" {n:>14}" for n in names)]
    for cluster in clusters:
        totals = {n: by_client(phases[n].clients.get(cluster, Counter())) for n in names}
        for client in sorted({c for t in totals.values() for c in t}):
            lines.append(f"{cluster:<20} {client:<52}" + "".join(f" {_cell(phases[n], totals[n][client]):>14}" for n in names))
    lines.append("")
    lines.append(f"{'cluster':<20} {'client':<40} {'verb':<9} {'resource':<30}" + "".join(f" {n:>14}" for n in names))
    for cluster in clusters:
        keys = sorted({k for w in phases.values() for k in w.clients.get(cluster, {})})
        for key in keys:
            values = {n: phases[n].clients.get(cluster, Counter())[key] for n in names}
            if all(phases[n].per_pod(values[n]) < min_per_pod for n in names):
                continue
            lines.append(f"{cluster:<20} {key[0]:<40} {key[1]:<9} {key[2]:<30}"
                         + "".join(f" {_cell(phases[n], values[n]):>14}" for n in names))
    return lines


def component_table(phases: Mapping[str, Window]) -> list[str]:
    """Requests per pod each of our processes counted itself, by cluster and verb."""
    names = list(phases)
    processes = sorted({p for w in phases.values() for p in w.components})
    if not processes:
        return []
    lines = [f"{'process':<28} {'cluster':<8} {'verb':<17}" + "".join(f" {n:>14}" for n in names)]
    for process in processes:
        keys = sorted({k for w in phases.values() for k in w.components.get(process, {})})
        for key in keys:
            values = {n: phases[n].components.get(process, Counter())[key] for n in names}
            lines.append(f"{process:<28} {key[0]:<8} {key[1]:<17}" + "".join(f" {_cell(phases[n], values[n]):>14}" for n in names))
    return lines


def cpu_table(phases: Mapping[str, Window], *, min_ms: float = 0.5) -> list[str]:
    """CPU milliseconds per pod per process (rows under ``min_ms`` everywhere left out),
    and the sums: ours, the kube-apiservers, the rest of the control planes."""
    names = list(phases)
    processes = sorted({p for w in phases.values() for p in w.cpu})
    lines = [f"{'process':<40}" + "".join(f" {n:>14}" for n in names)]

    def row(label: str, value: Mapping[str, float]) -> str:
        return f"{label:<40}" + "".join(f" {phases[n].per_pod(value[n]) * 1000:>14.1f}" for n in names)

    for process in processes:
        values = {n: phases[n].cpu.get(process, 0.0) for n in names}
        if all(phases[n].per_pod(values[n]) * 1000 < min_ms for n in names):
            continue
        lines.append(row(process, values))
    for label, predicate in (
        ("sum: ours", lambda p: p.startswith("ours/")),
        ("sum: kube-apiservers", lambda p: p.endswith("/kube-apiserver")),
        ("sum: rest of the control planes", lambda p: not p.startswith("ours/") and not p.endswith("/kube-apiserver")),
    ):
        lines.append(row(label, {n: sum(v for p, v in phases[n].cpu.items() if predicate(p)) for n in names}))
    return lines


def work_report(phases: Mapping[str, Window], local: str, *, per: str, idle: Window | None = None) -> list[str]:
    """Every table of the work per pod, as the benches print it: ``per`` says per what
    ("pod, 100 pods"); ``idle`` adds the background line under the heading."""

    def indented(table: list[str]) -> list[str]:
        return ["  " + line for line in table]

    lines = [f"API requests per {per} (apiserver_request_total after - before each phase):"]
    if idle is not None:
        lines.append(background_line(idle, phases))
    lines += indented(totals_table(phases, local)) + [""] + indented(request_table(phases))
    for title, table in (("By client (audit log):", client_table(phases)),
                         ("By our process, from its own kube_offload_api_requests_total:", component_table(phases))):
        if table:
            lines += ["", title, *indented(table)]
    lines += ["", f"CPU ms per {per} (/proc/<pid>/stat of the processes started for the run):",
              *indented(cpu_table(phases))]
    goals = goals_report(phases, local)
    if goals:
        lines += ["", *goals]
    return lines


# Issue 39's goals for the work per offloaded pod, printed beside the figures.
GOAL_OURS_CPU_MS = 15.0
GOAL_CPU_RATIO = 2.2
GOAL_LOCAL_REQUESTS = 6.0
GOAL_REMOTE_REQUESTS = 5.0


def goals_report(phases: Mapping[str, Window], local: str) -> list[str]:
    """Issue 39's goals beside the figures of the phase "offloaded pod" (and, for the
    CPU ratio, of "local pod"): kube-offload's own CPU per pod, all processes' CPU against
    a local pod's, API requests per pod on the local and on the remote clusters. Empty
    without an "offloaded pod" phase."""
    offloaded = phases.get("offloaded pod")
    if offloaded is None or not offloaded.pods:
        return []

    def verdict(value: float, goal: float) -> str:
        return "meets" if value <= goal else "misses"

    ours = offloaded.per_pod(sum(v for p, v in offloaded.cpu.items() if p.startswith("ours/"))) * 1000
    local_requests = offloaded.per_pod(sum(sum(k.values()) for c, k in offloaded.requests.items() if c == local))
    remote_requests = offloaded.per_pod(sum(sum(k.values()) for c, k in offloaded.requests.items() if c != local))
    lines = ["Goals (issue 39), per offloaded pod:",
             f"  ours CPU {ours:.1f} ms (goal <= {GOAL_OURS_CPU_MS:g}): {verdict(ours, GOAL_OURS_CPU_MS)}"]
    baseline = phases.get("local pod")
    if baseline is not None and baseline.pods and sum(baseline.cpu.values()):
        ratio = offloaded.per_pod(sum(offloaded.cpu.values())) / baseline.per_pod(sum(baseline.cpu.values()))
        lines.append(f"  all processes' CPU {ratio:.2f} x a local pod's (goal <= {GOAL_CPU_RATIO:g}): "
                     f"{verdict(ratio, GOAL_CPU_RATIO)}")
    lines += [f"  requests on the local apiserver {local_requests:.2f} (goal <= {GOAL_LOCAL_REQUESTS:g}): "
              f"{verdict(local_requests, GOAL_LOCAL_REQUESTS)}",
              f"  requests on the remote apiservers {remote_requests:.2f} (goal <= {GOAL_REMOTE_REQUESTS:g}): "
              f"{verdict(remote_requests, GOAL_REMOTE_REQUESTS)}"]
    return lines


def background_line(idle: Window, phases: Mapping[str, Window]) -> str:
    """How much of each phase's per-pod figure the idle rate explains (leases, node
    heartbeats, the benchmark's polling): requests per second when nothing is asked,
    times the phase's length, per pod."""
    rate = sum(sum(k.values()) for k in idle.requests.values()) / idle.seconds if idle.seconds else math.nan
    parts = [f"{n} {rate * w.seconds / w.pods:.2f} per pod ({w.seconds:.0f} s)" for n, w in phases.items() if w.pods]
    return f"idle: {rate:.1f} requests/s over all apiservers; at that rate: " + ", ".join(parts)


# --- thin I/O -----------------------------------------------------------------------------


@dataclass
class Snapshot:
    at: float
    requests: dict[str, Counter[RequestKey]]
    audit_offsets: dict[str, int]
    cpu: dict[str, float]
    components: dict[str, Counter[tuple[str, str]]] = field(default_factory=dict)


class Meter:
    """Snapshots of every apiserver's request counters (``kubectl get --raw /metrics`` with
    the admin kubeconfig), of the audit logs' lengths and of the CPU of the processes the
    harness and kwokctl started (by PID, /proc/<pid>/stat)."""

    def __init__(self, env, clusters: list, components: Mapping[str, str] | None = None) -> None:
        import controlplane

        self._controlplane = controlplane
        self.clusters = clusters
        # our process -> the URL of its /metrics (the health port)
        self.components = dict(components or {})
        # Every process the harness started except its stand-in for local-path-provisioner.
        self.ours = {r.name: r.pid for r in env.processes.load() if r.running() and not r.name.startswith("local-path")}
        self.control = {(c.name, comp): pid for c in clusters for comp, pid in controlplane.control_plane_pids(c).items()}

    def _requests(self, cluster) -> Counter[RequestKey]:
        text = cluster.kubectl("get", "--raw", "/metrics", timeout=120).stdout
        return request_counts(parse_prometheus(text, names=[REQUEST_METRIC]))

    def snapshot(self) -> Snapshot:
        cpu = {f"ours/{name}": self._controlplane.cpu_seconds(pid) for name, pid in self.ours.items()}
        cpu.update({f"{cluster}/{comp}": self._controlplane.cpu_seconds(pid) for (cluster, comp), pid in self.control.items()})
        offsets = {}
        for cluster in self.clusters:
            log = audit_log(cluster)
            if log is not None:
                offsets[cluster.name] = complete_length(log)
        components = {}
        for name, url in self.components.items():
            try:
                with urllib.request.urlopen(url, timeout=30) as response:
                    text = response.read().decode()
            except OSError:
                continue  # gone (a failover's killed leader): no figures for it
            components[name] = component_counts(parse_prometheus(text, names=[COMPONENT_METRIC]))
        return Snapshot(time.monotonic(), {c.name: self._requests(c) for c in self.clusters}, offsets, cpu, components)

    def window(self, before: Snapshot, after: Snapshot, pods: int) -> Window:
        clients = {}
        for cluster in self.clusters:
            log = audit_log(cluster)
            if log is None or cluster.name not in before.audit_offsets:
                continue
            with log.open("rb") as f:
                f.seek(before.audit_offsets[cluster.name])
                chunk = f.read(after.audit_offsets[cluster.name] - before.audit_offsets[cluster.name])
            clients[cluster.name] = audit_counts(chunk.decode("utf-8", "replace").splitlines())
        return Window(
            pods=pods, seconds=after.at - before.at,
            requests={c: delta(before.requests[c], after.requests[c]) for c in after.requests},
            clients=clients,
            cpu={k: after.cpu[k] - before.cpu.get(k, 0.0) for k in after.cpu},
            components={p: delta(before.components[p], after.components[p])
                        for p in after.components if p in before.components},
        )


def complete_length(path: Path) -> int:
    """The length of ``path`` up to its last newline: a line the apiserver is still
    writing belongs to the next window."""
    with path.open("rb") as f:
        size = f.seek(0, 2)
        tail = max(0, size - (1 << 20))
        f.seek(tail)
        data = f.read(size - tail)
    cut = data.rfind(b"\n")
    return tail + cut + 1 if cut >= 0 else tail


def component_metrics_urls(topology) -> dict[str, str]:
    """Each remote's vkubelet and enforcer: their /metrics on the health port (plain HTTP
    on loopback, docs/observability.md)."""
    urls = {}
    for spec in topology.remotes:
        urls[f"vkubelet-{spec.cluster_id}"] = f"http://127.0.0.1:{spec.vkubelet_health_port}/metrics"
        urls[f"enforcer-{spec.cluster_id}"] = f"http://127.0.0.1:{spec.enforcer_health_port}/metrics"
    return urls


def audit_log(cluster) -> Path | None:
    """The audit log kwokctl's binary runtime writes for ``cluster``, if audit is on."""
    path = cluster.kwok_workdir / "clusters" / cluster.name / "logs" / "audit.log"
    return path if path.exists() else None
