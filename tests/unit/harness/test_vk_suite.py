"""virtual-kubelet's e2e suite as a cached test binary: the wrapper module's pins, the cache
key, and reading the suite's verbose output (kube_offload_harness/vk_suite.py)."""

import re
import shutil
from pathlib import Path

import pytest

from kube_offload_harness import binaries, versions, vk_suite

WRAPPER = Path(__file__).resolve().parents[2] / "vk-e2e"

# The shape of `vk-e2e.test -test.v` output: the wrapper's skip line, upstream's messages.
OUTPUT = """=== RUN   TestEndToEnd
    main_test.go:80: node kube-offload-remote-1, namespace vk-e2e-1; not the kubelet protocol, skipped: [...]
    suite.go:62: True
=== RUN   TestEndToEnd/TestCreatePodWithMandatoryInexistentConfigMap
kube-offload: skipping TestCreatePodWithMandatoryInexistentConfigMap: waits for virtual-kubelet's library Event reason MandatoryConfigMapNotFound
    suite.go:53: Skipped due to shouldSkipTest()
=== RUN   TestEndToEnd/TestGetPods
    basic.go:40: Created pod: nginx-testgetpods-g9s42
    basic.go:46: Pod nginx-testgetpods-g9s42 ready
=== RUN   TestEndToEnd/TestPodLifecycleForceDelete
    basic.go:208: Created pod: nginx-testpodlifecycleforcedelete-wrjgk
    basic.go:229: assertion failed: error is not nil: failed to find pod
=== RUN   TestEndToEnd/TestPodLifecycleGracefulDelete
--- FAIL: TestEndToEnd (11.75s)
    --- SKIP: TestEndToEnd/TestCreatePodWithMandatoryInexistentConfigMap (0.00s)
    --- PASS: TestEndToEnd/TestGetPods (0.80s)
    --- FAIL: TestEndToEnd/TestPodLifecycleForceDelete (2.05s)
    --- PASS: TestEndToEnd/TestPodLifecycleGracefulDelete (1.05s)
FAIL
"""


def go_mod() -> str:
    return (WRAPPER / "go.mod").read_text()


def test_the_wrapper_builds_the_suite_against_the_control_planes_kubernetes():
    # Bumping versions.KUBERNETES means bumping the wrapper too (go get k8s.io/...@v0.X.Y;
    # go mod tidy), or the suite talks to the API server through another client-go.
    staging = binaries.staging_version(versions.KUBERNETES)
    pinned = dict(re.findall(r"^\s*(k8s\.io/[\w./-]+)\s+(v0\.\d+\.\d+)(?=\s)", go_mod(), re.MULTILINE))
    assert {"k8s.io/api", "k8s.io/apimachinery", "k8s.io/client-go"} <= set(pinned)
    assert {module: version for module, version in pinned.items() if version != staging} == {}


def test_the_suite_version_is_read_off_the_wrappers_go_mod():
    version = vk_suite.suite_version(go_mod())
    assert re.fullmatch(r"v\d+\.\d+\.\d+", version)
    with pytest.raises(binaries.BuildError, match="requires no github.com/virtual-kubelet/virtual-kubelet"):
        vk_suite.suite_version("module x\n\ngo 1.26.0\n")


def test_the_cache_key_follows_the_wrappers_files(tmp_path):
    copy = tmp_path / "vk-e2e"
    shutil.copytree(WRAPPER, copy)
    name = vk_suite.build_name(vk_suite.module_files(copy))
    assert name.startswith(f"vk-e2e-{vk_suite.suite_version(go_mod())}-")
    assert vk_suite.suite_binary(copy, root=tmp_path) == tmp_path / "bin" / name / vk_suite.BINARY
    (copy / "main_test.go").write_text((copy / "main_test.go").read_text() + "\n// edited\n")
    assert vk_suite.build_name(vk_suite.module_files(copy)) != name
    (copy / "go.sum").unlink()
    with pytest.raises(binaries.BuildError, match="go.sum is missing"):
        vk_suite.module_files(copy)


def test_results_are_read_per_test_with_the_wrappers_skip_reasons():
    results = vk_suite.read_results(OUTPUT)
    assert results.passed == ["TestGetPods", "TestPodLifecycleGracefulDelete"]
    assert results.skipped == ["TestCreatePodWithMandatoryInexistentConfigMap"]
    assert results.failed == ["TestPodLifecycleForceDelete"]
    assert results.top == "FAIL"
    assert results.summary() == "2 passed, 1 skipped, 1 failed"
    assert results.lines() == [
        "  SKIP TestCreatePodWithMandatoryInexistentConfigMap: waits for virtual-kubelet's library Event reason "
        "MandatoryConfigMapNotFound",
        "  PASS TestGetPods",
        "  FAIL TestPodLifecycleForceDelete",
        "  PASS TestPodLifecycleGracefulDelete",
    ]


def test_a_suite_that_failed_before_any_test_has_no_results_but_its_top_failure():
    results = vk_suite.read_results("=== RUN   TestEndToEnd\n    suite.go:77: context deadline exceeded\n--- FAIL: TestEndToEnd (120.00s)\nFAIL\n")
    assert (results.passed, results.skipped, results.failed, results.top) == ([], [], [], "FAIL")


def test_a_failure_shows_what_the_failed_test_logged():
    results = vk_suite.read_results(OUTPUT)
    assert vk_suite.failure_output(OUTPUT, results).splitlines() == [
        "=== RUN   TestEndToEnd/TestPodLifecycleForceDelete",
        "    basic.go:208: Created pod: nginx-testpodlifecycleforcedelete-wrjgk",
        "    basic.go:229: assertion failed: error is not nil: failed to find pod",
    ]
