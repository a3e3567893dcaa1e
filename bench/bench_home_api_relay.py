"""Benchmark: the home-API relay at scale, N concurrent pod connections through one relay
and one virtual kubelet, against the same connections made directly, in the same run.

    .venv/bin/python bench/bench_home_api_relay.py [--connections 1000] [--serial 300] [--rounds 3]
                                                   [--open-concurrency 16] [--keep]

What runs (docs/home-api.md, "The path"): a loopback environment (local + 1 remote kwok
cluster, the harness's vkubelet), the relay (``kube-offload relay``, a process of its own
on the host) and, in the remote's tenant namespace, the relay's Service and a relay pod
that kwok runs. kwok forwards every pod port to one host address
(harness/kube_offload_harness/kwok_sim.py): the relay's uplink port listens there, so
each uplink really is a port-forward through the remote kube-apiserver (a WebSocket as
the consumer's identity, then kwok), and on its go byte the vkubelet dials the local
kube-apiserver, as in a real provider.

The "pods" are this script: N TLS connections to the relay's pod port, each verified
against the local cluster's CA and authenticated as its admin, i.e. TLS end to end with
the home API server through the relay; and N direct connections to the same API server
(the baseline). Per connection: connect + TLS handshake + one ``GET
/api/v1/namespaces/default`` (the first request also pairs the relay's connection with an
uplink, and makes the vkubelet dial home). All N of each kind stay open, then:

* **serial**: ``--serial`` requests one at a time, relay and direct interleaved, over the
  open connections: the added latency of the two hops with nothing else in flight;
* **concurrent**: ``--rounds`` rounds in which every one of the N connections sends one
  request at once (relay, then direct): the added latency under N in flight.

Printed: the latencies (p50/p90/p99) both ways and the difference; CPU (user + system,
``/proc``) and memory (``VmRSS``), threads and descriptors of the relay and of the vkubelet
before and with the N connections held, per connection and per request; the remote
kube-apiserver's and kwok's share (they carry the port-forward streams); failures.

Not a test: it never fails on time. It exits non-zero only if the environment could not
be set up. It brings up its own environment in a temporary state directory and tears it
down at the end, stopping exactly the processes it started.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import ssl
import statistics
import sys
import tempfile
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import controlplane
from kube_offload import constants as C
from kube_offload.runtime.kube import load_api_client
from kube_offload_harness import kwok_sim
from kube_offload_harness.cluster import Environment, default_topology

RELAY_POD = "home-api-relay-bench"
RELAY_LABELS = {"app.kubernetes.io/name": "kube-offload", "app.kubernetes.io/component": C.HOME_API_RELAY_COMPONENT}
PATH = "/api/v1/namespaces/default"
# The goal of issue 39 beside which the figures are printed.
GOAL = "1,000 concurrent pod connections through one relay and one vkubelet, CPU and memory per connection and added latency printed"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- the client: one kept-alive HTTP/1.1 connection over TLS --------------------------------------
@dataclass
class Target:
    address: tuple[str, int]
    server_hostname: str
    host_header: str
    context: ssl.SSLContext
    auth: str  # an Authorization header line, or ""
    direct: tuple[str, int]  # the API server's own address


@dataclass
class Conn:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    broken: bool = False
    last_used: float = field(default_factory=time.monotonic)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # one request at a time on it


@dataclass
class Stats:
    opened: list[float] = field(default_factory=list)
    failed_open: int = 0
    failed_requests: int = 0
    serial: list[float] = field(default_factory=list)
    concurrent: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)

    def error(self, exc: BaseException) -> None:
        key = f"{exc.__class__.__name__}: {str(exc)[:80]}"
        self.errors[key] = self.errors.get(key, 0) + 1


async def request(conn: Conn, target: Target) -> float:
    """Seconds for one GET and its whole answer on an open connection (checked)."""
    conn.last_used = time.monotonic()
    started = time.perf_counter()
    conn.writer.write(f"GET {PATH} HTTP/1.1\r\nHost: {target.host_header}\r\nAccept: application/json\r\n"
                      f"{target.auth}\r\n".encode())
    await conn.writer.drain()
    head = await conn.reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = lines[0].split(" ", 2)
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
    if "content-length" in headers:
        body = await conn.reader.readexactly(int(headers["content-length"]))
    else:  # chunked
        body = b""
        while True:
            size = int((await conn.reader.readuntil(b"\r\n")).split(b";")[0], 16)
            body += await conn.reader.readexactly(size + 2)
            if size == 0:
                break
    elapsed = time.perf_counter() - started
    if len(status) < 2 or status[1] != "200" or b'"name":"default"' not in body:
        raise RuntimeError(f"answer {lines[0]!r}: {body[:120]!r}")
    return elapsed


async def open_conn(target: Target, stats: Stats) -> Conn | None:
    started = time.perf_counter()
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(
            *target.address, ssl=target.context, server_hostname=target.server_hostname), 30)
        conn = Conn(reader, writer)
        await asyncio.wait_for(request(conn, target), 30)
    except (OSError, ssl.SSLError, asyncio.TimeoutError, asyncio.IncompleteReadError, RuntimeError, ValueError) as exc:
        stats.failed_open += 1
        stats.error(exc)
        return None
    stats.opened.append(time.perf_counter() - started)
    return conn


# The home API server closes a kept-alive connection idle for 90 s (the apiserver's
# http.Server IdleTimeout), as it would a pod's: the bench keeps each one busier than that.
KEEPALIVE_SECONDS = 30.0


async def keep_alive(conns: list[tuple[Conn, Target]], stats: dict[str, "Stats"], stop: asyncio.Event) -> None:
    """A GET on every open connection idle for KEEPALIVE_SECONDS (not counted in the
    latencies; a failure marks the connection broken and counts in ``keepalive_failures``)."""
    while not stop.is_set():
        now = time.monotonic()
        due = [(conn, target) for conn, target in conns
               if not conn.broken and not conn.lock.locked() and now - conn.last_used > KEEPALIVE_SECONDS]
        # At once, not one after the other: a pass over 2,000 connections one GET at a
        # time can outlast the API server's 90 s on a busy machine.
        await asyncio.gather(*(timed(conn, target, stats["relay" if target.address != target.direct else "direct"], [])
                               for conn, target in due))
        try:
            await asyncio.wait_for(stop.wait(), 2)
        except asyncio.TimeoutError:
            pass


async def open_all(target: Target, count: int, concurrency: int, stats: Stats,
                   held: list[tuple[Conn, Target]]) -> list[Conn]:
    gate = asyncio.Semaphore(concurrency)

    async def one() -> Conn | None:
        async with gate:
            conn = await open_conn(target, stats)
        if conn is not None:
            held.append((conn, target))  # kept alive from now on
        return conn

    return [c for c in await asyncio.gather(*(one() for _ in range(count))) if c is not None]


async def timed(conn: Conn, target: Target, stats: Stats, into: list[float]) -> None:
    if conn.broken:
        return
    try:
        async with conn.lock:
            into.append(await asyncio.wait_for(request(conn, target), 60))
    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, RuntimeError, ValueError) as exc:
        conn.broken = True
        stats.failed_requests += 1
        stats.error(exc)


# --- the processes -------------------------------------------------------------------------------
@dataclass
class Sample:
    cpu: float
    rss_kib: int
    threads: int
    fds: int


def sample(pid: int) -> Sample:
    try:
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        fds = 0
    return Sample(controlplane.cpu_seconds(pid, children=False), controlplane.status_kib(pid, "VmRSS"),
                  controlplane.status_kib(pid, "Threads"), fds)


def samples(pids: dict[str, int]) -> dict[str, Sample]:
    return {name: sample(pid) for name, pid in pids.items()}


def relay_metric(health_port: int, name: str) -> float:
    """A gauge the relay serves; 0 while it is not serving yet (still importing on a busy machine)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{health_port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return 0.0
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def percentiles(values: list[float]) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    pick = lambda q: ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] * 1000  # noqa: E731
    return f"{pick(0.5):.2f} / {pick(0.9):.2f} / {pick(0.99):.2f}"


