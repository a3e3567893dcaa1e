"""Throughput and latency through the gateway's tunnel against the direct path, in one run
(a script, not a test: it prints figures). As root, after scripts/bootstrap.sh.

The namespaces of harness gateway_lab.py (two clusters' nodes, a pod behind each) with
pod CIDRs that do not overlap, so that the same two pods can talk both ways:

- **direct**: pod A -> pod B at B's real address, routed node to node over the underlay
  link (a veth), no tunnel, no NAT: what a flat, routed network between the clusters does;
- **tunnel**: pod A -> pod B at B's remapped address, through the product's gateways
  (gateway/engine.py: WireGuard — wireguard-go where the kernel has no module — and the
  NETMAP rules on both nodes), over the same link.

Figures per path: TCP throughput (one connection sending for ``--seconds``, bytes the
receiver counted) and the round trip of a 1-byte request and its answer on one open
connection (median and p99 of ``--round-trips``), then the tunnel's over the direct
path's. Both ends are Python processes, as are the machine's other loads: the absolute
figures say more about this 2-core machine than about WireGuard, the ratio is the point.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

from kube_offload_harness import binaries, gateway_lab as lab_mod, netns
from kube_offload_harness.gateway_lab import PA1, PB1, REMAPPED_B

PORT = 8090
RECEIVER = """
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(1); print("listening", flush=True)
c, _ = s.accept(); mode = c.recv(1)
if mode == b"t":
    total = 0; started = None
    while True:
        data = c.recv(1 << 16)
        if not data: break
        if started is None: started = time.monotonic()
        total += len(data)
    print(total, time.monotonic() - started, flush=True)
else:
    while True:
        data = c.recv(1)
        if not data: break
        c.sendall(data)
"""
SENDER = """
import socket, sys, time
address, port, mode, amount = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
c = socket.create_connection((address, port), timeout=10); c.sendall(mode.encode())
if mode == "t":
    block = b"x" * (1 << 16); end = time.monotonic() + amount
    while time.monotonic() < end: c.sendall(block)
    c.close()
else:
    times = []
    for _ in range(int(amount)):
        started = time.perf_counter(); c.sendall(b"p"); c.recv(1); times.append(time.perf_counter() - started)
    print(" ".join(f"{t:.7f}" for t in times))
"""


def measure(address: str, mode: str, amount: float) -> str:
    receiver = subprocess.Popen(["nsenter", f"--net={netns.netns_path(PB1)}", "--", sys.executable, "-c", RECEIVER, str(PORT)],
                                stdout=subprocess.PIPE, text=True)
    try:
        assert receiver.stdout is not None and receiver.stdout.readline().strip() == "listening"
        sent = netns.in_netns(PA1, [sys.executable, "-c", SENDER, address, str(PORT), mode, str(amount)])
        if mode == "t":
            return receiver.stdout.readline().strip()
        return sent.stdout.strip()
    finally:
        receiver.kill()
        receiver.wait(10)


def figures(address: str, seconds: float, round_trips: int) -> dict[str, float]:
    total, elapsed = measure(address, "t", seconds).split()
    rtts = sorted(float(t) for t in measure(address, "r", round_trips).split())
    return {"mbit_s": int(total) * 8 / float(elapsed) / 1e6, "rtt_p50_us": statistics.median(rtts) * 1e6,
            "rtt_p99_us": rtts[int(len(rtts) * 0.99) - 1] * 1e6}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="how long each throughput run sends")
    parser.add_argument("--round-trips", type=int, default=2000, help="round trips per latency run")
    parser.add_argument("--rounds", type=int, default=3, help="direct/tunnel pairs, alternated (the machine's load varies)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench_gateway: needs root (network namespaces)", file=sys.stderr)
        return 2
    lab = lab_mod.make(overlap=False, wireguard_go=binaries.wireguard_go_path(), direct_routes=True)
    try:
        lab_mod.start_gateways(lab)
        direct_address = lab.pod_ip(PB1)
        tunnel_address = lab.remapped(direct_address, REMAPPED_B)
        print(f"WireGuard: {lab.engines['a'].kind}; direct {lab.pod_ip(PA1)} -> {direct_address}, "
              f"tunnel -> {tunnel_address}; load average {os.getloadavg()[0]:.1f}")
        runs: dict[str, list[dict[str, float]]] = {"direct": [], "tunnel": []}
        for round_ in range(args.rounds):
            for name, address in (("direct", direct_address), ("tunnel", tunnel_address)):
                result = figures(address, args.seconds, args.round_trips)
                runs[name].append(result)
                print(f"  round {round_ + 1} {name:<6} {result['mbit_s']:8.1f} Mbit/s   "
                      f"rtt p50 {result['rtt_p50_us']:7.1f} us  p99 {result['rtt_p99_us']:8.1f} us")
        medians = {name: {key: statistics.median(r[key] for r in results) for key in results[0]}
                   for name, results in runs.items()}
        d, t = medians["direct"], medians["tunnel"]
        print(f"direct: {d['mbit_s']:.1f} Mbit/s, rtt p50 {d['rtt_p50_us']:.1f} us (medians of {args.rounds} rounds)")
        print(f"tunnel: {t['mbit_s']:.1f} Mbit/s, rtt p50 {t['rtt_p50_us']:.1f} us")
        print(f"tunnel/direct: throughput x{t['mbit_s'] / d['mbit_s']:.2f}, round trip x{t['rtt_p50_us'] / d['rtt_p50_us']:.2f} "
              f"(+{t['rtt_p50_us'] - d['rtt_p50_us']:.1f} us added per round trip)")
    finally:
        left = lab_mod.remove(lab)
    if left:
        print(f"left behind: {left}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
