"""The ValidatingWebhookConfiguration that registers the enforcer's webhooks (pure).

Every ShadowPod CREATE and UPDATE in every namespace goes through it, with
``failurePolicy: Fail``: a ShadowPod nobody validated would become a Pod with whatever it
asks for, so while the webhook is down no ShadowPod is written (existing ones keep
running; the enforcer's own status writes use the status subresource, which is not
matched). No namespaceSelector on purpose: a ShadowPod outside a twin namespace is
exactly what must be refused, not skipped.

The second webhook judges the addresses of the EndpointSlices consumers write into twin
namespaces (enforcer/admission/endpointslice_policy.py), also with ``failurePolicy: Fail``. It
sees only twin namespaces and only ServiceAccounts' writes, and never the provider's own
EndpointSlice controllers: they keep working while the enforcer is down.

The fourth judges the TokenRequests (``serviceaccounts/token``) a consumer's identity makes
in its tenant namespace (enforcer/admission/token_policy.py), ``failurePolicy: Fail``:
while the enforcer is down the consumer cannot renew its token (its virtual kubelet renews
at 80 % of the lifetime, so it has hours), and nobody else's token request is matched.

The fifth counts what a consumer keeps in its tenant namespace: a CREATE of a TwinNamespace
request or an OffloadSlice by that namespace's own ServiceAccounts past Consumer
spec.policy twinNamespaces.maxRequests or slices.maxCount (enforcer/admission/tenant_objects.py),
``failurePolicy: Fail`` (the enforcer serves neither while it is down anyway).

The third judges the custom resource objects consumers write into twin namespaces
(enforcer/admission/custom_resource_policy.py), ``failurePolicy: Fail``: every custom kind
(a group with a dot, neither Kubernetes' nor kube-offload's), written by a ServiceAccount,
in twin namespaces only. A provider's controller writing custom resources into a twin as
a ServiceAccount is matched too (and allowed: only the twin's owner is judged), so it
waits while the enforcer is down.
"""

from __future__ import annotations

from typing import Any

import yaml

from kube_offload import constants as c
from kube_offload.provider_policy import NEVER_GRANTED_GROUPS
from kube_offload.webhook_target import WebhookTarget, check_options

FAILURE_POLICY = "Fail"
DEFAULT_TIMEOUT_SECONDS = 10
# The controllers that write EndpointSlices in every namespace, twins included (as
# kube-controller-manager names them with --use-service-account-credentials).
PROVIDER_ENDPOINTSLICE_WRITERS: tuple[str, ...] = (
    "system:serviceaccount:kube-system:endpointslice-controller",
    "system:serviceaccount:kube-system:endpointslicemirroring-controller",
)


def endpointslice_match_condition() -> dict[str, Any]:
    """A consumer is a ServiceAccount (Consumer spec.serviceAccount); users such as
    system:kube-controller-manager and the provider's admins are not judged."""
    writers = ", ".join(f"'{w}'" for w in PROVIDER_ENDPOINTSLICE_WRITERS)
    return {
        "name": "service-accounts-but-the-controllers",
        "expression": f"request.userInfo.username.startsWith('system:serviceaccount:') && !(request.userInfo.username in [{writers}])",
    }


def custom_resource_match_condition() -> dict[str, Any]:
    """Custom kinds only (a group with a dot that is neither Kubernetes' nor ours: those
    have their own rules, and core/apps/batch... have no dot), written by a
    ServiceAccount (a consumer's identity is one)."""
    never = " && ".join(
        f"request.resource.group != '{g}' && !request.resource.group.endsWith('.{g}')" for g in NEVER_GRANTED_GROUPS
    )
    return {
        "name": "custom-kinds-by-service-accounts",
        "expression": "request.userInfo.username.startsWith('system:serviceaccount:') && "
        f"request.resource.group.contains('.') && {never}",
    }


def tenant_webhook(target: WebhookTarget, name: str, path: str, *, group: str, version: str, resources: list[str],
                   timeout_seconds: int) -> dict[str, Any]:
    """A webhook on CREATE of ``resources`` in the consumers' tenant namespaces (label
    kube-offload.io/tenant), by those namespaces' own ServiceAccounts: every other request of
    the cluster (kubelets mounting tokens, controllers, the provider's admins) never waits on
    the enforcer."""
    return {
        "name": name,
        "clientConfig": target.client_config(path),
        "rules": [{"operations": ["CREATE"], "apiGroups": [group], "apiVersions": [version], "resources": resources,
                   "scope": "Namespaced"}],
        "namespaceSelector": {"matchExpressions": [{"key": c.LABEL_TENANT, "operator": "Exists"}]},
        "matchConditions": [token_match_condition()],
        "failurePolicy": FAILURE_POLICY,
        "matchPolicy": "Equivalent",
        "sideEffects": "None",
        "timeoutSeconds": timeout_seconds,
        "admissionReviewVersions": ["v1"],
    }


