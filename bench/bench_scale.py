"""Benchmark: N offloaded pods over R remote clusters converge to Running, 1:1, and scale
back to 0 with nothing left behind; CPU of our processes per pod against the
kube-apiservers' in the same run, and each virtual kubelet's peak memory.

    .venv/bin/python bench/bench_scale.py [--pods 10000] [--remotes 3] [--per-deployment 1000] [--no-local-baseline]
                                          [--profile DIR] [--tracemalloc DIR] [--steady 60]
    .venv/bin/python bench/bench_scale.py --failover vkubelet|enforcer [--failover-at 0.3]

--steady SECONDS (default 60): once all pods run, our processes' CPU while nothing
changes (what holding the pods costs: resyncs, usage sampling, leases), per second and
per pod per minute. --tracemalloc DIR (bench/memtrace.py): what each vkubelet's memory
per pod is made of, from tracemalloc snapshots of the live process before the burst and
with all pods running (caches by transform, the rest by function), and the garbage that
gc.freeze kept; it slows the vkubelets, so its RSS readings are not the goal's.

With --failover (default 1,000 pods on 1 remote) the burst runs twice in the same
environment: first as the baseline, then with a standby replica of the first remote's
vkubelet or enforcer and a kill -9 of the leader once --failover-at of the pods have
ShadowPods (bench/failover.py); it prints the handover times, the convergence time
against the baseline's, and the 1:1 check after the failover.

Local baseline (on by default, not with --failover): before the offloaded burst, the same
N pods in the same Deployments go to a namespace whose pods stay on the local cluster's
kwok nodes (placement Local, as in bench_offloading.py), timed the same way (apply ->
all Running by the same poll), then the namespace is deleted; it prints offloaded
pods/s, local pods/s and their ratio (the goal: 10,000 pods over 3 remotes at >= 0.85 x
local). The local kwok nodes are sized to hold all N pods 1.5 times over too.

Not a test: it never fails on time. It exits non-zero only if the pods did not converge
or the 1:1 check (local pod <-> ShadowPod <-> remote pod, across all remotes) or the
clean-up check found something wrong. It brings up its own environment (local + R remote
clusters, kwok nodes large enough that capacity is never the limit) in a temporary state
directory and tears it down at the end, stopping exactly the processes it started.

CPU is user + system time from /proc/<pid>/stat: of the PIDs the harness recorded for our
processes (each virtual kubelet, enforcer, the webhook's gunicorn arbiter and workers, the
extender) and of each cluster's kube-apiserver (the PID kwokctl recorded), over the same
window; the ratio ours/apiservers is our overhead per offloaded pod in the apiservers'
own currency.

API requests per offloaded pod (bench/apirequests.py): each kube-apiserver's
``apiserver_request_total`` before and after, per pod by cluster, verb and resource, for
the scale-up and for up + down; by client too with ``--audit`` (each apiserver writes an
audit log: a JSON line per request, ~1 KB, i.e. GBs at 10,000 pods; off by default). The
local-node baseline of the same figures is bench_offloading.py's (this script offloads
every pod).

--profile DIR (bench/profiles.py, as in bench_offloading.py): Go CPU profiles of each
kube-apiserver and py-spy of each vkubelet and enforcer during the local baseline (until
all its pods run) and during the offloaded scale-up (likewise), then CPU ms per pod by
category for both.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path

from kube_offload import constants as C
from kube_offload_harness.cluster import Cluster, Environment, default_topology

import apirequests
import controlplane
import failover
import memtrace
import profiles
from bench_offloading import deployment
from failover import Failover

NAMESPACE = "bench-scale"
LOCAL_NAMESPACE = "bench-scale-local"  # the local baseline: pods stay on local kwok nodes
RATIO_GOAL = 0.85  # offloaded pods/s against local pods/s (issue 27)
POLL_SECONDS = 3.0

# Issue 39: a vkubelet's memory per offloaded pod at 5,000 pods, in every reading.
GOAL_KIB_PER_POD = 30


def log(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


def summed(delta: dict[str, float], predicate) -> float:
    return sum(v for k, v in delta.items() if predicate(k))


def deployment_sizes(pods: int, per_deployment: int) -> list[int]:
    """The replica counts of the Deployments that make ``pods`` pods, ``per_deployment``
    each, the last one taking the remainder."""
    if pods < 1 or per_deployment < 1:
        raise ValueError(f"--pods ({pods}) and --per-deployment ({per_deployment}) must be at least 1")
    sizes = [per_deployment] * (pods // per_deployment)
    if pods % per_deployment:
        sizes.append(pods % per_deployment)
    return sizes


def nodes_capacity(pods: int, nodes: int) -> int:
    """Pods per kwok node so that ``nodes`` nodes hold ``pods`` 1.5 times over, whatever
    the scheduler's spread: capacity is never the limit of a burst."""
    return math.ceil(pods * 1.5 / nodes) + 50


