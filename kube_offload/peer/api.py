"""One cluster through the Kubernetes API, with the admin kubeconfig the user passed; its
errors become messages that say which cluster failed and what to do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kube_offload import peering as p
from kube_offload.peer.errors import CommandError, Unreachable
from kube_offload.runtime.kinds import Resource
from kube_offload.runtime.kube import ApiError, Kube, load_api_client


class Cluster:
    def __init__(self, kubeconfig: Path, context: str | None, side: str) -> None:
        self.side = side
        try:
            api = load_api_client(str(kubeconfig), context=context)
        except Exception as exc:  # the client's ConfigException: a broken file or unknown context
            raise p.PeeringError(f"{side} kubeconfig {str(kubeconfig)!r}: {exc}") from None
        self.server = api.configuration.host
        self.kube = Kube(api)

    def get(self, resource: Resource, name: str, *, namespace: str | None = None) -> dict[str, Any] | None:
        """The object, or None if it does not exist."""
        try:
            return self.kube.get_or_none(resource, name, namespace=namespace)
        except ApiError as exc:
            raise self.error(exc) from None

    def delete(self, resource: Resource, name: str, *, namespace: str | None = None, **options: Any) -> None:
        """Delete it (``options``: :meth:`Kube.delete`'s); one already gone is no error."""
        try:
            self.kube.delete(resource, name, namespace=namespace, **options)
        except ApiError as exc:
            if not exc.not_found:
                raise self.error(exc) from None

    def error(self, exc: ApiError) -> Exception:
        if exc.transient and exc.status != 0:
            return exc  # the server's trouble, not ours: a wait retries it
        if exc.status == 0:
            return Unreachable(f"{self.side}: cannot reach the API server at {self.server}: {exc.message}")
        if exc.status in (401, 403):
            return CommandError(f"{self.side}: {exc.message} (peer and unpeer need admin credentials on both clusters; drain and undrain on the provider)")
        return CommandError(f"{self.side}: {exc}")

    def list_items(self, resource: Resource, *, namespace: str | None = None, label_selector: str | None = None,
                   field_selector: str | None = None) -> list[dict[str, Any]]:
        try:
            return self.kube.list(resource, namespace=namespace, label_selector=label_selector,
                                  field_selector=field_selector).get("items") or []
        except ApiError as exc:
            if exc.not_found:  # e.g. the CRD is not installed: nothing of that kind exists
                return []
            raise self.error(exc) from None
