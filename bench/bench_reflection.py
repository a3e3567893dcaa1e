"""Benchmark: reflection latency at scale. For N ConfigMaps, then N Services each with an
EndpointSlice, written into an offloaded namespace of the local cluster: the time from
the local write to the remote copy existing, and to the remote EndpointSlice being ready,
as p50/p99; the virtual kubelet's CPU seconds and RSS per reflected object, and the API
requests per object on both apiservers.

    .venv/bin/python bench/bench_reflection.py [--sizes 100,1000] [--kinds configmaps,services]
        [--writers 8] [--rate 5] [--py-spy-dir DIR] [--vkubelet-arg=--reflect-services-workers=4 ...]

Not a test: it never fails on time (goal, issue 25: p99 <= 1 s at 1,000 Services on the
2-core development machine). It brings up its own environment (local + 1 remote cluster,
default topology) in a temporary state directory and tears it down at the end, stopping
exactly the processes it started.

**Timestamps come from watches on both sides**, in this process (one monotonic clock):
a watch on the local namespace and one on its twin namespace per kind, opened before the
first write; each object's first event that satisfies the measure (exists; for a slice:
has a ready endpoint) is its timestamp. The latency of an object is remote timestamp -
local timestamp, paired by name (reflection keeps the names of these kinds). Nothing
polls the API server.

**Load**: each size writes its N objects into a fresh namespace (``bench-refl-<kind>-<N>``,
placement Remote) with ``--writers`` threads as fast as the local apiserver takes them
(a burst, the hard case for a work queue), so the tail is the time to drain the burst;
``--rate`` paces the writes instead (the latency of one object when reflection keeps up).
Services have no selector; their EndpointSlice (``<service>-1``, one ready endpoint in
the harness's local pod CIDR, reflected remapped into the range the harness's provider
policy grants) is written right after the Service, as a user or a controller would.
Objects reflected: ConfigMaps by the configmaps reflector; Services and EndpointSlices by
theirs.

**Cost per object**: the vkubelet's user+system CPU (/proc/<pid>/stat) and its RSS before
and after each size's window; API requests per object by verb and resource
(bench/apirequests.py: each apiserver's ``apiserver_request_total``, the vkubelet's own
``kube_offload_api_requests_total``) over the same window, which runs from just before
the first write until every remote copy is seen plus ``--settle`` seconds.

``--py-spy-dir DIR`` records a py-spy profile of the vkubelet (``--format raw``, for
flame graphs) for each size and kind into DIR (py-spy from ``pip install -e '.[bench]'``).

The pure parts (percentiles, pairing local and remote timestamps, what counts as a ready
slice, the objects written) are unit-tested in tests/unit/bench/test_bench_reflection.py.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping

from kube_offload import constants as C
from kube_offload.runtime import kinds
from kube_offload.runtime.kinds import Resource
from kube_offload.runtime.kube import ApiError, Kube, load_api_client
from kube_offload_harness.cluster import Cluster, Environment, default_topology

import apirequests
import controlplane

CONFIGMAPS = "configmaps"
SERVICES = "services"
KINDS = (CONFIGMAPS, SERVICES)
GOAL_P99_S = 1.0  # issue 25: p99 <= 1 s at 1,000 Services
SLICE_MANAGER = "bench.kube-offload.io"  # not the endpointslice controller: it would delete the slice
# The harness's local pod CIDR (kwok's, KWOK_POD_CIDR 10.0.0.0/16): the vkubelet remaps
# it into the range the harness's provider policy grants, so the slices are reflected.
ENDPOINT_NET = (10, 0)
# kwokctl's default Service range (10.0.0.0/24) holds 254 cluster IPs: a second range on
# both clusters (a ServiceCIDR object, Kubernetes >= 1.33) makes room for 5,000 Services.
# Outside the pod ranges, local and remapped, so no endpoint falls in it.
EXTRA_SERVICE_CIDR = "10.96.0.0/16"


def log(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


# --- pure parts -----------------------------------------------------------------------------


def percentile(values: Iterable[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile (0 < q <= 100): the smallest value with at
    least q % of the values at or below it, so p99 of 100 values is the 99th, and of
    1,000 the 990th; NaN for no values."""
    ordered = sorted(values)
    if not 0 < q <= 100:
        raise ValueError(f"percentile {q} must be in (0, 100]")
    if not ordered:
        return math.nan
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def pair(local: Mapping[str, float], remote: Mapping[str, float]) -> tuple[list[float], list[str]]:
    """Latencies (remote - local timestamp) of the objects seen on both sides, in name
    order, and the names written locally that were never seen remotely. Remote objects
    with no local write (the CA bundle the vkubelet reflects into every twin) are not
    ours to measure and are left out."""
    latencies = [remote[name] - local[name] for name in sorted(local) if name in remote]
    missing = sorted(name for name in local if name not in remote)
    return latencies, missing


