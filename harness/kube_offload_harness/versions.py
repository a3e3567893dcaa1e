"""Pinned versions of the control-plane binaries built from Go modules (the one place).

Kubernetes matches the major version of the ``kubernetes`` Python client (37 <-> 1.37);
etcd is the minor line that Kubernetes release requires; kwok is the newest release; Helm
is the newest v3.22 patch the Go module proxy serves. All build with Go >= 1.26 and
``GOTOOLCHAIN=local``.
"""

from __future__ import annotations

from typing import Final

KUBERNETES: Final = "v1.37.2"
ETCD: Final = "v3.7.3"
KWOK: Final = "v0.8.0"
# Helm runs the charts in the tests (lint, template, install into the loopback clusters).
HELM: Final = "v3.22.0"
# metrics-server serves metrics.k8s.io (kubectl top) in both loopback clusters (docs/metrics.md).
METRICS_SERVER: Final = "v0.9.0"
# A real dynamic provisioner for the loopback clusters (the virtual storage class e2e tests):
# Rancher's local-path-provisioner, run as a process against a cluster (docs/storage.md).
LOCAL_PATH_PROVISIONER: Final = "v0.0.30"
# The real node of each loopback cluster (docs/real-nodes.md): kubelet and kube-proxy come
# from KUBERNETES above; containerd 2.x (Kubernetes 1.36+ supports containerd 2 only, and
# Debian's is 1.6); the CNI reference plugins.
CONTAINERD: Final = "v2.4.2"
CNI_PLUGINS: Final = "v1.10.0"
# The real nodes' images come from a local OCI registry (docs/real-nodes.md, "Images"):
# CNCF Distribution's registry (the OCI distribution reference implementation), from its Go module.
REGISTRY: Final = "v3.1.2"
# Cluster DNS of the real nodes (and its image, registry.k8s.io/coredns/coredns).
COREDNS: Final = "v1.15.0"
# The gateway's userspace WireGuard where the kernel has no module (docs/networking.md):
# wireguard-go, module golang.zx2c4.com/wireguard (its only published version is a pseudo
# version). The image builds the same one: the Dockerfile's ARG WIREGUARD_GO_VERSION
# (tests/unit/test_gateway_image.py keeps the two equal).
WIREGUARD_GO: Final = "v0.0.0-20260522210424-ecfc5a8d5446"
# virtual-kubelet's own e2e suite (tests/e2e/test_virtual_kubelet_suite.py) is pinned in its
# wrapper module, tests/vk-e2e/go.mod, with go.sum beside it: a Go module of its own, read
# by vk_suite.py; its Kubernetes modules are KUBERNETES's (tests/unit/harness/test_vk_suite.py).
GO_MINIMUM: Final = (1, 26)
