"""virtual-kubelet's own end-to-end suite against the virtual node (issue 40, item 2).

The suite is upstream's Go package ``github.com/virtual-kubelet/virtual-kubelet/test/e2e``,
unmodified, at the version our wrapper module pins (``tests/vk-e2e/``: go.mod, go.sum and
main_test.go, which drives the suite and skips, each with its reason, the tests that check
virtual-kubelet's library or CI deployment rather than the kubelet protocol). Its test
binary is built on first use and cached (kube_offload_harness/vk_suite.py) and runs here
against the session's environment: the local cluster's API server, the virtual node of
remote ``remote-1``, kwok nodes running the remote pods (the suite's images are
placeholder names, which kwok never pulls).

The suite reads ``/pods`` and ``/runningpods/`` through the apiserver's node proxy, which
refuses the session's loopback node address: for the module's length the virtual node
moves to an address on a link of the harness's own (kube_offload_harness/node_proxy_link.py,
root), and back.

The suite creates its pods with ``spec.nodeName`` set: they pass by the scheduler and by
our webhook (which leaves a pod that names its node alone), so nothing adds the virtual
node's toleration, and the NoExecute taint would have the taint manager evict them at
once. The namespace therefore gets what a user who binds pods by hand gives them: a
MutatingAdmissionPolicy, bound to that namespace only, that adds the toleration. The
namespace is labelled for offloading, so the virtual kubelet serves it.

Every test that applies must pass; with ``CI=true`` a suite that cannot be built, or a
machine where the link cannot be made, fails instead of skipping. The pass/skip/fail count is printed whatever the outcome.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
import uuid
from pathlib import Path
from typing import Callable, Iterator

import pytest

from kube_offload import constants as C
from kube_offload.affinity import virtual_node_toleration
from kube_offload_harness import node_proxy_link, vk_suite
from kube_offload_harness.binaries import BuildError
from support.clusters import delete_namespace, offloaded_namespace

WRAPPER = Path(__file__).resolve().parents[1] / "vk-e2e"
VIRTUAL_NODE = f"{C.VIRTUAL_NODE_PREFIX}remote-1"
# The suite runs its tests one after another; each waits at most this long for a pod.
WATCH_TIMEOUT = "90s"
RUN_TIMEOUT = 600


@pytest.fixture(scope="module")
def say(request) -> Callable[[str], None]:
    """Print past pytest's capture: the build's progress and the suite's count show in
    ``make test`` as they happen, not only when the test fails."""
    capture = request.config.pluginmanager.getplugin("capturemanager")

    def say(line: str) -> None:
        with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
            print(line, flush=True)

    return say


def skip_or_fail(message: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def suite_binary(say) -> Path:
    try:
        return vk_suite.ensure_suite_binary(WRAPPER, say=say)
    except BuildError as exc:
        skip_or_fail(f"virtual-kubelet's e2e suite could not be built: {exc}")
        raise


@pytest.fixture(scope="module")
def node_proxy(offload_env, local, remote, say) -> Iterator[str]:
    """The virtual node at an address the apiserver's node proxy accepts (the suite reads
    /pods and /runningpods/ through it): node_proxy_link.py."""
    unmet = node_proxy_link.unmet()
    if unmet:
        skip_or_fail(f"virtual-kubelet's e2e suite: {unmet}")
    with node_proxy_link.proxyable_virtual_node(offload_env, local, remote.spec, say=say) as address:
        yield address


def toleration_policy(name: str, namespace: str) -> list[dict]:
    """A MutatingAdmissionPolicy and its binding: pods created in ``namespace`` get the
    virtual node's toleration (appended to any they have)."""
    toleration = "Object.spec.tolerations{" + ", ".join(
        f"{key}: {json.dumps(value)}" for key, value in virtual_node_toleration().items()
    ) + "}"
    patch = (
        "has(object.spec.tolerations) ? "
        f"[JSONPatch{{op: 'add', path: '/spec/tolerations/-', value: {toleration}}}] : "
        f"[JSONPatch{{op: 'add', path: '/spec/tolerations', value: [{toleration}]}}]"
    )
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "matchConstraints": {
                    "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}],
                },
                "failurePolicy": "Fail",
                "reinvocationPolicy": "Never",
                "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": patch}}],
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}},
            },
        },
    ]


def tolerates_the_node(local, namespace: str) -> bool:
    """Whether a pod created now in ``namespace`` gets the toleration (the policy is
    enforced a moment after it is created): asked with a server-side dry run."""
    probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe", "namespace": namespace},
             "spec": {"nodeName": VIRTUAL_NODE, "containers": [{"name": "probe", "image": "probe"}]}}
    result = local.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(probe), check=False)
    if result.returncode != 0:
        return False
    return virtual_node_toleration() in (json.loads(result.stdout)["spec"].get("tolerations") or [])


@pytest.fixture(scope="module")
def suite_namespace(local, wait, say):
    started = time.monotonic()
    namespace = f"vk-e2e-{uuid.uuid4().hex[:8]}"
    policy = f"{namespace}-toleration"
    offloaded_namespace(local, namespace)
    local.apply(toleration_policy(policy, namespace))
    try:
        # ServiceAccount admission refuses pods until the namespace's default account exists.
        wait(lambda: local.kubectl("get", "serviceaccount", "default", "-n", namespace, check=False).returncode == 0,
             timeout=60, what=f"the default ServiceAccount of {namespace}")
        wait(lambda: tolerates_the_node(local, namespace), timeout=60, what=f"pods in {namespace} getting the virtual node's toleration")
        say(f"- namespace {namespace}: offloaded, its pods tolerate the virtual node (after {time.monotonic() - started:.0f}s)")
        yield namespace
    finally:
        local.kubectl("delete", "mutatingadmissionpolicybinding,mutatingadmissionpolicy", policy, "--ignore-not-found", check=False)
        delete_namespace(local, namespace)


def test_virtual_kubelets_own_e2e_suite_passes_on_the_virtual_node(local, suite_binary, node_proxy, suite_namespace, say):
    argv = [
        str(suite_binary), "-test.v", f"-test.timeout={RUN_TIMEOUT - 30}s",
        "-kubeconfig", str(local.kubeconfig), "-namespace", suite_namespace, "-node-name", VIRTUAL_NODE,
        "-watch-timeout", WATCH_TIMEOUT,
    ]
    say(f"kube-offload: running virtual-kubelet's e2e suite: {' '.join(argv)}")
    started = time.monotonic()
    run = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False)
    output = run.stdout + run.stderr
    results = vk_suite.read_results(output)
    report = "\n".join([
        f"virtual-kubelet's e2e suite on {VIRTUAL_NODE}: {results.summary()} in {time.monotonic() - started:.0f}s",
        *results.lines(),
    ])
    say(report)

    assert run.returncode == 0 and results.top == "PASS" and not results.failed, (
        f"{report}\n\n{vk_suite.failure_output(output, results)[-12000:]}"
    )
    assert results.passed, f"the suite ran no test:\n{output[-4000:]}"
    # Every skip is one of the wrapper's, with its reason: nothing that applies is skipped.
    unexplained = sorted(set(results.skipped) - set(results.skip_reasons))
    assert not unexplained, f"skipped without a reason of the wrapper's: {unexplained}\n{report}"
