"""The ``kube-offload`` console script: one subcommand per component or tool.

Each component package owns a ``cli`` module exposing ``register(subparsers)``, which adds
its subcommand and sets ``func`` to the function that runs it; this module only collects
them, so a component's flags live next to its code.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# (module, subcommand) in the order --help lists them.
SUBCOMMANDS: tuple[str, ...] = (
    "webhook.cli",
    "extender.cli",
    "certs.cli",
    "vkubelet.cli",
    "enforcer.cli",
    "kube_offload.binaries_cli",
    "kube_offload.cluster_cli",
    "kube_offload.demo",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kube-offload",
        description=(
            "Run pods of one Kubernetes cluster on the resources of others. "
            "Every flag can also be set through the environment variable shown in its help."
        ),
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in SUBCOMMANDS:
        module = importlib.import_module(module_name)
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
