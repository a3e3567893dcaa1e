"""The ValidatingWebhookConfiguration that registers the ShadowPod webhook (pure).

Every ShadowPod CREATE and UPDATE in every namespace goes through it, with
``failurePolicy: Fail``: a ShadowPod nobody validated would become a Pod with whatever it
asks for, so while the webhook is down no ShadowPod is written (existing ones keep
running; the enforcer's own status writes use the status subresource, which is not
matched). No namespaceSelector on purpose: a ShadowPod outside a twin namespace is
exactly what must be refused, not skipped.
"""

from __future__ import annotations

import yaml

from kube_offload import constants as c
from kube_offload.webhook_target import WebhookTarget, check_options

FAILURE_POLICY = "Fail"
DEFAULT_TIMEOUT_SECONDS = 10


def validating_configuration(target: WebhookTarget, *, timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS) -> dict:
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
            }
        ],
    }


def configuration_yaml(target: WebhookTarget, *, timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS) -> str:
    return yaml.safe_dump(validating_configuration(target, timeout_seconds=timeout_seconds), sort_keys=False)
