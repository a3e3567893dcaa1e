"""How the provider's policy matches names against its patterns (pure): label and taint
keys against prefixes, namespace names against wildcards, image references against the
registries a consumer is granted. The keys and defaults themselves are in
:mod:`kube_offload.provider_policy`; the rules that call these are in ``pod_rules``,
``object_rules`` and ``tenant_rules`` (the rule book)."""

from __future__ import annotations

from kube_offload.provider_policy import (
    ALWAYS_DENIED_METADATA_PREFIXES,
    ALWAYS_RESERVED_NODE_KEYS,
    ANY_REGISTRY,
    UNIVERSAL_TOPOLOGY_KEYS,
    ProviderPolicy,
)

# How a container runtime names Docker Hub, whatever alias an image reference uses.
DOCKER_HUB = "docker.io"
_DOCKER_HUB_ALIASES = ("index.docker.io", "registry-1.docker.io")


def key_matches(key: str, patterns: tuple[str, ...] | list[str]) -> bool:
    """Whether ``key`` is one of ``patterns``, where a pattern ending in "/" is a prefix."""
    return any(key == p or (p.endswith("/") and key.startswith(p)) for p in patterns)


def name_matches(name: str, patterns: tuple[str, ...] | list[str]) -> bool:
    """Whether ``name`` is one of ``patterns``, where a pattern ending in "*" is a prefix."""
    return any(name == p or (p.endswith("*") and name.startswith(p[:-1])) for p in patterns)


def reserved_node_key(key: str, policy: ProviderPolicy) -> bool:
    """Whether node label (or taint) ``key`` is one the provider reserves for itself:
    always the hostname, the node roles and the node lifecycle keys, plus the keys the
    provider lists (``pods.reservedNodeLabelKeys``). No selector, affinity requirement,
    spread or toleration of a consumer pod may name one."""
    return key_matches(key, (*ALWAYS_RESERVED_NODE_KEYS, *policy.pods.reserved_node_label_keys))


def reserved_topology_key(key: str, policy: ProviderPolicy) -> bool:
    """Whether a spread constraint or pod (anti-)affinity may not use ``key`` as its
    topologyKey: a reserved key selects nodes there too (nodes without it are left out),
    except the keys every node carries (UNIVERSAL_TOPOLOGY_KEYS: spreading one replica per
    hostname selects no node, and refusing it would break the commonest chart pattern)."""
    return key not in UNIVERSAL_TOPOLOGY_KEYS and reserved_node_key(key, policy)


def denied_metadata_key(key: str, policy: ProviderPolicy) -> bool:
    """Whether a consumer pod may not carry label or annotation ``key`` (it configures
    the provider's own controllers): the always-denied prefixes plus the provider's
    ``pods.deniedMetadataPrefixes``."""
    return key_matches(key, (*ALWAYS_DENIED_METADATA_PREFIXES, *policy.pods.denied_metadata_prefixes))


def image_name(image: str) -> str:
    """An image reference's full name, registry first, without tag or digest, as a container
    runtime resolves it: ``nginx:1.27`` is ``docker.io/library/nginx``, ``quay.io/a/b@sha256:..``
    is ``quay.io/a/b``, ``localhost:5000/x`` is itself."""
    name = image.split("@", 1)[0]
    slash, colon = name.rfind("/"), name.rfind(":")
    if colon > slash:
        name = name[:colon]  # the tag
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        registry, repository = first, rest
    else:
        registry, repository = DOCKER_HUB, name
    if registry in _DOCKER_HUB_ALIASES:
        registry = DOCKER_HUB
    if registry == DOCKER_HUB and "/" not in repository:
        repository = f"library/{repository}"
    return f"{registry}/{repository}"


def image_allowed(image: str, allowed: tuple[str, ...] | list[str]) -> bool:
    """Whether ``image`` comes from one of ``allowed`` (``pods.imageRegistries``): ``*``, a
    registry (the image's registry is it), or a name prefix (``docker.io/library/``; without
    the final ``/`` the name itself or what lies under it)."""
    name = image_name(image)
    registry = name.split("/", 1)[0]
    for entry in allowed:
        if entry == ANY_REGISTRY:
            return True
        head, slash, tail = entry.partition("/")
        entry = f"{DOCKER_HUB if head in _DOCKER_HUB_ALIASES else head}{slash}{tail}"
        if not slash:
            if registry == entry:
                return True
        elif name.startswith(entry) if entry.endswith("/") else (name == entry or name.startswith(f"{entry}/")):
            return True
    return False
