"""``kube-offload binaries``: build, locate and inspect the cached control-plane binaries.

Also runnable as ``python -m kube_offload_harness.binaries_cli`` with only the standard
library (the builder needs nothing else): scripts/bootstrap.sh starts the build that way
before the virtualenv exists, so the Go build and the pip install overlap."""

from __future__ import annotations

import argparse
import signal
import sys

from kube_offload_harness import binaries, versions


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "binaries",
        help="build and locate the Kubernetes/etcd/kwok/helm binaries used for loopback clusters and chart tests",
        description=(
            f"Builds kube-apiserver, kube-scheduler, kube-controller-manager, kubectl ({versions.KUBERNETES}), "
            f"etcd ({versions.ETCD}), kwok/kwokctl ({versions.KWOK}) and helm ({versions.HELM}) from Go modules with the local Go "
            "toolchain, into $KUBE_OFFLOAD_CACHE (default ~/.cache/kube-offload). Only missing binaries are built."
        ),
    )
    actions = parser.add_subparsers(dest="binaries_action", metavar="ACTION")
    build = actions.add_parser("build", help="build whatever is missing (first run: tens of minutes)")
    build.add_argument("--real-node", action="store_true",
                       help=f"also the real node's kubelet, kube-proxy, containerd ({versions.CONTAINERD}), CNI plugins "
                            f"({versions.CNI_PLUGINS}), pause, the image registry ({versions.REGISTRY}) and CoreDNS "
                            f"({versions.COREDNS}) (docs/real-nodes.md)")
    build.set_defaults(func=_build)
    status = actions.add_parser("status", help="list each binary and whether it is cached")
    status.set_defaults(func=_status)
    parser.set_defaults(func=_status)


def _build(args: argparse.Namespace) -> int:
    try:
        bins, nbins = binaries.ensure_all(real_node=args.real_node)
    except binaries.BuildError as exc:
        print(f"kube-offload: {exc}", file=sys.stderr)
        return 1
    for line in [*binaries.describe(bins), *binaries.describe(nbins)]:
        print(line)
    return 0


def _status(_args: argparse.Namespace) -> int:
    bins = binaries.binaries()
    for line in [*binaries.describe(bins), *binaries.describe(binaries.node_binaries())]:
        print(line)
    # the real node's binaries are optional (built with `build --real-node`)
    return 0 if not bins.missing() else 1


def main(argv: list[str] | None = None) -> int:
    # bootstrap.sh stops a background build with SIGTERM: raise, so that the Go processes
    # it started are stopped too (go_build.run_step, go_build.Context.cancel).
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(143))
    parser = argparse.ArgumentParser(prog="kube-offload")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["binaries", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
