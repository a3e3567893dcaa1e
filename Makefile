# The two commands of the README:
#   make demo   bring up loopback clusters and show offloading end to end
#   make test   the whole test suite (unit, component, end-to-end on real control planes)
# Both install what they need first (scripts/bootstrap.sh): .venv and the cached binaries.

.PHONY: bootstrap demo lint test test-fast test-image test-realnode image bench down

bootstrap:
	@scripts/bootstrap.sh

demo: bootstrap
	.venv/bin/kube-offload demo

# Static checks, first (seconds once mypy's cache is warm): ruff, mypy, the import
# contracts of the layers (pyproject.toml; docs/testing.md). Each stops make on a finding.
lint: bootstrap
	.venv/bin/ruff check .
	.venv/bin/mypy
	.venv/bin/lint-imports --no-logo

test: bootstrap lint
	.venv/bin/python -m pytest

# Unit and component tiers only (no clusters, no image): seconds.
test-fast: bootstrap
	.venv/bin/python -m pytest -m "not e2e and not image and not realnode"

# Only the real-node tier: a real kubelet + containerd + runc node in a loopback cluster
# (as root; about a minute; docs/real-nodes.md). `make test` runs it too.
test-realnode: bootstrap
	.venv/bin/python -m pytest -m realnode

# The container image from the Dockerfile, built with buildah: no Docker daemon, no
# registry; needs root (docs/image.md). About a minute; `make test` runs it too.
image:
	scripts/build-image.sh

# Only the image's tests (build, then run it with a read-only root): tests/image.
test-image: bootstrap
	.venv/bin/python -m pytest -m image

bench: bootstrap
	.venv/bin/python bench/bench_webhook.py
	.venv/bin/python bench/bench_extender.py
	.venv/bin/python bench/bench_offloading.py
	.venv/bin/python bench/bench_kubelet_api.py

down:
	.venv/bin/kube-offload cluster down --state-dir $${XDG_STATE_HOME:-$$HOME/.local/state}/kube-offload/demo
