"""ConfigMaps local -> remote. The local cluster's CA bundle (kube-root-ca.crt) goes
under another name (names.REFLECTED_ROOT_CA_CONFIGMAP), since the remote cluster
publishes its own kube-root-ca.crt in every namespace, twin namespaces included."""


from __future__ import annotations

from typing import Any, Mapping

from kube_offload.runtime import kinds
from kube_offload.views import metadata as _meta
from vkubelet.reflection import forge as f
from vkubelet.shared import names as n
from vkubelet.reflection.forge import ForgeContext, Unreflectable, copy_fields, forge_metadata
from vkubelet.reflection.policy import Decision
from vkubelet.reflection.reflector import Reflector
from vkubelet.reflection.settings import CONFIGMAPS

# --- the forge (pure): the object to write, from the local one ------------------------------
def forge_configmap(local: Mapping[str, Any], ctx: ForgeContext) -> dict[str, Any] | None:
    name = str(_meta(local).get("name") or "")
    if name == n.REFLECTED_ROOT_CA_CONFIGMAP:
        raise Unreflectable(
            f"the name {name} is reserved for the reflected {n.ROOT_CA_CONFIGMAP} (the local cluster's CA): rename it"
        )
    remote_name = n.REFLECTED_ROOT_CA_CONFIGMAP if name == n.ROOT_CA_CONFIGMAP else name
    desired = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": forge_metadata(local, ctx, name=remote_name)}
    copy_fields(local, desired, ("data", "binaryData", "immutable"))
    return desired


# --- the reflector ------------------------------------------------------------
class ConfigMapReflector(Reflector):
    resource = CONFIGMAPS
    kind = "ConfigMap"
    api_kind = kinds.CONFIG_MAPS

    def forge(self, local: Mapping[str, Any], ctx: f.ForgeContext) -> dict[str, Any] | None:
        return forge_configmap(local, ctx)

    def selection(self, local: Mapping[str, Any]) -> Decision:
        # Every offloaded pod with a service-account token mounts the CA bundle, and
        # nobody annotates a ConfigMap the controller-manager writes: whatever the policy.
        # (A CA certificate is public: nothing secret is exported by it.)
        if (local.get("metadata") or {}).get("name") == n.ROOT_CA_CONFIGMAP:
            return Decision(True, f"{n.ROOT_CA_CONFIGMAP} is reflected whatever the policy")
        return super().selection(local)
