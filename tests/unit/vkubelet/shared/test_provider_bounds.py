"""What the consumer takes back from its provider, and how much of it
(vkubelet/shared/provider_bounds.py, pure): sizes in bytes, counts, addresses."""

from __future__ import annotations

import pytest

from vkubelet.shared import provider_bounds as pb
from vkubelet.shared.ip_remapping import NO_REMAPPING, RemappingSettings


@pytest.mark.parametrize(("text", "limit", "cut"), [
    ("short", 10, "short"),
    ("abcdef", 3, "abc"),
    ("é" * 4, 5, "éé"),  # two bytes each: never half a character
    ("日本語", 4, "日"),
    ("", 0, ""),
])
def test_texts_are_cut_in_bytes_never_inside_a_character(text, limit, cut):
    assert pb.truncate_utf8(text, limit) == cut
    assert len(pb.truncate_utf8(text, limit).encode()) <= limit


def test_each_container_gets_4_kib_within_12_kib_for_the_pod():
    assert pb.container_message_bytes(0) == pb.container_message_bytes(1) == 4096
    assert pb.container_message_bytes(3) == 4096
    assert pb.container_message_bytes(4) == 3072
    assert pb.container_message_bytes(100) == 122


def test_the_status_texts_are_bounded_and_nothing_else_changes():
    status = {
        "phase": "Running",
        "reason": "Q" * 500,
        "message": "m" * 10_000,
        "podIPs": [{"ip": "10.0.0.1"}],
        "conditions": [{"type": "Ready", "status": "True", "reason": "R" * 500, "message": "r" * 10_000}, "junk"],
        "containerStatuses": [{
            "name": "app", "restartCount": 3, "ready": True, "image": "i" * 5000,
            "state": {"terminated": {"exitCode": 2, "reason": "T" * 500, "message": "t" * 10_000}},
            "lastState": {"waiting": {"reason": "W", "message": "w" * 10_000}},
        }],
    }
    bounded = pb.bounded_status_texts(status)
    assert bounded["reason"] == "Q" * 128 and bounded["message"] == "m" * 4096
    assert bounded["conditions"] == [{"type": "Ready", "status": "True", "reason": "R" * 128, "message": "r" * 4096}]
    [app] = bounded["containerStatuses"]
    assert app["image"] == "i" * 1024  # any other text: 1 KiB
    assert app["state"]["terminated"] == {"exitCode": 2, "reason": "T" * 128, "message": "t" * 4096}
    assert app["lastState"]["waiting"] == {"reason": "W", "message": "w" * 4096}
    assert (app["restartCount"], app["ready"], bounded["phase"], bounded["podIPs"]) == (3, True, "Running", [{"ip": "10.0.0.1"}])
    # Idempotent (the cache's bound, then the status mapping's), and the input untouched.
    assert pb.bounded_status_texts(bounded) == bounded
    assert len(status["message"]) == 10_000


def test_conditions_are_the_kubelets_each_once():
    remote = [{"type": "Ready", "status": "True"}, {"type": "Ready", "status": "False"}, {"type": "PodScheduled"},
              {"type": "example.com/x"}, {"type": "Initialized", "status": "True"}, None]
    assert pb.copied_conditions(remote) == [{"type": "Ready", "status": "True"}, {"type": "Initialized", "status": "True"}]
    assert pb.copied_conditions(None) == []


def test_container_statuses_are_those_the_pod_declares_one_each_in_the_remote_order():
    declared = [{"name": "a"}, {"name": "b", "volumeMounts": [{"name": "v"}]}]
    remote = [{"name": "b", "volumeMounts": [{"name": "v"}, {"name": "w"}]}, {"name": "x"}, {"name": "a", "n": 1},
              {"name": "a", "n": 2}]
    assert pb.copied_container_statuses(remote, declared, 4096) == [
        {"name": "b", "volumeMounts": [{"name": "v"}]}, {"name": "a", "n": 1}]


def test_pod_ips_inside_the_range_translated_one_per_family_the_rest_named():
    remapping = RemappingSettings(remote_pod_cidr="10.0.0.0/16,fd00:10::/64",
                                  remote_pod_cidr_remapped="10.100.0.0/16,fd00:99::/64").remote_pod_ips
    assert pb.shown_pod_ips(["10.0.1.2", "fd00:10::2"], remapping) == (["10.100.1.2", "fd00:99::2"], [])
    assert pb.shown_pod_ips(["203.0.113.7"], remapping) == ([], ["203.0.113.7"])
    assert pb.shown_pod_ips(["203.0.113.7", "10.0.1.2", "10.0.1.3"], remapping) == (["10.100.1.2"], ["203.0.113.7"])
    # Nothing configured: every valid address is shown as it is, one per family.
    assert pb.shown_pod_ips(["203.0.113.7", "junk", "198.51.100.1", "2001:db8::1"], NO_REMAPPING) == (
        ["203.0.113.7", "2001:db8::1"], [])
    # The same CIDR on both sides: checked, not translated.
    identity = RemappingSettings(remote_pod_cidr="10.0.0.0/16", remote_pod_cidr_remapped="10.0.0.0/16").remote_pod_ips
    assert pb.shown_pod_ips(["10.0.1.2", "192.168.0.1"], identity) == (["10.0.1.2"], ["192.168.0.1"])
