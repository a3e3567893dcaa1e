"""How many times walking one pod from the pod loop's reconcile to its ShadowPod's creation
enters each module of the product (a script, not a test: it prints figures; issue 38's
"enters each module at most twice").

The pod is the local pod of tests/fixtures/vkubelet_pod_objects.json (as the local API
server admitted it: service-account volume, tolerations, a ReplicaSet owner...), bound to
the virtual node of a twin namespace the provider made (the twin request Ready). No API
server: the informers are fed through their caches, the two writes (the ShadowPod create,
a status patch of the local pod) and the Event recorder are replaced by recorders, as the
unit tests of the pod loop do. A profiler hook counts a module *entered* each time a call
goes into it from another module; *re-entries* are entries into a module entered before
during the same walk (each one a return to a module the reader had left).

Two walks: ``reconcile``, the whole decision for a new pod (``PodOffloader.reconcile``:
read the caches, pick the step, translate, create), and ``create``, the step alone
(``pods/shadowpods.py:create``, where issue 38 counted from).

    .venv/bin/python bench/module_walk.py            # vkubelet modules
    .venv/bin/python bench/module_walk.py --product  # kube_offload's too
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import sys
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kubernetes import client  # noqa: E402

from kube_offload import constants as c  # noqa: E402
from kube_offload.runtime.informer import ADDED  # noqa: E402
from vkubelet.pods import shadowpods  # noqa: E402
from vkubelet.pods.reconcile import PodOffloader  # noqa: E402
from vkubelet.settings import Settings  # noqa: E402
from vkubelet.shared.events import EventRecorder  # noqa: E402
from vkubelet.shared.informers import SharedInformers  # noqa: E402
from vkubelet.twins.namespaces import TwinNamespaces  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "vkubelet_pod_objects.json"
LOCAL_CLUSTER = "local"
PRODUCT = ("vkubelet", "kube_offload")


def module_of(filename: str, packages: tuple[str, ...]) -> str | None:
    """``vkubelet.pods.reconcile`` for .../vkubelet/pods/reconcile.py; None outside ``packages``."""
    try:
        relative = Path(filename).resolve().relative_to(ROOT)
    except ValueError:
        return None
    if relative.parts[0] not in packages or relative.suffix != ".py":
        return None
    parts = list(relative.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def walk(action: Callable[[], Any], packages: tuple[str, ...]) -> list[str]:
    """The modules entered while ``action`` runs, in order (one item per entry)."""
    entries: list[str] = []
    names: dict[str, str | None] = {}

    def name(frame: FrameType | None) -> str | None:
        if frame is None:
            return None
        filename = frame.f_code.co_filename
        if filename not in names:
            names[filename] = module_of(filename, packages)
        return names[filename]

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        if event != "call":
            return
        module = name(frame)
        if module is not None and module != name(frame.f_back):
            entries.append(module)

    sys.setprofile(profile)
    try:
        action()
    finally:
        sys.setprofile(None)
    return entries


def new_pod_loop() -> tuple[PodOffloader, dict, str, list[dict]]:
    """A pod loop whose caches hold one new local pod of an offloaded namespace with a
    usable twin, and no ShadowPod yet; the pod, its twin, what was created."""
    local = json.loads(FIXTURE.read_text())["local_pod"]
    namespace = local["metadata"]["namespace"]
    settings = Settings(cluster_id="remote-1", local_cluster_id=LOCAL_CLUSTER)
    twin = f"{namespace}-{LOCAL_CLUSTER}"
    informers = SharedInformers(settings, client.ApiClient(), client.ApiClient())
    recorder = EventRecorder(client.ApiClient(), host="bench")
    loop = PodOffloader(settings, informers, TwinNamespaces(settings, informers, recorder), recorder)
    informers.set_twin_namespaces([twin])
    loop.twins.local_namespaces.apply(ADDED, {
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": namespace, "resourceVersion": "1",
                     "labels": {c.LABEL_ENABLED: c.ENABLED_VALUE, c.LABEL_POD_PLACEMENT: c.PLACEMENT_REMOTE}},
    })
    loop.twins.requests.apply(ADDED, {
        "apiVersion": f"{c.DOMAIN}/{c.SHADOWPOD_VERSION}", "kind": c.TWIN_NAMESPACE_KIND,
        "metadata": {"name": twin, "namespace": settings.tenant_namespace, "resourceVersion": "1",
                     "labels": {c.LABEL_ORIGIN_CLUSTER_ID: LOCAL_CLUSTER}},
        "spec": {"localNamespace": namespace},
        "status": {"phase": c.TWIN_PHASE_READY},
    })
    for informer in (loop.shadowpods, loop.remote_pods):
        informer._children[twin]._synced.set()  # listed once, empty: no ShadowPod yet
    local = copy.deepcopy(local)
    local["spec"]["nodeName"] = settings.node_name
    loop.local_pods.apply(ADDED, local)
    created: list[dict] = []
    loop.kube.create = lambda _kind, body, **_kw: created.append(body) or body  # type: ignore[method-assign]
    loop.local.kube.patch = lambda *_a, **_kw: {}  # type: ignore[method-assign]
    recorder.warning = lambda *_a, **_kw: None  # type: ignore[method-assign]
    recorder.normal = lambda *_a, **_kw: None  # type: ignore[method-assign]
    return loop, local, twin, created


def report(title: str, entries: list[str]) -> None:
    counts = Counter(entries)
    reentries = sum(n - 1 for n in counts.values())
    print(f"\n{title}: {len(counts)} modules entered, {len(entries)} entries, {reentries} re-entries, "
          f"most entered {max(counts.values()) if counts else 0} times")
    for module, n in counts.most_common():
        print(f"  {n:3d}  {module}")
    path = [m for i, m in enumerate(entries) if i == 0 or m != entries[i - 1]]
    print("  path: " + " > ".join(path))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--product", action="store_true", help="count kube_offload's modules too, not only vkubelet's")
    args = parser.parse_args()
    logging.disable(logging.CRITICAL)
    packages = PRODUCT if args.product else ("vkubelet",)

    loop, local, twin, created = new_pod_loop()
    key = f"{local['metadata']['namespace']}/{local['metadata']['name']}"
    entries = walk(lambda: loop.reconcile(key), packages)
    assert len(created) == 1, f"the reconcile created {len(created)} ShadowPods"
    report(f"reconcile {key} (a new pod) to its ShadowPod's creation", entries)

    loop, local, twin, created = new_pod_loop()
    logger = logging.LoggerAdapter(logging.getLogger("bench"), {})
    attempt = loop.refusals.attempt((key, shadowpods.CREATE), local)
    desired = loop.desired(local, twin)
    entries = walk(lambda: shadowpods.create(loop, local, twin, desired, attempt, logger), packages)
    assert len(created) == 1, f"the create step created {len(created)} ShadowPods"
    report("pods/shadowpods.py:create alone", entries)
    return 0


if __name__ == "__main__":
    sys.exit(main())
