"""Consumer spec.pools: the CRD's schema and kube_offload/pools.py read the same fields,
a malformed pool refuses naming its field, and the offloading patch merges as documented
(docs/slices.md "Provider: pools")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kube_offload import constants as c
from kube_offload.pools import Pool, PoolError, apply_pool_patch, parse_pools, patch_conflicts, pool_covers

CRD = Path(__file__).resolve().parents[3] / "kube_offload" / "manifests" / "consumer-crd.yaml"
GPU = {
    "name": "gpu",
    "description": "A100 nodes",
    "nodeSelector": {"pool": "gpu"},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "runtimeClassName": "nvidia",
    "nodeLabels": {"accelerator": "a100"},
}


def pools_schema() -> dict[str, Any]:
    crd = yaml.safe_load(CRD.read_text())
    [version] = crd["spec"]["versions"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["pools"]
    return schema


def test_the_schema_is_a_list_keyed_by_name_with_the_fields_the_parser_reads() -> None:
    schema = pools_schema()
    assert schema["type"] == "array"
    assert schema["x-kubernetes-list-type"] == "map" and schema["x-kubernetes-list-map-keys"] == ["name"]
    item = schema["items"]
    assert item["required"] == ["name", "nodeSelector"]
    assert set(item["properties"]) == {"name", "description", "nodeSelector", "tolerations", "runtimeClassName", "nodeLabels"}
    assert item["properties"]["name"]["maxLength"] == c.POOL_NAME_MAX
    # Every field of the example parses back to what it says.
    assert parse_pools({"pools": [GPU]}) == {"gpu": Pool(
        name="gpu", node_selector={"pool": "gpu"}, description="A100 nodes",
        tolerations=({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},),
        runtime_class_name="nvidia", node_labels={"accelerator": "a100"})}


def test_no_pools_is_no_pool() -> None:
    assert parse_pools({}) == {}
    assert parse_pools({"pools": []}) == {}


@pytest.mark.parametrize(
    "pools, message",
    [
        ("gpu", r"spec\.pools must be a list"),
        ([{"nodeSelector": {"a": "b"}}], r"spec\.pools\[0\]\.name is required"),
        ([{"name": "Gpu", "nodeSelector": {"a": "b"}}], r"spec\.pools\[0\]\.name 'Gpu' must be a DNS label"),
        ([{"name": "a" * 21, "nodeSelector": {"a": "b"}}], r"at most 20 characters"),
        ([{"name": "gpu"}], r"spec\.pools\[gpu\]\.nodeSelector is required and not empty"),
        ([{"name": "gpu", "nodeSelector": {"bad key!": "x"}}], r"spec\.pools\[gpu\]\.nodeSelector: label key name"),
        ([{"name": "gpu", "nodeSelector": {"a": "b"}, "tolerations": [{"key": "k", "operator": "Maybe"}]}],
         r"spec\.pools\[gpu\]\.tolerations\[0\]\.operator 'Maybe'"),
        ([{"name": "gpu", "nodeSelector": {"a": "b"}, "tolerations": [{"key": "k", "priority": 1}]}],
         r"tolerations\[0\]: unknown field 'priority'"),
        ([{"name": "gpu", "nodeSelector": {"a": "b"}}, {"name": "gpu", "nodeSelector": {"a": "c"}}], r"listed twice"),
    ],
)
def test_a_malformed_pool_refuses_naming_the_field(pools: object, message: str) -> None:
    with pytest.raises(PoolError, match=message):
        parse_pools({"pools": pools})


def test_a_pool_covers_the_nodes_with_every_selector_label() -> None:
    [pool] = parse_pools({"pools": [{"name": "gpu", "nodeSelector": {"pool": "gpu", "zone": "a"}}]}).values()
    assert pool_covers(pool, {"metadata": {"labels": {"pool": "gpu", "zone": "a", "x": "y"}}})
    assert not pool_covers(pool, {"metadata": {"labels": {"pool": "gpu"}}})
    assert not pool_covers(pool, {"metadata": {}})


def test_the_patch_merges_the_selector_appends_tolerations_and_sets_the_runtime_class() -> None:
    [pool] = parse_pools({"pools": [GPU]}).values()
    spec = {"containers": [{"name": "a"}], "nodeSelector": {"disk": "ssd"},
            "tolerations": [{"key": "mine", "operator": "Exists"}]}
    patched = apply_pool_patch(spec, pool)
    assert patched["nodeSelector"] == {"disk": "ssd", "pool": "gpu"}
    assert patched["tolerations"] == [{"key": "mine", "operator": "Exists"}, dict(GPU["tolerations"][0])]
    assert patched["runtimeClassName"] == "nvidia"
    assert spec["nodeSelector"] == {"disk": "ssd"} and "runtimeClassName" not in spec  # the input is left alone
    assert apply_pool_patch(patched, pool) == patched  # applied twice, the same pod
    bare = apply_pool_patch({"containers": []}, Pool(name="general", node_selector={"pool": "general"}))
    assert bare == {"containers": [], "nodeSelector": {"pool": "general"}}


def test_a_consumer_field_that_conflicts_with_the_patch_is_named() -> None:
    [pool] = parse_pools({"pools": [GPU]}).values()
    assert patch_conflicts({"nodeSelector": {"pool": "gpu"}, "runtimeClassName": "nvidia"}, pool) == []
    problems = patch_conflicts({"nodeSelector": {"pool": "cpu"}, "runtimeClassName": "kata"}, pool, field_prefix="spec.pod.spec")
    assert len(problems) == 2
    assert problems[0].startswith("spec.pod.spec.nodeSelector[pool]='cpu' conflicts with pool 'gpu'")
    assert problems[1].startswith("spec.pod.spec.runtimeClassName='kata' conflicts with pool 'gpu'")
