"""The consumer distrusts the provider (issue 37, item 6), end to end: what a provider writes
about an offloaded pod (its Events, the remote pod's status) reaches the local cluster
bounded and checked, whatever the provider does (docs/security.md, "What a provider can do
to a consumer").

On the shared loopback environment (conftest.py): the components run under their charts'
identities; the **provider side of each test is hostile**: it writes with the provider's
admin kubeconfig (``remote.kubectl``), as an administrator of the provider (or anything
holding its credentials) could, never through our components:

- many Events about the remote pod and its ShadowPod: repeats, similar messages, a flood
  of distinct reasons (vkubelet/reflection/events.py: aggregated as client-go's
  EventCorrelator would, per-pod and per-remote budgets, what is dropped counted and
  logged once);
- a remote pod address outside the configured remote pod range (``--remote-pod-cidr``,
  the harness's kwok remotes: 10.0.0.0/16): not shown on the local pod, one Warning says
  why (vkubelet/pods/addresses.py);
- huge messages, reasons, an unknown condition and a status for a container the pod does
  not have (vkubelet/shared/provider_bounds.py).
"""

from __future__ import annotations

import json
import tempfile
import time
from typing import Any

import pytest

from kube_offload_harness.cluster import Cluster, Environment
from kube_offload_harness.naming import twin_namespace as twin, unique
from support.clusters import get_or_none, offloaded_namespace
from support.metrics import health_url, scrape, value
from support.waiting import wait_for

IMAGE = "registry.k8s.io/pause:3.10"  # kwok never pulls it
TIMEOUT = 120  # seconds; generous for a loaded 2-core machine
VK_COMPONENT = "kube-offload-vkubelet"
DROPPED_METRIC = "kube_offload_reflection_events_dropped_total"
# A documentation address (RFC 5737), outside the harness's remote pod range: only ever
# data in a pod's status here, never a target.
OUTSIDE_ADDRESS = "203.0.113.7"
HUGE = 100_000  # bytes: far past every bound, far below the API's object size limit


# --- helpers ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ns(local: Cluster, remote: Cluster) -> Any:
    name = unique("distrust")
    offloaded_namespace(local, name)
    wait_for(lambda: get_or_none(remote, "namespace", "", twin(name)) is not None, timeout=TIMEOUT,
             what=f"twin namespace {twin(name)}")
    yield name
    local.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)


def offload(local: Cluster, remote: Cluster, namespace: str, name: str, containers: tuple[str, ...] = ("app",)) -> tuple[dict, dict]:
    """A pod offloaded and running remotely: (local pod, remote pod)."""
    local.apply({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [{"name": c, "image": IMAGE} for c in containers], "terminationGracePeriodSeconds": 0},
    })

    def remote_running() -> dict | None:
        pod = get_or_none(remote, "pod", twin(namespace), name)
        return pod if pod and (pod.get("status") or {}).get("phase") == "Running" else None

    remote_pod = wait_for(remote_running, timeout=TIMEOUT, what=f"{name} running remotely")
    wait_for(lambda: (local.kubectl_json("get", "pod", name, "-n", namespace).get("status") or {}).get("phase") == "Running",
             timeout=TIMEOUT, what=f"{name} Running locally")
    return local.kubectl_json("get", "pod", name, "-n", namespace), remote_pod


def copies(local: Cluster, namespace: str, name: str, reason: str | None = None) -> list[dict]:
    """The Events the vkubelet copied onto local pod ``name`` (not those it recorded itself:
    its own carry no remote source)."""
    items = local.kubectl_json("get", "events", "-n", namespace, "--field-selector", f"involvedObject.name={name}")["items"]
    return [
        e for e in items
        if (e.get("source") or {}).get("component") == VK_COMPONENT
        and "kube-offload.io/remote-source" in ((e.get("metadata") or {}).get("annotations") or {})
        and (reason is None or e["reason"] == reason)
    ]


def own_events(local: Cluster, namespace: str, name: str, reason: str) -> list[dict]:
    items = local.kubectl_json("get", "events", "-n", namespace, "--field-selector", f"involvedObject.name={name}")["items"]
    return [e for e in items if e["reason"] == reason]


def write_remote_events(remote: Cluster, namespace: str, about: dict, events: list[tuple[str, str, str]]) -> None:
    """As the provider's admin: one Event per (name suffix, reason, message) about ``about``
    (a remote Pod or ShadowPod), in one request."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    meta = about["metadata"]
    items = [{
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"{meta['name']}.{suffix}", "namespace": namespace},
        "involvedObject": {"apiVersion": about.get("apiVersion", "v1"), "kind": about["kind"], "namespace": namespace,
                           "name": meta["name"], "uid": meta["uid"]},
        "type": "Warning", "reason": reason, "message": message, "count": 1,
        "firstTimestamp": now, "lastTimestamp": now, "source": {"component": "kubelet"},
    } for suffix, reason, message in events]
    remote.kubectl("create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))


def patch_remote_status(remote: Cluster, namespace: str, name: str, status: dict) -> None:
    """As the provider's admin, the way a hostile provider lies: straight into the remote
    pod's status (a merge patch, from a file: it may be larger than a command line)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json") as patch:
        json.dump({"status": status}, patch)
        patch.flush()
        remote.kubectl("patch", "pod", name, "-n", namespace, "--subresource=status", "--type=merge",
                       f"--patch-file={patch.name}")