@dataclass(frozen=True)
class Summary:
    count: int
    missing: int
    p50: float
    p99: float
    max: float

    @classmethod
    def of(cls, local: Mapping[str, float], remote: Mapping[str, float]) -> "Summary":
        latencies, missing = pair(local, remote)
        return cls(len(latencies), len(missing), percentile(latencies, 50), percentile(latencies, 99),
                   max(latencies, default=math.nan))

    def to_json(self) -> dict:
        return {"count": self.count, "missing": self.missing, "p50_s": round(self.p50, 4), "p99_s": round(self.p99, 4),
                "max_s": round(self.max, 4)}


def slice_ready(obj: Mapping) -> bool:
    """An EndpointSlice with at least one ready endpoint. An unset ``ready`` counts as
    ready: the API says consumers should read it so."""
    for endpoint in obj.get("endpoints") or []:
        if (endpoint.get("conditions") or {}).get("ready") is not False and endpoint.get("addresses"):
            return True
    return False


def exists(_obj: Mapping) -> bool:
    return True


def reflected(obj: Mapping) -> bool:
    """A remote object our reflection wrote (its reflector label): the twin's own
    ``kube-root-ca.crt``, which the remote cluster publishes, shares a name with the local
    one and must not pass for its copy."""
    return C.LABEL_REFLECTOR in ((obj.get("metadata") or {}).get("labels") or {})


def reflected_and_ready(obj: Mapping) -> bool:
    return reflected(obj) and slice_ready(obj)


def written(stamps: Mapping[str, float], names: Iterable[str]) -> dict[str, float]:
    """The local stamps of the objects the bench wrote (not what the namespace had)."""
    return {n: stamps[n] for n in names if n in stamps}


def endpoint_address(index: int) -> str:
    """A distinct address per object in the harness's local pod CIDR (10.0.0.0/16)."""
    if not 0 <= index < 250 * 256:
        raise ValueError(f"object index {index} out of range: at most {250 * 256} objects")
    return f"{ENDPOINT_NET[0]}.{ENDPOINT_NET[1]}.{index // 250}.{index % 250 + 1}"


def object_name(kind: str, index: int) -> str:
    return f"{kind[:-1]}-{index:05d}"


def configmap(namespace: str, index: int) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": object_name(CONFIGMAPS, index), "namespace": namespace, "labels": {"app": "bench"}},
            "data": {"index": str(index), "settings.yaml": "mode: bench\nlevel: 3\n"}}


def service(namespace: str, index: int, *, headless: bool = False) -> dict:
    # No selector: the endpoints are the slice written beside it. Headless: no cluster IP
    # to allocate (kube-apiserver allocates them one at a time: see --headless).
    spec: dict = {"ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]}
    if headless:
        spec["clusterIP"] = "None"
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": object_name(SERVICES, index), "namespace": namespace, "labels": {"app": "bench"}},
            "spec": spec}


def endpointslice(namespace: str, index: int) -> dict:
    name = object_name(SERVICES, index)
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": f"{name}-1", "namespace": namespace,
                         "labels": {"kubernetes.io/service-name": name, "endpointslice.kubernetes.io/managed-by": SLICE_MANAGER}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": [{"addresses": [endpoint_address(index)], "conditions": {"ready": True, "serving": True, "terminating": False}}]}


def service_of_slice(name: str) -> str:
    """``service-00007-1`` -> ``service-00007``: the Service a bench slice belongs to."""
    return name.rsplit("-", 1)[0]


def by_service(slices: Mapping[str, float]) -> dict[str, float]:
    """Slice timestamps keyed by their Service (the first slice of each), to pair a
    Service's local write with its remote slice being ready."""
    out: dict[str, float] = {}
    for name, at in slices.items():
        key = service_of_slice(name)
        out[key] = min(at, out.get(key, math.inf))
    return out


