"""The product/harness boundary (issue 10, part 2): the production wheel's packages never
import the development harness, the shared package never imports the components, and the
CLI works without the harness installed."""

from __future__ import annotations

import ast
from importlib import metadata
from pathlib import Path

import pytest

from kube_offload import cli

ROOT = Path(__file__).resolve().parents[3]
PRODUCT_PACKAGES = ("kube_offload", "webhook", "extender", "vkubelet", "enforcer", "certs", "kubectl_offload")
COMPONENTS = ("webhook", "extender", "vkubelet", "enforcer", "certs")
HARNESS_COMMANDS = {"demo", "cluster", "binaries"}


def _imported_top_levels(package: str) -> dict[str, set[str]]:
    """Every top-level module imported anywhere in ``package`` (also inside functions)."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.split(".")[0], set()).add(str(path.relative_to(ROOT)))
    return found


@pytest.mark.parametrize("package", PRODUCT_PACKAGES)
def test_product_packages_never_import_the_harness(package):
    imports = _imported_top_levels(package)
    assert imports, f"no Python files found under {package}/"
    assert "kube_offload_harness" not in imports, imports.get("kube_offload_harness")


def test_shared_package_never_imports_the_components():
    imports = _imported_top_levels("kube_offload")
    offenders = {name: files for name, files in imports.items() if name in COMPONENTS}
    assert not offenders


def test_harness_modules_are_not_in_the_product_package():
    shipped = {path.stem for path in (ROOT / "kube_offload").glob("*.py")}
    harness = {path.stem for path in (ROOT / "harness" / "kube_offload_harness").glob("*.py")} - {"__init__"}
    assert harness, "harness/kube_offload_harness has no modules"
    assert not shipped & harness


def test_the_harness_commands_come_from_entry_points():
    declared = {ep.name for ep in metadata.entry_points(group=cli.COMMANDS_GROUP)}
    assert declared >= HARNESS_COMMANDS, "install the harness: pip install -e harness (scripts/bootstrap.sh)"
    assert not {name.rsplit(".", 1)[-1] for name in cli.SUBCOMMANDS} & {"demo", "cluster_cli", "binaries_cli"}


def test_cli_works_without_the_harness(monkeypatch, capsys):
    monkeypatch.setattr(cli.metadata, "entry_points", lambda group: [])
    parser = cli.build_parser()
    commands = set(parser._subparsers._group_actions[0].choices)  # noqa: SLF001 (argparse has no public accessor)
    assert {"webhook", "extender", "certs", "vkubelet", "enforcer"} <= commands
    assert not commands & HARNESS_COMMANDS
    with pytest.raises(SystemExit) as exited:
        parser.parse_args(["--help"])
    assert exited.value.code == 0
    assert "demo" not in capsys.readouterr().out
