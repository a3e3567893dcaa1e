"""Install the CRDs shipped in kube_offload/manifests (ShadowPod, Consumer, TwinNamespace,
OffloadSlice) where they are missing (``--install-crd``: handy for test clusters; Helm
installs them in production)."""

from __future__ import annotations

from typing import Any

import logging
import time
from importlib import resources

import yaml
from kubernetes import client

from kube_offload.runtime.kinds import CUSTOM_RESOURCE_DEFINITIONS
from kube_offload.runtime.kube import ApiError, Kube

# Every CRD the enforcer reads; the chart symlinks the same files.
MANIFESTS = ("shadowpod-crd.yaml", "consumer-crd.yaml", "twinnamespace-crd.yaml", "offloadslice-crd.yaml")

log = logging.getLogger("kube_offload.enforcer.crd")


def load_crds() -> list[dict[str, Any]]:
    manifests = resources.files("kube_offload") / "manifests"
    return [yaml.safe_load((manifests / name).read_text()) for name in MANIFESTS]


def ensure_crds(api_client: client.ApiClient, *, timeout: float = 30.0) -> None:
    """Create each CRD unless one of that name exists (an existing one is left as it is:
    upgrading a CRD is the installer's job), then wait until all are Established so the
    informers' first lists do not meet a 404."""
    kube = Kube(api_client)
    crds = load_crds()
    for crd in crds:
        name = crd["metadata"]["name"]
        try:
            kube.create(CUSTOM_RESOURCE_DEFINITIONS, crd)
            log.info("created CustomResourceDefinition %s", name)
        except ApiError as exc:
            if not exc.already_exists:
                raise
    deadline = time.monotonic() + timeout
    for crd in crds:
        name = crd["metadata"]["name"]
        while not _established(kube.get(CUSTOM_RESOURCE_DEFINITIONS, name)):
            if time.monotonic() > deadline:
                raise SystemExit(f"kube-offload enforcer: CRD {name} not Established after {timeout:.0f}s")
            time.sleep(0.2)


def _established(crd: dict[str, Any]) -> bool:
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)