DURATION = "apiserver_request_duration_seconds"


def create_seconds(samples: Mapping[tuple[str, apirequests.Labels], float]) -> dict[str, tuple[float, float]]:
    """resource -> (seconds, count) of the creates (POST, not dry run) an apiserver served,
    from its request-duration histogram's _sum and _count: what one create costs inside the
    apiserver, admission webhooks and etcd included."""
    out: dict[str, list[float]] = {}
    for (name, labels), value in samples.items():
        if name not in (f"{DURATION}_sum", f"{DURATION}_count"):
            continue
        label = dict(labels)
        if label.get("verb") != "POST" or label.get("subresource") or label.get("dry_run"):
            continue
        entry = out.setdefault(label.get("resource", ""), [0.0, 0.0])
        entry[0 if name.endswith("_sum") else 1] += value
    return {resource: (total, count) for resource, (total, count) in out.items()}


def mean_create_ms(before: Mapping[str, tuple[float, float]], after: Mapping[str, tuple[float, float]]) -> dict[str, float]:
    """resource -> mean milliseconds of the creates served between two scrapes."""
    means = {}
    for resource, (total, count) in after.items():
        t0, c0 = before.get(resource, (0.0, 0.0))
        if count - c0 > 0:
            means[resource] = (total - t0) / (count - c0) * 1000
    return means


def usable(services: Mapping[str, float], slices: Mapping[str, float]) -> dict[str, float]:
    """When each remote Service could carry traffic: it exists and its slice is ready,
    whichever came last (the slice reflector does not wait for the Service's, so a slice
    may be there first, naming a Service not yet created)."""
    return {name: max(at, slices[name]) for name, at in services.items() if name in slices}


def latency_rows(size: int, kind: str, summaries: Mapping[str, Summary], write_s: float) -> list[str]:
    lines = []
    for measure, s in summaries.items():
        lines.append(f"{size:>6} {kind:<11} {measure:<46} {s.count:>6} {s.missing:>5} {s.p50 * 1000:>9.0f} "
                     f"{s.p99 * 1000:>9.0f} {s.max * 1000:>9.0f} {size / write_s if write_s else math.nan:>9.0f}")
    return lines


LATENCY_HEADER = (f"{'N':>6} {'kind':<11} {'measure (remote - local watch time)':<46} {'seen':>6} {'lost':>5} "
                  f"{'p50 ms':>9} {'p99 ms':>9} {'max ms':>9} {'writes/s':>9}")


# --- thin I/O -------------------------------------------------------------------------------


