"""The Event recorder (kube_offload/runtime/events.py) against a real kube-apiserver: Events
arrive, repeats grow one Event's count, similar ones are combined, a reconcile returns
while the apiserver has not been answered, and stop() writes what is queued.

The cluster is this module's own (one kwokctl control plane, no nodes). The recorder runs
under a ServiceAccount that may only create and patch Events in one namespace: what the
recorder needs, and nothing it could read back; the tests read with the admin kubeconfig.
"Not answered" is a gate in front of the real sink: the writer's call waits on it, then
goes to the apiserver.
"""

from __future__ import annotations

import threading
import time
from typing import Iterator

import pytest
import yaml
from kubernetes import client, config

from kube_offload.runtime import metrics as rm
from kube_offload.runtime.controller import Controller
from kube_offload.runtime.event_correlator import COMBINED_PREFIX, SIMILAR_MAX
from kube_offload.runtime.events import EventRecorder, KubeEventSink
from kube_offload_harness.cluster import Cluster
from support.clusters import bare_cluster
from kube_offload_harness.identities import token_kubeconfig

NS = "runtime-events"
SA = "event-writer"
TIMEOUT = 30


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    with bare_cluster(tmp_path_factory, "rtevents", NS) as cluster:
        cluster.kubectl("create", "serviceaccount", SA, "-n", NS)
        cluster.kubectl("create", "role", SA, "-n", NS, "--verb=create,patch", "--resource=events")
        cluster.kubectl("create", "rolebinding", SA, "-n", NS, f"--role={SA}", f"--serviceaccount={NS}:{SA}")
        yield cluster


@pytest.fixture(scope="module")
def writer_client(cluster: Cluster, tmp_path_factory) -> client.ApiClient:
    """An ApiClient with the ServiceAccount's token: Events create and patch only."""
    token = cluster.kubectl("create", "token", SA, "-n", NS, "--duration=1h").stdout.strip()
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    path = tmp_path_factory.mktemp("event-writer") / "kubeconfig.yaml"
    path.write_text(yaml.safe_dump(token_kubeconfig(admin, token, SA)))
    return config.new_client_from_config(config_file=str(path))


class GatedSink:
    """The real sink behind a gate: while closed, the writer's call waits (an apiserver
    that does not answer), then goes through."""

    def __init__(self, sink: KubeEventSink) -> None:
        self._sink = sink
        self._open = threading.Event()
        self._open.set()
        self.waiting = threading.Event()

    def close(self) -> None:
        self._open.clear()

    def open(self) -> None:
        self._open.set()

    def _gate(self) -> None:
        self.waiting.set()
        self._open.wait(TIMEOUT)

    def create_event(self, namespace, event):
        self._gate()
        return self._sink.create_event(namespace, event)

    def patch_event(self, namespace, name, patch):
        self._gate()
        return self._sink.patch_event(namespace, name, patch)


def recorder_for(sink) -> EventRecorder:
    return EventRecorder(sink, component="e2e", reporting_controller="kube-offload.io/e2e", instance="e2e-0")


def configmap(cluster: Cluster, name: str) -> dict:
    cluster.kubectl("create", "configmap", name, "-n", NS)
    obj = cluster.kubectl_json("get", "configmap", name, "-n", NS)
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": obj["metadata"]}


def events_of(cluster: Cluster, obj: dict) -> list[dict]:
    uid = obj["metadata"]["uid"]
    items = cluster.kubectl_json("get", "events", "-n", NS, "--field-selector", f"involvedObject.uid={uid}")["items"]
    return sorted(items, key=lambda e: e["metadata"]["name"])


def test_events_arrive_and_repeats_grow_one_events_count(cluster, writer_client):
    obj = configmap(cluster, "repeated")
    recorder = recorder_for(KubeEventSink(writer_client))
    for _ in range(3):
        recorder.warning(obj, "SyncFailed", "remote cluster unreachable")
    assert recorder.flush(TIMEOUT)
    [event] = events_of(cluster, obj)
    assert (event["type"], event["reason"], event["message"]) == ("Warning", "SyncFailed", "remote cluster unreachable")
    assert event["count"] == 3
    assert event["involvedObject"]["kind"] == "ConfigMap" and event["involvedObject"]["name"] == "repeated"
    assert event["source"] == {"component": "e2e", "host": "e2e-0"}
    recorder.warning(obj, "SyncFailed", "remote cluster unreachable")  # a later repeat: a patch
    assert recorder.flush(TIMEOUT)
    [event] = events_of(cluster, obj)
    assert event["count"] == 4
    recorder.stop()


def test_similar_events_are_combined(cluster, writer_client):
    obj = configmap(cluster, "similar")
    recorder = recorder_for(KubeEventSink(writer_client))
    total = SIMILAR_MAX + 2
    for i in range(total):
        recorder.warning(obj, "ProviderRefused", f"refused: attempt {i}")
        assert recorder.flush(TIMEOUT)
    events = events_of(cluster, obj)
    assert len(events) == SIMILAR_MAX
    combined = [e for e in events if e["message"].startswith(COMBINED_PREFIX)]
    assert len(combined) == 1
    assert combined[0]["message"] == f"{COMBINED_PREFIX}refused: attempt {total - 1}"
    assert combined[0]["count"] == total - (SIMILAR_MAX - 1)
    recorder.stop()


def test_a_reconcile_returns_while_the_apiserver_has_not_answered(cluster, writer_client):
    obj = configmap(cluster, "held")
    sink = GatedSink(KubeEventSink(writer_client))
    recorder = recorder_for(sink)
    done = threading.Event()

    def reconcile(key: str) -> None:
        recorder.normal(obj, "Offloaded", f"{key} running in cluster e2e")
        done.set()

    controller = Controller(name="e2e-events", reconcile=reconcile, workers=1)
    sink.close()
    controller.start()
    try:
        controller.enqueue(f"{NS}/held")
        assert done.wait(TIMEOUT)
        assert sink.waiting.wait(TIMEOUT), "the writer never tried"
        # The reconcile ended (success counted) while the Event write is still held.
        deadline = time.monotonic() + TIMEOUT
        while rm.RECONCILES.labels(controller="e2e-events", outcome=rm.OUTCOME_SUCCESS)._value.get() < 1:
            assert time.monotonic() < deadline, "the reconcile did not return"
            time.sleep(0.05)
        assert events_of(cluster, obj) == []
        sink.open()
        assert recorder.flush(TIMEOUT)
        [event] = events_of(cluster, obj)
        assert (event["reason"], event["message"]) == ("Offloaded", f"{NS}/held running in cluster e2e")
    finally:
        sink.open()
        controller.stop()
        recorder.stop()


def test_stop_writes_what_is_queued(cluster, writer_client):
    objs = [configmap(cluster, f"stop-{i}") for i in range(5)]
    sink = GatedSink(KubeEventSink(writer_client))
    recorder = recorder_for(sink)
    sink.close()
    for obj in objs:
        recorder.normal(obj, "Created", "made by the e2e test")
    assert sink.waiting.wait(TIMEOUT)
    threading.Timer(0.5, sink.open).start()
    recorder.stop(timeout=TIMEOUT)
    assert [len(events_of(cluster, obj)) for obj in objs] == [1] * 5
