"""The enforcer's per-slice metrics (enforcer/observability.py; docs/observability.md):
phase, accepted and used per resource, read from the caches at scrape time."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from enforcer.observability import slice_families
from kube_offload import constants as c
from support import builders

TENANT = c.tenant_namespace("local")
TWIN = "demo-local"


class Cache(dict):  # type: ignore[type-arg]
    def list(self) -> list[Any]:
        return list(self.values())


def shadowpod(name: str, cpu: str, slice_name: str, **meta: Any) -> dict[str, Any]:
    return builders.shadowpod(name, TWIN, spec={"containers": [builders.container(requests={"cpu": cpu})]}, origin="local",
                              labels={c.LABEL_SLICE: slice_name}, **meta)


def test_each_slice_reports_its_phase_what_was_accepted_and_what_its_pods_use() -> None:
    namespaces = Cache({
        TENANT: {"metadata": {"name": TENANT, "labels": {c.LABEL_TENANT: "local"}}},
        TWIN: {"metadata": {"name": TWIN, "labels": {c.LABEL_MANAGED_BY: c.MANAGED_BY_ENFORCER, c.LABEL_ORIGIN_CLUSTER_ID: "local"}}},
    })
    slices = Cache({
        f"{TENANT}/train": {"metadata": {"name": "train", "namespace": TENANT}, "spec": {"pool": "gpu"},
                            "status": {"phase": "PartiallyAccepted", "accepted": {"cpu": "2", "pods": "4"}}},
        f"{TENANT}/web": {"metadata": {"name": "web", "namespace": TENANT}, "spec": {"pool": "general"},
                          "status": {"phase": "Refused", "accepted": {}}},
    })
    ended = shadowpod("c", "1", "train")
    ended["status"] = {"phase": "Failed"}
    shadowpods = Cache({"a": shadowpod("a", "500m", "train"), "b": shadowpod("b", "250m", "train"), "c": ended})
    enforcer = SimpleNamespace(shadowpods=shadowpods, consumer_loops=SimpleNamespace(namespaces=namespaces, slices=slices))
    families = {f.name: {tuple(s.labels.values()): s.value for s in f.samples} for f in slice_families([enforcer])}  # type: ignore[list-item]
    assert families["kube_offload_enforcer_slice_phase"] == {
        ("local", "train", "PartiallyAccepted"): 1.0, ("local", "web", "Refused"): 1.0}
    assert families["kube_offload_enforcer_slice_accepted"] == {
        ("local", "train", "gpu", "cpu"): 2.0, ("local", "train", "gpu", "pods"): 4.0}
    assert families["kube_offload_enforcer_slice_used"] == {
        ("local", "train", "gpu", "cpu"): 0.75, ("local", "train", "gpu", "pods"): 2.0}