def dropped_so_far(env: Environment, remote: Cluster) -> float:
    samples, _ = scrape(health_url(env, f"vkubelet-{remote.spec.cluster_id}"))
    return value(samples, DROPPED_METRIC)


def shadowpod_of(remote: Cluster, namespace: str, name: str) -> dict:
    return remote.kubectl_json("get", "shadowpods.kube-offload.io", name, "-n", namespace)


def utf8_len(text: str | None) -> int:
    return len((text or "").encode())


# --- Events ------------------------------------------------------------------------------------------------
def test_repeats_of_one_remote_event_are_one_local_event_whose_count_adds_up(local, remote, ns):
    """30 remote Events saying the same thing (a provider that never aggregates, or makes
    a new Event each time to flood): one local Event, counted 30 times, as client-go's
    EventCorrelator folds repeats. Before: 30 local copies, one per remote Event."""
    _, remote_pod = offload(local, remote, ns, "repeated")
    write_remote_events(remote, twin(ns), remote_pod,
                        [(f"r{i}", "ProviderSaysAgain", "the same thing, once more") for i in range(30)])
    counted = wait_for(lambda: [e for e in copies(local, ns, "repeated", "ProviderSaysAgain") if e["count"] == 30],
                       timeout=TIMEOUT, what="one local Event counting the 30 remote ones")
    every = copies(local, ns, "repeated", "ProviderSaysAgain")
    assert len(every) == 1, f"{len(every)} local Events"
    assert counted[0]["message"] == "the same thing, once more"


def test_remote_events_differing_only_in_their_message_are_combined_past_ten(local, remote, ns):
    """15 remote Events of one reason, each message different: the first nine stand
    alone, from the tenth on they are one Event "(combined from similar events): <the
    latest>", as client-go's EventAggregator does. Before: 15 local copies."""
    _, remote_pod = offload(local, remote, ns, "chatty")
    write_remote_events(remote, twin(ns), remote_pod,
                        [(f"c{i:02d}", "ProviderChatters", f"message number {i:02d}") for i in range(15)])

    def combined() -> list[dict]:
        return [e for e in copies(local, ns, "chatty", "ProviderChatters")
                if e["message"].startswith("(combined from similar events): ") and e["count"] == 6]

    [event] = wait_for(combined, timeout=TIMEOUT, what="the combined local Event counting 6 remote ones")
    time.sleep(3)
    every = copies(local, ns, "chatty", "ProviderChatters")
    assert len(every) == 10, sorted(e["message"] for e in every)
    assert sum(e["count"] for e in every) == 15
    assert event["message"] == "(combined from similar events): message number 14"


def test_a_flood_of_remote_events_past_the_pod_budget_is_dropped_counted_and_logged_once(offload_env, local, remote, ns):
    """80 remote Events of 80 different reasons about one pod (40 on the remote pod, 40 on
    its ShadowPod): at most the pod's budget (client-go's 25 at once, then one a minute)
    reaches the local cluster; the rest is dropped, counted in the vkubelet's metric, and
    said in one log line. Before: 80 local copies."""
    _, remote_pod = offload(local, remote, ns, "flooded")
    shadowpod = shadowpod_of(remote, twin(ns), "flooded")
    log = offload_env.log_path(f"vkubelet-{remote.spec.cluster_id}")
    log_offset = log.stat().st_size
    dropped_before = dropped_so_far(offload_env, remote)
    started = time.monotonic()
    write_remote_events(remote, twin(ns), remote_pod, [(f"p{i}", f"ProviderFloodsPod{i}", "flood") for i in range(40)])
    write_remote_events(remote, twin(ns), shadowpod, [(f"s{i}", f"ProviderFloodsShadow{i}", "flood") for i in range(40)])

    wait_for(lambda: dropped_so_far(offload_env, remote) - dropped_before >= 80 - 25, timeout=TIMEOUT,
             what="the dropped remote Events counted")
    time.sleep(5)  # anything still on its way
    flood = [e for e in copies(local, ns, "flooded") if e["reason"].startswith("ProviderFloods")]
    minutes = (time.monotonic() - started) / 60
    # The pod's budget: 25 at once (its Scheduled copy took one), one more a minute.
    assert 0 < len(flood) <= 24 + int(minutes) + 1, len(flood)
    assert dropped_so_far(offload_env, remote) - dropped_before >= 80 - len(flood)
    said = [line for line in log.read_text(errors="replace")[log_offset:].splitlines()
            if "dropped" in line and f"{ns}/flooded" in line]
    assert len(said) == 1, said


