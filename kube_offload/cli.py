"""The ``kube-offload`` console script: one subcommand per component or tool.

Each component package owns a ``cli`` module exposing ``register(subparsers)``, which adds
its subcommand and sets ``func`` to the function that runs it; this module only collects
them, so a component's flags live next to its code.

Tools that are not part of the product (the development harness's ``demo``, ``cluster`` and
``binaries``) add their subcommands through the ``kube_offload.commands`` entry-point group:
the product never imports them, and its CLI works the same without them installed.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from importlib import metadata

# (module, subcommand) in the order --help lists them.
SUBCOMMANDS: tuple[str, ...] = (
    "webhook.cli",
    "extender.cli",
    "certs.cli",
    "vkubelet.cli",
    "enforcer.cli",
    "relay.cli",  # the home API relay (provider side; docs/home-api.md)
    "gateway.cli",  # gateway, gateway-routes: the WireGuard fabric (both sides; docs/networking.md)
    "kube_offload.peer.cli",  # peer, unpeer
    "kubectl_offload.cli",  # explain, status (also the kubectl plugin: kubectl offload ...)
)

# Entry points named here register extra subcommands: ``name = "module:register"``.
COMMANDS_GROUP = "kube_offload.commands"


def arrange_argv(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """``argv`` as each subcommand module's optional ``arrange_argv(parser, argv)`` rewrites
    it before parsing (the kubectl plugin moves kubectl's global flags written before
    ``explain``/``status`` after it: argparse only reads a subcommand's flags after it)."""
    for module_name in SUBCOMMANDS:
        arrange = getattr(importlib.import_module(module_name), "arrange_argv", None)
        if arrange is not None:
            argv = arrange(parser, argv)
    return argv


def build_parser(prog: str = "kube-offload") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description=(
            "Run pods of one Kubernetes cluster on the resources of others. "
            "Every flag can also be set through the environment variable shown in its help."
        ),
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in SUBCOMMANDS:
        module = importlib.import_module(module_name)
        module.register(subparsers)
    for entry_point in sorted(metadata.entry_points(group=COMMANDS_GROUP), key=lambda ep: ep.name):
        try:
            register = entry_point.load()
        except ImportError as exc:
            # A half-installed plugin must not take the product's own commands down with it.
            print(
                f"kube-offload: skipping subcommand {entry_point.name!r} ({entry_point.value}): {exc}; "
                "reinstall the package that provides it (from a checkout: scripts/bootstrap.sh)",
                file=sys.stderr,
            )
            continue
        register(subparsers)
    return parser


def main(argv: list[str] | None = None, *, prog: str = "kube-offload") -> int:
    parser = build_parser(prog)
    args = parser.parse_args(arrange_argv(parser, sys.argv[1:] if argv is None else list(argv)))
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


def kubectl_main() -> int:
    """The ``kubectl-offload`` executable: kubectl runs it for ``kubectl offload ...``
    (any executable named kubectl-<name> on PATH is a plugin). Same commands, kubectl's name."""
    return main(prog="kubectl offload")


if __name__ == "__main__":
    sys.exit(main())
