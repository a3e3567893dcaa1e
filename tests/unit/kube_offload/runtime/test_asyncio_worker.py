"""The asyncio worker's byte budget over all connections' bodies
(kube_offload/runtime/asyncio_worker.py, ByteBudget); the worker itself is tested over
real sockets in tests/component/test_webhook_asyncio_worker.py."""

from __future__ import annotations

import asyncio

import pytest

from kube_offload.runtime.asyncio_worker import ByteBudget
from kube_offload.runtime.serving import WORKER_CLASSES, GunicornServer, ServerSettings


def test_bodies_that_fit_are_granted_at_once_and_others_wait_in_order() -> None:
    async def scenario() -> list[str]:
        budget = ByteBudget(100)
        granted: list[str] = []
        await budget.acquire(60)
        await budget.acquire(40)
        assert budget.used == 100

        async def take(name: str, size: int) -> None:
            await budget.acquire(size)
            granted.append(name)

        first = asyncio.create_task(take("first", 50))
        await asyncio.sleep(0)
        second = asyncio.create_task(take("second", 10))  # fits after 'first', not before it
        await asyncio.sleep(0)
        assert granted == []
        budget.release(40)  # 60 used: 'first' (50) does not fit yet, so 'second' waits too
        await asyncio.sleep(0)
        assert granted == []
        budget.release(60)
        await asyncio.gather(first, second)
        assert budget.used == 60
        return granted

    assert asyncio.run(scenario()) == ["first", "second"]


def test_a_cancelled_waiter_gives_nothing_back_and_takes_nothing() -> None:
    async def scenario() -> int:
        budget = ByteBudget(10)
        await budget.acquire(10)
        waiter = asyncio.create_task(budget.acquire(5))
        await asyncio.sleep(0)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        budget.release(10)
        return budget.used

    assert asyncio.run(scenario()) == 0


def test_a_body_larger_than_the_budget_takes_all_of_it() -> None:
    async def scenario() -> int:
        budget = ByteBudget(10)
        await budget.acquire(1000)
        used = budget.used
        budget.release(1000)
        return used * 100 + budget.used

    assert asyncio.run(scenario()) == 1000


def test_worker_classes_are_named_not_free_form() -> None:
    assert WORKER_CLASSES["asyncio"] == "kube_offload.runtime.asyncio_worker.AsyncioWorker"
    with pytest.raises(ValueError, match="use one of"):
        GunicornServer(ServerSettings(worker_class="gevent"), proc_name="x")
