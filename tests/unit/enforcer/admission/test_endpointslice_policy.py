"""Which addresses a consumer's EndpointSlice may name (enforcer/admission/endpointslice_policy.py)."""

from __future__ import annotations

import ipaddress

import pytest

from enforcer.admission import endpointslice_policy as ep
from kube_offload import constants as c
from kube_offload.admission import AdmissionRequest, GroupVersionKind, UserInfo

CONSUMER = "local"
TWIN = "shop-local"
CONSUMER_USER = f"system:serviceaccount:{c.tenant_namespace(CONSUMER)}:{c.CONSUMER_SERVICE_ACCOUNT}"
PROVIDER = ep.ProviderAddresses(
    nodes={"172.18.0.2": "control-plane", "172.18.0.3": "worker-1", "fd00::3": "worker-1"},
    service_cidrs=(ipaddress.ip_network("10.96.0.0/12"), ipaddress.ip_network("fd00:10:96::/112")),
    api_servers=frozenset({"172.18.0.2", "192.168.49.2"}),
)
OWN_PODS = {(TWIN, "10.0.0.7"): "web-abc"}


def pod_at(namespace: str, ip: str) -> str | None:
    return OWN_PODS.get((namespace, ip))


def twin(name: str = TWIN, origin: str = CONSUMER) -> dict:
    return {"metadata": {"name": name, "labels": {c.LABEL_MANAGED_BY: c.MANAGED_BY_ENFORCER, c.LABEL_ORIGIN_CLUSTER_ID: origin}}}


def consumer(cidrs=("10.200.0.0/16",)) -> dict:
    return {"metadata": {"name": CONSUMER}, "spec": {"policy": {"endpoints": {"cidrs": list(cidrs)}}}}


def request(addresses, *, user: str = CONSUMER_USER, address_type: str = "IPv4", operation: str = "CREATE") -> AdmissionRequest:
    slice_ = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": {"name": "db-1", "namespace": TWIN},
              "addressType": address_type, "endpoints": [{"addresses": [a]} for a in addresses]}
    return AdmissionRequest(uid="u", api_version="admission.k8s.io/v1", kind=GroupVersionKind("discovery.k8s.io", "v1", "EndpointSlice"),
                            operation=operation, namespace=TWIN, name="db-1", sub_resource="", object=slice_, old_object=None,
                            dry_run=False, user_info=UserInfo(user))


def decide(addresses, **kwargs):
    cons = kwargs.pop("consumer", consumer())
    namespace = kwargs.pop("namespace", twin())
    return ep.decide(request(addresses, **kwargs), namespace=namespace, consumer=cons, provider=PROVIDER, pod_at=pod_at)


@pytest.mark.parametrize("address", ["10.200.3.4", "10.0.0.7"])
def test_a_granted_range_or_a_pod_of_that_twin_is_admitted(address):
    assert decide([address]).allowed


@pytest.mark.parametrize(("address", "why"), [
    ("172.18.0.3", "provider node worker-1"),
    ("fd00::3", "provider node worker-1"),
    ("172.18.0.2", "API server"),
    ("192.168.49.2", "API server"),
    ("10.96.0.1", "Service range 10.96.0.0/12"),
    ("127.0.0.1", "loopback"),
    ("169.254.169.254", "link-local"),
    ("fe80::1", "link-local"),
    ("fd00:ec2::254", "cloud metadata"),
    ("100.100.100.200", "cloud metadata"),
    ("0.0.0.0", "unspecified"),
    ("224.0.0.1", "multicast"),
])
def test_provider_and_special_addresses_are_never_admitted_even_when_granted(address, why):
    # Granting everything changes nothing for these: the never-list comes first.
    decision = decide([address], consumer=consumer(cidrs=("0.0.0.0/0", "::/0")))
    assert not decision.allowed
    assert address in decision.message and why in decision.message
    assert "spec.policy.endpoints.cidrs" in decision.message and "endpoints[].addresses" in decision.message


def test_an_address_neither_granted_nor_an_own_pod_is_refused_naming_the_key():
    decision = decide(["10.200.3.4", "10.9.9.9"])
    assert not decision.allowed
    assert "10.9.9.9" in decision.message and "10.200.3.4" not in decision.message
    assert f"neither a pod of namespace {TWIN}" in decision.message
    assert 'the provider grants ranges with Consumer spec.policy.endpoints.cidrs' in decision.message


def test_a_pod_ip_of_another_namespace_is_not_an_own_pod():
    namespace = twin("other-local")
    req = request(["10.0.0.7"])
    req = AdmissionRequest(**{**req.__dict__, "namespace": "other-local"})
    decision = ep.decide(req, namespace=namespace, consumer=consumer(), provider=PROVIDER, pod_at=pod_at)
    assert not decision.allowed and "neither a pod of namespace other-local" in decision.message


def test_default_policy_grants_no_range():
    decision = decide(["10.200.3.4"], consumer={"metadata": {"name": CONSUMER}, "spec": {}})
    assert not decision.allowed


def test_only_the_consumer_in_its_twin_is_judged():
    # The provider's own writers (an admin, a controller) are not the consumer.
    assert decide(["172.18.0.3"], user="system:admin").allowed
    # Not a twin namespace: not ours.
    assert ep.decide(request(["172.18.0.3"]), namespace={"metadata": {"name": "x"}}, consumer=None,
                     provider=PROVIDER, pod_at=pod_at).allowed


def test_a_twin_without_its_consumer_is_refused():
    decision = ep.decide(request(["10.200.3.4"]), namespace=twin(), consumer=None, provider=PROVIDER, pod_at=pod_at)
    assert not decision.allowed and "no Consumer object" in decision.message


def test_an_invalid_policy_grants_nothing_and_says_so():
    bad = {"metadata": {"name": CONSUMER}, "spec": {"policy": {"endpoints": {"cidrs": ["not-a-cidr"]}}}}
    decision = decide(["10.200.3.4"], consumer=bad)
    assert not decision.allowed and "spec.policy.endpoints.cidrs" in decision.message


def test_fqdn_slices_are_left_to_the_admission_policy():
    assert decide(["db.example.com"], address_type="FQDN").allowed


def test_facts_from_the_cached_objects():
    nodes = [{"metadata": {"name": "n1"}, "status": {"addresses": [{"type": "InternalIP", "address": "172.18.0.3"},
                                                                   {"type": "Hostname", "address": "n1"}]}}]
    assert ep.node_addresses(nodes) == {"172.18.0.3": "n1", "n1": "n1"}
    assert ep.service_cidrs([{"spec": {"cidrs": ["10.96.0.0/12", "junk"]}}]) == (ipaddress.ip_network("10.96.0.0/12"),)
    assert ep.api_server_addresses([{"endpoints": [{"addresses": ["172.18.0.2"]}]}]) == frozenset({"172.18.0.2"})
    pod = {"metadata": {"namespace": TWIN}, "status": {"podIP": "10.0.0.7", "podIPs": [{"ip": "10.0.0.7"}, {"ip": "fd00::0:7"}]}}
    assert ep.pod_ip_keys(pod) == sorted([f"{TWIN}/10.0.0.7", f"{TWIN}/fd00::7"])
