"""Benchmark: Deployment creation -> all pods Running, through the virtual node vs on local
kwok nodes, in the same run on the same loopback environment; plus the virtual kubelet's
resident memory at that scale.

    .venv/bin/python bench/bench_offloading.py [--sizes 100,500] [--pin] [--keep] [--profile DIR]

Prints a table and the ratio virtual/local for each size (goal: <= 1.5). Not a test: it
never fails on time. It brings up its own environment (local + 1 remote cluster, large
kwok nodes so capacity is never the bottleneck) in a temporary state directory and tears
it down at the end, stopping exactly the processes it started.

--pin puts the local cluster's control plane (kube-apiserver, etcd, scheduler,
controller-manager, kwok: the processes kwokctl started) on the first core and the remote
cluster's on the second, as separate machines would, so the ratio reflects the offloading
path rather than two control planes competing for the same cores. Our processes and the
benchmark stay unpinned.

The work per pod, measured in the same run (bench/apirequests.py; the figures that hold on
a busy machine): each kube-apiserver's ``apiserver_request_total`` scraped before and after
each phase (local pods, then offloaded pods), per pod by cluster, verb and resource; with
the audit log (on by default, ``--no-audit`` for timing alone: it costs the apiservers a
JSON line per request) the same by client; CPU seconds per pod of every process the
harness and kwokctl started. An idle window first gives the background rate (leases,
heartbeats, this script's polling), which the per-pod figures include.

--profile DIR: where that CPU goes (bench/profiles.py). During each phase, back-to-back
5 s Go CPU profiles of each kube-apiserver (``/debug/pprof/profile`` with the admin
kubeconfig; the other control-plane components too where reachable, it says which are
not) and ``py-spy record --nonblocking`` of each vkubelet and enforcer; after the
run, CPU ms per pod by category (the profile's shares of each process's /proc CPU over
the phase), local phase against offloaded phase. The profiles and ``pprof -top`` texts
stay under DIR. Profiling costs CPU itself (the samplers and py-spy): time a run without it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from kube_offload import constants as C
from kube_offload_harness.cluster import Cluster, Environment, default_topology

import apirequests
import controlplane
import profiles


def deployment(name: str, namespace: str, replicas: int) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "busybox",
                                         "resources": {"requests": {"cpu": "1m", "memory": "1Mi"}}}]},
            },
        },
    }


def running(cluster: Cluster, namespace: str) -> int:
    out = cluster.kubectl("get", "pods", "-n", namespace, "-o", "jsonpath={.items[*].status.phase}", timeout=120).stdout
    return out.split().count("Running")


def time_to_running(cluster: Cluster, namespace: str, replicas: int, timeout: float) -> float:
    started = time.monotonic()
    cluster.apply(deployment("bench", namespace, replicas))
    while time.monotonic() - started < timeout:
        if running(cluster, namespace) >= replicas:
            return time.monotonic() - started
        time.sleep(0.5)
    raise SystemExit(f"bench: {namespace}: {running(cluster, namespace)}/{replicas} Running after {timeout}s")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def namespace(local: Cluster, name: str, placement: str) -> str:
    local.kubectl("create", "namespace", name)
    local.kubectl("label", "namespace", name, f"{C.LABEL_ENABLED}=true", f"{C.LABEL_POD_PLACEMENT}={placement}")
    return name


def cleanup(local: Cluster, names: list[str], timeout: float = 300) -> None:
    local.kubectl("delete", "namespace", *names, "--wait=true", f"--timeout={int(timeout)}s", check=False, timeout=timeout + 30)


def profiled(profiler: profiles.Profiler | None, phase: str, settle: float, cluster: Cluster, namespace: str,
             replicas: int, timeout: float) -> float:
    """time_to_running(), profiled when asked, then the settle time: the profiles' last
    chunk ends inside it."""
    if profiler is not None:
        profiler.start(phase)
    try:
        result = time_to_running(cluster, namespace, replicas, timeout)
    finally:
        stopping = time.monotonic()
        if profiler is not None:
            profiler.stop()
    time.sleep(max(0.0, settle - (time.monotonic() - stopping)))
    return result


def print_work(size: int, phases: dict[str, apirequests.Window], idle: apirequests.Window, local: str) -> None:
    print()
    print("\n".join(apirequests.work_report(phases, local, per=f"pod, {size} pods", idle=idle)))


def print_profiles(size: int, phases: dict[str, apirequests.Window], found: dict[str, dict]) -> None:
    cpu = {name: window.cpu for name, window in phases.items()}
    pods = {name: window.pods for name, window in phases.items()}
    print("\n".join(profiles.profile_report(found, cpu, pods, per=f"pod, {size} pods")))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100,500", help="comma-separated replica counts")
    parser.add_argument("--timeout", type=float, default=600, help="per measurement, seconds")
    parser.add_argument("--keep", action="store_true", help="leave the environment up at the end")
    parser.add_argument("--pin", action="store_true",
                        help="pin the local control plane to the first core and the remote one to the second")
    parser.add_argument("--audit", action=argparse.BooleanOptionalAction, default=True,
                        help="write each apiserver's audit log, to count requests by client (default: on)")
    parser.add_argument("--idle", type=float, default=10, help="seconds of the idle window (background rate)")
    parser.add_argument("--settle", type=float, default=5,
                        help="seconds after all pods run before a phase's window closes (its trailing writes)")
    parser.add_argument("--profile", type=Path, default=None, metavar="DIR",
                        help="profile the kube-apiservers (pprof) and the vkubelet and enforcer (py-spy) during each "
                             "phase, keep the profiles in DIR and print CPU ms per pod by category")
    args = parser.parse_args()
    if args.profile is not None and args.settle < profiles.CHUNK_SECONDS:
        parser.error(f"--profile needs --settle >= {profiles.CHUNK_SECONDS}: a phase's last profile must end in its window")
    cores = sorted(os.sched_getaffinity(0))
    if args.pin and len(cores) < 2:
        parser.error(f"--pin needs two cores, this process may use {cores}")
    sizes = [int(s) for s in args.sizes.split(",") if s]

    state = Path(tempfile.mkdtemp(prefix="kube-offload-bench-"))
    env = Environment(state, say=lambda line: print(line, file=sys.stderr, flush=True))
    # Big nodes: 2 local and 2 remote nodes with room for 600 pods each.
    topology = default_topology(prefix="bench", remotes=1, local_nodes=2, remote_nodes=2,
                                node_cpu="64", node_memory="256Gi", node_pods=600)
    for spec in topology.clusters():
        spec.audit = args.audit
    rows = []
    work: dict[int, dict[str, apirequests.Window]] = {}
    profiler: profiles.Profiler | None = None
    load_before = os.getloadavg()
    try:
        env.up(topology)
        local = env.cluster(topology.local)
        vkubelet = env.processes.get(f"vkubelet-{topology.remotes[0].cluster_id}")
        assert vkubelet is not None
        rss_idle = rss_mib(vkubelet.pid)
        if args.pin:
            for spec, core in ((topology.local, cores[0]), (topology.remotes[0], cores[1])):
                pinned = controlplane.pin_cluster(env.cluster(spec), {core})
                print(f"  pinned {spec.name} to core {core}: " + ", ".join(f"{k} ({n} threads)" for k, n in pinned.items()),
                      file=sys.stderr, flush=True)
        meter = apirequests.Meter(env, [env.cluster(spec) for spec in topology.clusters()],
                                  apirequests.component_metrics_urls(topology))
        if args.profile is not None:
            clusters = [env.cluster(spec) for spec in topology.clusters()]
            profiler = profiles.for_environment(env, clusters, args.profile, say=lambda line: print(line, file=sys.stderr),
                                                control_plane={c.name: controlplane.control_plane_pids(c) for c in clusters})
        first = meter.snapshot()
        time.sleep(args.idle)
        idle = meter.window(first, meter.snapshot(), 0)
        for size in sizes:
            ns_local = namespace(local, f"bench-local-{size}", C.PLACEMENT_LOCAL)
            ns_remote = namespace(local, f"bench-remote-{size}", C.PLACEMENT_REMOTE)
            start = meter.snapshot()
            t_local = profiled(profiler, f"{size}-local", args.settle, local, ns_local, size, args.timeout)
            middle = meter.snapshot()
            t_remote = profiled(profiler, f"{size}-offloaded", args.settle, local, ns_remote, size, args.timeout)
            end = meter.snapshot()
            work[size] = {"local pod": meter.window(start, middle, size), "offloaded pod": meter.window(middle, end, size)}
            rss = rss_mib(vkubelet.pid)
            rows.append((size, t_local, t_remote, t_remote / t_local, rss))
            print(f"  {size} pods: local {t_local:.1f}s, virtual node {t_remote:.1f}s, vkubelet RSS {rss:.0f} MiB",
                  file=sys.stderr, flush=True)
            cleanup(local, [ns_local, ns_remote])
    finally:
        if not args.keep:
            env.down()

    print()
    print(f"machine: {platform.machine()}, {platform.system()} {platform.release()}, "
          f"{len(cores)} cores; python {platform.python_version()}; load {load_before[0]:.1f} before, "
          f"{os.getloadavg()[0]:.1f} after; audit log {'on' if args.audit else 'off'}"
          + ("; control planes pinned: local to core %d, remote to core %d" % (cores[0], cores[1]) if args.pin else ""))
    print(f"vkubelet RSS idle: {rss_idle:.0f} MiB")
    print(f"{'pods':>6} {'local kwok (s)':>15} {'virtual node (s)':>17} {'ratio':>7} {'vkubelet RSS (MiB)':>19}")
    for size, t_local, t_remote, ratio, rss in rows:
        print(f"{size:>6} {t_local:>15.1f} {t_remote:>17.1f} {ratio:>7.2f} {rss:>19.0f}")
    for size, phases in work.items():
        print_work(size, phases, idle, topology.local.name)
        if profiler is not None:
            print_profiles(size, phases, {"local pod": profiler.summarise(f"{size}-local"),
                                          "offloaded pod": profiler.summarise(f"{size}-offloaded")})
    if profiler is not None:
        print(f"\nprofiles under {args.profile}" + "".join(f"\nPROFILE PROBLEM: {p}" for p in profiler.problems))
    print(json.dumps({"rows": [dict(zip(("pods", "local_s", "virtual_s", "ratio", "rss_mib"), r, strict=True)) for r in rows],
                      "work": {size: {name: w.to_json() for name, w in phases.items()} for size, phases in work.items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
