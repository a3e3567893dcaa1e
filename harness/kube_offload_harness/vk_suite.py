"""virtual-kubelet's own end-to-end suite as a test binary: built from our wrapper module
(``tests/vk-e2e/``: go.mod, go.sum, main_test.go), cached beside the other binaries, and
its verbose output read back into passed, skipped and failed tests.

Layout under the cache root (binaries.py)::

    bin/vk-e2e-<virtual-kubelet version>-<digest>/vk-e2e.test
    build/vk-e2e-<virtual-kubelet version>-<digest>/   a copy of the module, build logs

The virtual-kubelet version is read off the wrapper's go.mod, the one place it is
written; the digest is of the module's files, so an edited wrapper or a new go.sum is
never served from an older build. The wrapper requires the Kubernetes modules at the
control plane's version (versions.KUBERNETES; tests/unit/harness/test_vk_suite.py keeps
them so): the suite talks to our API servers through the client-go of their release.
``-mod=readonly``: the build uses the module graph and checksums committed in go.mod and
go.sum, and fails rather than resolve anything anew.

Built on first use by the test that runs it (tests/e2e/test_virtual_kubelet_suite.py),
not by ``kube-offload binaries build``: nothing else needs it, so a cold ``make demo``
does not wait for it, and because the cache key follows the wrapper's files an edited
wrapper is rebuilt by the next test run without anyone running the builder.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from kube_offload_harness import binaries, go_build
from kube_offload_harness.go_build import BuildError

MODULE = "github.com/virtual-kubelet/virtual-kubelet"
SUITE_PACKAGE = f"{MODULE}/test/e2e"
BINARY = "vk-e2e.test"
# The wrapper's top-level test; the suite's tests are its subtests.
TOP_TEST = "TestEndToEnd"
# What the wrapper prints before each skip (main_test.go shouldSkip).
_SKIP_REASON = re.compile(r"^kube-offload: skipping (Test\w+): (.+)$", re.MULTILINE)
_RESULT = re.compile(rf"^\s*--- (PASS|FAIL|SKIP): {TOP_TEST}(?:/(\w+))? \(", re.MULTILINE)


def module_files(directory: Path) -> dict[str, bytes]:
    """The wrapper module's files (go.mod, go.sum, the Go sources), by name."""
    files = {path.name: path.read_bytes() for path in sorted(directory.iterdir())
             if path.is_file() and (path.name in ("go.mod", "go.sum") or path.suffix == ".go")}
    for required in ("go.mod", "go.sum"):
        if required not in files:
            raise BuildError(f"{directory / required} is missing: the wrapper module of virtual-kubelet's e2e suite needs it")
    return files


def suite_version(go_mod: str) -> str:
    """The virtual-kubelet version the wrapper's go.mod requires."""
    version = binaries.module_version(go_mod, MODULE)
    if version is None:
        raise BuildError(f"the wrapper's go.mod requires no {MODULE}: add it (go get {MODULE}@<version>)")
    return version


def build_name(files: dict[str, bytes]) -> str:
    digest = hashlib.sha256()
    for name, content in sorted(files.items()):
        digest.update(name.encode() + b"\0" + hashlib.sha256(content).digest())
    return f"vk-e2e-{suite_version(files['go.mod'].decode())}-{digest.hexdigest()[:12]}"


def suite_binary(directory: Path, root: Path | None = None) -> Path:
    """Where the binary of the wrapper in ``directory`` is cached (built or not)."""
    root = root or binaries.cache_root()
    return root / "bin" / build_name(module_files(directory)) / BINARY


def ensure_suite_binary(directory: Path, *, say: Callable[[str], None], root: Path | None = None) -> Path:
    """The suite's test binary, built first if missing (under the machine's one build
    lock, as every binary of the cache: a parallel caller waits, then finds it built)."""
    root = root or binaries.cache_root()
    files = module_files(directory)
    name = build_name(files)
    target = root / "bin" / name / BINARY
    if os.access(target, os.X_OK):
        return target
    say(f"kube-offload: virtual-kubelet's e2e suite is not built yet; waiting for the build lock ({root / 'build.lock'})")
    with binaries._Lock(root / "build.lock"):
        if os.access(target, os.X_OK):
            return target
        go = go_build.check_go()
        work = root / "build" / name
        shutil.rmtree(work, ignore_errors=True)
        (work / "out").mkdir(parents=True)
        for file_name, content in files.items():
            (work / file_name).write_bytes(content)
        version = suite_version(files["go.mod"].decode())
        say(f"- virtual-kubelet {version} e2e suite: compiling it and its dependencies (a few minutes when cold)")
        # First the suite's package and everything under it, one line per package (the
        # heartbeat counts them), then the test binary, which then only links.
        common = ["-trimpath", "-mod=readonly"]
        go_build.run_step(f"build virtual-kubelet {version} e2e suite", [go, "build", "-v", *common, SUITE_PACKAGE],
                          cwd=work, log_path=work / "build.log", say=say)
        go_build.run_step(f"link {BINARY}", [go, "test", "-c", *common, "-ldflags", "-s -w", "-o", str(work / "out" / BINARY), "."],
                          cwd=work, log_path=work / "link.log", say=say)
        go_build.install(work / "out" / BINARY, target)
    return target


# --- the suite's output --------------------------------------------------------------------
@dataclass
class SuiteResults:
    """The suite's tests by outcome (``go test -v`` lines), and why each skip was made."""

    passed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    # TOP_TEST's own outcome: FAIL also when the suite's setup failed before any test.
    top: str | None = None
    skip_reasons: dict[str, str] = field(default_factory=dict)

    def summary(self) -> str:
        return f"{len(self.passed)} passed, {len(self.skipped)} skipped, {len(self.failed)} failed"

    def lines(self) -> list[str]:
        """One line per test: outcome, name and, for a skip, the wrapper's reason."""
        rows = [(name, "PASS") for name in self.passed] + [(name, "SKIP") for name in self.skipped]
        rows += [(name, "FAIL") for name in self.failed]
        return [f"  {outcome} {name}" + (f": {self.skip_reasons[name]}" if name in self.skip_reasons and outcome == "SKIP" else "")
                for name, outcome in sorted(rows)]


def failure_output(output: str, results: SuiteResults) -> str:
    """What the failed tests logged (each ``=== RUN`` block of theirs; every run of it
    with ``-test.count``), or the whole output when the suite failed before any test."""
    if not results.failed:
        return output
    failed = set(results.failed)
    kept: list[str] = []
    keeping = False
    for line in output.splitlines():
        if line.startswith("=== ") or line.startswith("--- ") or line.startswith("    --- "):
            match = re.match(rf"=== (?:RUN|CONT|PAUSE)\s+{TOP_TEST}/(\w+)$", line)
            keeping = bool(match and match.group(1) in failed)
        if keeping:
            kept.append(line)
    return "\n".join(kept)


def read_results(output: str) -> SuiteResults:
    """Parse the ``-test.v`` output of the suite's binary."""
    results = SuiteResults(skip_reasons=dict(_SKIP_REASON.findall(output)))
    by_outcome = {"PASS": results.passed, "SKIP": results.skipped, "FAIL": results.failed}
    for outcome, subtest in _RESULT.findall(output):
        if subtest:
            by_outcome[outcome].append(subtest)
        else:
            results.top = outcome
    return results
