"""``kubectl top`` read as numbers, and metrics-server run for it, for the e2e modules that
compare a cluster's figures with another's (tests/e2e/test_metrics.py, test_multihop.py)."""

from __future__ import annotations

import contextlib
from typing import Iterator

from kube_offload.resources import parse_quantity
from kube_offload_harness import metrics_server
from kube_offload_harness.cluster import Cluster, Environment


@contextlib.contextmanager
def metrics_servers(env: Environment, *clusters: Cluster) -> Iterator[None]:
    """metrics-server in each of ``clusters``, started in that order (the cluster whose
    figures the next one reads first), each stopped on exit (unregistered first)."""
    started = []
    try:
        for cluster in clusters:
            metrics_server.start(env, cluster)
            started.append(cluster)
        yield
    finally:
        for cluster in started:
            metrics_server.stop(env, cluster)


def top(cluster, *args: str) -> dict[str, tuple[int, int]] | None:
    """``kubectl top`` rows as name -> (cpu milli-cores, memory bytes); None until it answers."""
    result = cluster.kubectl("top", *args, "--no-headers", check=False)
    if result.returncode != 0:
        return None
    rows = {}
    for line in result.stdout.splitlines():
        fields = line.split()
        if args[0] == "node":  # NAME CPU CPU% MEMORY MEMORY%
            rows[fields[0]] = (parse_quantity(fields[1]), parse_quantity(fields[3]) // 1000)
        elif "--containers" in args:  # POD NAME CPU MEMORY
            rows[f"{fields[0]}/{fields[1]}"] = (parse_quantity(fields[2]), parse_quantity(fields[3]) // 1000)
        else:  # NAME CPU MEMORY
            rows[fields[0]] = (parse_quantity(fields[1]), parse_quantity(fields[2]) // 1000)
    return rows


def close(a: int, b: int, tolerance: float = 0.05, slack: int = 2) -> bool:
    return abs(a - b) <= max(slack, tolerance * max(a, b))
