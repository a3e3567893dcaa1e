"""Install the ShadowPod CRD shipped in kube_offload/manifests when it is missing
(``--install-crd``: handy for test clusters; Helm installs it in production)."""

from __future__ import annotations

import logging
import time
from importlib import resources

import yaml
from kubernetes import client

from enforcer.api import raw_request
from kube_offload.constants import SHADOWPOD_GROUP, SHADOWPOD_PLURAL
from kube_offload.kube import ApiError, call_json

CRD_NAME = f"{SHADOWPOD_PLURAL}.{SHADOWPOD_GROUP}"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"

log = logging.getLogger("kube_offload.enforcer.crd")


def load_crd() -> dict:
    text = (resources.files("kube_offload") / "manifests" / "shadowpod-crd.yaml").read_text()
    return yaml.safe_load(text)


def ensure_crd(api_client: client.ApiClient, *, timeout: float = 30.0) -> None:
    """Create the CRD unless one of that name exists (an existing one is left as it is:
    upgrading a CRD is the installer's job), then wait until it is Established so the
    informer's first list does not meet a 404."""
    try:
        call_json(raw_request, api_client, "POST", CRD_PATH, body=load_crd())
        log.info("created CustomResourceDefinition %s", CRD_NAME)
    except ApiError as exc:
        if not exc.already_exists:
            raise
    deadline = time.monotonic() + timeout
    while True:
        crd = call_json(raw_request, api_client, "GET", f"{CRD_PATH}/{CRD_NAME}")
        conditions = (crd.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"kube-offload enforcer: CRD {CRD_NAME} not Established after {timeout:.0f}s")
        time.sleep(0.2)