def throughput_report(pods: int, offloaded_s: float | None, local_s: float | None) -> tuple[list[str], float | None]:
    """The lines comparing the offloaded burst with the local baseline, and the ratio
    offloaded pods/s over local pods/s (None when either did not converge)."""
    def rate(seconds: float | None) -> str:
        return f"{pods / seconds:.1f} pods/s ({seconds:.1f}s)" if seconds else "not converged"

    ratio = local_s / offloaded_s if offloaded_s and local_s else None
    lines = [f"throughput, {pods} pods: offloaded {rate(offloaded_s)}, local kwok nodes {rate(local_s)}",
             "ratio offloaded/local pods/s: " + (f"{ratio:.2f}" if ratio is not None else "-")
             + f" (goal >= {RATIO_GOAL:.2f})"]
    return lines, ratio


def running_pods(local: Cluster, namespace: str = NAMESPACE) -> tuple[int, int]:
    """(Running, existing) local pods of the bench. The server-side table (kubectl's default
    output) is the cheapest full list; Deployment status is no use here, the
    controller-manager's client rate limit delays its updates by minutes at this scale."""
    out = local.kubectl("get", "pods", "-n", namespace, "--no-headers", "--chunk-size=0", timeout=120).stdout
    rows = [line.split() for line in out.splitlines() if line.strip()]
    return sum(1 for row in rows if len(row) > 2 and row[2] == "Running"), len(rows)


def jsonpath_rows(cluster: Cluster, resource: str, columns: list[str], *scope: str) -> list[list[str]]:
    fields = "{\"\\t\"}".join("{" + c + "}" for c in columns)
    template = "{range .items[*]}" + fields + "{\"\\n\"}{end}"
    out = cluster.kubectl("get", resource, *scope, "--chunk-size=500", "-o", f"jsonpath={template}", timeout=600).stdout
    return [line.split("\t") for line in out.splitlines() if line.strip()]


def escape(key: str) -> str:
    return key.replace(".", "\\.")


