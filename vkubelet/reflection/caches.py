"""The caches reflection reads: one process-wide informer per side, resource and
selection (shared by every loop that asks for the same), and, on the remote side, the
label selector and the index of the objects one reflector of this cluster wrote. Shared
by the generic reflector (reflector.py), the token and Event reflection, and the virtual
storage class (vkubelet/storage/virtual.py)."""

from __future__ import annotations

import functools
from typing import Any, Callable, Literal, TYPE_CHECKING, overload

from kube_offload import constants as c
from kube_offload.runtime.indexer import IndexFunc
from kube_offload.runtime.informer import Informer
from kube_offload.runtime.kinds import Resource
from kube_offload.runtime.kube import Kube
from kube_offload.runtime.namespaced_informer import MultiNamespaceInformer
from vkubelet.shared.indexes import by_origin
from vkubelet.reflection import forge as f
from vkubelet.shared import names as n

if TYPE_CHECKING:
    from vkubelet.shared.informers import SharedInformers


# The side says which class comes back: the remote side is always namespace-scoped.
@overload
def shared_informer(
    informers: "SharedInformers",
    side: Literal["local"],
    resource: str,
    kind: Resource,
    *,
    label_selector: str = "",
    field_selector: str = "",
    transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> Informer: ...


@overload
def shared_informer(
    informers: "SharedInformers",
    side: Literal["remote"],
    resource: str,
    kind: Resource,
    *,
    label_selector: str = "",
    field_selector: str = "",
    transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> MultiNamespaceInformer: ...


def shared_informer(
    informers: "SharedInformers",
    side: str,
    resource: str,
    kind: Resource,
    *,
    label_selector: str = "",
    field_selector: str = "",
    transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> Informer | MultiNamespaceInformer:
    """The process-wide informer on ``resource`` of one side (``local``: every
    namespace; ``remote``: the usable twin namespaces only, the one place the consumer
    may read), optionally selected; registered once by name, so every loop asking for
    the same selection shares one list+watch (and the first one's ``transform``: what
    its cache keeps of each object, vkubelet/shared/trim.py)."""
    api_client = informers.local_client if side == "local" else informers.remote_client
    kube = Kube(api_client)
    selection = ",".join(filter(None, [label_selector, field_selector]))
    name = f"{side}-{resource}" + (f"[{selection}]" if selection else "")
    kwargs = {}
    if label_selector:
        kwargs["label_selector"] = label_selector
    if field_selector:
        kwargs["field_selector"] = field_selector
    if side == "remote":
        return informers.remote_in_twins(name, lambda ns: kube.list_func(kind, namespace=ns), transform, **kwargs)

    def make() -> Informer:
        return Informer(
            name=name,
            list_func=kube.list_func(kind),
            list_kwargs=kwargs,
            resync_seconds=informers.settings.resync_period,
            transform=transform,
        )

    return informers.shared(name, make)


@functools.lru_cache(maxsize=None)
def owned_by_origin(local_cluster_id: str, resource: str) -> IndexFunc:
    """:data:`~vkubelet.shared.indexes.BY_ORIGIN` over the remote objects the ``resource``
    reflector of ``local_cluster_id`` wrote (one function object per pair, so a loop made
    again on the same shared informer registers the same index)."""
    return by_origin(lambda obj: f.is_owned(obj, local_cluster_id, resource))


def owned_selector(local_cluster_id: str, reflector: str) -> str:
    return f"{c.LABEL_ORIGIN_CLUSTER_ID}={local_cluster_id},{n.LABEL_REFLECTOR}={reflector}"
