"""Benchmark: the virtual node's kubelet API against the remote cluster itself, same run.

    .venv/bin/python bench/bench_kubelet_api.py [--execs 40] [--log-mib 32] [--rounds 3] [--keep]

Two operations on one offloaded pod, each done two ways and interleaved:

* **exec round trip**: open ``pods/exec`` (``echo x``, stdout), read the output and the
  exit Status, close. Through the virtual node = on the LOCAL apiserver for the local pod
  (local apiserver -> vkubelet -> remote apiserver -> kwok); directly = on the REMOTE
  apiserver for its twin pod (remote apiserver -> kwok). Both with the same WebSocket
  client (wsproto, vkubelet/kubeletapi/remote.py), as the clusters' admin.
* **log throughput**: ``GET pods/log`` of a ``--log-mib`` MiB container log (kwok serves
  the simulated log file, grown here first), read to the end, the same two ways.

Prints median/p90 latency, MiB/s and the ratio virtual node / direct. Not a test: never
fails on time. It brings up its own environment (local + 1 remote cluster) in a
temporary state directory and tears it down at the end, stopping exactly the processes
it started.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

from kube_offload import constants as C
from kube_offload.runtime.kube import load_api_client
from kube_offload_harness import kwok_sim
from kube_offload_harness.cluster import Environment, default_topology
from vkubelet.kubeletapi import remote as remote_api
from vkubelet.kubeletapi import streams
from vkubelet.twins.naming import twin_namespace_name

POD = "bench"
CONTAINER = "app"


def exec_once(endpoint: remote_api.Endpoint, namespace: str, pod: str) -> float:
    """Seconds from connecting to the exit Status and close; checks the output."""
    path = remote_api.pod_path(endpoint, "exec", namespace, pod, [("container", CONTAINER), ("stdout", "true"),
                                                                   ("command", "echo"), ("command", "x")])
    started = time.perf_counter()
    peer = remote_api.open_websocket(endpoint, path, [streams.V5, streams.V4], timeout=30, name="bench")
    peer.sock.settimeout(30)
    out, status = b"", None
    try:
        messages = peer.pending()
        while True:
            for message in messages:
                if message.data[:1] == bytes([streams.STDOUT]):
                    out += message.data[1:]
                elif message.data[:1] == bytes([streams.ERROR]):
                    status = json.loads(message.data[1:])
            if peer.closed:
                break
            messages = peer.receive()
    finally:
        peer.shutdown()
    elapsed = time.perf_counter() - started
    if out != b"x\n" or (status or {}).get("status") != "Success":
        raise SystemExit(f"bench: exec in {namespace}/{pod} gave {out!r} and {status}")
    return elapsed


def log_throughput(api_client, namespace: str, pod: str) -> tuple[float, int]:
    """(MiB/s, bytes) of reading the whole log once (the client's own request building,
    credentials included, as read_namespaced_pod_log does)."""
    method, url, headers, body, post_params = api_client.param_serialize(
        method="GET", resource_path="/api/v1/namespaces/{namespace}/pods/{name}/log",
        path_params={"namespace": namespace, "name": pod}, query_params=[("container", CONTAINER)],
        header_params={"Accept": "text/plain, */*"}, auth_settings=["BearerToken"],
    )
    started = time.perf_counter()
    response = api_client.call_api(method, url, header_params=headers, body=body, post_params=post_params, _request_timeout=(10, 300))
    raw = response.response
    size = 0
    try:
        if response.status != 200:
            raise SystemExit(f"bench: GET log of {namespace}/{pod}: {response.status} {raw.read()[:300]!r}")
        while chunk := raw.read1(256 * 1024):
            size += len(chunk)
    finally:
        raw.release_conn()
    elapsed = time.perf_counter() - started
    return size / (1024 * 1024) / elapsed, size


def grow_log(path: Path, mib: int) -> None:
    line = "kube-offload bench log line " + "x" * 200
    now = datetime.now(timezone.utc)
    block = "".join(kwok_sim.cri_log_line(now, f"{line} {i}") for i in range(5000))
    with open(path, "a", encoding="utf-8") as handle:
        while handle.tell() < mib * 1024 * 1024:
            handle.write(block)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--execs", type=int, default=40, help="exec round trips per path")
    parser.add_argument("--log-mib", type=int, default=32, help="size of the container log read")
    parser.add_argument("--rounds", type=int, default=3, help="log reads per path")
    parser.add_argument("--keep", action="store_true", help="leave the environment up at the end")
    args = parser.parse_args()

    state = Path(tempfile.mkdtemp(prefix="kube-offload-bench-kapi-"))
    env = Environment(state, say=lambda line: print(line, file=sys.stderr, flush=True))
    topology = default_topology(prefix=f"bk{uuid.uuid4().hex[:4]}", remotes=1)
    try:
        env.up(topology)
        local = env.cluster(topology.local)
        remote = env.cluster(topology.remotes[0])
        namespace = f"bench-{uuid.uuid4().hex[:6]}"
        local.kubectl("create", "namespace", namespace)
        local.kubectl("label", "namespace", namespace, f"{C.LABEL_ENABLED}=true", f"{C.LABEL_POD_PLACEMENT}={C.PLACEMENT_REMOTE}")
        local.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": POD, "namespace": namespace},
                     "spec": {"containers": [{"name": CONTAINER, "image": "busybox"}]}})
        deadline = time.monotonic() + 180
        while local.kubectl("get", "pod", "-n", namespace, POD, "-o", "jsonpath={.status.phase}").stdout != "Running":
            if time.monotonic() > deadline:
                raise SystemExit("bench: the pod did not become Running")
            time.sleep(1)
        twin = twin_namespace_name(namespace, topology.local.cluster_id)
        local_client = load_api_client(str(local.kubeconfig))
        remote_client = load_api_client(str(remote.kubeconfig))
        paths = {
            "virtual node": (local_client, remote_api.endpoint_from(local_client.configuration), namespace),
            "direct": (remote_client, remote_api.endpoint_from(remote_client.configuration), twin),
        }
        print(f"- exec: {args.execs} round trips per path, interleaved", file=sys.stderr, flush=True)
        latencies: dict[str, list[float]] = {name: [] for name in paths}
        for _client, endpoint, ns in paths.values():
            exec_once(endpoint, ns, POD)  # warm-up: caches, reviews, connections
        for _ in range(args.execs):
            for name, (_client, endpoint, ns) in paths.items():
                latencies[name].append(exec_once(endpoint, ns, POD))
        print(f"- logs: growing the simulated log to {args.log_mib} MiB, {args.rounds} reads per path", file=sys.stderr, flush=True)
        grow_log(kwok_sim.simulated_files(state).logs, args.log_mib)
        throughput: dict[str, list[float]] = {name: [] for name in paths}
        sizes: dict[str, int] = {}
        for _ in range(args.rounds):
            for name, (client, _endpoint, ns) in paths.items():
                rate, sizes[name] = log_throughput(client, ns, POD)
                throughput[name].append(rate)
    finally:
        if not args.keep:
            env.down()

    print()
    print(f"machine: {platform.machine()}, {platform.system()} {platform.release()}, "
          f"{len(os.sched_getaffinity(0))} cores; python {platform.python_version()}")
    print(f"{'operation':<28} {'virtual node':>14} {'direct':>10} {'ratio':>7}")
    v_med, d_med = (statistics.median(latencies[n]) * 1000 for n in ("virtual node", "direct"))
    v_p90, d_p90 = (percentile(latencies[n], 0.9) * 1000 for n in ("virtual node", "direct"))
    v_rate, d_rate = (statistics.median(throughput[n]) for n in ("virtual node", "direct"))
    print(f"{'exec round trip median (ms)':<28} {v_med:>14.1f} {d_med:>10.1f} {v_med / d_med:>7.2f}")
    print(f"{'exec round trip p90 (ms)':<28} {v_p90:>14.1f} {d_p90:>10.1f} {v_p90 / d_p90:>7.2f}")
    print(f"{'log read (MiB/s)':<28} {v_rate:>14.1f} {d_rate:>10.1f} {v_rate / d_rate:>7.2f}")
    print(f"log size read: {sizes.get('virtual node', 0) / 2**20:.1f} MiB (virtual node), {sizes.get('direct', 0) / 2**20:.1f} MiB (direct)")
    print(json.dumps({
        "exec_ms": {"virtual_median": v_med, "direct_median": d_med, "virtual_p90": v_p90, "direct_p90": d_p90},
        "logs_mib_s": {"virtual": v_rate, "direct": d_rate},
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
