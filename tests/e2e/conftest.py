"""Session fixtures: real loopback clusters (one local, one remote) with kube-offload running.

The environment is built once per test session by the same code as `kube-offload cluster
up`, in a temporary state directory, and torn down at the end: exactly the processes the
harness started (by PID) are stopped and the kwokctl clusters deleted. When a test fails,
every component's log is copied to `.artifacts/e2e-logs/` in the repository.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Iterator

import pytest

from kube_offload_harness.cluster import Cluster, Environment, default_topology
from support.clusters import keep_logs
from support.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / ".artifacts" / "e2e-logs"

_failed = False


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    global _failed
    if report.failed and "e2e" in item.keywords:
        _failed = True


def pytest_collection_modifyitems(items):
    for item in items:
        if "/tests/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)
    users = [item for item in items if "offload_env" in getattr(item, "fixturenames", ())]
    _last_user[:] = users[-1:]


# The session's environment while it is up. The last test that uses it takes it down
# (pytest_runtest_teardown below) rather than the session's end, so that the image and
# real-node tiers after it do not share two cores with its idle control planes, kwok
# nodes and components.
_env: list[Environment] = []
_last_user: list[pytest.Item] = []


@pytest.fixture(scope="session")
def offload_env(tmp_path_factory) -> Iterator[Environment]:
    state_dir = tmp_path_factory.mktemp("kube-offload-e2e")
    env = Environment(state_dir, say=lambda line: print(line, flush=True))
    topology = default_topology(prefix="e2e", remotes=1, local_nodes=2, remote_nodes=2)
    _env.append(env)
    try:
        env.up(topology)
        yield env
    finally:
        _down()


def _down() -> None:
    """Take the session's environment down, once (logs kept first when an e2e test failed)."""
    while _env:
        env = _env.pop()
        if _failed or os.environ.get("KUBE_OFFLOAD_KEEP_LOGS"):
            _keep_logs(env)
        env.down()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield
    if item in _last_user:
        _down()


def _keep_logs(env: Environment) -> None:
    target = keep_logs(env, ARTIFACTS, control_planes=True)
    print(f"\nkube-offload e2e: component and control-plane logs kept in {target}")


@pytest.fixture(scope="session")
def local(offload_env: Environment) -> Cluster:
    return offload_env.cluster(offload_env.topology().local)


@pytest.fixture(scope="session")
def remote(offload_env: Environment) -> Cluster:
    return offload_env.cluster(offload_env.topology().remotes[0])


@pytest.fixture(scope="session")
def wait() -> Callable[..., object]:
    """:func:`support.waiting.wait_for`, as a fixture (what the e2e modules have always asked for)."""
    return wait_for