class Stamps:
    """The first time (monotonic) each name satisfied a measure; written by a watch thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.at: dict[str, float] = {}

    def record(self, name: str, when: float) -> None:
        with self._lock:
            self.at.setdefault(name, when)

    def snapshot(self) -> dict[str, float]:
        with self._lock:
            return dict(self.at)

    def count(self, names: Iterable[str]) -> int:
        with self._lock:
            return sum(1 for n in names if n in self.at)


class Watcher(threading.Thread):
    """One watch (list, then watch from its resourceVersion, resumed after each server
    timeout), stamping each object the first time ``accept`` says yes."""

    def __init__(self, kube: Kube, resource: Resource, namespace: str, measures: Mapping[str, Callable[[Mapping], bool]]) -> None:
        super().__init__(daemon=True, name=f"watch-{resource.plural}-{namespace}")
        self.kube, self.resource, self.namespace = kube, resource, namespace
        self.measures = {name: (accept, Stamps()) for name, accept in measures.items()}
        self.stopping = threading.Event()
        self.listed = threading.Event()
        self.events = 0

    def stamps(self, measure: str) -> Stamps:
        return self.measures[measure][1]

    def _see(self, obj: Mapping, when: float) -> None:
        name = (obj.get("metadata") or {}).get("name") or ""
        for accept, stamps in self.measures.values():
            if accept(obj):
                stamps.record(name, when)

    def run(self) -> None:
        rv = None
        while not self.stopping.is_set():
            try:
                if rv is None:
                    body = self.kube.list(self.resource, namespace=self.namespace)
                    now = time.monotonic()
                    for obj in body.get("items") or []:
                        self._see(obj, now)
                    rv = (body.get("metadata") or {}).get("resourceVersion")
                    self.listed.set()
                for event in self.kube.watch(self.resource, namespace=self.namespace, resource_version=rv, timeout_seconds=30):
                    now = time.monotonic()
                    obj = event.get("object") or {}
                    rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        self.events += 1
                        self._see(obj, now)
                    if self.stopping.is_set():
                        return
            except ApiError as exc:
                if exc.gone:
                    rv = None  # history compacted: list again (late stamps, never lost ones)
                else:
                    log(f"  watch {self.resource.plural} in {self.namespace}: {exc.status} {exc.message}; retrying")
                    time.sleep(1)
            except Exception as exc:  # noqa: BLE001 - a dropped connection: resume from rv
                log(f"  watch {self.resource.plural} in {self.namespace}: {exc!r}; resuming")
                time.sleep(0.5)


def service_cidr() -> dict:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR", "metadata": {"name": "bench-reflection"},
            "spec": {"cidrs": [EXTRA_SERVICE_CIDR]}}


def scrape_creates(cluster: Cluster) -> dict[str, tuple[float, float]]:
    text = cluster.kubectl("get", "--raw", "/metrics", timeout=120).stdout
    return create_seconds(apirequests.parse_prometheus(text, names=[f"{DURATION}_sum", f"{DURATION}_count"]))


def admin_kube(cluster: Cluster) -> Kube:
    return Kube(load_api_client(str(cluster.kubeconfig)), timeout=(5.0, 60.0))


def wait_for(what: str, check: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"bench: {what} not after {timeout:.0f}s")
        time.sleep(0.2)


def offloaded_namespace(local: Cluster, remote: Kube, name: str, twin: str, timeout: float) -> None:
    """Create and offload ``name``; return once the vkubelet reflects into its twin (the
    CA bundle reflected there says the namespace's local informers run)."""
    local.kubectl("create", "namespace", name)
    local.kubectl("label", "namespace", name, f"{C.LABEL_ENABLED}=true", f"{C.LABEL_POD_PLACEMENT}={C.PLACEMENT_REMOTE}")
    wait_for(f"the CA bundle reflected into twin namespace {twin}",
             lambda: remote.get_or_none(kinds.CONFIG_MAPS, "kube-offload-root-ca.crt", namespace=twin) is not None, timeout)


def write_all(kube: Kube, namespace: str, kind: str, size: int, writers: int, rate: float | None, *,
              headless: bool = False) -> float:
    """Write the N objects of ``kind`` with ``writers`` threads, object i handed to them
    at i / ``rate`` seconds (None: all at once, a burst); the seconds it took."""
    def one(index: int) -> None:
        if kind == CONFIGMAPS:
            kube.create(kinds.CONFIG_MAPS, configmap(namespace, index), namespace=namespace)
        else:
            kube.create(kinds.SERVICES, service(namespace, index, headless=headless), namespace=namespace)
            kube.create(kinds.ENDPOINT_SLICES, endpointslice(namespace, index), namespace=namespace)

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=writers) as pool:
        futures = []
        for i in range(size):
            if rate:
                time.sleep(max(0.0, started + i / rate - time.monotonic()))
            futures.append(pool.submit(one, i))
        for future in futures:
            future.result()
    return time.monotonic() - started


