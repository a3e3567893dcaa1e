"""The provider policy's rules on the objects a consumer reflects into its twins, each one
predicate (pure; rows of :mod:`kube_offload.rule_book`).

The provider applies them in its API server, as the remote chart's ValidatingAdmissionPolicies
(CEL, charts/kube-offload-remote/templates/admission-policies.yaml), and, for what needs the
cluster's state (an EndpointSlice address that is a node, a pod of that twin), in the
enforcer's EndpointSlice webhook; the honest virtual kubelet fits what it reflects with the
same predicates. The CEL is checked against these by the agreement tests (one table of
cases, tests/unit/kube_offload/test_rule_book.py and tests/e2e/test_policy_agreement.py).

* Service: a type not granted becomes ClusterIP (its node ports and load-balancer fields go
  with it); an external IP outside the granted ranges is dropped (CVE-2020-8554); an
  ExternalName Service not granted is not sent; node ports and load-balancer fields on a
  Service of another type are dropped (no key grants them there).
* EndpointSlice: FQDN addresses only with ExternalName granted; an address that is never a
  consumer's endpoint (loopback, link-local, cloud metadata, unspecified, multicast,
  broadcast; for the provider also its nodes, Service range and API server), or one neither
  inside a granted range nor a pod of that twin, is dropped (an endpoint left with none
  goes; a slice left with none is not sent).
* Ingress: a class not granted, a host outside the granted domains, a catch-all (a rule
  without a host, a TLS entry without hosts, a default backend with no rules): not sent; a
  default backend beside host rules, and an annotation not granted, are dropped.
* PersistentVolumeClaim: a class not granted, a size over the largest claim, a named
  volume, a data source other than a claim or snapshot of the same namespace: not sent.
  (A claim naming no class gets the provider's default class from its API server before
  the CEL reads it: the provider judges that class by name, which the consumer cannot
  know; the consumer's check refuses such a claim only when no class is granted at all.)
* Secret: never of type ``kubernetes.io/service-account-token`` (the provider's token
  controller would mint a token of its own ServiceAccount into it).
"""

from __future__ import annotations

import ipaddress
from typing import Any, Mapping

from kube_offload import constants as c
from kube_offload import provider_policy as pp
from kube_offload import policy_matching as pm
from kube_offload.policy_rules import Context, Edit, Violation, grant, granted_list, items, mapping, strings, text
from kube_offload.resources import QuantityError, parse_quantity

CLUSTER_IP = "ClusterIP"
EXTERNAL_NAME = "ExternalName"
LOAD_BALANCER = "LoadBalancer"
NODE_PORT_TYPES = ("NodePort", LOAD_BALANCER)
# Fields only a Service reached from outside the cluster has; a type change to ClusterIP
# takes them out.
EXTERNAL_SERVICE_FIELDS = (
    "externalTrafficPolicy",
    "healthCheckNodePort",
    "loadBalancerIP",
    "loadBalancerSourceRanges",
    "loadBalancerClass",
    "allocateLoadBalancerNodePorts",
)
# Fields the CEL admits on a LoadBalancer Service only.
LOAD_BALANCER_FIELDS = ("loadBalancerIP", "loadBalancerSourceRanges", "loadBalancerClass", "healthCheckNodePort")
SERVICE_ACCOUNT_TOKEN_TYPE = "kubernetes.io/service-account-token"
# A claim may be seeded only from these (kind, apiGroup), of its own namespace.
CLAIM_SOURCES = (("PersistentVolumeClaim", ""), ("VolumeSnapshot", "snapshot.storage.k8s.io"))
_METADATA_NETWORKS = tuple(ipaddress.ip_network(n) for n in pp.METADATA_ADDRESSES)


# --- Services ---------------------------------------------------------------------------------------
def service_type(svc: Mapping[str, Any]) -> str:
    return text(mapping(svc, "spec", ""), "type", "spec") or CLUSTER_IP


def service_types(svc: Mapping[str, Any], ctx: Context) -> list[Violation]:
    kind = service_type(svc)
    if kind in (CLUSTER_IP, EXTERNAL_NAME) or kind in ctx.policy.services.types:
        return []
    spec = mapping(svc, "spec", "")
    edits = [Edit(("spec", "type"), CLUSTER_IP)]
    edits += [Edit(("spec", name)) for name in EXTERNAL_SERVICE_FIELDS if name in spec]
    edits += [Edit(("spec", "ports", i, "nodePort")) for i, port in items(spec, "ports", "spec") if "nodePort" in port]
    return [Violation(
        "services.types", "spec.type",
        f"{kind} is not granted to {ctx.who} (granted: {granted_list(ctx.policy.services.types)}); {grant('services.types')}",
        "or use a ClusterIP Service", tuple(edits), f"{kind} changed to {CLUSTER_IP}")]


