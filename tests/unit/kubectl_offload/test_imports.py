"""The kubectl plugin depends on the domain and the contract (kube_offload), never on a
component's internals (docs/architecture.md): read from the source, so an import added
anywhere in kubectl_offload/, or in a kube_offload module it reaches, fails here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PLUGIN = "kubectl_offload"
# The components (and the development harness): what the plugin must not reach.
FORBIDDEN = ("webhook", "extender", "enforcer", "vkubelet", "certs", "kube_offload_harness")
# Packages of this repository whose modules the walk follows.
FOLLOWED = (PLUGIN, "kube_offload")


def imported_modules(path: Path, module: str) -> set[str]:
    """Every module ``path`` (the module named ``module``) imports, at any depth of its
    code: relative imports resolved, ``importlib.import_module("...")`` included."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            found.add(base)
            # ``from package import module`` imports the module too.
            found.update(f"{base}.{alias.name}" for alias in node.names)
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.add(node.args[0].value)
    return found


def module_file(module: str) -> Path | None:
    base = ROOT.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def reached_from_plugin() -> dict[str, str]:
    """Every module the plugin reaches through this repository's packages, with the module
    that first imported it (to name the chain in a failure)."""
    start = sorted(p for p in (ROOT / PLUGIN).rglob("*.py"))
    queue = [".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__") for p in start]
    parent: dict[str, str] = {name: "" for name in queue}
    while queue:
        name = queue.pop()
        path = module_file(name)
        if path is None:
            continue
        for imported in imported_modules(path, name):
            if imported in parent or imported.split(".")[0] not in FOLLOWED + FORBIDDEN:
                continue
            parent[imported] = name
            if imported.split(".")[0] in FOLLOWED:
                queue.append(imported)
    return parent


def chain(parent: dict[str, str], name: str) -> str:
    links = [name]
    while parent.get(links[-1]):
        links.append(parent[links[-1]])
    return " <- ".join(links)


def test_the_plugin_reaches_no_component():
    parent = reached_from_plugin()
    offending = sorted(name for name in parent if name.split(".")[0] in FORBIDDEN)
    assert not offending, "kubectl_offload reaches a component's internals; move what it needs into " \
        "kube_offload (domain or contract):\n" + "\n".join(chain(parent, name) for name in offending)


def test_the_walk_sees_the_plugins_own_imports():
    # The test above proves something only if the walk finds imports at all.
    parent = reached_from_plugin()
    assert "kube_offload.pod_mutation" in parent and "kube_offload.node_filter" in parent
    assert "kubectl_offload.explain" in parent


@pytest.mark.parametrize("source, found", [
    ("from extender import core\n", {"extender", "extender.core"}),
    ("def f():\n    import vkubelet.naming\n", {"vkubelet.naming"}),
    ("import importlib\nimportlib.import_module('webhook.review')\n", {"importlib", "webhook.review"}),
    ("from .explain import x\n", {"kubectl_offload.explain", "kubectl_offload.explain.x"}),
])
def test_imports_are_found_wherever_written(tmp_path, source, found):
    path = tmp_path / "probe.py"
    path.write_text(source)
    assert imported_modules(path, "kubectl_offload.probe") == found