def start_profile(directory: Path | None, pid: int, label: str) -> subprocess.Popen | None:
    if directory is None:
        return None
    directory.mkdir(parents=True, exist_ok=True)
    py_spy = Path(sys.executable).parent / "py-spy"
    out = directory / f"vkubelet-{label}.txt"
    log(f"  py-spy recording the vkubelet into {out}")
    return subprocess.Popen([str(py_spy), "record", "--pid", str(pid), "--format", "raw", "--rate", "50",
                             "--idle", "--output", str(out), "--nonblocking"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def stop_profile(process: subprocess.Popen | None) -> None:
    if process is None:
        return
    process.send_signal(signal.SIGINT)
    try:
        _, err = process.communicate(timeout=60)
        if process.returncode not in (0, -signal.SIGINT):
            log(f"  py-spy exited {process.returncode}: {err.decode(errors='replace')[-400:]}")
    except subprocess.TimeoutExpired:
        process.kill()


@dataclass
class Run:
    size: int
    kind: str
    write_s: float
    summaries: dict[str, Summary]
    cpu_s: float
    rss_before_kib: int
    rss_after_kib: int
    work: apirequests.Window
    # cluster -> resource -> mean ms of one create inside that apiserver, over the window
    create_ms: dict[str, dict[str, float]]

    def to_json(self) -> dict:
        return {"size": self.size, "kind": self.kind, "write_s": round(self.write_s, 3),
                "latency": {k: s.to_json() for k, s in self.summaries.items()},
                "vkubelet_cpu_s": round(self.cpu_s, 3), "vkubelet_rss_before_kib": self.rss_before_kib,
                "vkubelet_rss_after_kib": self.rss_after_kib,
                "apiserver_create_ms": {c: {r: round(ms, 1) for r, ms in m.items()} for c, m in self.create_ms.items()},
                "work": self.work.to_json()}


def measure(env: Environment, local: Cluster, remote_cluster: Cluster, *, kind: str, size: int, args: argparse.Namespace,
            meter: apirequests.Meter, vkubelet_pid: int, local_id: str) -> Run:
    lk, rk = admin_kube(local), admin_kube(remote_cluster)
    namespace = f"bench-refl-{kind}-{size}"
    twin = C.twin_namespace_name(namespace, local_id)
    offloaded_namespace(local, rk, namespace, twin, args.timeout)
    if kind == CONFIGMAPS:
        watchers = {"local": [Watcher(lk, kinds.CONFIG_MAPS, namespace, {"exists": exists})],
                    "remote": [Watcher(rk, kinds.CONFIG_MAPS, twin, {"exists": reflected})]}
    else:
        watchers = {"local": [Watcher(lk, kinds.SERVICES, namespace, {"exists": exists}),
                              Watcher(lk, kinds.ENDPOINT_SLICES, namespace, {"exists": exists})],
                    "remote": [Watcher(rk, kinds.SERVICES, twin, {"exists": reflected}),
                               Watcher(rk, kinds.ENDPOINT_SLICES, twin, {"exists": reflected, "ready": reflected_and_ready})]}
    every = watchers["local"] + watchers["remote"]
    for w in every:
        w.start()
    wait_for("the watches' first lists", lambda: all(w.listed.is_set() for w in every), 60)
    names = [object_name(kind, i) for i in range(size)]
    slice_names = [f"{n}-1" for n in names]
    # What "all reflected" means: each remote copy seen (and each remote slice ready).
    remote_done: list[tuple[Stamps, list[str]]] = [(watchers["remote"][0].stamps("exists"), names)]
    if kind == SERVICES:
        remote_done.append((watchers["remote"][1].stamps("ready"), slice_names))

    cpu_before = controlplane.cpu_seconds(vkubelet_pid, children=False)
    rss_before = controlplane.status_kib(vkubelet_pid, "VmRSS")
    profile = start_profile(args.py_spy_dir, vkubelet_pid, f"{kind}-{size}")
    before = meter.snapshot()
    creates_before = {c.name: scrape_creates(c) for c in (local, remote_cluster)}
    log(f"[{kind} x {size}] writing into {namespace} with {args.writers} writers")
    write_s = write_all(lk, namespace, kind, size, args.writers, args.rate, headless=args.headless)
    log(f"[{kind} x {size}] written in {write_s:.1f}s ({size / write_s:.0f}/s); waiting for the remote copies in {twin}")
    deadline = time.monotonic() + args.timeout
    last = -1
    while time.monotonic() < deadline:
        seen = sum(stamps.count(wanted) for stamps, wanted in remote_done)
        if seen == sum(len(wanted) for _, wanted in remote_done):
            break
        if seen != last:
            log(f"  {seen}/{sum(len(w) for _, w in remote_done)} remote, load {os.getloadavg()[0]:.1f}")
            last = seen
        time.sleep(0.5)
    stop_profile(profile)
    time.sleep(args.settle)
    after = meter.snapshot()
    creates = {c.name: mean_create_ms(creates_before[c.name], scrape_creates(c)) for c in (local, remote_cluster)}
    cpu_s = controlplane.cpu_seconds(vkubelet_pid, children=False) - cpu_before
    rss_after = controlplane.status_kib(vkubelet_pid, "VmRSS")
    for w in every:
        w.stopping.set()

    loc = {w.resource.plural: w for w in watchers["local"]}
    rem = {w.resource.plural: w for w in watchers["remote"]}
    if kind == CONFIGMAPS:
        summaries = {"ConfigMap written -> remote ConfigMap exists":
                     Summary.of(written(loc["configmaps"].stamps("exists").snapshot(), names), rem["configmaps"].stamps("exists").snapshot())}
    else:
        local_slices = written(loc["endpointslices"].stamps("exists").snapshot(), slice_names)
        local_services = written(loc["services"].stamps("exists").snapshot(), names)
        remote_ready = rem["endpointslices"].stamps("ready").snapshot()
        summaries = {
            "Service written -> remote Service exists":
                Summary.of(local_services, rem["services"].stamps("exists").snapshot()),
            "EndpointSlice written -> remote slice exists":
                Summary.of(local_slices, rem["endpointslices"].stamps("exists").snapshot()),
            "EndpointSlice written -> remote slice ready": Summary.of(local_slices, remote_ready),
            "Service written -> remote Service + ready slice":
                Summary.of(local_services, usable(rem["services"].stamps("exists").snapshot(), by_service(remote_ready))),
        }
    run = Run(size, kind, write_s, summaries, cpu_s, rss_before, rss_after, meter.window(before, after, size), creates)
    log(f"[{kind} x {size}] " + "; ".join(f"{m}: p50 {s.p50 * 1000:.0f} ms, p99 {s.p99 * 1000:.0f} ms"
                                          f"{f', {s.missing} LOST' if s.missing else ''}" for m, s in summaries.items())
        + f"; vkubelet {cpu_s:.1f} CPU s, RSS {rss_before / 1024:.0f} -> {rss_after / 1024:.0f} MiB")
    if not args.keep_namespaces:
        local.kubectl("delete", "namespace", namespace, "--wait=true", f"--timeout={int(args.timeout)}s", check=False,
                      timeout=args.timeout + 30)
    return run


def restart_vkubelet(env: Environment, extra: list[str]) -> int:
    topology = env.topology()
    assert topology is not None
    spec = topology.remotes[0]
    name = f"vkubelet-{spec.cluster_id}"
    env.processes.stop(name)
    env.start_vkubelet(topology, spec, extra)
    env.wait_virtual_node_ready(env.cluster(topology.local), spec)
    # The node may still show Ready from the old process's last heartbeat: the new one is
    # ready (caches listed) when its /readyz says so, and only then is its RSS "idle".
    url = f"http://127.0.0.1:{spec.vkubelet_health_port}/readyz"

    def ready() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return response.status == 200
        except OSError:
            return False

    wait_for(f"the restarted vkubelet's {url}", ready, 120)
    record = env.processes.get(name)
    assert record is not None
    return record.pid


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100,1000", help="comma-separated object counts (default 100,1000)")
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated, among {', '.join(KINDS)}")
    parser.add_argument("--writers", type=int, default=8, help="threads writing the local objects (default 8)")
    parser.add_argument("--rate", type=float, default=None,
                        help="objects written per second, paced (default: a burst, as fast as the writers go)")
    parser.add_argument("--headless", action="store_true",
                        help="headless Services (clusterIP: None): no cluster IP to allocate on either side")
    parser.add_argument("--timeout", type=float, default=900, help="per size and kind, seconds")
    parser.add_argument("--settle", type=float, default=3, help="seconds after the last remote copy before the window closes")
    parser.add_argument("--py-spy-dir", type=Path, default=None, help="record a py-spy profile of the vkubelet per run here")
    parser.add_argument("--vkubelet-arg", action="append", default=[],
                        help="extra vkubelet flag (repeatable, e.g. --vkubelet-arg=--reflect-services-workers=4): "
                             "the vkubelet is restarted with it before the runs")
    parser.add_argument("--keep-namespaces", action="store_true", help="do not delete each run's namespace")
    parser.add_argument("--keep", action="store_true", help="leave the environment up at the end")
    args = parser.parse_args()
    try:
        sizes = [int(s) for s in args.sizes.split(",") if s]
    except ValueError:
        parser.error(f"--sizes {args.sizes!r}: give whole numbers separated by commas, e.g. 100,1000")
    chosen = [k for k in args.kinds.split(",") if k]
    if not chosen or any(k not in KINDS for k in chosen):
        parser.error(f"--kinds {args.kinds!r}: choose among {', '.join(KINDS)}")
    if any(not 0 < s <= 250 * 256 for s in sizes):
        parser.error(f"--sizes {args.sizes!r}: each between 1 and {250 * 256}")
    if args.rate is not None and args.rate <= 0:
        parser.error("--rate must be a positive number of objects per second")
    if args.writers < 1:
        parser.error("--writers must be at least 1")

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda number, frame: sys.exit(128 + number))
    state = Path(tempfile.mkdtemp(prefix="kube-offload-bench-refl-"))
    env = Environment(state, say=log)
    topology = default_topology(prefix="refl", remotes=1, local_nodes=1, remote_nodes=1)
    runs: list[Run] = []
    load_before = os.getloadavg()
    try:
        env.up(topology)
        local = env.cluster(topology.local)
        remote = env.cluster(topology.remotes[0])
        name = f"vkubelet-{topology.remotes[0].cluster_id}"
        record = env.processes.get(name)
        assert record is not None
        pid = restart_vkubelet(env, args.vkubelet_arg) if args.vkubelet_arg else record.pid
        rss_idle = controlplane.status_kib(pid, "VmRSS")
        if SERVICES in chosen and max(sizes) > 200:
            for cluster in (local, remote):
                cluster.apply(service_cidr())
        meter = apirequests.Meter(env, [local, remote], {name: f"http://127.0.0.1:{topology.remotes[0].vkubelet_health_port}/metrics"})
        for size in sizes:
            for kind in chosen:
                runs.append(measure(env, local, remote, kind=kind, size=size, args=args, meter=meter,
                                    vkubelet_pid=pid, local_id=topology.local.cluster_id))
    finally:
        if not args.keep:
            env.down()

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).parent).stdout.strip()
    print()
    print(f"machine: {platform.machine()}, {platform.system()} {platform.release()}, {os.cpu_count()} cores; "
          f"python {platform.python_version()}; load {load_before[0]:.1f} before, {os.getloadavg()[0]:.1f} after; "
          f"commit {commit}; writers {args.writers}; " + (f"paced at {args.rate:g}/s" if args.rate else "burst")
          + ("; headless Services" if args.headless else "") + (f"; vkubelet {' '.join(args.vkubelet_arg)}" if args.vkubelet_arg else ""))
    print(f"vkubelet RSS idle: {rss_idle / 1024:.0f} MiB")
    print(LATENCY_HEADER)
    for run in runs:
        print("\n".join(latency_rows(run.size, run.kind, run.summaries, run.write_s)))
    print()
    print(f"{'N':>6} {'kind':<11} {'vkubelet CPU ms/object':>23} {'RSS before MiB':>15} {'RSS after MiB':>14} {'RSS KiB/object':>15}")
    for run in runs:
        print(f"{run.size:>6} {run.kind:<11} {run.cpu_s / run.size * 1000:>23.2f} {run.rss_before_kib / 1024:>15.0f} "
              f"{run.rss_after_kib / 1024:>14.0f} {(run.rss_after_kib - run.rss_before_kib) / run.size:>15.1f}")
    print()
    print("Mean time of one create inside each apiserver over the window (apiserver_request_duration_seconds), ms:")
    for run in runs:
        for cluster, means in run.create_ms.items():
            shown = ", ".join(f"{r} {ms:.0f}" for r, ms in sorted(means.items()) if r in ("configmaps", "services", "endpointslices", "ipaddresses"))
            print(f"  {run.size:>6} {run.kind:<11} {cluster:<16} {shown}")
    for run in runs:
        per = "Service (+ its EndpointSlice)" if run.kind == SERVICES else "ConfigMap"
        print()
        print("\n".join(apirequests.work_report({f"{run.kind} {run.size}": run.work}, topology.local.name,
                                                per=f"{per}, {run.size} of them")))
    print(json.dumps({"runs": [r.to_json() for r in runs], "load_before": load_before, "commit": commit}))
    lost = [f"{r.kind} x {r.size}: {m}: {s.missing} never seen remotely" for r in runs for m, s in r.summaries.items() if s.missing]
    for line in lost:
        print(f"PROBLEM: {line}", file=sys.stderr)
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
