"""Informer indexes of the virtual kubelet: remote objects by the local pod (or object)
they stand for.

Remote ShadowPods, pods and reflected objects say which local object they stand for in
their origin annotations; a loop needs "every remote object of local key ns/name" (there
may be several after a restart, a namespace-mapping change or a reused name), and a scan
of the whole cache per reconcile would be quadratic in a large cluster. The informer keeps
the index (kube_offload/runtime/indexer.py) and updates it before any handler hears of the
change, so a reconcile triggered by a remote event always finds that object under its key.

Index functions are made once per (what they accept) and cached: every loop sharing an
informer registers the same function object under :data:`BY_ORIGIN`, which the informer
takes as one index, not a conflict.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Mapping

from kube_offload.remote_resources import is_ours
from kube_offload.runtime.indexer import IndexFunc
from vkubelet.shared.origin import origin_key

BY_ORIGIN = "by-origin"


def by_origin(accept: Callable[[Mapping[str, Any]], bool]) -> IndexFunc:
    """Index function: the origin key of an object ``accept`` says is ours, else none."""

    def index(obj: dict[str, Any]) -> list[str]:
        key = origin_key(obj) if accept(obj) else None
        return [key] if key else []

    return index


@functools.lru_cache(maxsize=None)
def ours_by_origin(local_cluster_id: str) -> IndexFunc:
    """:data:`BY_ORIGIN` over remote pods and ShadowPods made for ``local_cluster_id``
    (the pod loop and the kubelet API share those informers, and this function)."""
    return by_origin(lambda obj: is_ours(obj, local_cluster_id))
