"""Which updates a controller may skip (kube_offload/runtime/predicates.py), and
Controller.watch(skip=...) applying it only to updates."""

from __future__ import annotations

import copy

import pytest

from kube_offload.runtime.controller import Controller
from kube_offload.runtime.informer import ADDED, DELETED, MODIFIED, Informer
from kube_offload.runtime.predicates import WriteEchoes, only_status_changed
from support.informers import drain, never_listed

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "web", "namespace": "ns", "uid": "u1", "resourceVersion": "10", "generation": 1,
                 "labels": {"app": "web"}, "managedFields": [{"manager": "kubectl"}]},
    "spec": {"containers": [{"name": "c", "image": "nginx"}]},
    "status": {"phase": "Pending"},
}


def changed(**edits) -> dict:
    """POD with ``edits`` applied: ``field=(section, key, value)``."""
    new = copy.deepcopy(POD)
    for section, key, value in edits.values():
        new[section][key] = value
    return new


@pytest.mark.parametrize(
    "new, skipped",
    [
        (changed(s=("status", "phase", "Running"), rv=("metadata", "resourceVersion", "11")), True),
        (changed(s=("status", "podIP", "10.0.0.1")), True),
        # the field managers and the version move with every write
        (changed(s=("status", "phase", "Running"), m=("metadata", "managedFields", [{"manager": "vk"}])), True),
        (changed(rv=("metadata", "resourceVersion", "11")), True),
        # anything else is news, with or without a status change
        (changed(s=("status", "phase", "Running"), l=("metadata", "labels", {"app": "db"})), False),
        (changed(d=("metadata", "deletionTimestamp", "2026-01-01T00:00:00Z")), False),
        (changed(a=("metadata", "annotations", {"x": "y"})), False),
        (changed(g=("metadata", "generation", 2)), False),
        (changed(n=("spec", "nodeName", "vk")), False),
        (copy.deepcopy(POD), False),  # nothing changed at all: a resync-like delivery
    ],
)
def test_only_status_changed(new, skipped):
    assert only_status_changed(POD, new) is skipped


def test_adds_and_resyncs_are_never_status_only():
    assert only_status_changed(None, POD) is False
    assert only_status_changed(POD, POD) is False
    # an object that gains a status for the first time
    bare = {k: v for k, v in POD.items() if k != "status"}
    assert only_status_changed(bare, POD) is True


def test_write_echoes_recognise_only_the_version_written():
    echoes = WriteEchoes()
    echoes.wrote(changed(rv=("metadata", "resourceVersion", "11")))
    assert echoes.is_echo(changed(rv=("metadata", "resourceVersion", "11")))
    assert not echoes.is_echo(changed(rv=("metadata", "resourceVersion", "12")))  # someone else's, later
    assert not echoes.is_echo({"metadata": {"name": "other", "namespace": "ns", "resourceVersion": "11"}})
    echoes.wrote({})  # an empty answer records nothing
    assert len(echoes) == 1
    echoes.forget("ns/web")
    assert len(echoes) == 0 and not echoes.is_echo(changed(rv=("metadata", "resourceVersion", "11")))


def test_watch_skips_only_the_updates_the_predicate_names():
    informer = Informer(name="pods", list_func=never_listed)
    controller = Controller(name="test-skip", reconcile=lambda key: None)
    controller.watch(informer, skip=only_status_changed)
    informer.apply(ADDED, copy.deepcopy(POD))
    assert drain(controller) == ["ns/web"]
    informer.apply(MODIFIED, changed(s=("status", "phase", "Running"), rv=("metadata", "resourceVersion", "11")))
    assert drain(controller) == []
    informer.resync()  # old is new: never skipped
    assert drain(controller) == ["ns/web"]
    informer.apply(MODIFIED, changed(l=("metadata", "labels", {"app": "db"}), rv=("metadata", "resourceVersion", "12")))
    assert drain(controller) == ["ns/web"]
    informer.apply(DELETED, changed(l=("metadata", "labels", {"app": "db"}), rv=("metadata", "resourceVersion", "12")))
    assert drain(controller) == ["ns/web"]
