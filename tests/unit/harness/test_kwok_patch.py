"""The harness's patch to kwok's source (kwok deletes by UID, as a kubelet does)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kube_offload_harness import binaries, kwok_patch, versions

POD_CONTROLLER = "pkg/kwok/controllers/pod_controller.go"
STAGE_CONTROLLER = "pkg/kwok/controllers/stage_controller.go"

# The shape of the two files in kwok v0.8.0, cut down to what the patch touches.
POD_SOURCE = """import (
\t"context"

\tcorev1 "k8s.io/api/core/v1"
\tmetav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func (c *PodController) deleteResource(ctx context.Context, pod *corev1.Pod) error {
\terr := c.typedClient.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, deleteOpt)
\tif err != nil {
\t\treturn err
\t}
\treturn nil
}
"""
STAGE_SOURCE = """import (
\tmetav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func (c *StageController) deleteResource(ctx context.Context, resource *unstructured.Unstructured) error {
\terr := cli.Delete(ctx, resource.GetName(), deleteOpt)
\treturn err
}
"""


def test_pod_deletes_carry_the_pods_uid_and_a_gone_uid_is_done() -> None:
    out = kwok_patch.patched(POD_CONTROLLER, POD_SOURCE)
    assert 'apierrors "k8s.io/apimachinery/pkg/api/errors"' in out
    assert "opts.Preconditions = metav1.NewUIDPreconditions(string(pod.UID))" in out
    assert "Delete(ctx, pod.Name, opts)" in out and "Delete(ctx, pod.Name, deleteOpt)" not in out
    assert "if apierrors.IsConflict(err) {\n\t\treturn nil" in out
    # The precondition is set before the call, and the original error path stays.
    assert out.index("NewUIDPreconditions") < out.index("Delete(ctx, pod.Name, opts)") < out.index("if err != nil")


def test_stage_deletes_carry_the_objects_uid() -> None:
    out = kwok_patch.patched(STAGE_CONTROLLER, STAGE_SOURCE)
    assert "metav1.NewUIDPreconditions(string(resource.GetUID()))" in out
    assert "cli.Delete(ctx, resource.GetName(), opts)" in out
    assert out.count("apierrors ") == 1


def test_other_files_are_left_as_they_are() -> None:
    assert kwok_patch.patched("pkg/kwok/controllers/node_controller.go", POD_SOURCE) == POD_SOURCE


@pytest.mark.parametrize("source, found", [(POD_SOURCE.replace("deleteOpt)", "options)"), 0),
                                           (POD_SOURCE + POD_SOURCE, 2)])
def test_a_moved_or_repeated_anchor_fails_the_build_with_a_message(source: str, found: int) -> None:
    with pytest.raises(kwok_patch.PatchError, match=f"found {found}; the kwok version changed"):
        kwok_patch.patched(POD_CONTROLLER, source)


def test_apply_patches_a_source_tree_in_place(tmp_path: Path) -> None:
    (tmp_path / POD_CONTROLLER).parent.mkdir(parents=True)
    (tmp_path / POD_CONTROLLER).write_text(POD_SOURCE)
    (tmp_path / STAGE_CONTROLLER).write_text(STAGE_SOURCE)
    assert kwok_patch.apply(tmp_path) == [POD_CONTROLLER, STAGE_CONTROLLER]
    assert "NewUIDPreconditions(string(pod.UID))" in (tmp_path / POD_CONTROLLER).read_text()
    assert "NewUIDPreconditions(string(resource.GetUID()))" in (tmp_path / STAGE_CONTROLLER).read_text()


def test_the_cache_key_names_the_patch_revision(tmp_path: Path) -> None:
    # A kwok built before the patch (bin/kwok-<version>/) must not count as built.
    kwok = binaries.binaries(tmp_path).kwok
    assert kwok.parent.name == f"kwok-{versions.KWOK}-{kwok_patch.REVISION}"
