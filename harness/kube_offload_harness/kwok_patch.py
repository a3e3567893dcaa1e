"""The one change the harness makes to kwok's source before building it: kwok deletes a
pod by name only, where a real kubelet deletes it by UID.

kwok's pod-delete stage can fire twice for one terminating pod (two watch events for it,
milliseconds apart). Each firing is ``DELETE pods/<name>`` with a grace period of 0 and no
precondition, so when the first one has already removed the pod and a controller (our
enforcer, a StatefulSet) has created its successor under the same name, the second one
deletes the successor, a pod kwok never saw terminating. A real kubelet never does that:
its final delete carries ``preconditions.uid``. With kwok's behaviour the enforcer
e2e tests saw one ``kubectl delete pod`` counted as two recreations, because two pods had
in fact been deleted.

The patch adds the same UID precondition to kwok's pod and stage deletes and treats the
409 it gets for a pod that is already gone as done. It is a list of exact text
replacements, each of which must match exactly once: a kwok upgrade that moves the code
fails the build with a message instead of silently building an unpatched kwok.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

# Part of the binaries' cache key (binaries.kwok_build_name): a new revision of the patch
# must not reuse a kwok built with an older one.
REVISION: Final = "uidsafe1"

_ERRORS_IMPORT: Final = 'apierrors "k8s.io/apimachinery/pkg/api/errors"'
_ANCHOR_IMPORT: Final = '\tmetav1 "k8s.io/apimachinery/pkg/apis/meta/v1"\n'


@dataclass(frozen=True)
class Replacement:
    path: str  # relative to the kwok module root
    old: str
    new: str


REPLACEMENTS: Final = (
    Replacement(
        "pkg/kwok/controllers/pod_controller.go",
        _ANCHOR_IMPORT,
        f"\t{_ERRORS_IMPORT}\n{_ANCHOR_IMPORT}",
    ),
    Replacement(
        "pkg/kwok/controllers/pod_controller.go",
        "\terr := c.typedClient.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, deleteOpt)\n",
        "\t// kube-offload: delete exactly this pod, as a kubelet does, never a successor of the same name.\n"
        "\topts := deleteOpt\n"
        "\topts.Preconditions = metav1.NewUIDPreconditions(string(pod.UID))\n"
        "\terr := c.typedClient.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, opts)\n"
        "\tif apierrors.IsConflict(err) {\n"
        "\t\treturn nil // that UID is gone already\n"
        "\t}\n",
    ),
    Replacement(
        "pkg/kwok/controllers/stage_controller.go",
        _ANCHOR_IMPORT,
        f"\t{_ERRORS_IMPORT}\n{_ANCHOR_IMPORT}",
    ),
    Replacement(
        "pkg/kwok/controllers/stage_controller.go",
        "\terr := cli.Delete(ctx, resource.GetName(), deleteOpt)\n",
        "\t// kube-offload: delete exactly this object, never a successor of the same name.\n"
        "\topts := deleteOpt\n"
        "\topts.Preconditions = metav1.NewUIDPreconditions(string(resource.GetUID()))\n"
        "\terr := cli.Delete(ctx, resource.GetName(), opts)\n"
        "\tif apierrors.IsConflict(err) {\n"
        "\t\treturn nil // that UID is gone already\n"
        "\t}\n",
    ),
)


class PatchError(RuntimeError):
    pass


def patched(path: str, text: str, replacements: tuple[Replacement, ...] = REPLACEMENTS) -> str:
    """``text`` (the file at ``path``) with every replacement for that path applied; each
    must match exactly once."""
    for replacement in replacements:
        if replacement.path != path:
            continue
        count = text.count(replacement.old)
        if count != 1:
            raise PatchError(
                f"kwok patch: expected exactly one {replacement.old.strip()!r} in {path}, found {count}; "
                "the kwok version changed: update harness/kube_offload_harness/kwok_patch.py"
            )
        text = text.replace(replacement.old, replacement.new)
    return text


def apply(module_root: Path, replacements: tuple[Replacement, ...] = REPLACEMENTS) -> list[str]:
    """Patch the writable copy of kwok's source at ``module_root``; the paths changed."""
    paths = sorted({r.path for r in replacements})
    for path in paths:
        target = module_root / path
        target.write_text(patched(path, target.read_text(), replacements))
    return paths
