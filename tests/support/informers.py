"""Informers for unit tests: the runtime's own, which never reach an API server.

An informer made here raises if it ever lists or watches; a test seeds and changes its
cache with :meth:`Informer.apply` / :meth:`MultiNamespaceInformer.apply`, the path every
watch event takes (cache and indexes first, then the handlers), so what a loop sees is
what it would see from a watch. :func:`drain` takes the keys a controller's workers would
now reconcile."""

from __future__ import annotations

from typing import Any, Callable

from kube_offload.runtime.controller import Controller
from kube_offload.runtime.informer import Informer
from kube_offload.runtime.namespaced_informer import MultiNamespaceInformer


def never_listed(**_kwargs: Any) -> Any:
    """A list function for an informer fed by hand: any API call fails the test."""
    raise AssertionError("no API call expected")


def never_listed_in(namespace: str) -> Callable[..., Any]:
    """``list_for_namespace`` of a :class:`MultiNamespaceInformer` fed by hand."""
    def list_func(**_kwargs: Any) -> Any:
        raise AssertionError(f"no API call expected (namespace {namespace})")
    return list_func


def offline_informer(name: str, **kwargs: Any) -> Informer:
    """An :class:`Informer` that never lists: fed only through ``apply``."""
    return Informer(name=name, list_func=never_listed, **kwargs)


def listed(informer: MultiNamespaceInformer, *namespaces: str) -> None:
    """``informer`` has listed each of ``namespaces`` (it watches them already:
    ``set_namespaces``) and found them empty, through the runtime's public
    ``MultiNamespaceInformer.replace``, the path a list's answer takes: what a loop that
    trusts an absence (a ShadowPod to create, a pod gone) waits for."""
    for namespace in namespaces:
        informer.replace(namespace, [])


def answered_403(informer: MultiNamespaceInformer, namespace: str, message: str = "forbidden") -> None:
    """``namespace``'s list or watch was answered 403 with ``message`` (the provider revoked
    our access there), as the informer marks it (``Informer.forbidden``, public; its
    per-namespace informer is reached through the private ``_children``, here only)."""
    child = informer._children[namespace]
    child.forbidden, child.forbidden_message = True, message


def drain(controller: Controller) -> list[str]:
    """The keys ``controller``'s workers would now reconcile, in order, taken off its
    queue (each marked done, so a key queued again later comes back)."""
    keys: list[str] = []
    while True:
        try:
            key = controller.queue.get(timeout=0.01)
        except TimeoutError:
            return keys
        keys.append(key)
        controller.queue.done(key)