def median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000 if values else float("nan")


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def setup_relay(env: Environment, topology, state: Path, connections: int) -> tuple[int, int, dict[str, int]]:
    """The relay process, its Service and pod on the remote, the vkubelet restarted to hold
    that many connections; (pod port, health port, pids by name)."""
    local = env.cluster(topology.local)
    remote = env.cluster(topology.remotes[0])
    spec = topology.remotes[0]
    tenant = C.tenant_namespace(topology.local.cluster_id)
    serve, health = free_port(), free_port()
    uplink = kwok_sim.port_forward_target(state)  # every remote pod port is forwarded there
    argv = [sys.executable, "-m", "kube_offload.cli", "relay", "--serve-bind", f"127.0.0.1:{serve}",
            "--uplink-port", str(uplink), "--max-connections", str(connections + 64),
            "--max-connections-per-source", str(connections + 64), "--health-bind", f"127.0.0.1:{health}"]
    env.processes.start("relay-bench", argv, log=env.log_path("relay-bench"), env=env._process_env())
    remote.apply({"apiVersion": "v1", "kind": "Service",
                  "metadata": {"name": C.HOME_API_SERVICE, "namespace": tenant, "labels": RELAY_LABELS},
                  "spec": {"selector": RELAY_LABELS, "ports": [{"name": "https", "port": C.HOME_API_SERVICE_PORT,
                                                               "targetPort": C.HOME_API_RELAY_SERVE_PORT}]}})
    remote.apply({"apiVersion": "v1", "kind": "Pod",
                  "metadata": {"name": RELAY_POD, "namespace": tenant, "labels": RELAY_LABELS},
                  "spec": {"automountServiceAccountToken": False,
                           "securityContext": {"runAsNonRoot": True, "runAsUser": 65532,
                                               "seccompProfile": {"type": "RuntimeDefault"}},
                           "containers": [{"name": "relay", "image": "kube-offload:bench",
                                           "ports": [{"containerPort": C.HOME_API_RELAY_SERVE_PORT}],
                                           "securityContext": {"allowPrivilegeEscalation": False,
                                                               "capabilities": {"drop": ["ALL"]}}}]}})
    # The vkubelet again, allowed that many uplinks and reading the relay every 2 s.
    name = f"vkubelet-{spec.cluster_id}"
    env.processes.stop(name)
    env.start_vkubelet(topology, spec, ["--home-api-max-connections", str(connections + 64),
                                        "--home-api-refresh-period", "2s"])
    env.wait_virtual_node_ready(local, spec)
    deadline = time.monotonic() + 120
    while relay_metric(health, "kube_offload_relay_idle_uplinks") < 1:
        if time.monotonic() > deadline:
            raise SystemExit(f"bench: no uplink reached the relay in 120 s; see {env.log_path(name)} and "
                             f"{env.log_path('relay-bench')}")
        time.sleep(1)
    pids = {"relay": env.processes.get("relay-bench").pid, "vkubelet": env.processes.get(name).pid}
    planes = controlplane.control_plane_pids(remote)
    pids.update({f"remote {k}": v for k, v in planes.items() if k == "kube-apiserver" or k.startswith("kwok")})
    return serve, health, pids


