"""The MutatingWebhookConfiguration and ValidatingWebhookConfiguration (pure builders).

Two ways to reach the webhook (:class:`~kube_offload.webhook_target.WebhookTarget`): a
``url`` or an in-cluster Service. Both configurations are named ``kube-offload-webhook``.
"""

from __future__ import annotations

from typing import Any

import yaml

from kube_offload import constants as c
from kube_offload.opt_in import runtime_class
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
# The same route for pods that opt in with the kube-offload RuntimeClass in namespaces
# that are not labelled (kube_offload/opt_in.py): a second entry so that the first keeps
# its plain namespaceSelector.
OPT_IN_POD_WEBHOOK_NAME = f"opt-in.pods.webhook.{c.DOMAIN}"
# CEL, evaluated by the apiserver before calling us: only pods that name the class are
# sent, so the webhook still cannot block any other pod of an unlabelled namespace.
OPT_IN_MATCH_EXPRESSION = (
    f"has(object.spec.runtimeClassName) && object.spec.runtimeClassName == '{c.RUNTIME_CLASS_OPT_IN}'"
)
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
) -> dict[str, Any]:
    """Pod CREATE in namespaces labelled ``kube-offload.io/enabled=true``, and in every
    other namespace but kube-system for pods that opt in with the kube-offload RuntimeClass."""
    check_options(failure_policy, timeout_seconds)
    pod_rules = [
        {
            "operations": ["CREATE"],
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["pods"],
            "scope": "Namespaced",
        }
    ]
    common = {
        "failurePolicy": failure_policy,
        "matchPolicy": "Equivalent",
        "sideEffects": "None",
        "timeoutSeconds": timeout_seconds,
        "admissionReviewVersions": ["v1"],
        # Another mutating webhook may add affinity/tolerations after ours; being
        # called again keeps the policy in force (our patch is idempotent).
        "reinvocationPolicy": "IfNeeded",
    }
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": CONFIGURATION_NAME},
        "webhooks": [
            {
                "name": POD_WEBHOOK_NAME,
                "clientConfig": target.client_config(POD_PATH),
                "rules": pod_rules,
                # Only opted-in namespaces: the webhook can never block pods elsewhere,
                # including its own and the control plane's.
                "namespaceSelector": {
                    "matchLabels": {c.LABEL_ENABLED: c.ENABLED_VALUE},
                },
                **common,
            },
            {
                "name": OPT_IN_POD_WEBHOOK_NAME,
                "clientConfig": target.client_config(POD_PATH),
                "rules": pod_rules,
                # Disjoint from the entry above (no pod is sent twice), and never the
                # control plane's namespace.
                "namespaceSelector": {
                    "matchExpressions": [
                        {"key": c.LABEL_ENABLED, "operator": "NotIn", "values": [c.ENABLED_VALUE]},
                        {"key": NAMESPACE_NAME_LABEL, "operator": "NotIn", "values": list(EXCLUDED_NAMESPACES)},
                    ]
                },
                "matchConditions": [{"name": "opts-in", "expression": OPT_IN_MATCH_EXPRESSION}],
                **common,
            },
        ],
    }


def validating_configuration(
    target: WebhookTarget,
    *,
    failure_policy: str = DEFAULT_NAMESPACE_FAILURE_POLICY,
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS,
) -> dict[str, Any]:
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
    """The opt-in RuntimeClass and both configurations as one multi-document YAML, ready
    for ``kubectl apply -f -``."""
    documents = [
        # Pods name it to opt in; the apiserver refuses a pod naming a class that does not exist.
        runtime_class(),
        mutating_configuration(
            target, failure_policy=pod_failure_policy, timeout_seconds=timeout_seconds
        ),
        validating_configuration(
            target, failure_policy=namespace_failure_policy, timeout_seconds=timeout_seconds
        ),
    ]
    return yaml.safe_dump_all(documents, sort_keys=False)
