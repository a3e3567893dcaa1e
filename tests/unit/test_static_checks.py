"""The static checks `make lint` runs before the tests (docs/testing.md, "Static checks"):
their configuration in pyproject.toml agrees with itself, and each checker really fails on
a violation (in a copy of the tree, next to an unmodified copy that passes)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]
PRODUCT = ("kube_offload", "webhook", "extender", "vkubelet", "enforcer", "certs", "kubectl_offload", "relay", "gateway")
# mypy's --strict, flag by flag (``strict`` itself is a global option only): pyproject.toml
# sets each for the whole product.
STRICT_FLAGS = (
    "disallow_any_generics", "disallow_subclassing_any", "disallow_untyped_calls", "disallow_untyped_defs",
    "disallow_incomplete_defs", "check_untyped_defs", "disallow_untyped_decorators", "warn_unused_ignores",
    "warn_return_any", "no_implicit_reexport", "strict_equality", "extra_checks", "warn_redundant_casts",
)
# What a per-module override may set without relaxing the checks.
NEUTRAL_OVERRIDES = {"module", "ignore_missing_imports"}
# The checkers' console scripts sit beside this interpreter (scripts/bootstrap.sh installs
# them with the `lint` extra).
BIN = Path(sys.executable).parent


def _contract(contract_id: str) -> dict[str, Any]:
    (contract,) = [c for c in TOOL["importlinter"]["contracts"] if c["id"] == contract_id]
    return contract


def _layers() -> list[set[str]]:
    return [{m.strip() for m in re.split(r"[|:]", layer)} for layer in _contract("layers")["layers"]]


def _run(*command: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in command], cwd=cwd, capture_output=True, text=True, timeout=300)


# --- the configuration --------------------------------------------------------------------------
def test_the_domain_is_the_same_list_for_every_check():
    domain = _layers()[-1]
    assert domain == set(_contract("domain-no-io")["source_modules"])


def test_mypy_is_strict_on_every_product_package():
    """Every strict flag is set for the whole run, no override relaxes one for some
    modules, and mypy checks every package of the product (and the typed fake of the tests'
    support package)."""
    mypy = TOOL["mypy"]
    assert {flag: mypy.get(flag) for flag in STRICT_FLAGS} == dict.fromkeys(STRICT_FLAGS, True)
    for override in mypy.get("overrides", []):
        assert set(override) <= NEUTRAL_OVERRIDES, override
    assert set(PRODUCT) <= set(mypy["files"])
    assert "tests/support/recording_kube.py" in mypy["files"]


# The largest a product module may grow (docs/architecture.md, "Layers"): past it a module
# holds more than one domain and should be split by them; the virtual kubelet, where most
# features land, is held tighter.
MAX_MODULE_LINES = 600
MAX_VKUBELET_MODULE_LINES = 500


def oversized_modules(root: Path) -> list[str]:
    """The product's modules over their line budget, as ``path: lines``."""
    found = []
    for package in PRODUCT:
        limit = MAX_VKUBELET_MODULE_LINES if package == "vkubelet" else MAX_MODULE_LINES
        for module in sorted((root / package).rglob("*.py")):
            lines = len(module.read_text().splitlines())
            if lines > limit:
                found.append(f"{module.relative_to(root)}: {lines} > {limit}")
    return found


def test_no_product_module_outgrows_its_budget():
    assert oversized_modules(ROOT) == []


def test_an_oversized_module_is_found(tmp_path: Path):
    for package in PRODUCT:
        (tmp_path / package).mkdir()
    (tmp_path / "vkubelet" / "big.py").write_text("x = 1\n" * (MAX_VKUBELET_MODULE_LINES + 1))
    (tmp_path / "enforcer" / "fits.py").write_text("x = 1\n" * MAX_MODULE_LINES)
    assert oversized_modules(tmp_path) == [f"vkubelet/big.py: {MAX_VKUBELET_MODULE_LINES + 1} > {MAX_VKUBELET_MODULE_LINES}"]


def test_every_module_of_the_shared_package_has_a_layer():
    """A new module in kube_offload/ must be placed (domain, runtime, shared services or CLI),
    or the import contracts would not look at it."""
    placed = set().union(*_layers())
    modules = {f"kube_offload.{p.stem}" for p in (ROOT / "kube_offload").glob("*.py") if p.stem != "__init__"}
    modules |= {f"kube_offload.{p.name}" for p in (ROOT / "kube_offload").iterdir() if (p / "__init__.py").exists()}
    assert modules - placed == set()
    assert {name for name in PRODUCT if name != "kube_offload"} <= placed


