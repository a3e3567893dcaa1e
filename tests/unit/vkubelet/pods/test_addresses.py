"""The Warning about an address the provider reports outside the remote pod range, told
once per pod (vkubelet/pods/addresses.py)."""

from __future__ import annotations

from vkubelet.pods.addresses import OutsideAddresses, outside_message


def pod(uid: str) -> dict:
    return {"metadata": {"name": "web", "namespace": "demo", "uid": uid}}


def test_told_once_per_pod_not_at_every_status_write():
    told = OutsideAddresses()
    assert told.first_time(pod("u1"), ["203.0.113.7"])
    assert not told.first_time(pod("u1"), ["203.0.113.7"])
    assert not told.first_time(pod("u1"), ["203.0.113.8"])  # once per pod, whatever it reports next
    assert told.first_time(pod("u2"), ["203.0.113.7"])  # another pod (or the same name made again)
    assert not told.first_time(pod("u3"), [])  # nothing outside: nothing to tell


def test_back_in_range_and_out_again_is_told_again():
    told = OutsideAddresses()
    assert told.first_time(pod("u1"), ["203.0.113.7"])
    assert not told.first_time(pod("u1"), [])
    assert told.first_time(pod("u1"), ["203.0.113.7"])


def test_the_memory_is_bounded_oldest_first_out():
    told = OutsideAddresses(max_remembered=2)
    for uid in ("a", "b", "c"):
        assert told.first_time(pod(uid), ["203.0.113.7"])
    assert told.first_time(pod("a"), ["203.0.113.7"])  # forgotten: told again at worst
    assert not told.first_time(pod("c"), ["203.0.113.7"])


def test_the_message_names_the_address_the_range_and_the_cluster():
    message = outside_message(["203.0.113.7", "2001:db8::7"], "10.0.0.0/16", "eu1")
    assert message.startswith("cluster eu1 reports pod IP 203.0.113.7, 2001:db8::7, outside --remote-pod-cidr=10.0.0.0/16: ")
    assert "not shown" in message
