"""Benchmark: N offloaded pods over R remote clusters converge to Running, 1:1, and scale
back to 0 with nothing left behind; CPU of our processes per pod against the
kube-apiservers' in the same run, and each virtual kubelet's peak memory.

    .venv/bin/python bench/bench_scale.py [--pods 10000] [--remotes 3] [--per-deployment 1000]

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
from pathlib import Path

from kube_offload import constants as C
from kube_offload_harness.cluster import Cluster, Environment, default_topology

import controlplane
from bench_offloading import deployment

NAMESPACE = "bench-scale"
POLL_SECONDS = 3.0


def log(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


class Meter:
    """CPU seconds of our processes and of the kube-apiservers (and the rest of the
    control planes, for context), sampled at the window's edges."""

    def __init__(self, env: Environment, clusters: list[Cluster]) -> None:
        # Every process the harness started except its stand-in for local-path-provisioner.
        self.ours = {r.name: r.pid for r in env.processes.load() if r.running() and not r.name.startswith("local-path")}
        self.control = {(c.name, comp): pid for c in clusters for comp, pid in controlplane.control_plane_pids(c).items()}

    def sample(self) -> dict[str, float]:
        sample = {f"ours/{name}": controlplane.cpu_seconds(pid) for name, pid in self.ours.items()}
        sample.update({f"{cluster}/{comp}": controlplane.cpu_seconds(pid) for (cluster, comp), pid in self.control.items()})
        return sample


def summed(delta: dict[str, float], predicate) -> float:
    return sum(v for k, v in delta.items() if predicate(k))


