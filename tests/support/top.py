"""``kubectl top`` read as numbers, for the e2e modules that compare a cluster's figures
with another's (tests/e2e/test_metrics.py, test_multihop.py)."""

from __future__ import annotations

from kube_offload.resources import parse_quantity


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
