"""Which API server an offloaded pod reaches, and how its spec is pointed there (pure).

The mode comes from the annotation ``kube-offload.io/api-server`` on the pod, else on
its local namespace, else ``home`` (constants.API_SERVER_MODES; docs/home-api.md "Which
API server a pod reaches"). Translation (vkubelet/pods/translation.py) applies it:

* ``home``: the pod keeps its LOCAL identity (the reflected token and CA) and its
  in-cluster configuration is pointed at the consumer's relay on the provider
  (:func:`point_at_home_api`): the ``KUBERNETES_SERVICE_*`` / ``KUBERNETES_PORT*``
  variables name ``kubernetes.default.svc`` and the relay's port, and hostAliases map
  that name (and the other names every API server's certificate carries) to the relay's
  ClusterIP, so the pod's TLS check of its home API server passes end to end;
* ``disabled``: no token, no address;
* ``remote``: the provider's API as the twin namespace's ``default`` ServiceAccount,
  where the provider's policy grants it (``pods.remoteAPIAccess``).

A value that is none of these is not guessed at: the pod runs as ``disabled`` (no
identity at all: a mistyped opt-out must not hand the pod its home token) and is told
with a Warning Event naming the annotation and the values it takes.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Mapping

from kube_offload import constants as c
from vkubelet.home_api import HomeAPIEndpoint

# The default domain of the home cluster's Services: the long name of the API server's
# Service (kubernetes.default.svc.<domain>) is in its certificate too.
DEFAULT_CLUSTER_DOMAIN = "cluster.local"
# The name the pod's in-cluster configuration connects to: in every API server's
# certificate (the relay's ClusterIP is not in the home one), and mapped to the relay by
# the pod's hostAliases.
HOME_API_HOST = "kubernetes.default.svc"
# Set by a container itself, it means the user points the container's in-cluster
# configuration somewhere on purpose: that container gets none of ours.
SERVICE_HOST_ENV = "KUBERNETES_SERVICE_HOST"


@dataclass(frozen=True)
class APIServerMode:
    """The mode a pod runs with, where it was read (``pod``, ``namespace`` or
    ``default``), and what was wrong with the value found (None: nothing)."""

    mode: str
    source: str = "default"
    problem: str | None = None


def _annotation(obj: Mapping[str, Any] | None) -> str | None:
    if not obj:
        return None
    value = ((obj.get("metadata") or {}).get("annotations") or {}).get(c.ANNOTATION_API_SERVER)
    return None if value is None else str(value)


def resolve_mode(pod: Mapping[str, Any], namespace: Mapping[str, Any] | None) -> APIServerMode:
    """The API server mode of ``pod``: its own annotation, else its local
    ``namespace``'s, else ``home``. An unknown value: ``disabled``, with the problem."""
    for source, obj in (("pod", pod), ("namespace", namespace)):
        value = _annotation(obj)
        if value is None:
            continue
        mode = value.strip()
        if mode in c.API_SERVER_MODES:
            return APIServerMode(mode, source)
        meta = (obj or {}).get("metadata") or {}
        where = f"namespace {meta.get('name')}" if source == "namespace" else "the pod"
        problem = (
            f"annotation {c.ANNOTATION_API_SERVER}={value!r} on {where} is not one of "
            f"{', '.join(c.API_SERVER_MODES)}: the pod runs offloaded with no API server access "
            f"({c.API_SERVER_DISABLED}) until the annotation is fixed and the pod recreated"
        )
        return APIServerMode(c.API_SERVER_DISABLED, source, problem)
    return APIServerMode(c.API_SERVER_HOME)


def home_api_env(endpoint: HomeAPIEndpoint) -> list[dict[str, str]]:
    """The variables a kubelet writes for the ``kubernetes`` Service (the service ones and
    the docker-link ones), all naming the home API server through the relay. The host is
    the name, not the relay's IP: clients build their URL from these and verify the name
    against the home API server's certificate."""
    port = str(endpoint.port)
    url = f"tcp://{HOME_API_HOST}:{port}"
    link = f"KUBERNETES_PORT_{port}_TCP"
    return [
        {"name": SERVICE_HOST_ENV, "value": HOME_API_HOST},
        {"name": "KUBERNETES_SERVICE_PORT", "value": port},
        {"name": "KUBERNETES_SERVICE_PORT_HTTPS", "value": port},
        {"name": "KUBERNETES_PORT", "value": url},
        {"name": link, "value": url},
        {"name": f"{link}_PROTO", "value": "tcp"},
        {"name": f"{link}_PORT", "value": port},
        {"name": f"{link}_ADDR", "value": HOME_API_HOST},
    ]


def home_api_hostnames(cluster_domain: str) -> list[str]:
    """The names of the home API server a pod may use, all of them in its certificate."""
    return [*c.HOME_API_HOSTNAMES, f"{HOME_API_HOST}.{cluster_domain}"]


def point_at_home_api(spec: dict[str, Any], endpoint: HomeAPIEndpoint, cluster_domain: str = DEFAULT_CLUSTER_DOMAIN) -> None:
    """Point ``spec``'s in-cluster configuration at the home API server through the
    relay at ``endpoint`` (in place).

    Every container (init and ephemeral ones too) gets :func:`home_api_env` first in its ``env``:
    container variables win over the ones the provider's kubelet derives from ITS
    ``kubernetes`` Service (kubelet makeEnvironmentVariables adds a service variable
    only where the container does not set the name), and being first, the user's own
    ``$(KUBERNETES_SERVICE_HOST)`` references expand to ours. A container that sets
    KUBERNETES_SERVICE_HOST itself is left as written (the user points it somewhere on
    purpose); one that sets only some of the others keeps its values for those.
    The pod's hostAliases map the API server's names to the relay's ClusterIP; a name
    the user already aliases keeps the user's address."""
    env = home_api_env(endpoint)
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        for container in spec.get(kind) or []:
            own = [e for e in container.get("env") or [] if isinstance(e, dict)]
            names = {e.get("name") for e in own}
            if SERVICE_HOST_ENV in names:
                continue
            container["env"] = [copy.deepcopy(e) for e in env if e["name"] not in names] + list(container.get("env") or [])
    aliases = list(spec.get("hostAliases") or [])
    taken = {name for alias in aliases for name in (alias.get("hostnames") or [])}
    hostnames = [name for name in home_api_hostnames(cluster_domain) if name not in taken]
    if hostnames:
        spec["hostAliases"] = [*aliases, {"ip": endpoint.ip, "hostnames": hostnames}]