def check_one_to_one(local: Cluster, remotes: list[Cluster], expected: int) -> list[str]:
    """Local pod <-> ShadowPod <-> remote pod, by UIDs; returns the problems found."""
    problems: list[str] = []
    pods = jsonpath_rows(local, "pods", [".metadata.uid", ".metadata.name", ".spec.nodeName", ".status.phase"], "-n", NAMESPACE)
    local_uids = {row[0]: row for row in pods}
    not_running = [row[1] for row in pods if row[3] != "Running"]
    if len(pods) != expected:
        problems.append(f"{len(pods)} local pods, expected {expected}")
    if not_running:
        problems.append(f"{len(not_running)} local pods not Running, e.g. {not_running[:3]}")
    virtual = [row for row in pods if row[2].startswith(C.VIRTUAL_NODE_PREFIX)]
    if len(virtual) != len(pods):
        problems.append(f"{len(pods) - len(virtual)} local pods not on a virtual node")
    shadow_by_origin: Counter[str] = Counter()
    shadow_uids: dict[str, str] = {}  # ShadowPod uid -> origin uid
    remote_pod_owners: Counter[str] = Counter()
    per_remote: dict[str, int] = {}
    origin = escape(C.ANNOTATION_ORIGIN_UID)
    for remote in remotes:
        shadows = jsonpath_rows(remote, "shadowpods", [".metadata.uid", f".metadata.annotations.{origin}"], "-A")
        rpods = jsonpath_rows(remote, "pods", [".metadata.uid", ".metadata.ownerReferences[0].uid", ".status.phase"],
                              "-A", "-l", C.LABEL_ORIGIN_CLUSTER_ID)
        per_remote[remote.name] = len(rpods)
        for row in shadows:
            origin_uid = row[1] if len(row) > 1 else ""
            shadow_by_origin[origin_uid] += 1
            shadow_uids[row[0]] = origin_uid
        for row in rpods:
            remote_pod_owners[row[1] if len(row) > 1 else ""] += 1
            if len(row) > 2 and row[2] != "Running":
                problems.append(f"remote pod {row[0]} in {remote.name} is {row[2]}")
    lost = [uid for uid in local_uids if shadow_by_origin[uid] == 0]
    duplicated = [uid for uid, n in shadow_by_origin.items() if n > 1]
    orphans = [uid for uid in shadow_by_origin if uid not in local_uids]
    if lost:
        problems.append(f"{len(lost)} local pods without a ShadowPod (lost), e.g. {lost[:3]}")
    if duplicated:
        problems.append(f"{len(duplicated)} local pods with more than one ShadowPod (duplicated), e.g. {duplicated[:3]}")
    if orphans:
        problems.append(f"{len(orphans)} ShadowPods whose local pod does not exist, e.g. {orphans[:3]}")
    no_pod = [uid for uid in shadow_uids if remote_pod_owners[uid] == 0]
    many = [uid for uid in shadow_uids if remote_pod_owners[uid] > 1]
    stray = [uid for uid in remote_pod_owners if uid not in shadow_uids]
    if no_pod:
        problems.append(f"{len(no_pod)} ShadowPods without a remote pod, e.g. {no_pod[:3]}")
    if many:
        problems.append(f"{len(many)} ShadowPods with more than one remote pod, e.g. {many[:3]}")
    if stray:
        problems.append(f"{len(stray)} remote pods not owned by a ShadowPod, e.g. {stray[:3]}")
    log(f"1:1 check: {len(pods)} local pods, {len(shadow_uids)} ShadowPods, "
        f"{sum(remote_pod_owners.values())} remote pods; per remote {per_remote}")
    return problems


def leftovers(local: Cluster, remotes: list[Cluster]) -> dict[str, int]:
    counts = {"local pods": len(jsonpath_rows(local, "pods", [".metadata.uid"], "-n", NAMESPACE))}
    for remote in remotes:
        counts[f"{remote.name} shadowpods"] = len(jsonpath_rows(remote, "shadowpods", [".metadata.uid"], "-A"))
        counts[f"{remote.name} pods"] = len(jsonpath_rows(remote, "pods", [".metadata.uid"], "-A", "-l", C.LABEL_ORIGIN_CLUSTER_ID))
    return counts


def steady_line(cpu: dict[str, float], seconds: float, pods_each: float) -> str:
    """Our processes' CPU while the pods are only held: ms per second and ms per pod per
    minute (each vkubelet holds ``pods_each``), largest first."""
    parts = []
    for key, used in sorted(cpu.items(), key=lambda kv: -kv[1]):
        rate = used / seconds * 1000
        parts.append(f"{key.removeprefix('ours/')} {rate:.0f} ms/s ({rate * 60 / pods_each:.2f} ms per pod per minute)")
    return ", ".join(parts)


