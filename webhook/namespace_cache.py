"""Where the webhook gets namespace policies from.

In production: an :class:`~kube_offload.runtime.informer.Informer` over namespaces (list+watch),
with policies parsed once per namespace change on the informer thread, so a pod admission
costs one dict lookup. A namespace created a moment ago may not be in the cache yet: a
miss falls back to one GET. Tests and benchmarks use :class:`StaticNamespaceSource`, which
needs no API server.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable, Protocol

from kube_offload.namespace_policies import evaluate
from kube_offload.policy import NamespacePolicy, PolicyError, namespace_name

log = logging.getLogger("webhook.namespaces")

# A fallback GET runs inside an admission call whose whole budget (timeoutSeconds) is a
# few seconds: give up well before the apiserver gives up on us.
FALLBACK_TIMEOUT: tuple[float, float] = (1.0, 2.0)


class NamespaceUnavailable(Exception):
    """The policy could not be read (API server unreachable): a server-side failure, so the
    webhook answers 503 and the registration's failurePolicy decides."""


class NamespaceSource(Protocol):
    def get_policy(self, name: str) -> NamespacePolicy | None:
        """The namespace's policy; None when the namespace does not exist.

        Raises PolicyError when its policy labels are invalid, NamespaceUnavailable when
        it cannot be read."""

    def ready(self) -> bool:
        """True once policies can be answered (cache synced)."""


def _answer(entry: NamespacePolicy | PolicyError) -> NamespacePolicy:
    if isinstance(entry, PolicyError):
        raise entry
    return entry


class StaticNamespaceSource:
    """Fixed namespaces (API-shaped dicts) held in memory; always ready."""

    def __init__(self, namespaces: Iterable[dict[str, Any]] = ()) -> None:
        self._entries = {namespace_name(ns): evaluate(ns) for ns in namespaces}

    def get_policy(self, name: str) -> NamespacePolicy | None:
        entry = self._entries.get(name)
        return None if entry is None else _answer(entry)

    def ready(self) -> bool:
        return True


class InformerNamespaceSource:
    """Policies from a namespace informer, with a GET on a cache miss."""

    def __init__(self, api_client: Any, *, resync_seconds: float = 300.0) -> None:
        # Imported here so that tests with a static source need neither module's deps.
        from kube_offload.runtime.informer import Informer
        from kube_offload.runtime.kinds import NAMESPACES
        from kube_offload.runtime.kube import Kube
        from kube_offload.namespace_policies import NamespacePolicies

        self._kube = Kube(api_client)
        self._informer = Informer(
            name="namespaces",
            list_func=self._kube.list_func(NAMESPACES),
            resync_seconds=resync_seconds,
        )
        self._policies = NamespacePolicies(self._informer)

    def start(self) -> None:
        self._informer.start()

    def stop(self) -> None:
        self._informer.stop()

    def ready(self) -> bool:
        return self._informer.has_synced()

    def wait_for_sync(self, timeout: float) -> bool:
        return self._informer.wait_for_sync(timeout)

    def get_policy(self, name: str) -> NamespacePolicy | None:
        entry = self._policies.get(name)
        if entry is not None:
            return _answer(entry)
        namespace = self._fetch(name)
        # Not stored: the watch delivers it shortly, and storing here could race with a
        # DELETED event and resurrect a namespace.
        return None if namespace is None else _answer(evaluate(namespace))

    def _fetch(self, name: str) -> dict[str, Any] | None:
        from kube_offload.runtime.kinds import NAMESPACES
        from kube_offload.runtime.kube import NO_RETRY, ApiError

        try:
            # One short try: an admission is waiting on it (the client tried once too).
            return self._kube.get(NAMESPACES, name, timeout=FALLBACK_TIMEOUT, retry=NO_RETRY)
        except ApiError as exc:
            if exc.not_found:
                return None
            log.warning("namespace %s: cache miss and GET failed: %s", name, exc)
            raise NamespaceUnavailable(
                f"namespace {name} is not in the webhook's cache yet and reading it failed: {exc}"
            ) from exc


def informer_source(kubeconfig: str | None = None) -> InformerNamespaceSource:
    """The production source (a picklable factory: ``functools.partial(informer_source, path)``)."""
    from kube_offload.runtime.kube import load_api_client

    return InformerNamespaceSource(load_api_client(kubeconfig))
