"""The pure parts of vkubelet/home_api/discovery.py."""

from __future__ import annotations

import pytest

from kube_offload import constants as c
from vkubelet.home_api import HomeAPIEndpoint
from vkubelet.home_api.discovery import endpoint_from_service, ready_relay_pods


def service(cluster_ip: str, *ports: int) -> dict:
    return {"spec": {"clusterIP": cluster_ip, "ports": [{"port": port} for port in ports]}}


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (None, None),
        (service("10.96.7.8", 443), HomeAPIEndpoint("10.96.7.8", 443)),
        (service("fd00::8", 8443, c.HOME_API_SERVICE_PORT), HomeAPIEndpoint("fd00::8", c.HOME_API_SERVICE_PORT)),
        (service("10.96.7.8", 8443), HomeAPIEndpoint("10.96.7.8", 8443)),  # the only port
        (service("None", 443), None),  # headless
        (service("", 443), None),  # not allocated yet / ExternalName
        (service("10.96.7.8"), None),  # no port
    ],
)
def test_endpoint_from_service(obj, expected):
    assert endpoint_from_service(obj) == expected


def pod(name: str, *, phase: str = "Running", ready: str = "True", deleting: bool = False) -> dict:
    metadata: dict = {"name": name}
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": metadata, "status": {"phase": phase, "conditions": [{"type": "Ready", "status": ready}]}}


def test_ready_relay_pods_keeps_running_ready_pods_not_terminating_sorted():
    pods = {"items": [pod("relay-b"), pod("relay-a"), pod("pending", phase="Pending"), pod("unready", ready="False"),
                      pod("going", deleting=True)]}
    assert ready_relay_pods(pods) == ["relay-a", "relay-b"]
    assert ready_relay_pods({"items": None}) == []


class _Reads:
    """Stands in for runtime.kube.Kube's two reads, counting them."""

    def __init__(self, service: dict | None) -> None:
        self.service, self.calls = service, 0

    def get_or_none(self, resource, name, *, namespace):
        self.calls += 1
        return self.service

    def list(self, resource, *, namespace, label_selector):
        return {"items": []}


def test_endpoint_source_is_none_without_uplinks_and_the_discovery_otherwise():
    from vkubelet.home_api.discovery import Discovery
    from vkubelet.home_api.loop import endpoint_source
    from vkubelet.home_api.settings import HomeAPISettings

    reads = _Reads({"spec": {"clusterIP": "10.96.0.9", "ports": [{"port": 443}]}})
    discovery = Discovery(reads, "kube-offload-tenant-local")  # type: ignore[arg-type]
    assert endpoint_source(HomeAPISettings(uplinks=4), discovery) == discovery.endpoint
    assert endpoint_source(HomeAPISettings(uplinks=0), discovery)() is None
    assert reads.calls == 0


def test_the_first_pod_asking_before_the_loop_read_the_relay_gets_a_fresh_read():
    from vkubelet.home_api import HomeAPIEndpoint
    from vkubelet.home_api.discovery import Discovery

    reads = _Reads({"spec": {"clusterIP": "10.96.0.9", "ports": [{"port": 443}]}})
    discovery = Discovery(reads, "kube-offload-tenant-local")  # type: ignore[arg-type]
    assert discovery.endpoint() == HomeAPIEndpoint("10.96.0.9", 443)
    assert discovery.endpoint() == HomeAPIEndpoint("10.96.0.9", 443)
    assert reads.calls == 1  # then the loop's refreshes keep it fresh
    assert Discovery(_Reads(None), "kube-offload-tenant-local").endpoint() is None  # type: ignore[arg-type]