def burst(env: Environment, local: Cluster, remotes: list[Cluster], *, label: str, pods: int, per_deployment: int,
          timeout: float, vkubelets: dict[str, int], driver: Failover | None = None,
          profiler: profiles.Profiler | None = None, trace: Path | None = None, steady: float = 0.0) -> dict:
    """Apply ``pods`` pods in Deployments named ``<label>-<i>``, wait until they all run,
    check 1:1, scale to 0 and check nothing is left, then delete the Deployments (so a
    second burst in the same namespace starts from nothing). With ``driver``, its
    thread kills the leader during the burst. With ``trace`` (--tracemalloc), each
    vkubelet's allocations are snapshot before the apply and once all pods run. With
    ``steady`` seconds, the CPU of our processes while all pods run and nothing changes
    (what holding the pods costs: resyncs, usage sampling, leases) is measured too."""
    topology = env.topology()
    assert topology is not None
    meter = apirequests.Meter(env, [local, *remotes], apirequests.component_metrics_urls(topology))
    sizes = deployment_sizes(pods, per_deployment)
    count = len(sizes)
    problems: list[str] = []

    snapshots: dict[str, dict[str, str]] = {}
    if trace is not None:
        for key, pid in vkubelets.items():
            snapshots[key] = {"before": str(memtrace.take(trace, pid, f"{label}-before"))}
    before = meter.snapshot()
    if profiler is not None:
        profiler.start(f"{label}-offloaded")
    started = time.monotonic()
    log(f"[{label}] applying {count} Deployments ({pods} pods) in {NAMESPACE}")
    local.apply([deployment(f"{label}-{i}", NAMESPACE, size) for i, size in enumerate(sizes)])
    if driver is not None:
        driver.begin(started)
    converged = None
    last_ready = -1
    while time.monotonic() - started < timeout:
        ready, existing = running_pods(local)
        if ready != last_ready:
            elapsed = time.monotonic() - started
            log(f"  {elapsed:6.0f}s  {ready}/{pods} Running ({existing} created), "
                f"{ready / elapsed:.1f} pods/s, vkubelet RSS "
                + ", ".join(f"{k} {controlplane.status_kib(pid, 'VmRSS') / 1024:.0f}" for k, pid in vkubelets.items())
                + f" MiB, load {os.getloadavg()[0]:.1f}")
            last_ready = ready
        if ready >= pods:
            converged = time.monotonic() - started
            break
        # Listing N pods costs the local apiserver too: poll less often as N grows.
        time.sleep(POLL_SECONDS if pods <= 1000 else 10.0)
    if profiler is not None:
        profiler.stop()
    after_up = meter.snapshot()
    if driver is not None:
        driver.done.set()
        driver.join(timeout=failover_join_seconds(timeout))
        problems += driver.figures.problems
    if converged is None:
        problems.append(f"not converged after {timeout}s: {last_ready}/{pods} ready")
    else:
        log(f"[{label}] converged in {converged:.1f}s; checking 1:1")
        problems += check_one_to_one(local, remotes, pods)
    peak = {k: controlplane.status_kib(pid, "VmHWM") / 1024 for k, pid in vkubelets.items()}
    if trace is not None and converged is not None:
        for key, pid in vkubelets.items():
            snapshots[key]["running"] = str(memtrace.take(trace, pid, f"{label}-running"))
    steady_cpu: dict[str, float] = {}
    if steady > 0 and converged is not None:
        log(f"[{label}] all pods running: measuring {steady:.0f}s of steady state")
        quiet = meter.snapshot()
        time.sleep(steady)
        held = meter.snapshot()
        steady_cpu = {k: held.cpu[k] - quiet.cpu.get(k, 0.0) for k in held.cpu if k.startswith("ours/")}

    log(f"[{label}] scaling to 0")
    down_started = time.monotonic()
    local.kubectl("scale", "deployment", "--all", "-n", NAMESPACE, "--replicas=0")
    cleaned = None
    while time.monotonic() - down_started < timeout:
        counts = leftovers(local, remotes)
        elapsed = time.monotonic() - down_started
        log(f"  {elapsed:6.0f}s  left: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
        if not any(counts.values()):
            cleaned = elapsed
            break
        time.sleep(max(POLL_SECONDS, 10.0 if sum(counts.values()) > 3000 else POLL_SECONDS))
    after_down = meter.snapshot()
    if cleaned is None:
        problems.append(f"not clean after {timeout}s: {leftovers(local, remotes)}")
    local.kubectl("delete", "deployment", "--all", "-n", NAMESPACE)
    return {
        "converge_s": converged, "pods_per_s": pods / converged if converged else None,
        "scale_down_s": cleaned, "vkubelet_peak_rss_mib": peak,
        "cpu_up": {k: after_up.cpu[k] - before.cpu[k] for k in before.cpu},
        "cpu_whole": {k: after_down.cpu[k] - before.cpu[k] for k in before.cpu},
        "work": {"scale up": meter.window(before, after_up, pods), "up + down": meter.window(before, after_down, pods)},
        "problems": problems, "tracemalloc": snapshots, "steady_s": steady, "steady_cpu": steady_cpu,
    }


def local_burst(local: Cluster, *, pods: int, per_deployment: int, timeout: float,
                profiler: profiles.Profiler | None = None, meter: apirequests.Meter | None = None) -> dict:
    """The baseline: the same Deployments in a namespace whose pods stay on the local kwok
    nodes, timed as burst() times the offloaded ones (apply -> all Running by the same
    poll); then the namespace goes, so the offloaded burst starts on an idle cluster.
    With ``profiler`` (and ``meter``), the phase is profiled and its window returned."""
    local.kubectl("create", "namespace", LOCAL_NAMESPACE)
    local.kubectl("label", "namespace", LOCAL_NAMESPACE, f"{C.LABEL_ENABLED}=true", f"{C.LABEL_POD_PLACEMENT}={C.PLACEMENT_LOCAL}")
    sizes = deployment_sizes(pods, per_deployment)
    problems: list[str] = []
    before = meter.snapshot() if profiler is not None and meter is not None else None
    if profiler is not None:
        profiler.start("local")
    started = time.monotonic()
    log(f"[local] applying {len(sizes)} Deployments ({pods} pods) in {LOCAL_NAMESPACE}")
    local.apply([deployment(f"local-{i}", LOCAL_NAMESPACE, size) for i, size in enumerate(sizes)])
    converged = None
    last_ready = -1
    while time.monotonic() - started < timeout:
        ready, existing = running_pods(local, LOCAL_NAMESPACE)
        if ready != last_ready:
            elapsed = time.monotonic() - started
            log(f"  {elapsed:6.0f}s  {ready}/{pods} Running ({existing} created), {ready / elapsed:.1f} pods/s, "
                f"load {os.getloadavg()[0]:.1f}")
            last_ready = ready
        if ready >= pods:
            converged = time.monotonic() - started
            break
        time.sleep(POLL_SECONDS if pods <= 1000 else 10.0)
    window = None
    if profiler is not None:
        profiler.stop()
        if meter is not None and before is not None:
            window = meter.window(before, meter.snapshot(), pods)
    if converged is None:
        problems.append(f"local baseline not converged after {timeout}s: {last_ready}/{pods} ready")
    else:
        virtual = [row for row in jsonpath_rows(local, "pods", [".spec.nodeName"], "-n", LOCAL_NAMESPACE)
                   if row and row[0].startswith(C.VIRTUAL_NODE_PREFIX)]
        if virtual:
            problems.append(f"local baseline: {len(virtual)} pods on a virtual node, expected none")
        log(f"[local] converged in {converged:.1f}s: {pods / converged:.1f} pods/s; deleting {LOCAL_NAMESPACE}")
    deleting = time.monotonic()
    local.kubectl("delete", "namespace", LOCAL_NAMESPACE, "--wait=true", f"--timeout={int(timeout)}s",
                  check=False, timeout=timeout + 30)
    log(f"[local] namespace deleted in {time.monotonic() - deleting:.1f}s")
    return {"local_converge_s": converged, "local_pods_per_s": pods / converged if converged else None,
            "local_problems": problems, "local_window": window}


def failover_join_seconds(timeout: float) -> float:
    # The driver's own waits are bounded (failover.READY_TIMEOUT each); never hang on it.
    return min(timeout, 2 * failover.READY_TIMEOUT)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=None,
                        help="offloaded pods in all (default 10000; 1000 with --failover)")
    parser.add_argument("--remotes", type=int, default=None, help="remote clusters (default 3; 1 with --failover)")
    parser.add_argument("--per-deployment", type=int, default=1000, help="pods per Deployment (default 1000)")
    parser.add_argument("--timeout", type=float, default=3600, help="for each of converge and scale-down, seconds")
    parser.add_argument("--failover", choices=failover.COMPONENTS, default=None,
                        help="run the burst twice: as a baseline, then with a standby replica of this component "
                             "and kill -9 of the leader during the burst (the first remote's vkubelet or enforcer)")
    parser.add_argument("--failover-at", type=float, default=0.3,
                        help="kill the leader once this fraction of the pods have ShadowPods (default 0.3)")
    parser.add_argument("--keep", action="store_true", help="leave the environment up at the end")
    parser.add_argument("--local-baseline", action=argparse.BooleanOptionalAction, default=None,
                        help="first run the same pods on local kwok nodes and print offloaded/local pods/s "
                             "(default: on, off with --failover)")
    parser.add_argument("--audit", action=argparse.BooleanOptionalAction, default=False,
                        help="write each apiserver's audit log, to count requests by client (default: off, "
                             "~1 KB per request)")
    parser.add_argument("--profile", type=Path, default=None, metavar="DIR",
                        help="profile the kube-apiservers (pprof) and the vkubelets and enforcers (py-spy) during the "
                             "local baseline and the offloaded scale-up; print CPU ms per pod by category")
    parser.add_argument("--tracemalloc", type=Path, default=None, metavar="DIR",
                        help="trace each vkubelet's Python allocations (bench/memtrace.py) and print what its memory "
                             "per pod is made of; slows the vkubelets 2-4x and inflates their RSS, so the RSS "
                             "readings of such a run are not the goal's")
    parser.add_argument("--steady", type=float, default=60.0, metavar="SECONDS",
                        help="once all pods run, measure our processes' CPU for this long while nothing changes "
                             "(default 60; 0: skip)")
    args = parser.parse_args()
    if args.pods is None:
        args.pods = 1000 if args.failover else 10_000
    if args.remotes is None:
        args.remotes = 1 if args.failover else 3
    if not 0 < args.failover_at < 1:
        parser.error("--failover-at must be between 0 and 1 (a fraction of --pods)")
    if args.local_baseline is None:
        args.local_baseline = not args.failover
    try:
        deployment_sizes(args.pods, args.per_deployment)
    except ValueError as error:
        parser.error(str(error))

    # Stopped by a signal (also when started in the background, where SIGINT is ignored):
    # leave through the finally below, which tears the environment down.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda number, frame: sys.exit(128 + number))
    state = Path(tempfile.mkdtemp(prefix="kube-offload-bench-scale-"))
    env = Environment(state, say=log)
    # Capacity is never the limit: each remote's two kwok nodes hold all of its share 1.5
    # times over, whatever the scheduler's spread.
    topology = default_topology(prefix="scale", remotes=args.remotes, local_nodes=1, remote_nodes=2,
                                node_cpu="1000", node_memory="4Ti",
                                node_pods=nodes_capacity(math.ceil(args.pods / args.remotes), 2))
    if args.local_baseline:
        # The baseline's pods all land on the local cluster: two nodes holding them all.
        topology.local.nodes = 2
        topology.local.node_pods = nodes_capacity(args.pods, 2)
    for spec in topology.clusters():
        spec.audit = args.audit
    result: dict = {"pods": args.pods, "remotes": args.remotes, "per_deployment": args.per_deployment}
    profiler: profiles.Profiler | None = None
    trace_dir = args.tracemalloc.resolve() if args.tracemalloc is not None else None
    load_before = os.getloadavg()
    try:
        if trace_dir is not None:
            memtrace.enable(trace_dir)
        env.up(topology)
        local = env.cluster(topology.local)
        remotes = [env.cluster(spec) for spec in topology.remotes]
        vkubelets = {spec.cluster_id: env.processes.get(f"vkubelet-{spec.cluster_id}").pid for spec in topology.remotes}
        rss_idle = {k: controlplane.status_kib(pid, "VmRSS") / 1024 for k, pid in vkubelets.items()}
        local.kubectl("create", "namespace", NAMESPACE)
        local.kubectl("label", "namespace", NAMESPACE, f"{C.LABEL_ENABLED}=true", f"{C.LABEL_POD_PLACEMENT}={C.PLACEMENT_REMOTE}")
        sizes = {"pods": args.pods, "per_deployment": args.per_deployment, "timeout": args.timeout}
        if args.profile is not None:
            profiler = profiles.for_environment(env, [local, *remotes], args.profile, say=log,
                                                control_plane={c.name: controlplane.control_plane_pids(c) for c in [local, *remotes]})
        if args.local_baseline:
            meter = apirequests.Meter(env, [local, *remotes]) if profiler is not None else None
            result.update(local_burst(local, profiler=profiler, meter=meter, **sizes))
        result.update(burst(env, local, remotes, label="baseline" if args.failover else "scale", vkubelets=vkubelets,
                            profiler=profiler, trace=trace_dir, steady=args.steady, **sizes))
        result["problems"] = result.pop("local_problems", []) + result["problems"]
        result.update({"vkubelet_rss_idle_mib": rss_idle, "load_before": load_before, "load_after": os.getloadavg()})
        if args.failover:
            driver = failover.Failover(env, topology, args.failover, pods=args.pods, fraction=args.failover_at,
                                       namespace=NAMESPACE, log=log)
            driver.prepare()
            load_failover = os.getloadavg()
            run = burst(env, local, remotes, label="failover", vkubelets=vkubelets, driver=driver, **sizes)
            result["failover"] = {**asdict(driver.figures), "converge_s": run["converge_s"],
                                  "scale_down_s": run["scale_down_s"], "load_before": load_failover,
                                  "load_after": os.getloadavg(), "problems": run["problems"]}
            result["problems"] = result["problems"] + [f"failover: {p}" for p in run["problems"]]
    finally:
        if not args.keep:
            env.down()

    problems = result.get("problems", ["the environment did not come up"])
    print()
    print(f"machine: {platform.machine()}, {platform.system()} {platform.release()}, "
          f"{os.cpu_count()} cores; python {platform.python_version()}; "
          f"load {result['load_before'][0]:.1f} before, {result['load_after'][0]:.1f} after")
    print(f"{args.pods} pods, {args.remotes} remotes, {args.per_deployment} per Deployment")
    if result.get("converge_s"):
        print(f"converged in {result['converge_s']:.1f}s: {result['pods_per_s']:.1f} pods/s")
    if args.local_baseline and "local_converge_s" in result:
        lines, ratio = throughput_report(args.pods, result.get("converge_s"), result["local_converge_s"])
        print("\n".join(lines))
        result["ratio_offloaded_local"] = ratio
    if result.get("scale_down_s") is not None:
        print(f"scaled to 0, nothing left, in {result['scale_down_s']:.1f}s")
    for label, delta in (("scale up", result["cpu_up"]), ("up + down", result["cpu_whole"])):
        ours = summed(delta, lambda k: k.startswith("ours/"))
        apiservers = summed(delta, lambda k: k.endswith("/kube-apiserver"))
        rest = summed(delta, lambda k: not k.startswith("ours/") and not k.endswith("/kube-apiserver"))
        print(f"CPU, {label}: ours {ours:.1f}s ({ours / args.pods * 1000:.1f} ms/pod), "
              f"kube-apiservers {apiservers:.1f}s ({apiservers / args.pods * 1000:.1f} ms/pod), "
              f"ratio ours/apiservers {ours / apiservers if apiservers else float('nan'):.2f}; "
              f"rest of the control planes {rest:.1f}s")
        print("   " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(delta.items(), key=lambda kv: -kv[1]) if v >= 0.5))
    each = args.pods / args.remotes
    for key, mib in result["vkubelet_peak_rss_mib"].items():
        idle = result['vkubelet_rss_idle_mib'][key]
        print(f"vkubelet {key}: peak RSS {mib:.0f} MiB (idle {idle:.0f} MiB); per offloaded pod ({each:.0f} on it): "
              f"whole process {mib * 1024 / each:.1f} KiB, what the pods add {(mib - idle) * 1024 / each:.1f} KiB "
              f"(goal, issue 39: <= {GOAL_KIB_PER_POD} KiB in both readings at 5,000 pods)")
    if result.get("steady_cpu"):
        print(f"steady state, {result['steady_s']:.0f}s with all {args.pods} pods running: "
              + steady_line(result["steady_cpu"], result["steady_s"], args.pods / args.remotes))
    for key, files in result.get("tracemalloc", {}).items():
        if "running" in files:
            print(f"vkubelet {key} (--tracemalloc {args.tracemalloc}: RSS above is inflated by the tracing):")
            trace = memtrace.breakdown_of(Path(files["before"]), Path(files["running"]), round(each))
            print("\n".join("   " + line for line in memtrace.report(trace)))
            frozen = memtrace.frozen_garbage(Path(files["running"]), trace)
            if frozen is not None:
                print(f"   garbage kept by gc.freeze (collected only at a thaw): {frozen / 2**20:.1f} MiB, "
                      f"{frozen / 1024 / each:.1f} KiB per pod")
    work = result.pop("work", None)
    local_window = result.pop("local_window", None)
    if work:
        print_work(work, topology.local.name)
        result["work"] = {name: window.to_json() for name, window in work.items()}
        if profiler is not None:
            print_profiles(profiler, work["scale up"], local_window, label="baseline" if args.failover else "scale")
    if "failover" in result:
        print_failover(result["failover"], baseline_s=result.get("converge_s"), pods=args.pods)
    print(json.dumps(result))
    for problem in problems:
        print(f"PROBLEM: {problem}", file=sys.stderr)
    return 1 if problems else 0


