"""The harness's free_port never hands out one port twice in a process: a topology's
ports are all chosen before any is bound (a bench run once got the local webhook's port
again as the enforcer's health port, and the enforcer could not start)."""

from __future__ import annotations

from kube_offload_harness.cluster import free_port


def test_free_port_never_repeats_itself():
    ports = [free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)
    assert all(1024 <= port <= 65535 for port in ports)
