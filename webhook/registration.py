"""The MutatingWebhookConfiguration and ValidatingWebhookConfiguration (pure builders).

Two ways to reach the webhook: a ``url`` (the webhook runs outside the cluster's network,
e.g. on loopback next to the apiserver in the end-to-end tests) or an in-cluster Service
(the Helm chart). Both configurations are named ``kube-offload-webhook``.
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from kube_offload import constants as c

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

FAILURE_POLICIES = ("Fail", "Ignore")
DEFAULT_POD_FAILURE_POLICY = "Fail"
# Validating namespace labels is a courtesy (bad values are refused again when pods are
# admitted, and the extender re-checks): an outage of the webhook must not block every
# namespace create/update in the cluster, hence Ignore.
DEFAULT_NAMESPACE_FAILURE_POLICY = "Ignore"
DEFAULT_TIMEOUT_SECONDS = 5


@dataclass(frozen=True)
class ServiceRef:
    namespace: str
    name: str
    port: int = 443


@dataclass(frozen=True)
class WebhookTarget:
    """Exactly one of ``url`` (base, e.g. ``https://127.0.0.1:8443``) or ``service``."""

    ca_bundle: str  # base64 PEM of the CA that signed the serving certificate
    url: str | None = None
    service: ServiceRef | None = None

    def __post_init__(self) -> None:
        if (self.url is None) == (self.service is None):
            raise ValueError("give exactly one of url or service")
        if self.url is not None and not self.url.startswith("https://"):
            raise ValueError(f"webhook url must start with https:// (got {self.url!r})")

    def client_config(self, path: str) -> dict:
        if self.url is not None:
            return {"url": self.url.rstrip("/") + path, "caBundle": self.ca_bundle}
        assert self.service is not None
        return {
            "service": {
                "namespace": self.service.namespace,
                "name": self.service.name,
                "path": path,
                "port": self.service.port,
            },
            "caBundle": self.ca_bundle,
        }


def _check(failure_policy: str, timeout_seconds: int) -> None:
    if failure_policy not in FAILURE_POLICIES:
        raise ValueError(f"failurePolicy must be one of {', '.join(FAILURE_POLICIES)}")
    # The API accepts 1..30 seconds.
    if not 1 <= timeout_seconds <= 30:
        raise ValueError("timeoutSeconds must be between 1 and 30")


def mutating_configuration(
    target: WebhookTarget,
    *,
    failure_policy: str = DEFAULT_POD_FAILURE_POLICY,
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS,
) -> dict:
    """Pod CREATE in namespaces labelled ``kube-offload.io/enabled=true``."""
    _check(failure_policy, timeout_seconds)
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
    _check(failure_policy, timeout_seconds)
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
