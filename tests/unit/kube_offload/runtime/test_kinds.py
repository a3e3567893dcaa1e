"""The kube-offload custom resources in the kinds table agree with the CRDs that define
them (kube_offload/manifests, which `--install-crd` applies, and the remote chart's crds/):
group, served version, kind, plural and scope. A CRD renamed on one side only would
otherwise surface as 404s against a real API server."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kube_offload.runtime import kinds

REPO = Path(__file__).resolve().parents[4]
CRD_FILES = sorted((REPO / "kube_offload" / "manifests").glob("*-crd.yaml")) + sorted(
    (REPO / "charts" / "kube-offload-remote" / "crds").glob("*.yaml")
)


def _crds() -> list[tuple[str, dict]]:
    found = []
    for path in CRD_FILES:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "CustomResourceDefinition":
                found.append((str(path.relative_to(REPO)), doc))
    return found


def test_every_crd_file_is_read() -> None:
    assert len(CRD_FILES) == 8
    assert {doc["spec"]["names"]["plural"] for _, doc in _crds()} == {"shadowpods", "consumers", "twinnamespaces", "offloadslices"}


@pytest.mark.parametrize(("where", "crd"), _crds(), ids=lambda v: v if isinstance(v, str) else "")
def test_the_kinds_table_matches_the_crd(where: str, crd: dict) -> None:
    spec = crd["spec"]
    by_plural = {r.plural: r for r in kinds.ALL if r.group == spec["group"]}
    resource = by_plural.get(spec["names"]["plural"])
    assert resource is not None, f"{where}: no entry in kube_offload/runtime/kinds.py"
    assert resource.kind == spec["names"]["kind"], where
    assert resource.namespaced == (spec["scope"] == "Namespaced"), where
    served = [v["name"] for v in spec["versions"] if v.get("served")]
    storage = [v["name"] for v in spec["versions"] if v.get("storage")]
    assert resource.version in served and storage == [resource.version], where
