#!/usr/bin/env bash
# Installs everything kube-offload needs on a fresh machine, idempotently:
#   1. a virtualenv in .venv with the package, its test dependencies and the static checkers
#      (PyPI), and the development harness (harness/: loopback clusters, binary builder, demo);
#   2. the real Kubernetes control-plane binaries, etcd, kwok and kwokctl, built from Go
#      modules into ~/.cache/kube-offload (or $KUBE_OFFLOAD_CACHE); only what is missing;
#   3. as root: the Debian packages of the real-node tier, and its kubelet, kube-proxy,
#      containerd, CNI plugins, pause binary, image registry and CoreDNS (docs/real-nodes.md).
# The Debian packages come first; then 2 and 3 build in the background while 1 installs.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
  echo "kube-offload: Python >= 3.11 is required ($PYTHON is $("$PYTHON" --version 2>&1 || echo missing)); set PYTHON=/path/to/python3.11" >&2
  exit 2
fi

# The real-node tier (docs/real-nodes.md) needs root and, from Debian: runc (containerd's
# runtime), iptables and conntrack (CNI portmap, kube-proxy), mmdebstrap (the stand-in
# images: busybox, alpine, python, nginx, debian, made from Debian packages), gcc and
# libc6-dev (Kubernetes' pause.c, static), iproute2 (namespaces, veths), wireguard-tools
# (`wg`: the gateways the harness runs as processes configure their WireGuard link with it;
# the tunnel itself is wireguard-go, built below, as this kernel may have no module).
# Without root it is skipped (it fails under CI=true), and so is its build.
REAL_NODE_PACKAGES="runc iptables conntrack mmdebstrap gcc libc6-dev iproute2 wireguard-tools"
build_args=(build)
if [ "$(id -u)" = 0 ]; then
  missing=""
  for package in $REAL_NODE_PACKAGES; do
    dpkg -s "$package" >/dev/null 2>&1 || missing="$missing $package"
  done
  if [ -n "$missing" ]; then
    echo "kube-offload: installing$missing from Debian (the real-node tier)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing
  fi
  build_args+=(--real-node)
else
  echo "kube-offload: not root: the real-node tier (tests/realnode, docs/real-nodes.md) will be skipped" >&2
fi

# The binaries (Go, tens of minutes cold, seconds when cached) and the virtualenv (pip,
# minutes cold) do not depend on each other: the builder needs only the standard library,
# so it starts now, from the checkout, and compiles while pip downloads and installs.
PYTHONPATH=harness "$PYTHON" -m kube_offload_harness.binaries_cli "${build_args[@]}" &
build_pid=$!
# If this script stops early (pip failed, Ctrl-C), the build stops too (it stops its Go
# processes on SIGTERM) rather than carrying on behind the user's prompt.
trap 'kill "$build_pid" 2>/dev/null || true' EXIT

if [ ! -x .venv/bin/python ]; then
  echo "kube-offload: creating virtualenv .venv"
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.kube-offload-installed
# The product, then the development harness (its own distribution, harness/, never in the
# product's wheel); either pyproject changing (entry points, dependencies) means re-install.
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ harness/pyproject.toml -nt "$stamp" ]; then
  echo "kube-offload: installing Python dependencies into .venv"
  pip_started=$SECONDS
  .venv/bin/python -m pip install --quiet --upgrade pip
  # One resolution for both distributions (the harness requires the product).
  .venv/bin/python -m pip install --quiet -e '.[test,lint]' -e harness
  touch "$stamp"
  echo "kube-offload: Python dependencies installed in $((SECONDS - pip_started))s"
fi

wait "$build_pid"
trap - EXIT
