"""The counted pause of the cyclic garbage collector (kube_offload.runtime.gcpause)."""

from __future__ import annotations

import gc
import threading

import pytest

from kube_offload.runtime.gcpause import collector_paused


@pytest.fixture(autouse=True)
def collector_enabled():
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_pauses_and_resumes() -> None:
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_nested_and_overlapping_pauses_resume_once_the_last_one_leaves() -> None:
    inside, release = threading.Event(), threading.Event()

    def other_request() -> None:
        with collector_paused():
            inside.set()
            release.wait(5)

    thread = threading.Thread(target=other_request)
    with collector_paused():
        thread.start()
        assert inside.wait(5)
        with collector_paused():
            assert not gc.isenabled()
    assert not gc.isenabled(), "the other request is still inside"
    release.set()
    thread.join(5)
    assert gc.isenabled()


def test_leaves_a_disabled_collector_disabled() -> None:
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()


def test_resumes_after_an_exception() -> None:
    with pytest.raises(RuntimeError):
        with collector_paused():
            raise RuntimeError("boom")
    assert gc.isenabled()
