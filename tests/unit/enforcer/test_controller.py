"""The enforcer's wiring decisions that are pure: whether a twin's consumer is granted
the provider's API (read from the Consumer caches when the enforcer makes a pod)."""

from __future__ import annotations

import pytest

from enforcer.controller import pool_of_slice, remote_api_granted
from kube_offload.pools import Pool
from kube_offload import constants as c


def _twin(owner: str | None = "local", managed: bool = True) -> dict:
    labels = {}
    if managed:
        labels[c.LABEL_MANAGED_BY] = c.MANAGED_BY_ENFORCER
    if owner:
        labels[c.LABEL_ORIGIN_CLUSTER_ID] = owner
    return {"metadata": {"name": "ns-local", "labels": labels}}


class Consumers(dict):
    pass


def _consumers(policy: object) -> Consumers:
    return Consumers({"local": {"metadata": {"name": "local"}, "spec": {"policy": policy}}})


def test_granted_by_the_owners_policy():
    assert remote_api_granted(_twin(), _consumers({"pods": {"remoteAPIAccess": True}})) is True


@pytest.mark.parametrize(
    "namespace, consumers",
    [
        pytest.param(_twin(), _consumers({}), id="default-policy"),
        pytest.param(_twin(), _consumers({"pods": {"remoteAPIAccess": False}}), id="refused"),
        pytest.param(_twin(owner="other"), _consumers({"pods": {"remoteAPIAccess": True}}), id="another-consumers-twin"),
        pytest.param(_twin(managed=False), _consumers({"pods": {"remoteAPIAccess": True}}), id="not-a-twin"),
        pytest.param(None, _consumers({"pods": {"remoteAPIAccess": True}}), id="no-namespace"),
        pytest.param(_twin(), _consumers({"pods": {"remoteAPIAccess": "yes"}}), id="policy-does-not-parse"),
    ],
)
def test_anything_else_is_not_granted(namespace, consumers):
    assert remote_api_granted(namespace, consumers) is False


def test_the_pool_of_a_slice_is_its_consumers_pool_of_that_name():
    tenant = c.tenant_namespace("local")
    consumers = Consumers({"local": {"metadata": {"name": "local"}, "spec": {
        "pools": [{"name": "gpu", "nodeSelector": {"pool": "gpu"}}]}}})
    slices = {f"{tenant}/train": {"spec": {"pool": "gpu"}}, f"{tenant}/old": {"spec": {"pool": "gone"}}}
    assert pool_of_slice(_twin(), consumers, slices, "train") == Pool(name="gpu", node_selector={"pool": "gpu"})
    assert pool_of_slice(_twin(), consumers, slices, "old") is None  # its pool is no longer there
    assert pool_of_slice(_twin(), consumers, slices, "other") is None  # no such slice
    assert pool_of_slice(_twin(owner="ghost"), consumers, slices, "train") is None  # no such consumer
    broken = Consumers({"local": {"metadata": {"name": "local"}, "spec": {"pools": [{"name": "gpu"}]}}})
    assert pool_of_slice(_twin(), broken, slices, "train") is None  # pools that do not parse
