"""Where an apiserver reaches one of our admission webhooks, for the registrations both
webhooks print (``kube-offload webhook configuration``, ``kube-offload enforcer
configuration``): a ``url`` (the webhook runs outside the cluster's network, e.g. on
loopback next to the apiserver in the end-to-end tests) or an in-cluster Service (the
Helm charts), plus the CA bundle. The CLI flags and their checks are written once here.
"""

from __future__ import annotations

from typing import Any

import argparse
import base64
from dataclasses import dataclass

from kube_offload.runtime.flags import add_flag

FAILURE_POLICIES = ("Fail", "Ignore")


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

    def client_config(self, path: str) -> dict[str, Any]:
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


def check_options(failure_policy: str, timeout_seconds: int) -> None:
    if failure_policy not in FAILURE_POLICIES:
        raise ValueError(f"failurePolicy must be one of {', '.join(FAILURE_POLICIES)}")
    # The API accepts 1..30 seconds.
    if not 1 <= timeout_seconds <= 30:
        raise ValueError("timeoutSeconds must be between 1 and 30")


# --- CLI ----------------------------------------------------------------------------------
def add_target_flags(parser: argparse.ArgumentParser, component: str, *, example_url: str) -> None:
    """``--url`` or ``--service-namespace/--service-name/--service-port``, and ``--ca-file``."""
    add_flag(parser, component, "--url", default=None,
             help=f"base URL of the webhook, e.g. {example_url} (paths are appended)")
    add_flag(parser, component, "--service-namespace", default=None,
             help="namespace of the webhook's Service (service mode)")
    add_flag(parser, component, "--service-name", default=None,
             help="name of the webhook's Service (service mode)")
    add_flag(parser, component, "--service-port", default=443, type=int,
             help="port of the webhook's Service")
    add_flag(parser, component, "--ca-file", default=None,
             help="PEM of the CA that signed the serving certificate (becomes caBundle); required")


def target_from_args(args: argparse.Namespace) -> WebhookTarget:
    """The target the flags of :func:`add_target_flags` describe; ValueError with a
    message for the user (naming the flag) when they do not describe one."""
    if not args.ca_file:
        raise ValueError("--ca-file is required (the CA that signed the webhook's certificate)")
    try:
        with open(args.ca_file, "rb") as handle:
            ca_bundle = base64.b64encode(handle.read()).decode("ascii")
    except OSError as exc:
        raise ValueError(f"--ca-file {args.ca_file!r} cannot be read: {exc.strerror}") from None
    service = None
    if args.service_namespace or args.service_name:
        if not (args.service_namespace and args.service_name):
            raise ValueError("service mode needs both --service-namespace and --service-name")
        service = ServiceRef(args.service_namespace, args.service_name, args.service_port)
    if (args.url is None) == (service is None):
        raise ValueError("give either --url or --service-namespace and --service-name")
    return WebhookTarget(ca_bundle=ca_bundle, url=args.url, service=service)
