"""The OffloadSlice loop (enforcer/consumers/slices.py): one key per tenant namespace, the
decision written into each slice's status only when it changes, Pending while the tenant
is not a consumer's; the decision itself is tests/unit/kube_offload/test_slices.py's."""

from __future__ import annotations

import copy
import re
from typing import Any

from enforcer.consumers.slices import NAMESPACE_INDEX, SliceReconciler, namespace_of
from kube_offload import constants as c
from kube_offload.runtime.controller import Controller
from kube_offload.runtime.kube import ApiError
from tests.support.informers import drain, offline_informer

TENANT = c.tenant_namespace("local")
MICRO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


class FakeApi:
    def __init__(self, slices: Any) -> None:
        self.slices = slices
        self.writes: list[tuple[str, str, dict[str, Any]]] = []
        self.gone: set[str] = set()

    def replace_slice_status(self, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
        if name in self.gone:
            raise ApiError(404, "NotFound", "gone")
        self.writes.append((namespace, name, status))
        obj = copy.deepcopy(self.slices.get(f"{namespace}/{name}"))
        obj["status"] = status
        obj["metadata"]["resourceVersion"] = str(int(obj["metadata"].get("resourceVersion", "1")) + 1)
        self.slices.apply("MODIFIED", obj)
        return obj  # type: ignore[no-any-return]


def consumer(quota: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "local", "generation": 1, "resourceVersion": "1"},
            "spec": {"serviceAccount": {"namespace": TENANT, "name": "consumer"}, "quota": quota or {},
                     "pools": [{"name": "general", "nodeSelector": {"pool": "general"}, "nodeLabels": {"tier": "std"}}]}}


def tenant_namespace(name: str = TENANT) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": "1", "labels": {c.LABEL_TENANT: "local"}}}


def node(cpu: str = "4", rv: str = "1") -> dict[str, Any]:
    return {"metadata": {"name": "w1", "resourceVersion": rv, "labels": {"pool": "general"}},
            "status": {"allocatable": {"cpu": cpu, "pods": "110"}, "conditions": [{"type": "Ready", "status": "True"}]}}


def offload_slice(name: str, cpu: str, created: str = "2026-11-27T09:00:00Z", namespace: str = TENANT) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "creationTimestamp": created, "generation": 1, "resourceVersion": "1"},
            "spec": {"pool": "general", "resources": {"cpu": cpu}}}


def setup() -> tuple[SliceReconciler, Any, FakeApi, Controller]:
    slices = offline_informer("offloadslices", indexers={NAMESPACE_INDEX: namespace_of})
    namespaces, consumers, nodes = offline_informer("namespaces"), offline_informer("consumers"), offline_informer("nodes")
    namespaces.apply("ADDED", tenant_namespace())
    consumers.apply("ADDED", consumer({"cpu": "3"}))
    nodes.apply("ADDED", node())
    api = FakeApi(slices)
    reconciler = SliceReconciler(slices=slices, namespaces=namespaces, consumers=consumers, nodes=nodes, api=api)
    controller = Controller(name="slices-test", reconcile=reconciler)
    controller.watch(slices, lambda obj: namespace_of(obj))
    return reconciler, (slices, namespaces, consumers, nodes), api, controller


def test_the_decision_is_written_once_and_the_echo_writes_nothing() -> None:
    reconciler, (slices, *_), api, controller = setup()
    slices.apply("ADDED", offload_slice("a", "2"))
    assert drain(controller) == [TENANT]
    reconciler(TENANT)
    [(namespace, name, status)] = api.writes
    assert (namespace, name) == (TENANT, "a")
    first_decided = status["firstDecided"]
    assert MICRO_TIME.fullmatch(first_decided), first_decided
    assert {k: v for k, v in status.items() if k != "firstDecided"} == {"phase": "Accepted", "reason": "Accepted", "message": "accepted in full from pool general",
                      "accepted": {"cpu": "2"}, "nodeLabels": {"tier": "std"}, "observedGeneration": 1}
    assert drain(controller) == [TENANT]  # the loop's own write comes back as an event...
    reconciler(TENANT)
    assert len(api.writes) == 1  # ...that writes nothing


def test_a_later_slice_gets_what_is_left_and_a_quota_change_redecides_both() -> None:
    reconciler, (slices, _ns, consumers, _nodes), api, _ = setup()
    slices.apply("ADDED", offload_slice("a", "2", created="2026-11-27T09:00:00Z"))
    slices.apply("ADDED", offload_slice("b", "2", created="2026-11-27T09:01:00Z"))
    reconciler(TENANT)
    assert {name: status["accepted"] for _, name, status in api.writes} == {"a": {"cpu": "2"}, "b": {"cpu": "1"}}
    assert reconciler.keys_for_consumer(consumer()) == [TENANT]
    consumers.apply("MODIFIED", dict(consumer({"cpu": "4"}), metadata={"name": "local", "generation": 2, "resourceVersion": "2"}))
    api.writes.clear()
    reconciler(TENANT)
    assert [(name, status["phase"], status["accepted"]) for _, name, status in api.writes] == [("b", "Accepted", {"cpu": "2"})]


