"""Put our CA into ``caBundle`` of named Mutating/ValidatingWebhookConfigurations, so that
kube-apiserver trusts the webhook's serving certificate.

``ca_bundle_patch`` is pure (tested on its own); ``patch_ca_bundle`` reads each named
configuration, builds the patch and sends it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Mapping, Sequence

if TYPE_CHECKING:  # the client is loaded only by the commands that talk to a cluster
    from kube_offload.runtime.kinds import Resource
    from kube_offload.runtime.kube import Kube

Kind = Literal["mutating", "validating"]

KIND_NAMES: dict[str, str] = {
    "mutating": "MutatingWebhookConfiguration",
    "validating": "ValidatingWebhookConfiguration",
}
FLAGS: dict[str, str] = {"mutating": "--mutating", "validating": "--validating"}


class WebhookConfigurationNotFound(LookupError):
    """A configuration named on the command line does not exist in the cluster."""

    def __init__(self, kind: Kind, name: str):
        self.kind = kind
        self.name = name
        super().__init__(
            f"{FLAGS[kind]} {name}: no {KIND_NAMES[kind]} named {name!r} in the cluster; "
            f"check the name with `kubectl get {KIND_NAMES[kind].lower()}s` "
            "or install the chart that creates it first"
        )


def ca_bundle_patch(config_obj: Mapping[str, Any], ca_b64: str) -> list[dict[str, Any]]:
    """An RFC 6902 JSON patch that sets ``clientConfig.caBundle`` on every webhook entry of
    ``config_obj`` (a webhook configuration as the API returns it, camelCase).

    JSON patch addresses list entries by index, so before each write the patch tests that
    the entry at that index still has the name we read: if someone reorders or edits the
    list in between, the apiserver rejects the whole patch instead of writing the bundle
    into the wrong webhook. Entries that already carry ``ca_b64`` are left out; the result
    is ``[]`` when there is nothing to change.
    """
    operations: list[dict[str, Any]] = []
    for index, webhook in enumerate(config_obj.get("webhooks") or []):
        client_config = webhook.get("clientConfig") or {}
        if client_config.get("caBundle") == ca_b64:
            continue
        base = f"/webhooks/{index}"
        operations.append({"op": "test", "path": f"{base}/name", "value": webhook.get("name")})
        if "clientConfig" not in webhook:
            # clientConfig is required by the API, but a patch must not assume it.
            operations.append({"op": "add", "path": f"{base}/clientConfig", "value": {"caBundle": ca_b64}})
        else:
            # "add" on an object member replaces an existing value and creates a missing one.
            operations.append({"op": "add", "path": f"{base}/clientConfig/caBundle", "value": ca_b64})
    return operations


@dataclass(frozen=True)
class PatchOutcome:
    kind: Kind
    name: str
    webhooks: int  # entries in the configuration
    changed: int  # entries whose caBundle was written

    def describe(self) -> str:
        what = f"{KIND_NAMES[self.kind]} {self.name}"
        if not self.webhooks:
            return f"{what}: has no webhooks, nothing to patch"
        if not self.changed:
            return f"{what}: caBundle already set on all {self.webhooks} webhooks"
        return f"{what}: caBundle set on {self.changed} of {self.webhooks} webhooks"


def patch_ca_bundle(
    api_client: Any,
    *,
    mutating: Sequence[str] = (),
    validating: Sequence[str] = (),
    ca_b64: str,
) -> list[PatchOutcome]:
    """Patch every named configuration. All names are looked up before any is patched, so
    a typo in one name leaves the cluster untouched. Raises WebhookConfigurationNotFound
    for a missing name and kube_offload.runtime.kube.ApiError for anything the server refuses."""
    from kube_offload.runtime.kube import Kube

    kube = Kube(api_client)
    targets: list[tuple[Kind, str]] = [("mutating", n) for n in mutating]
    targets += [("validating", n) for n in validating]
    for kind, name in targets:
        _read(kube, kind, name)
    return [_patch_one(kube, kind, name, ca_b64) for kind, name in targets]


def _resource(kind: Kind) -> Resource:
    from kube_offload.runtime import kinds

    return kinds.MUTATING_WEBHOOK_CONFIGURATIONS if kind == "mutating" else kinds.VALIDATING_WEBHOOK_CONFIGURATIONS


def _read(kube: Kube, kind: Kind, name: str) -> dict[str, Any]:
    found = kube.get_or_none(_resource(kind), name)
    if found is None:
        raise WebhookConfigurationNotFound(kind, name)
    return found


def _patch_one(kube: Kube, kind: Kind, name: str, ca_b64: str) -> PatchOutcome:
    from kube_offload.runtime.kube import JSON_PATCH, ApiError

    attempts = 3
    for attempt in range(1, attempts + 1):
        config_obj = _read(kube, kind, name)
        operations = ca_bundle_patch(config_obj, ca_b64)
        total = len(config_obj.get("webhooks") or [])
        if not operations:
            return PatchOutcome(kind, name, total, 0)
        try:
            kube.patch(_resource(kind), name, operations, content_type=JSON_PATCH)
        except ApiError as exc:
            # A failed "test" (the list changed under us) comes back as 422, a lost
            # update race as 409: read again and rebuild the patch.
            if exc.status in (409, 422) and attempt < attempts:
                continue
            raise
        return PatchOutcome(kind, name, total, len(operations) // 2)
    raise AssertionError("the loop returns or raises")
