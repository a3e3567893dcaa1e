"""The consumer's heartbeat Lease (vkubelet/node/heartbeat.py): its shape and renewal patch,
which the provider's enforcer reads (enforcer/consumers/continuity.py)."""

from __future__ import annotations

from datetime import datetime, timezone

from enforcer.consumers.continuity import REACHABLE, reachability
from kube_offload import constants as C
from vkubelet.node.heartbeat import heartbeat_lease, heartbeat_renewal

NOW = datetime(2026, 11, 27, 10, 0, 0, 123456, tzinfo=timezone.utc)


def test_lease_is_the_one_name_in_the_tenant_namespace() -> None:
    lease = heartbeat_lease("kube-offload-tenant-alpha", "kube-offload-beta", 40)
    assert lease["metadata"] == {"name": C.CONSUMER_HEARTBEAT_LEASE, "namespace": "kube-offload-tenant-alpha"}
    assert lease["spec"] == {"holderIdentity": "kube-offload-beta", "leaseDurationSeconds": 40}
    assert "renewTime" not in lease["spec"]


def test_renewal_is_a_micro_time_the_enforcer_reads_as_fresh() -> None:
    patch = heartbeat_renewal("kube-offload-beta", 40, NOW)
    # MicroTime: the API refuses it without exactly six fraction digits.
    assert patch == {"spec": {"holderIdentity": "kube-offload-beta", "leaseDurationSeconds": 40,
                              "renewTime": "2026-11-27T10:00:00.123456Z"}}
    lease = {"metadata": {"name": C.CONSUMER_HEARTBEAT_LEASE}, **patch}
    assert reachability("alpha", {"metadata": {"name": "alpha"}}, lease, NOW, 40.0).state == REACHABLE