def settle(reconciler: SliceReconciler, controller: Controller) -> None:
    """Reconcile until the loop's own writes come back as events that write nothing, as
    the enforcer's workers would."""
    for _ in range(10):
        keys = drain(controller)
        if not keys:
            return
        for key in keys:
            reconciler(key)
    raise AssertionError("the slice loop never settled: it keeps rewriting statuses")


def test_a_slice_created_in_the_same_second_after_another_was_decided_never_takes_its_share() -> None:
    # Seen in CI: "train" accepted, "big" created 0.7 s later (the same creationTimestamp
    # second). Each pass's writes come back as events and are decided again; the order must
    # hold through every pass, not only the first.
    reconciler, (slices, _ns, consumers, _nodes), api, controller = setup()
    consumers.apply("MODIFIED", dict(consumer({"cpu": "2"}), metadata={"name": "local", "generation": 2, "resourceVersion": "2"}))
    slices.apply("ADDED", offload_slice("train", "1"))
    settle(reconciler, controller)
    slices.apply("ADDED", offload_slice("big", "5"))
    settle(reconciler, controller)
    train, big = (slices.get(f"{TENANT}/{name}")["status"] for name in ("train", "big"))
    assert (train["phase"], train["accepted"]) == ("Accepted", {"cpu": "1"})
    assert (big["phase"], big["reason"], big["accepted"]) == ("PartiallyAccepted", "QuotaExceeded", {"cpu": "1"})
    assert train["firstDecided"] < big["firstDecided"]
    assert [name for _, name, _ in api.writes] == ["train", "big"]  # each written once, then left alone


def test_a_tenant_that_is_no_consumers_leaves_its_slices_pending_saying_why() -> None:
    reconciler, (slices, namespaces, _c, _n), api, _ = setup()
    other = c.tenant_namespace("ghost")
    namespaces.apply("ADDED", {"metadata": {"name": other, "resourceVersion": "1", "labels": {c.LABEL_TENANT: "ghost"}}})
    slices.apply("ADDED", offload_slice("a", "1", namespace=other))
    reconciler(other)
    [(_, _, status)] = api.writes
    assert status["phase"] == "Pending" and status["reason"] == "NoConsumer"
    assert "there is no Consumer ghost" in status["message"]


def test_a_slice_deleted_before_its_status_is_written_is_skipped() -> None:
    reconciler, (slices, *_), api, _ = setup()
    slices.apply("ADDED", offload_slice("a", "1"))
    slices.apply("ADDED", offload_slice("b", "1", created="2026-11-27T09:05:00Z"))
    api.gone.add("a")
    reconciler(TENANT)
    assert [name for _, name, _ in api.writes] == ["b"]
    assert reconciler.all_keys() == [TENANT]


class RecordingRecorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any], str, str]] = []

    def normal(self, obj: dict[str, Any], reason: str, message: str) -> None:
        self.events.append(("Normal", obj, reason, message))

    def warning(self, obj: dict[str, Any], reason: str, message: str) -> None:
        self.events.append(("Warning", obj, reason, message))


def test_each_change_of_a_decision_is_one_event_on_the_offloadslice() -> None:
    """Issue 41: a slice decision wrote no Event (docs/slices.md "Events")."""
    _, (slices, namespaces, consumers, nodes), api, controller = setup()
    recorder = RecordingRecorder()
    reconciler = SliceReconciler(slices=slices, namespaces=namespaces, consumers=consumers, nodes=nodes, api=api,
                                 recorder=recorder)
    obj = offload_slice("a", "2")
    obj["metadata"]["uid"] = "uid-a"
    slices.apply("ADDED", obj)
    settle(reconciler, controller)
    [(kind, involved, reason, message)] = recorder.events
    assert (kind, reason) == ("Normal", "SliceAccepted")
    assert involved == {"apiVersion": "kube-offload.io/v1alpha1", "kind": "OffloadSlice",
                        "metadata": {"name": "a", "namespace": TENANT, "uid": "uid-a"}}
    assert message == "slice a (pool general) is Accepted: accepted in full from pool general"
    # The quota cut below it: one Warning, with the provider's words; passes since write none.
    consumers.apply("MODIFIED", dict(consumer({"cpu": "1"}), metadata={"name": "local", "generation": 2, "resourceVersion": "2"}))
    reconciler(TENANT)
    settle(reconciler, controller)
    assert [(k, r) for k, _, r, _ in recorder.events] == [("Normal", "SliceAccepted"), ("Warning", "SlicePartiallyAccepted")]
    assert recorder.events[1][3] == ("slice a (pool general) is PartiallyAccepted (QuotaExceeded): "
                                     "cpu: asked 2, accepted 1: quota cpu leaves 1 (Consumer spec.quota)")
