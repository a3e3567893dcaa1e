#!/bin/sh
# The image's builder stage, written once: the Dockerfile and scripts/build-image.sh both
# run this inside their builder (a Python 3.11 with venv), so the two images hold the same
# /opt/kube-offload.
#
#   build-venv.sh SOURCE_DIR VENV_DIR
#
# 1. builds the project's wheel from SOURCE_DIR/pyproject.toml (the product only);
# 2. refuses a wheel that carries the development harness, tests or benchmarks;
# 3. creates VENV_DIR without pip and installs the wheel with its runtime dependencies,
#    using a throwaway pip from another venv (no pip, no caches, no .pyc in the result);
# 4. prunes what nothing imports (see below).
#
# POSIX sh only: the buildah builder has dash and Python, nothing else.
set -eu

if [ $# -ne 2 ]; then
  echo "usage: $0 SOURCE_DIR VENV_DIR" >&2
  exit 2
fi
src=$1
venv=$2
# By its versioned name: the venv's python links to the path it was created with, and
# only python3.11 is in every base (the `make image` runtime base has no python3 link).
python=${PYTHON:-python3.11}
work=$(mktemp -d "${TMPDIR:-/tmp}/kube-offload-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1

echo "build-venv: $("$python" --version) at $(command -v "$python")"
"$python" -m venv "$work/pip"

echo "build-venv: building the wheel from $src/pyproject.toml"
"$work/pip/bin/pip" wheel --quiet --no-deps --wheel-dir "$work/wheels" "$src"
set -- "$work"/wheels/kube_offload-*.whl
if [ $# -ne 1 ] || [ ! -f "$1" ]; then
  echo "build-venv: expected one kube_offload wheel in $work/wheels" >&2
  exit 1
fi
wheel=$1

# The harness is its own distribution (harness/pyproject.toml): if a packaging change
# lets it (or tests/bench) back into the product wheel, stop here rather than ship it.
"$python" - "$wheel" <<'EOF'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
tops = sorted({name.split("/", 1)[0] for name in names})
print(f"build-venv: {sys.argv[1].rsplit('/', 1)[-1]}: {len(names)} files in {', '.join(tops)}")
forbidden = [t for t in tops if t.split("-")[0] in ("kube_offload_harness", "harness", "tests", "bench")]
if forbidden:
    sys.exit(f"build-venv: the wheel must not contain {', '.join(forbidden)} (development only)")
EOF

echo "build-venv: installing it and its dependencies into $venv"
"$python" -m venv --without-pip "$venv"
"$work/pip/bin/pip" --python "$venv/bin/python" install --quiet --no-compile "$wheel"

# kubernetes >= 35 ships an asyncio twin of the whole client (kubernetes/aio, ~40 MB of
# generated models) next to the synchronous one; kube-offload only uses the synchronous
# client and nothing imports kubernetes.aio. Dropping it keeps the image under ~150 MB.
rm -rf "$venv"/lib/python3*/site-packages/kubernetes/aio
# Nothing should have written bytecode (--no-compile), but make sure: the root file system
# is read-only at run time and PYTHONDONTWRITEBYTECODE=1, so stale .pyc would only mislead.
find "$venv" -name __pycache__ -type d -prune -exec rm -rf {} +
# Shell activation scripts are for interactive use; the image runs bin/kube-offload.
rm -f "$venv"/bin/activate "$venv"/bin/activate.* "$venv"/bin/Activate.ps1

echo "build-venv: done: $(du -sh "$venv" | cut -f1) in $venv"
