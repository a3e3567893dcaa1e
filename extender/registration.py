"""How kube-scheduler is told about the extender: a KubeSchedulerConfiguration, pure.

kube-scheduler takes one ``--config`` file; ``kube-offload extender scheduler-config``
prints the document built here, and the Helm chart and the end-to-end tests use the same
function so the three never disagree on verbs or field names.
"""

from __future__ import annotations

from typing import Any

import base64
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

import yaml

API_VERSION = "kubescheduler.config.k8s.io/v1"
KIND = "KubeSchedulerConfiguration"
FILTER_VERB = "filter"
PRIORITIZE_VERB = "prioritize"
DEFAULT_SCHEDULER_NAME = "default-scheduler"

# A Go time.Duration as metav1.Duration parses it ("5s", "1m30s", "500ms").
_GO_DURATION = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?(?:ns|us|µs|ms|s|m|h))+")


@dataclass(frozen=True)
class ExtenderRegistration:
    url: str
    """urlPrefix: where kube-scheduler POSTs ``<url>/filter`` and ``<url>/prioritize``."""
    weight: int = 1
    """Multiplies our 0..10 scores (kube-scheduler scales them to its 0..100 range)."""
    http_timeout: str = "5s"
    """A Go duration; after it the scheduling cycle of that pod fails (or, if
    ignorable, goes on without us)."""
    node_cache_capable: bool = False
    ignorable: bool = False
    """False by default: a broken extender then shows up as scheduling errors in pod events
    instead of pods silently landing on virtual nodes that cannot run them."""
    ca_file: str = ""
    ca_data: bytes = b""
    """PEM of the CA that signed the extender's serving certificate (for https)."""
    server_name: str = ""
    insecure_skip_verify: bool = False
    scheduler_name: str = DEFAULT_SCHEDULER_NAME


def scheduler_configuration(registration: ExtenderRegistration) -> dict[str, Any]:
    """The KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1) with our extender."""
    parts = urlsplit(registration.url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"extender URL must be http(s)://host:port[/path], got {registration.url!r}")
    if registration.weight < 1:
        # kube-scheduler refuses a non-positive weight when prioritizeVerb is set.
        raise ValueError(f"weight must be a positive integer, got {registration.weight}")
    if not _GO_DURATION.fullmatch(registration.http_timeout):
        raise ValueError(f"httpTimeout must be a Go duration such as 5s or 1m30s, got {registration.http_timeout!r}")
    https = parts.scheme == "https"
    extender: dict[str, Any] = {
        "urlPrefix": registration.url.rstrip("/"),
        "filterVerb": FILTER_VERB,
        "prioritizeVerb": PRIORITIZE_VERB,
        "weight": registration.weight,
        "enableHTTPS": https,
        "httpTimeout": registration.http_timeout,
        "nodeCacheCapable": registration.node_cache_capable,
        "ignorable": registration.ignorable,
    }
    if https:
        tls: dict[str, Any] = {"insecure": registration.insecure_skip_verify}
        if registration.server_name:
            tls["serverName"] = registration.server_name
        if registration.ca_file:
            tls["caFile"] = registration.ca_file
        if registration.ca_data:
            # []byte fields are base64 in the config file, as in any Kubernetes object.
            tls["caData"] = base64.b64encode(registration.ca_data).decode()
        extender["tlsConfig"] = tls
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "profiles": [{"schedulerName": registration.scheduler_name}],
        "extenders": [extender],
    }


def scheduler_configuration_yaml(registration: ExtenderRegistration) -> str:
    return yaml.safe_dump(scheduler_configuration(registration), sort_keys=False)
