"""The MutatingWebhookConfiguration and ValidatingWebhookConfiguration (pure builders).

Two ways to reach the webhook (:class:`~kube_offload.webhook_target.WebhookTarget`): a
``url`` or an in-cluster Service. Both configurations are named ``kube-offload-webhook``.
"""

from __future__ import annotations

import yaml

from kube_offload import constants as c
from kube_offload.webhook_target import FAILURE_POLICIES, ServiceRef, WebhookTarget, check_options

__all__ = [
    "CONFIGURATION_NAME",
    "FAILURE_POLICIES",
    "ServiceRef",
    "WebhookTarget",
    "configurations_yaml",
    "mutating_configuration",
    "validating_configuration",
]

CONFIGURATION_NAME = "kube-offload-webhook"
# Webhook names must be fully qualified (at least three DNS labels); they appear in the
# apiserver's messages: 'admission webhook "namespaces.webhook.kube-offload.io" denied ...'.
POD_WEBHOOK_NAME = f"pods.webhook.{c.DOMAIN}"
NAMESPACE_WEBHOOK_NAME = f"namespaces.webhook.{c.DOMAIN}"
POD_PATH = "/mutate/pods"
NAMESPACE_PATH = "/validate/namespaces"

# Kubernetes' own label: the apiserver sets it on every namespace to the namespace's name.
NAMESPACE_NAME_LABEL = c.LABEL_NAMESPACE_NAME
EXCLUDED_NAMESPACES: tuple[str, ...] = ("kube-system",)

DEFAULT_POD_FAILURE_POLICY = "Fail"
# Validating namespace labels is a courtesy (bad values are refused again when pods are
# admitted, and the extender re-checks): an outage of the webhook must not block every
# namespace create/update in the cluster, hence Ignore.
DEFAULT_NAMESPACE_FAILURE_POLICY = "Ignore"
DEFAULT_TIMEOUT_SECONDS = 5


def mutating_configuration(
    target: WebhookTarget,
    *,
    failure_policy: str = DEFAULT_POD_FAILURE_POLICY,
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS,
) -> dict:
    """Pod CREATE in namespaces labelled ``kube-offload.io/enabled=true``."""
    check_options(failure_policy, timeout_seconds)
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": CONFIGURATION_NAME},
        "webhooks": [
            {
                "name": POD_WEBHOOK_NAME,
                "clientConfig": target.client_config(POD_PATH),
                "rules": [
                    {
                        "operations": ["CREATE"],
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                        "scope": "Namespaced",
                    }
                ],
                # Only opted-in namespaces: the webhook can never block pods elsewhere,
                # including its own and the control plane's.
                "namespaceSelector": {
                    "matchLabels": {c.LABEL_ENABLED: c.ENABLED_VALUE},
                },
                "failurePolicy": failure_policy,
                "matchPolicy": "Equivalent",
                "sideEffects": "None",
                "timeoutSeconds": timeout_seconds,
                "admissionReviewVersions": ["v1"],
                # Another mutating webhook may add affinity/tolerations after ours; being
                # called again keeps the policy in force (our patch is idempotent).
                "reinvocationPolicy": "IfNeeded",
            }
        ],
    }


def validating_configuration(
    target: WebhookTarget,
    *,
    failure_policy: str = DEFAULT_NAMESPACE_FAILURE_POLICY,
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS,
) -> dict:
    """Namespace CREATE/UPDATE everywhere but kube-system."""
    check_options(failure_policy, timeout_seconds)
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": CONFIGURATION_NAME},
        "webhooks": [
            {
                "name": NAMESPACE_WEBHOOK_NAME,
                "clientConfig": target.client_config(NAMESPACE_PATH),
                "rules": [
                    {
                        "operations": ["CREATE", "UPDATE"],
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["namespaces"],
                        "scope": "Cluster",
                    }
                ],
                "namespaceSelector": {
                    "matchExpressions": [
                        {
                            "key": NAMESPACE_NAME_LABEL,
                            "operator": "NotIn",
                            "values": list(EXCLUDED_NAMESPACES),
                        }
                    ]
                },
                "failurePolicy": failure_policy,
                "matchPolicy": "Equivalent",
                "sideEffects": "None",
                "timeoutSeconds": timeout_seconds,
                "admissionReviewVersions": ["v1"],
            }
        ],
    }


def configurations_yaml(
    target: WebhookTarget,
    *,
    pod_failure_policy: str = DEFAULT_POD_FAILURE_POLICY,
    namespace_failure_policy: str = DEFAULT_NAMESPACE_FAILURE_POLICY,
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS,
) -> str:
    """Both configurations as one multi-document YAML, ready for ``kubectl apply -f -``."""
    documents = [
        mutating_configuration(
            target, failure_policy=pod_failure_policy, timeout_seconds=timeout_seconds
        ),
        validating_configuration(
            target, failure_policy=namespace_failure_policy, timeout_seconds=timeout_seconds
        ),
    ]
    return yaml.safe_dump_all(documents, sort_keys=False)