# --- each checker fails on a violation ----------------------------------------------------------
@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The product and the harness package, importable from the copy's root."""
    root = tmp_path_factory.mktemp("tree")
    ignore = shutil.ignore_patterns("__pycache__")
    for package in PRODUCT:
        shutil.copytree(ROOT / package, root / package, ignore=ignore)
    shutil.copytree(ROOT / "harness" / "kube_offload_harness", root / "kube_offload_harness", ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", root)
    return root


def test_the_import_contracts_pass_on_the_unmodified_copy(tree: Path):
    checked = _run(BIN / "lint-imports", "--no-cache", "--no-logo", cwd=tree)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def _lint_imports_with(tree: Path, module: str, lines: str) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` on the copy with ``lines`` appended to ``module``, then restored."""
    path = tree / module
    original = path.read_text()
    path.write_text(f"{original}\n{lines}\n")
    try:
        return _run(BIN / "lint-imports", "--no-cache", "--no-logo", cwd=tree)
    finally:
        path.write_text(original)


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        ("kube_offload/selector.py", "from kube_offload.runtime import kube", "Layers"),
        ("kube_offload/runtime/workqueue.py", "import vkubelet.twins.naming", "Layers"),
        ("webhook/app.py", "import vkubelet.twins.naming", "Layers"),
        ("kube_offload/policy.py", "import subprocess", "The domain does no I/O"),
        ("certs/pki.py", "import kube_offload_harness", "never imports the development harness"),
        ("kubectl_offload/status.py", "import enforcer.consumers.quota", "never on a component"),
        ("enforcer/consumers/trim.py", "import enforcer.shadowpods.api", "The enforcer: process wiring"),
        ("enforcer/shadowpods/reconcile.py", "import enforcer.admission.dry_run", "The enforcer: process wiring"),
        # the vkubelet: the bottom imports no loop, a loop no higher one, two siblings not each other
        ("vkubelet/shared/informers.py", "import vkubelet.pods.reconcile", "The virtual kubelet: process wiring"),
        ("vkubelet/reflection/scope.py", "import vkubelet.pods.translation", "The virtual kubelet: process wiring"),
        ("vkubelet/kubeletapi/paths.py", "import vkubelet.twins.namespaces", "The virtual kubelet: process wiring"),
        ("vkubelet/pods/status.py", "import vkubelet.runner", "The virtual kubelet: process wiring"),
    ],
)
def test_the_import_contracts_catch(tree: Path, module: str, line: str, broken: str):
    checked = _lint_imports_with(tree, module, line)
    assert checked.returncode != 0, checked.stdout
    assert re.search(rf"{re.escape(broken)}.* BROKEN", checked.stdout), checked.stdout


def test_an_import_for_the_type_checker_only_is_not_a_layer_violation(tree: Path):
    """A loop names the wiring's Settings under ``if TYPE_CHECKING`` (it never runs): the
    vkubelet contract counts what runs (exclude_type_checking_imports)."""
    checked = _lint_imports_with(tree, "vkubelet/shared/trim.py",
                                 "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import vkubelet.runner")
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize(
    ("source", "rule"),
    [
        ("def f():\n    return undefined_name\n", "F821"),
        ("callbacks = []\nfor i in range(3):\n    callbacks.append(lambda: i)\n", "B023"),
    ],
)
def test_ruff_catches(tmp_path: Path, source: str, rule: str):
    (tmp_path / "bad.py").write_text(source)
    checked = _run(BIN / "ruff", "check", "--no-cache", "--config", ROOT / "pyproject.toml", "bad.py", cwd=tmp_path)
    assert checked.returncode != 0
    assert rule in checked.stdout, checked.stdout


@pytest.mark.parametrize(
    ("module", "source", "strict"),
    [
        ("kube_offload/selector.py", "def untyped(x):\n    return x\n", True),
        ("kube_offload/runtime/workqueue.py", "def untyped(x):\n    return x\n", True),
        ("webhook/review.py", "def untyped(x):\n    return x\n", True),
        ("vkubelet/pods/reconcile.py", "def untyped(x):\n    return x\n", True),
        ("enforcer/shadowpods/reconcile.py", "def untyped(x):\n    return x\n", True),
        ("relay/server.py", "def untyped(x):\n    return x\n", True),
        # The control: the same function typed passes.
        ("vkubelet/pods/reconcile.py", "def typed(x: int) -> int:\n    return x\n", False),
    ],
)
def test_mypy_is_strict_everywhere(tmp_path: Path, module: str, source: str, strict: bool):
    """An untyped function fails in any package of the product, domain, runtime or component."""
    for package in {*Path(module).parents, Path("kube_offload")}:
        if package == Path("."):
            continue
        (tmp_path / package).mkdir(parents=True, exist_ok=True)
        (tmp_path / package / "__init__.py").touch()
    path = tmp_path / module
    path.write_text(source)
    checked = _run(
        sys.executable, "-m", "mypy", "--config-file", ROOT / "pyproject.toml", "--cache-dir", tmp_path / ".mypy_cache",
        module, cwd=tmp_path,
    )
    assert (checked.returncode != 0) is strict, checked.stdout
    assert ("no-untyped-def" in checked.stdout) is strict, checked.stdout