def target_of(kubeconfig: Path, address: tuple[str, int] | None = None) -> Target:
    config = load_api_client(str(kubeconfig)).configuration
    parts = urlsplit(config.host)
    context = ssl.create_default_context(cafile=config.ssl_ca_cert)
    if config.cert_file:
        context.load_cert_chain(config.cert_file, config.key_file)
    token = (config.api_key or {}).get("authorization") or (config.api_key or {}).get("BearerToken") or ""
    auth = f"Authorization: {token}\r\n" if token else ""
    direct = (parts.hostname or "127.0.0.1", parts.port or 443)
    return Target(address or direct, parts.hostname or "", f"{direct[0]}:{direct[1]}", context, auth, direct)


async def measure(direct: Target, relayed: Target, args: argparse.Namespace, pids: dict[str, int], health: int) -> dict:
    stats = {"relay": Stats(), "direct": Stats()}
    held_conns: list[tuple[Conn, Target]] = []
    stop = asyncio.Event()
    keeper = asyncio.create_task(keep_alive(held_conns, stats, stop))
    before = samples(pids)
    t0 = time.monotonic()
    say(f"- opening {args.connections} connections through the relay ({args.open_concurrency} at a time)")
    relay_conns = await open_all(relayed, args.connections, args.open_concurrency, stats["relay"], held_conns)
    opened_s = time.monotonic() - t0
    await asyncio.sleep(3)
    held = samples(pids)
    say(f"- opening {args.connections} direct connections")
    direct_conns = await open_all(direct, args.connections, args.open_concurrency, stats["direct"], held_conns)
    paired = relay_metric(health, "kube_offload_relay_active_connections")
    say(f"- serial: {args.serial} requests each way, interleaved")
    for i in range(args.serial):
        for conns, target, name in ((relay_conns, relayed, "relay"), (direct_conns, direct, "direct")):
            if conns:
                await timed(conns[i % len(conns)], target, stats[name], stats[name].serial)
    cpu_rounds = {}
    for name, conns, target in (("relay", relay_conns, relayed), ("direct", direct_conns, direct)):
        say(f"- concurrent: {args.rounds} rounds of {len(conns)} requests at once ({name})")
        start = samples(pids)
        for _ in range(args.rounds):
            await asyncio.gather(*(timed(conn, target, stats[name], stats[name].concurrent) for conn in conns))
        end = samples(pids)
        cpu_rounds[name] = {k: end[k].cpu - start[k].cpu for k in pids}
    stop.set()
    await keeper
    for conn in relay_conns + direct_conns:
        conn.writer.close()
    return {"stats": stats, "before": before, "held": held, "opened_s": opened_s, "paired": paired,
            "relay_conns": len(relay_conns), "direct_conns": len(direct_conns), "cpu_rounds": cpu_rounds}


