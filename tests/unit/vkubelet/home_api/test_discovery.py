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


def test_endpoint_source_is_none_without_uplinks_and_the_discovery_otherwise():
    from vkubelet.home_api.discovery import Discovery
    from vkubelet.home_api.loop import endpoint_source
    from vkubelet.home_api.settings import HomeAPISettings

    discovery = Discovery(None, "kube-offload-tenant-local")  # type: ignore[arg-type]  # never refreshed here
    assert discovery.endpoint() is None  # nothing read yet
    assert endpoint_source(HomeAPISettings(uplinks=4), discovery) == discovery.endpoint
    assert endpoint_source(HomeAPISettings(uplinks=0), discovery)() is None