# --- the pod's addresses -----------------------------------------------------------------------------------
def test_a_remote_pod_ip_outside_the_remote_range_is_not_shown_and_a_warning_says_why_once(local, remote, ns):
    """The provider reports an address outside --remote-pod-cidr (10.0.0.0/16 here): the
    local pod does not show it (a local client would reach whatever the provider chose),
    and one Warning PodIPNotRemapped says why, however often the status is written again.
    Before: shown as the provider wrote it, the Warning repeated at every status write."""
    local_pod, _ = offload(local, remote, ns, "misaddressed")
    assert local_pod["status"]["podIP"].startswith("10.100."), local_pod["status"]  # remapped from 10.0.x.y
    patch_remote_status(remote, twin(ns), "misaddressed", {"podIP": OUTSIDE_ADDRESS, "podIPs": [{"ip": OUTSIDE_ADDRESS}]})
    assert get_or_none(remote, "pod", twin(ns), "misaddressed")["status"]["podIP"] == OUTSIDE_ADDRESS

    [warning] = wait_for(lambda: own_events(local, ns, "misaddressed", "PodIPNotRemapped"), timeout=TIMEOUT,
                         what="a PodIPNotRemapped Warning on the local pod")
    assert warning["type"] == "Warning" and OUTSIDE_ADDRESS in warning["message"]
    status = local.kubectl_json("get", "pod", "misaddressed", "-n", ns)["status"]
    assert OUTSIDE_ADDRESS not in json.dumps(status), status
    assert not status.get("podIP") and not status.get("podIPs"), status

    # More status writes (the provider keeps changing the message): still not shown, still told once.
    for i in range(3):
        patch_remote_status(remote, twin(ns), "misaddressed", {"message": f"still here {i}"})
        wait_for(lambda i=i: (local.kubectl_json("get", "pod", "misaddressed", "-n", ns)["status"].get("message") == f"still here {i}"),
                 timeout=TIMEOUT, what=f"status write {i} mirrored")
    time.sleep(3)
    status = local.kubectl_json("get", "pod", "misaddressed", "-n", ns)["status"]
    assert OUTSIDE_ADDRESS not in json.dumps(status), status
    [again] = own_events(local, ns, "misaddressed", "PodIPNotRemapped")
    assert again["count"] == 1 and again["metadata"]["name"] == warning["metadata"]["name"], again


# --- sizes and counts --------------------------------------------------------------------------------------
def test_what_the_provider_writes_into_the_status_is_bounded_in_size_and_count(local, remote, ns):
    """Huge messages and reasons, a condition type of the provider's own and a status for
    a container the pod does not have: the local pod shows the messages cut at their
    bounds (4 KiB; a reason at 128 bytes), neither the unknown condition nor the stray
    container. Before: all of it, 100 KB at a time, copied onto the local pod."""
    offload(local, remote, ns, "bloated")
    remote_pod = get_or_none(remote, "pod", twin(ns), "bloated")
    status = remote_pod["status"]
    conditions = [c for c in status["conditions"] if c["type"] != "Ready"]
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    conditions.append({**ready, "reason": "R" * 1000, "message": "r" * HUGE})
    conditions.append({"type": "example.com/provider-says", "status": "True", "message": "p" * HUGE,
                       "lastTransitionTime": ready["lastTransitionTime"]})
    [app] = status["containerStatuses"]
    app = {**app, "lastState": {"terminated": {"exitCode": 1, "reason": "T" * 1000, "message": "t" * HUGE,
                                               "startedAt": ready["lastTransitionTime"],
                                               "finishedAt": ready["lastTransitionTime"]}}}
    ghost = {**app, "name": "ghost", "containerID": "containerd://" + "0" * 64}
    patch_remote_status(remote, twin(ns), "bloated", {
        "message": "m" * HUGE, "reason": "Q" * 1000, "conditions": conditions, "containerStatuses": [app, ghost],
    })
    assert len(json.dumps(get_or_none(remote, "pod", twin(ns), "bloated")["status"])) > 4 * HUGE

    mirrored = wait_for(lambda: (lambda s: s if (s.get("message") or "").startswith("m") else None)(
        local.kubectl_json("get", "pod", "bloated", "-n", ns)["status"]), timeout=TIMEOUT, what="the status mirrored")
    assert mirrored["message"] == "m" * 4096
    assert mirrored["reason"] == "Q" * 128
    types = [c["type"] for c in mirrored["conditions"]]
    assert "example.com/provider-says" not in types and len(types) == len(set(types)), types
    ready = next(c for c in mirrored["conditions"] if c["type"] == "Ready")
    assert ready["message"] == "r" * 4096 and ready["reason"] == "R" * 128
    assert [c["name"] for c in mirrored["containerStatuses"]] == ["app"]
    terminated = mirrored["containerStatuses"][0]["lastState"]["terminated"]
    assert terminated["message"] == "t" * 4096 and terminated["reason"] == "T" * 128
    assert len(json.dumps(mirrored)) < 20_000