def running_pods(local: Cluster) -> tuple[int, int]:
    """(Running, existing) local pods of the bench. The server-side table (kubectl's default
    output) is the cheapest full list; Deployment status is no use here, the
    controller-manager's client rate limit delays its updates by minutes at this scale."""
    out = local.kubectl("get", "pods", "-n", NAMESPACE, "--no-headers", "--chunk-size=0", timeout=120).stdout
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=10_000, help="offloaded pods in all (default 10000)")
    parser.add_argument("--remotes", type=int, default=3, help="remote clusters (default 3)")
    parser.add_argument("--per-deployment", type=int, default=1000, help="pods per Deployment (default 1000)")
    parser.add_argument("--timeout", type=float, default=3600, help="for each of converge and scale-down, seconds")
    parser.add_argument("--keep", action="store_true", help="leave the environment up at the end")
    args = parser.parse_args()

    # Stopped by a signal (also when started in the background, where SIGINT is ignored):
    # leave through the finally below, which tears the environment down.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda number, frame: sys.exit(128 + number))
    state = Path(tempfile.mkdtemp(prefix="kube-offload-bench-scale-"))
    env = Environment(state, say=log)
    # Capacity is never the limit: each remote's two kwok nodes hold all of its share 1.5
    # times over, whatever the scheduler's spread.
    per_node = math.ceil(args.pods / args.remotes * 1.5 / 2) + 50
    topology = default_topology(prefix="scale", remotes=args.remotes, local_nodes=1, remote_nodes=2,
                                node_cpu="1000", node_memory="4Ti", node_pods=per_node)
    result: dict = {"pods": args.pods, "remotes": args.remotes, "per_deployment": args.per_deployment}
    problems: list[str] = []
    load_before = os.getloadavg()
    try:
        env.up(topology)
        local = env.cluster(topology.local)
        remotes = [env.cluster(spec) for spec in topology.remotes]
        vkubelets = {spec.cluster_id: env.processes.get(f"vkubelet-{spec.cluster_id}").pid for spec in topology.remotes}
        rss_idle = {k: controlplane.status_kib(pid, "VmRSS") / 1024 for k, pid in vkubelets.items()}
        local.kubectl("create", "namespace", NAMESPACE)
        local.kubectl("label", "namespace", NAMESPACE, f"{C.LABEL_ENABLED}=true", f"{C.LABEL_POD_PLACEMENT}={C.PLACEMENT_REMOTE}")
        meter = Meter(env, [local, *remotes])
        count = math.ceil(args.pods / args.per_deployment)
        sizes = [args.per_deployment] * (args.pods // args.per_deployment)
        if args.pods % args.per_deployment:
            sizes.append(args.pods % args.per_deployment)

        before = meter.sample()
        started = time.monotonic()
        log(f"applying {count} Deployments ({args.pods} pods) in {NAMESPACE}")
        local.apply([deployment(f"scale-{i}", NAMESPACE, size) for i, size in enumerate(sizes)])
        converged = None
        last_ready = -1
        while time.monotonic() - started < args.timeout:
            ready, existing = running_pods(local)
            if ready != last_ready:
                elapsed = time.monotonic() - started
                log(f"  {elapsed:6.0f}s  {ready}/{args.pods} Running ({existing} created), "
                    f"{ready / elapsed:.1f} pods/s, vkubelet RSS "
                    + ", ".join(f"{k} {controlplane.status_kib(pid, 'VmRSS') / 1024:.0f}" for k, pid in vkubelets.items())
                    + f" MiB, load {os.getloadavg()[0]:.1f}")
                last_ready = ready
            if ready >= args.pods:
                converged = time.monotonic() - started
                break
            # Listing N pods costs the local apiserver too: poll less often as N grows.
            time.sleep(POLL_SECONDS if args.pods <= 1000 else 10.0)
        after_up = meter.sample()
        if converged is None:
            problems.append(f"not converged after {args.timeout}s: {last_ready}/{args.pods} ready")
        else:
            log(f"converged in {converged:.1f}s; checking 1:1")
            problems += check_one_to_one(local, remotes, args.pods)
        peak = {k: controlplane.status_kib(pid, "VmHWM") / 1024 for k, pid in vkubelets.items()}

        log("scaling to 0")
        down_started = time.monotonic()
        local.kubectl("scale", "deployment", "--all", "-n", NAMESPACE, "--replicas=0")
        cleaned = None
        while time.monotonic() - down_started < args.timeout:
            counts = leftovers(local, remotes)
            elapsed = time.monotonic() - down_started
            log(f"  {elapsed:6.0f}s  left: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
            if not any(counts.values()):
                cleaned = elapsed
                break
            time.sleep(max(POLL_SECONDS, 10.0 if sum(counts.values()) > 3000 else POLL_SECONDS))
        after_down = meter.sample()
        if cleaned is None:
            problems.append(f"not clean after {args.timeout}s: {leftovers(local, remotes)}")

        up = {k: after_up[k] - before[k] for k in before}
        whole = {k: after_down[k] - before[k] for k in before}
        result.update({
            "converge_s": converged, "pods_per_s": args.pods / converged if converged else None,
            "scale_down_s": cleaned, "vkubelet_rss_idle_mib": rss_idle, "vkubelet_peak_rss_mib": peak,
            "cpu_up": up, "cpu_whole": whole, "problems": problems,
            "load_before": load_before, "load_after": os.getloadavg(),
        })
    finally:
        if not args.keep:
            env.down()

    print()
    print(f"machine: {platform.machine()}, {platform.system()} {platform.release()}, "
          f"{os.cpu_count()} cores; python {platform.python_version()}; "
          f"load {result['load_before'][0]:.1f} before, {result['load_after'][0]:.1f} after")
    print(f"{args.pods} pods, {args.remotes} remotes, {args.per_deployment} per Deployment")
    if result.get("converge_s"):
        print(f"converged in {result['converge_s']:.1f}s: {result['pods_per_s']:.1f} pods/s")
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
    for key, mib in result["vkubelet_peak_rss_mib"].items():
        print(f"vkubelet {key}: peak RSS {mib:.0f} MiB (idle {result['vkubelet_rss_idle_mib'][key]:.0f} MiB)")
    print(json.dumps(result))
    for problem in problems:
        print(f"PROBLEM: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