def token_match_condition() -> dict[str, Any]:
    """A consumer is a ServiceAccount of its tenant namespace: the provider's admins (who
    mint the consumer's first token with kube-offload peer) are not judged, and never wait
    on the enforcer (the TokenRequest and the tenant-objects webhooks)."""
    return {
        "name": "service-accounts-of-the-namespace",
        "expression": "request.userInfo.username.startsWith('system:serviceaccount:' + request.namespace + ':')",
    }


def validating_configuration(target: WebhookTarget, *, timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS) -> dict[str, Any]:
    check_options(FAILURE_POLICY, timeout_seconds)
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": c.SHADOWPOD_WEBHOOK_CONFIGURATION},
        "webhooks": [
            {
                "name": c.SHADOWPOD_WEBHOOK_NAME,
                "clientConfig": target.client_config(c.SHADOWPOD_WEBHOOK_PATH),
                "rules": [
                    {
                        "operations": ["CREATE", "UPDATE"],
                        "apiGroups": [c.SHADOWPOD_GROUP],
                        "apiVersions": [c.SHADOWPOD_VERSION],
                        "resources": [c.SHADOWPOD_PLURAL],
                        "scope": "Namespaced",
                    }
                ],
                "failurePolicy": FAILURE_POLICY,
                "matchPolicy": "Equivalent",
                "sideEffects": "None",
                "timeoutSeconds": timeout_seconds,
                "admissionReviewVersions": ["v1"],
            },
            {
                "name": c.ENDPOINTSLICE_WEBHOOK_NAME,
                "clientConfig": target.client_config(c.ENDPOINTSLICE_WEBHOOK_PATH),
                "rules": [
                    {
                        "operations": ["CREATE", "UPDATE"],
                        "apiGroups": ["discovery.k8s.io"],
                        "apiVersions": ["v1"],
                        "resources": ["endpointslices"],
                        "scope": "Namespaced",
                    }
                ],
                "namespaceSelector": {"matchLabels": {c.LABEL_MANAGED_BY: c.MANAGED_BY_ENFORCER}},
                "matchConditions": [endpointslice_match_condition()],
                "failurePolicy": FAILURE_POLICY,
                "matchPolicy": "Equivalent",
                "sideEffects": "None",
                "timeoutSeconds": timeout_seconds,
                "admissionReviewVersions": ["v1"],
            },
            {
                "name": c.CUSTOM_RESOURCE_WEBHOOK_NAME,
                "clientConfig": target.client_config(c.CUSTOM_RESOURCE_WEBHOOK_PATH),
                "rules": [
                    {
                        "operations": ["CREATE", "UPDATE"],
                        "apiGroups": ["*"],
                        "apiVersions": ["*"],
                        # The objects and their status: a consumer never writes status.
                        "resources": ["*", "*/status"],
                        "scope": "Namespaced",
                    }
                ],
                "namespaceSelector": {"matchLabels": {c.LABEL_MANAGED_BY: c.MANAGED_BY_ENFORCER}},
                "matchConditions": [custom_resource_match_condition()],
                "failurePolicy": FAILURE_POLICY,
                "matchPolicy": "Equivalent",
                "sideEffects": "None",
                "timeoutSeconds": timeout_seconds,
                "admissionReviewVersions": ["v1"],
            },
            tenant_webhook(target, c.TOKEN_WEBHOOK_NAME, c.TOKEN_WEBHOOK_PATH, group="", version="v1",
                           resources=["serviceaccounts/token"], timeout_seconds=timeout_seconds),
            tenant_webhook(target, c.TENANT_OBJECTS_WEBHOOK_NAME, c.TENANT_OBJECTS_WEBHOOK_PATH, group=c.SHADOWPOD_GROUP,
                           version=c.SHADOWPOD_VERSION, resources=[c.TWIN_NAMESPACE_PLURAL, c.SLICE_PLURAL],
                           timeout_seconds=timeout_seconds),
        ],
    }


def configuration_yaml(target: WebhookTarget, *, timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS) -> str:
    return yaml.safe_dump(validating_configuration(target, timeout_seconds=timeout_seconds), sort_keys=False)
