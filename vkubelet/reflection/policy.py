"""Which local objects are reflected to a provider (pure): what is never exported, then
the deny-list, allow-list or by-use policy of each resource type.

Order of the rules, first match wins:

1. **Never exported**, whatever the policy or annotations: the local cluster's own
   credentials and Helm's release records (:data:`NEVER_REFLECTED_SECRET_TYPES`,
   Helm releases kept in ConfigMaps). A provider has no use for them and must never
   hold them: a service-account token Secret is a long-lived key to the local API
   server; a Helm release holds every rendered manifest of a chart, values included.
2. The skip annotation ``kube-offload.io/skip-reflection`` (any value but ``false``).
3. Deny-list (the default): everything else. Allow-list: only objects annotated
   ``kube-offload.io/allow-reflection`` (any value but ``false``). By-use (ConfigMaps and
   Secrets only): only objects an offloaded pod references now (usage.py; the caller
   says whether one does, read from the pod informer's index).

docs/reflection.md ("What is exported to a provider") is written from this module.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Mapping

from kube_offload import constants as c


class Policy(str, enum.Enum):
    # Everything, except objects annotated kube-offload.io/skip-reflection.
    DENY_LIST = "deny-list"
    # Nothing, except objects annotated kube-offload.io/allow-reflection.
    ALLOW_LIST = "allow-list"
    # Only ConfigMaps and Secrets an offloaded pod references (usage.py), while it does.
    BY_USE = "by-use"


POLICIES = tuple(p.value for p in Policy)

SERVICE_ACCOUNT_TOKEN_TYPE = "kubernetes.io/service-account-token"
HELM_RELEASE_TYPE = "helm.sh/release.v1"
BOOTSTRAP_TOKEN_TYPE = "bootstrap.kubernetes.io/token"

# Secret type -> why it stays home.
NEVER_REFLECTED_SECRET_TYPES: Mapping[str, str] = {
    SERVICE_ACCOUNT_TOKEN_TYPE: "a service-account token of the local cluster (its credentials stay home)",
    BOOTSTRAP_TOKEN_TYPE: "a bootstrap token of the local cluster (its credentials stay home)",
    HELM_RELEASE_TYPE: "a Helm release record (every rendered manifest and value of a chart)",
}
# Helm 3 with HELM_DRIVER=configmap keeps the same records in ConfigMaps named
# sh.helm.release.v1.<release>.v<revision>, labelled owner=helm.
HELM_RELEASE_NAME_PREFIX = "sh.helm.release.v1."
HELM_OWNER_LABEL = ("owner", "helm")


@dataclass(frozen=True)
class Decision:
    reflect: bool
    why: str  # for logs: which rule decided


def _annotated(obj: Mapping[str, Any], key: str) -> bool:
    """Set unless absent or ``false``: ``kubectl annotate ... key=`` and ``key=true``
    both mean yes, while ``key=false`` can turn it off without removing it."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    if key not in annotations:
        return False
    return str(annotations[key]).strip().lower() != "false"


def never_reflected(obj: Mapping[str, Any], kind: str) -> str | None:
    """Why ``obj`` (of ``kind``, e.g. ``Secret``) is never exported, or None."""
    if kind == "Secret":
        return NEVER_REFLECTED_SECRET_TYPES.get(str(obj.get("type") or ""))
    if kind == "ConfigMap":
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        key, value = HELM_OWNER_LABEL
        if str(meta.get("name") or "").startswith(HELM_RELEASE_NAME_PREFIX) and labels.get(key) == value:
            return NEVER_REFLECTED_SECRET_TYPES[HELM_RELEASE_TYPE]
    return None


def decide(obj: Mapping[str, Any], policy: Policy, *, kind: str = "", in_use: bool = False) -> Decision:
    """Whether ``obj`` (of ``kind``; "" = no kind-specific rule) is reflected under
    ``policy``, and why. Under an allow-list or by-use a skip annotation still wins, and
    nothing lifts a never-exported object. ``in_use``: whether an offloaded pod
    references it now (read only by the by-use policy)."""
    never = never_reflected(obj, kind)
    if never is not None:
        return Decision(False, f"never exported: {never}")
    if _annotated(obj, c.ANNOTATION_SKIP_REFLECTION):
        return Decision(False, f"annotated {c.ANNOTATION_SKIP_REFLECTION}")
    if policy is Policy.ALLOW_LIST:
        if _annotated(obj, c.ANNOTATION_ALLOW_REFLECTION):
            return Decision(True, f"annotated {c.ANNOTATION_ALLOW_REFLECTION}")
        return Decision(False, f"the allow-list policy leaves it out (not annotated {c.ANNOTATION_ALLOW_REFLECTION})")
    if policy is Policy.BY_USE:
        if in_use:
            return Decision(True, "an offloaded pod uses it (by-use policy)")
        return Decision(False, "no offloaded pod uses it (by-use policy)")
    return Decision(True, "the deny-list policy reflects it")


def should_reflect(obj: Mapping[str, Any], policy: Policy, *, kind: str = "", in_use: bool = False) -> bool:
    return decide(obj, policy, kind=kind, in_use=in_use).reflect