def print_work(phases: dict[str, apirequests.Window], local: str) -> None:
    print("\n".join(apirequests.work_report(phases, local, per="offloaded pod")))


def print_profiles(profiler: profiles.Profiler, offloaded: apirequests.Window, local: apirequests.Window | None, *,
                   label: str) -> None:
    phases = {"offloaded pod": (offloaded, profiler.summarise(f"{label}-offloaded"))}
    if local is not None:
        phases = {"local pod": (local, profiler.summarise("local")), **phases}
    print("\n".join(profiles.profile_report({n: found for n, (_, found) in phases.items()},
                                             {n: w.cpu for n, (w, _) in phases.items()},
                                             {n: w.pods for n, (w, _) in phases.items()}, per="pod")))
    print(f"profiles under {profiler.out}" + "".join(f"\nPROFILE PROBLEM: {p}" for p in profiler.problems))


def print_failover(fo: dict, *, baseline_s: float | None, pods: int) -> None:
    def seconds(value: float | None) -> str:
        return f"{value:.1f}s" if value is not None else "-"

    print(f"failover of the {fo['component']}: kill -9 of the leader at {fo['shadowpods_at_kill']} of {pods} ShadowPods "
          f"({seconds(fo['killed_at_s'])} into the burst; load {fo['load_before'][0]:.1f} before the burst)")
    print(f"  Lease taken by the standby {seconds(fo['handover_s'])} after the kill "
          f"(transitions {fo['lease_transitions']}), new leader ready after {seconds(fo['ready_s'])}"
          + (f", ShadowPod webhook routed to it after {seconds(fo['webhook_s'])}" if fo["component"] == "enforcer" else ""))
    print(f"  ShadowPods created again {seconds(fo['resumed_s'])} after the kill "
          f"({fo['shadowpods_at_handover']} ShadowPods when the Lease changed hands)")
    ratio = fo["converge_s"] / baseline_s if fo.get("converge_s") and baseline_s else float("nan")
    print(f"  converged in {seconds(fo['converge_s'])} against {seconds(baseline_s)} without failover "
          f"(ratio {ratio:.2f}); scaled to 0, nothing left, in {seconds(fo['scale_down_s'])}")
    print("  1:1 after the failover: " + ("0 lost, 0 duplicated" if not fo["problems"] else "see PROBLEM lines")
          + " (local pod <-> ShadowPod <-> remote pod by UIDs)")


if __name__ == "__main__":
    sys.exit(main())
