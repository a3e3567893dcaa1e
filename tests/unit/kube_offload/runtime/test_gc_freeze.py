"""The enforcer's gc.freeze after each full collection (kube_offload/runtime/gc_freeze.py):
what a full pass walks, the cycle it may keep, and the thaw that reclaims it, with the real
collector."""

from __future__ import annotations

import gc
import weakref
from typing import Any, Iterator

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from kube_offload.runtime.gc_freeze import FreezeAfterFullCollection


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Node:
    def __init__(self) -> None:
        self.other: Any = None


@pytest.fixture
def hooked() -> Iterator[tuple[FreezeAfterFullCollection, Clock]]:
    clock = Clock()
    hook = FreezeAfterFullCollection(600, clock=clock)
    gc.collect()
    gc.callbacks.append(hook)
    try:
        yield hook, clock
    finally:
        gc.callbacks.remove(hook)
        gc.unfreeze()
        gc.collect()


def test_only_full_collections_end_in_a_freeze() -> None:
    calls: list[str] = []
    hook = FreezeAfterFullCollection(600, clock=Clock(), freeze=lambda: calls.append("freeze"),
                                     unfreeze=lambda: calls.append("unfreeze"), frozen_count=lambda: 0)
    hook("start", {"generation": 2})
    hook("stop", {"generation": 0})
    hook("stop", {"generation": 1})
    assert calls == []
    hook("stop", {"generation": 2})
    assert calls == ["freeze"] and hook.freezes == 1


def test_what_survives_a_full_pass_is_frozen_and_the_next_pass_walks_only_the_new(hooked) -> None:
    hook, _ = hooked
    cache = [{"metadata": {"name": f"sp-{i}"}, "spec": {"containers": [{"name": "c"}]}} for i in range(20_000)]
    gc.collect()
    frozen = gc.get_freeze_count()
    assert hook.freezes >= 1 and frozen >= 60_000, frozen  # the cache's dicts and lists among them
    assert len(gc.get_objects(generation=2)) < frozen // 10  # nothing of the cache left to walk
    del cache  # frozen objects without cycles are still freed by reference counting
    assert gc.get_freeze_count() < frozen - 50_000


def test_a_cycle_kept_by_a_freeze_is_reclaimed_after_the_thaw(hooked) -> None:
    hook, clock = hooked
    holder = [Node()]
    holder[0].other = Node()
    holder[0].other.other = holder[0]  # a cycle, alive through holder
    alive = weakref.ref(holder[0])
    gc.collect()  # the cycle survives this full pass: frozen
    holder.clear()  # now garbage, but only a collection can tell, and none walks it
    gc.collect()
    assert alive() is not None  # the cost of freezing: kept
    clock.now += 600
    gc.collect()  # its end thaws...
    assert hook.thaws == 1
    gc.collect()  # ...so this pass walks everything, and its end freezes again
    assert alive() is None
    assert hook.freezes >= 2


def test_the_frozen_count_is_served_and_the_period_must_be_positive() -> None:
    registry = CollectorRegistry()
    registry.register(FreezeAfterFullCollection(600, clock=Clock(), frozen_count=lambda: 1234))
    assert "kube_offload_python_gc_frozen_objects 1234.0" in generate_latest(registry).decode()
    with pytest.raises(ValueError, match="thaw_every"):
        FreezeAfterFullCollection(0)


@pytest.mark.parametrize("component", ["vkubelet", "enforcer"])
def test_gc_thaw_period_flag_installs_the_hook_by_default_and_nothing_at_zero(component, monkeypatch):
    # Both processes that hold large caches parse the same flag (kube_offload/runtime/flags.py).
    import argparse

    from kube_offload.runtime import gc_freeze
    from kube_offload.runtime.flags import add_gc_thaw_period_flag

    installed: list[float] = []
    monkeypatch.setattr(gc_freeze, "freeze_after_full_collections", lambda period: installed.append(period) or "hook")
    parser = argparse.ArgumentParser()
    add_gc_thaw_period_flag(parser, component)
    assert gc_freeze.freeze_from_flag(parser.parse_args([]).gc_thaw_period) == "hook"
    assert installed == [1800.0]
    assert gc_freeze.freeze_from_flag(parser.parse_args(["--gc-thaw-period", "0"]).gc_thaw_period) is None
    assert installed == [1800.0]
    monkeypatch.setenv(f"KUBE_OFFLOAD_{component.upper()}_GC_THAW_PERIOD", "5m")
    parser = argparse.ArgumentParser()
    add_gc_thaw_period_flag(parser, component)
    assert parser.parse_args([]).gc_thaw_period == 300.0