def external_name(svc: Mapping[str, Any], ctx: Context) -> list[Violation]:
    if service_type(svc) != EXTERNAL_NAME or ctx.policy.services.external_name:
        return []
    return [Violation(
        "services.externalName", "spec.type",
        f"ExternalName (a DNS alias the provider's pods would follow: {text(mapping(svc, 'spec', ''), 'externalName', 'spec')}) "
        f"is not granted to {ctx.who}; {grant('services.externalName')}", "or use another type")]


def in_cidrs(address: str, cidrs: tuple[str, ...]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    for cidr in cidrs:
        network = ipaddress.ip_network(cidr, strict=False)
        if ip.version == network.version and ip in network:
            return True
    return False


def external_ips(svc: Mapping[str, Any], ctx: Context) -> list[Violation]:
    spec = mapping(svc, "spec", "")
    addresses = strings(spec, "externalIPs", "spec")
    cidrs = ctx.policy.services.external_ip_cidrs
    bad = [i for i, a in enumerate(addresses) if not in_cidrs(a, cidrs)]
    out = []
    for i in bad:
        edits = [Edit(("spec", "externalIPs", i))]
        if len(bad) == len(addresses) and service_type(svc) == CLUSTER_IP and "externalTrafficPolicy" in spec:
            edits.append(Edit(("spec", "externalTrafficPolicy")))  # meaningless, and invalid, without external IPs
        out.append(Violation(
            "services.externalIPCIDRs", f"spec.externalIPs[{i}]",
            f"{addresses[i]} is not inside a range granted to {ctx.who} (granted: {granted_list(cidrs)}): an external IP "
            f"captures that address for every pod of the provider; {grant('services.externalIPCIDRs')}",
            "or remove it", tuple(edits)))
    return out


def external_fields(svc: Mapping[str, Any], ctx: Context) -> list[Violation]:
    """Node ports and load-balancer fields on a Service of a type that has none (no key
    grants them there; a type not granted loses them with its type, service_types)."""
    kind = service_type(svc)
    spec = mapping(svc, "spec", "")
    out = []
    if kind not in NODE_PORT_TYPES:
        for i, port in items(spec, "ports", "spec"):
            if port.get("nodePort"):
                out.append(Violation(
                    "", f"spec.ports[{i}].nodePort",
                    f"only a NodePort or LoadBalancer Service opens node ports, and {ctx.who} wrote {kind}; never granted "
                    f"on it", "remove nodePort", (Edit(("spec", "ports", i, "nodePort")),)))
    if kind != LOAD_BALANCER:
        for name in LOAD_BALANCER_FIELDS:
            if spec.get(name) not in (None, "", [], 0):
                out.append(Violation(
                    "", f"spec.{name}", f"only a LoadBalancer Service has it, and {ctx.who} wrote {kind}; never granted on it",
                    f"remove {name}", (Edit(("spec", name)),)))
    return out


# --- EndpointSlices -----------------------------------------------------------------------------------
def never_endpoint(text_: str) -> str | None:
    """Why an address can never be a consumer's endpoint, whatever is granted, or None:
    what no network plan makes a consumer's (the CEL's "not global unicast")."""
    try:
        address = ipaddress.ip_address(text_)
    except ValueError:
        return "not an IP address"
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address (where cloud metadata services answer)"
    if any(address in network for network in _METADATA_NETWORKS):
        return "a cloud metadata address"
    if address.is_unspecified:
        return "the unspecified address"
    if address.is_multicast:
        return "a multicast address"
    if address.version == 4 and address == ipaddress.IPv4Address("255.255.255.255"):
        return "the broadcast address"
    return None


def fqdn_endpoints(slice_: Mapping[str, Any], ctx: Context) -> list[Violation]:
    if slice_.get("addressType") != "FQDN" or ctx.policy.services.external_name:
        return []
    return [Violation(
        "services.externalName", "addressType",
        f"FQDN endpoints (DNS names the provider's pods would follow) are not granted to {ctx.who}; "
        f"{grant('services.externalName')}", "use IPv4 or IPv6 addresses")]


def endpoint_addresses(slice_: Mapping[str, Any], ctx: Context) -> list[Violation]:
    """Every address an IP slice names: never one of :func:`never_endpoint` (nor, for the
    provider, one of its own: ``ctx.endpoint_facts``); else inside ``endpoints.cidrs`` or a
    pod the enforcer made in that twin (only the provider knows those)."""
    if slice_.get("addressType") == "FQDN":
        return []
    facts = ctx.endpoint_facts
    cidrs = ctx.policy.endpoints.cidrs
    endpoints = list(items(slice_, "endpoints", ""))
    found: list[tuple[int, int, str, str, str]] = []  # (endpoint, address index, address, key, why)
    kept_any = False
    left: dict[int, int] = {}
    for e, endpoint in endpoints:
        addresses = strings(endpoint, "addresses", f"endpoints[{e}]")
        left[e] = len(addresses)
        for a, address in enumerate(addresses):
            why = never_endpoint(address) or (facts.never(address) if facts is not None else None)
            if why is not None:
                found.append((e, a, address, "", f"{why}: never admitted for {ctx.who}, whatever Consumer "
                                                 f"{pp.POLICY}.endpoints.cidrs grants"))
            elif in_cidrs(address, cidrs) or (facts is not None and facts.own_pod(address)):
                kept_any = True
                continue
            else:
                found.append((e, a, address, "endpoints.cidrs", (
                    f"neither a pod of namespace {ctx.namespace or 'the twin'} nor inside a range granted to {ctx.who} "
                    f"(granted: {granted_list(cidrs)}); the provider grants ranges with Consumer {pp.POLICY}.endpoints.cidrs")))
            left[e] -= 1
    out = []
    for e, a, address, key, why in found:
        # An endpoint left with no address goes whole; a slice left with none is not sent.
        edits = () if not kept_any else ((Edit(("endpoints", e)),) if left[e] == 0 else (Edit(("endpoints", e, "addresses", a)),))
        out.append(Violation(key, f"endpoints[{e}].addresses[{a}]", f"{address} is {why}", "remove it", edits))
    return out


# --- Ingresses -------------------------------------------------------------------------------------
def host_granted(host: str, domains: tuple[str, ...]) -> bool:
    """Whether Ingress host ``host`` (``*.`` wildcards included) is one of ``domains`` or
    under one of them."""
    name = host[2:] if host.startswith("*.") else host
    return any(name == d or name.endswith(f".{d}") for d in (d.lstrip(".").rstrip(".") for d in domains))


def _class_not_granted(key: str, field: str, shown: str, classes: tuple[str, ...], ctx: Context) -> list[Violation]:
    """A class (``shown``: its name, or what no name means) the provider does not grant: not sent."""
    return [Violation(key, field, f"{shown} is not granted to {ctx.who} (granted: {granted_list(classes)}); {grant(key)}",
                      "name a granted class")]


def ingress_classes(ing: Mapping[str, Any], ctx: Context) -> list[Violation]:
    name = text(mapping(ing, "spec", ""), "ingressClassName", "spec")
    classes = ctx.policy.ingress.classes
    if name and name in classes:
        return []
    shown = repr(name) if name else "none given (the provider's default class would serve it)"
    return _class_not_granted("ingress.classes", "spec.ingressClassName", shown, classes, ctx)


def ingress_hosts(ing: Mapping[str, Any], ctx: Context) -> list[Violation]:
    spec = mapping(ing, "spec", "")
    domains = ctx.policy.ingress.host_domains
    why = f"is not under a domain granted to {ctx.who} (granted: {granted_list(domains)}); {grant('ingress.hostDomains')}"
    out = []
    for i, rule in items(spec, "rules", "spec"):
        host = text(rule, "host", f"spec.rules[{i}]")
        if host and not host_granted(host, domains):
            out.append(Violation("ingress.hostDomains", f"spec.rules[{i}].host", f"{host} {why}", "or use a granted host"))
    for i, tls in items(spec, "tls", "spec"):
        for j, host in enumerate(strings(tls, "hosts", f"spec.tls[{i}]")):
            if not host_granted(host, domains):
                out.append(Violation("ingress.hostDomains", f"spec.tls[{i}].hosts[{j}]", f"{host} {why}", "or use a granted host"))
    return out


def ingress_annotations(ing: Mapping[str, Any], ctx: Context) -> list[Violation]:
    granted = ctx.policy.ingress.annotations
    out = []
    for key in mapping(mapping(ing, "metadata", ""), "annotations", "metadata"):
        key = str(key)
        # Our own bookkeeping (the origin annotations reflection writes) configures no controller.
        if key.startswith(f"{c.DOMAIN}/") or pm.key_matches(key, granted):
            continue
        out.append(Violation(
            "ingress.annotations", f"metadata.annotations[{key}]",
            f"not granted to {ctx.who} (granted: {granted_list(granted)}): an Ingress annotation configures the provider's "
            f"controller; {grant('ingress.annotations')}", "or remove it", (Edit(("metadata", "annotations", key)),)))
    return out


def ingress_catch_alls(ing: Mapping[str, Any], ctx: Context) -> list[Violation]:
    """A catch-all takes every request no other Ingress of the provider matches: never."""
    spec = mapping(ing, "spec", "")
    rules = list(items(spec, "rules", "spec"))
    out = []
    if spec.get("defaultBackend") is not None:
        hosts = any(text(r, "host", "") for _, r in rules)
        out.append(Violation(
            "", "spec.defaultBackend",
            f"a catch-all backend takes every request no other Ingress matches; never admitted for {ctx.who}",
            "route hosts under Consumer spec.policy.ingress.hostDomains instead",
            (Edit(("spec", "defaultBackend")),) if hosts else ()))
    for i, rule in rules:
        if not text(rule, "host", f"spec.rules[{i}]"):
            out.append(Violation("", f"spec.rules[{i}].host", f"a rule without a host is a catch-all, never admitted for {ctx.who}",
                                 f"name a host under Consumer {pp.POLICY}.ingress.hostDomains"))
    for i, tls in items(spec, "tls", "spec"):
        if not strings(tls, "hosts", f"spec.tls[{i}]"):
            out.append(Violation("", f"spec.tls[{i}].hosts", f"a TLS entry without hosts is a catch-all certificate, never "
                                 f"admitted for {ctx.who}", f"name hosts under Consumer {pp.POLICY}.ingress.hostDomains"))
    return out


# --- claims -----------------------------------------------------------------------------------------
def claim_classes(pvc: Mapping[str, Any], ctx: Context) -> list[Violation]:
    name = text(mapping(pvc, "spec", ""), "storageClassName", "spec")
    classes = ctx.policy.storage.classes
    if name in classes or (not name and classes):
        return []  # no class: the provider's default class, judged by its name there
    shown = repr(name) if name else "none (the provider's default class)"
    return _class_not_granted("storage.classes", "spec.storageClassName", shown, classes, ctx)


def claim_size(pvc: Mapping[str, Any], ctx: Context) -> list[Violation]:
    spec = mapping(pvc, "spec", "")
    size = mapping(mapping(spec, "resources", "spec"), "requests", "spec.resources").get("storage")
    most = ctx.policy.storage.max_claim_size
    if size is None:
        return []
    try:
        if parse_quantity(size) <= parse_quantity(most):
            return []
    except (QuantityError, TypeError, ValueError):
        return []  # the API server's own validation says what is wrong with it
    return [Violation(
        "storage.maxClaimSize", "spec.resources.requests.storage",
        f"{size} is more than {most}, the largest claim granted to {ctx.who}; {grant('storage.maxClaimSize')}",
        "or claim less")]


def claim_sources(pvc: Mapping[str, Any], ctx: Context) -> list[Violation]:
    """A named volume (someone else's data), a clone or restore of another namespace's
    volume: never. (The PV binder writes volumeName on bind; it is not the consumer.)"""
    spec = mapping(pvc, "spec", "")
    out = []
    old_volume = text(mapping(ctx.old_object or {}, "spec", ""), "volumeName", "spec")
    if text(spec, "volumeName", "spec") and text(spec, "volumeName", "spec") != old_volume:
        out.append(Violation("", "spec.volumeName", f"binding a named PersistentVolume (someone else's data) is never "
                             f"admitted for {ctx.who}", f"claim a class granted in Consumer {pp.POLICY}.storage.classes"))
    for name in ("dataSource", "dataSourceRef"):
        source = mapping(spec, name, "spec")
        if not source:
            continue
        kind = (text(source, "kind", f"spec.{name}"), text(source, "apiGroup", f"spec.{name}"))
        if kind not in CLAIM_SOURCES or text(source, "namespace", f"spec.{name}") not in ("", ctx.namespace):
            out.append(Violation("", f"spec.{name}", f"only a PersistentVolumeClaim or VolumeSnapshot of the same namespace "
                                 f"may seed a claim of {ctx.who}; never granted", f"remove {name}"))
    return out


# --- Secrets ----------------------------------------------------------------------------------------
def secret_types(secret: Mapping[str, Any], ctx: Context) -> list[Violation]:
    if text(secret, "type", "") != SERVICE_ACCOUNT_TOKEN_TYPE:
        return []
    return [Violation(
        "", "type",
        f"{SERVICE_ACCOUNT_TOKEN_TYPE} would mint a token of a provider ServiceAccount for {ctx.who}; a consumer's pods "
        "never get a provider identity; never granted", f"use another type (the virtual kubelet reflects tokens as "
        f"{c.DOMAIN}/service-account-token)")]