def report(result: dict, args: argparse.Namespace, load: tuple[tuple[float, ...], tuple[float, ...]]) -> None:
    stats, before, held = result["stats"], result["before"], result["held"]
    n = max(1, result["relay_conns"])
    print(f"\nmachine: {platform.machine()}, Linux {platform.release()}, Python {platform.python_version()}, "
          f"{os.cpu_count()} CPUs; load {load[0][0]:.1f} before, {load[1][0]:.1f} after")
    print(f"goal (issue 39): {GOAL}")
    print(f"\nconnections held: relay {result['relay_conns']} of {args.connections} (relay's active gauge "
          f"{result['paired']:.0f}), direct {result['direct_conns']} of {args.connections}; "
          f"opening the relay ones took {result['opened_s']:.1f} s")
    for name in ("relay", "direct"):
        s = stats[name]
        print(f"  {name}: failed opens {s.failed_open}, failed requests {s.failed_requests}"
              + (f"; errors: {json.dumps(s.errors)}" if s.errors else ""))
    print(f"\n{'latency ms (p50 / p90 / p99)':<36} {'relay':>24} {'direct':>24} {'added (p50)':>12}")
    for label, attr in (("open: connect + TLS + first GET", "opened"), ("serial GET (one in flight)", "serial"),
                        (f"concurrent GET ({result['relay_conns']} in flight)", "concurrent")):
        r, d = getattr(stats["relay"], attr), getattr(stats["direct"], attr)
        print(f"{label:<36} {percentiles(r):>24} {percentiles(d):>24} {median_ms(r) - median_ms(d):>11.2f}")
    print(f"\n{'per process':<24} {'RSS MiB before':>15} {'with N held':>12} {'KiB/conn':>9} {'threads':>12} "
          f"{'fds':>12} {'CPU ms/conn (open)':>19} {'CPU ms/request':>15}")
    requests = max(1, len(stats["relay"].concurrent))
    for name in before:
        b, h = before[name], held[name]
        print(f"{name:<24} {b.rss_kib / 1024:>15.1f} {h.rss_kib / 1024:>12.1f} {(h.rss_kib - b.rss_kib) / n:>9.1f} "
              f"{b.threads:>5} -> {h.threads:<5} {b.fds:>5} -> {h.fds:<5} {(h.cpu - b.cpu) * 1000 / n:>19.2f} "
              f"{result['cpu_rounds']['relay'][name] * 1000 / requests:>15.3f}")
    print("(CPU ms/request: over the concurrent relay rounds; the direct rounds cost these processes "
          + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in result["cpu_rounds"]["direct"].items()) + " in all)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--connections", type=int, default=1000, help="pod connections held at once, each way")
    parser.add_argument("--serial", type=int, default=300, help="requests one at a time, each way")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every connection sending one request at once")
    parser.add_argument("--open-concurrency", type=int, default=16, help="connections being opened at once")
    parser.add_argument("--keep", action="store_true", help="leave the environment up at the end")
    args = parser.parse_args()

    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = 4 * args.connections + 512  # this script holds 2 per pair; the relay and vkubelet inherit it
    if soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            raise SystemExit(f"bench: {args.connections} connections need {needed} descriptors; the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    load_before = os.getloadavg()
    state = Path(tempfile.mkdtemp(prefix="kube-offload-bench-relay-"))
    env = Environment(state, say=say)
    topology = default_topology(prefix=f"br{uuid.uuid4().hex[:4]}", remotes=1)
    try:
        env.up(topology)
        serve, health, pids = setup_relay(env, topology, state, args.connections)
        local = env.cluster(topology.local)
        direct = target_of(local.kubeconfig)
        relayed = target_of(local.kubeconfig, ("127.0.0.1", serve))
        result = asyncio.run(measure(direct, relayed, args, pids, health))
    finally:
        if not args.keep:
            env.down()
    report(result, args, (load_before, os.getloadavg()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
