"""The per-consumer provider policy: defaults, parsing, refusals that name the key."""

from __future__ import annotations

import pytest

from kube_offload import provider_policy as pp
from kube_offload.policy_matching import key_matches, name_matches

from kube_offload.provider_policy import (
    DEFAULT_POLICY,
    NAMESPACED_VOLUME_TYPES,
    SCHEMA,
    ProviderPolicyError,
    parse_policy,
    policy_to_spec,
)


def test_absent_policy_is_the_safe_default() -> None:
    policy = parse_policy(None)
    assert policy == DEFAULT_POLICY
    assert policy.services.types == ()
    assert policy.services.external_ip_cidrs == ()
    assert policy.services.external_name is False
    assert policy.ingress.host_domains == () and policy.ingress.classes == ()
    assert policy.pods.priority_classes == () and policy.pods.tolerations == ()
    assert policy.pods.volume_types == NAMESPACED_VOLUME_TYPES
    assert "hostPath" not in policy.pods.volume_types
    assert policy.storage.classes == ()
    assert policy.twin_namespaces.same_names == ()
    assert policy.quota_mode == "requests"


def test_empty_sections_keep_defaults() -> None:
    assert parse_policy({key: {} for key in SCHEMA}) == DEFAULT_POLICY


def test_round_trip_through_the_consumer_spec() -> None:
    raw = {
        "services": {"types": ["NodePort"], "externalIPCIDRs": ["192.0.2.0/24"], "externalName": True},
        "endpoints": {"cidrs": ["10.200.0.0/16"]},
        "ingress": {"hostDomains": ["apps.example.com"], "classes": ["nginx"], "annotations": ["nginx.ingress.kubernetes.io/rewrite-target"]},
        "storage": {"classes": ["standard"], "maxClaimSize": "10Gi"},
        "pods": {"priorityClasses": ["batch-low"], "tolerations": ["example.com/gpu"], "runtimeClasses": ["gvisor"]},
        "twinNamespaces": {"sameNames": ["shared-*"], "reserved": ["monitoring"], "maxCount": 3},
        "quotaMode": "both",
    }
    policy = parse_policy(raw)
    assert policy.services.types == ("NodePort",)
    assert policy.twin_namespaces.max_count == 3
    assert policy.quota_mode == "both"
    assert parse_policy(policy_to_spec(policy)) == policy
    # Every key of the schema is written, so what the provider sees is what is enforced.
    spec = policy_to_spec(DEFAULT_POLICY)
    for key, (_attr, fields) in SCHEMA.items():
        assert set(spec[key]) == set(fields)


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ({"services": {"types": ["ExternalName"]}}, "spec.policy.services.types"),
        ({"services": {"types": "NodePort"}}, "spec.policy.services.types"),
        ({"services": {"externalIPCIDRs": ["not-a-cidr"]}}, "spec.policy.services.externalIPCIDRs"),
        ({"services": {"externalName": "yes"}}, "spec.policy.services.externalName"),
        ({"endpoints": {"cidrs": ["10.0.0.0/33"]}}, "spec.policy.endpoints.cidrs"),
        ({"pods": {"priorityClasses": ["system-node-critical"]}}, "spec.policy.pods.priorityClasses"),
        ({"pods": {"volumeTypes": ["hostPath"]}}, "spec.policy.pods.volumeTypes"),
        ({"pods": {"tolerations": [""]}}, "spec.policy.pods.tolerations"),
        ({"storage": {"maxClaimSize": "ten gigs"}}, "spec.policy.storage.maxClaimSize"),
        ({"twinNamespaces": {"maxCount": -1}}, "spec.policy.twinNamespaces.maxCount"),
        ({"storage": {"maxClaimSize": "0"}}, "spec.policy.storage.maxClaimSize"),
        ({"pods": {"maxTerminationGracePeriodSeconds": -1}}, "spec.policy.pods.maxTerminationGracePeriodSeconds"),
        ({"pods": {"maxTerminationGracePeriodSeconds": "300"}}, "spec.policy.pods.maxTerminationGracePeriodSeconds"),
        ({"tokens": {"maxExpirationSeconds": 60}}, "spec.policy.tokens.maxExpirationSeconds"),
        ({"tokens": {"maxExpirationSeconds": 1.5}}, "spec.policy.tokens.maxExpirationSeconds"),
        ({"tokens": {"audiences": "vault"}}, "spec.policy.tokens.audiences"),
        ({"tokens": {"lifetime": 600}}, "spec.policy.tokens"),
        ({"twinNamespaces": {"maxRequests": -1}}, "spec.policy.twinNamespaces.maxRequests"),
        ({"slices": {"maxCount": "20"}}, "spec.policy.slices.maxCount"),
        ({"slices": {"max": 1}}, "spec.policy.slices"),
        ({"twinNamespaces": {"maxCount": True}}, "spec.policy.twinNamespaces.maxCount"),
        ({"quotaMode": "everything"}, "spec.policy.quotaMode"),
        ({"services": {"typo": []}}, "spec.policy.services"),
        ({"network": {}}, "spec.policy"),
        ({"pods": []}, "spec.policy.pods"),
    ],
)
def test_bad_policy_names_the_key(raw: dict, key: str) -> None:
    with pytest.raises(ProviderPolicyError) as excinfo:
        parse_policy(raw)
    assert str(excinfo.value).startswith(key)


def test_the_providers_api_is_a_grant_off_by_default() -> None:
    assert DEFAULT_POLICY.pods.remote_api_access is False
    assert parse_policy({"pods": {"remoteAPIAccess": True}}).pods.remote_api_access is True
    assert policy_to_spec(DEFAULT_POLICY)["pods"]["remoteAPIAccess"] is False
    with pytest.raises(ProviderPolicyError, match=r"^spec.policy.pods.remoteAPIAccess: must be true or false"):
        parse_policy({"pods": {"remoteAPIAccess": "true"}})


def test_no_bound_is_unlimited_by_default() -> None:
    # A consumer admitted with the defaults cannot claim a 1Ei volume, an 8-day grace or an
    # 8-day token (docs/security.md "Provider policy").
    assert DEFAULT_POLICY.storage.max_claim_size == "100Gi"
    assert DEFAULT_POLICY.pods.max_termination_grace_seconds == 300
    assert DEFAULT_POLICY.tokens.max_expiration_seconds == 24 * 3600
    assert DEFAULT_POLICY.tokens.audiences == ()
    assert DEFAULT_POLICY.twin_namespaces.max_requests == 100 and DEFAULT_POLICY.slices.max_count == 20
    # A Consumer stored when an empty maxClaimSize meant "no limit" gets the bound.
    assert parse_policy({"storage": {"maxClaimSize": ""}}).storage.max_claim_size == "100Gi"
    assert parse_policy({"storage": {"maxClaimSize": "1Ti"}}).storage.max_claim_size == "1Ti"
    assert parse_policy({"pods": {"maxTerminationGracePeriodSeconds": 0}}).pods.max_termination_grace_seconds == 0
    granted = parse_policy({"tokens": {"maxExpirationSeconds": 600, "audiences": ["vault"]}})
    assert granted.tokens == pp.TokenPolicy(max_expiration_seconds=600, audiences=("vault",))
    assert parse_policy(policy_to_spec(granted)) == granted


def test_a_bad_bound_is_refused_with_what_to_give() -> None:
    with pytest.raises(ProviderPolicyError, match=r"below the TokenRequest API's minimum of 600 s.*give at least 600"):
        parse_policy({"tokens": {"maxExpirationSeconds": 599}})
    with pytest.raises(ProviderPolicyError, match=r"maxClaimSize: '0' admits no claim; give the largest claim, such as 100Gi"):
        parse_policy({"storage": {"maxClaimSize": "0"}})


def test_patterns() -> None:
    assert key_matches("node-role.kubernetes.io/control-plane", ("node-role.kubernetes.io/",))
    assert not key_matches("node-role.kubernetes.io", ("node-role.kubernetes.io/",))
    assert key_matches("kubernetes.io/hostname", ("kubernetes.io/hostname",))
    assert not key_matches("kubernetes.io/hostname2", ("kubernetes.io/hostname",))
    assert name_matches("kube-system", ("kube-*",))
    assert name_matches("default", ("default",))
    assert not name_matches("defaults", ("default",))
    assert not name_matches("my-kube-x", ("kube-*",))


# --- custom resources ------------------------------------------------------------------------
def test_custom_resources_none_by_default_and_round_trip():
    assert pp.DEFAULT_POLICY.custom_resources == ()
    raw = {"customResources": [{"group": "example.com", "resource": "widgets", "specFields": ["size", "color", "size"]}]}
    policy = pp.parse_policy(raw)
    assert policy.custom_resources == (pp.CustomResourceGrant("example.com", "widgets", ("size", "color")),)
    assert policy.custom_resource("example.com", "widgets") is policy.custom_resources[0]
    assert policy.custom_resource("example.com", "gadgets") is None
    assert pp.parse_policy(pp.policy_to_spec(policy)) == policy


@pytest.mark.parametrize(
    "entries, words",
    [
        ({"group": "example.com"}, "must be a list"),
        (["widgets"], "[0]: must be an object"),
        ([{"group": "example.com", "resource": "widgets", "verbs": ["get"]}], "[0]: unknown key(s) verbs"),
        ([{"group": "example", "resource": "widgets"}], "[0].group"),
        ([{"group": "kube-offload.io", "resource": "shadowpods"}], "cannot be granted"),
        ([{"group": "apps.k8s.io", "resource": "deployments"}], "cannot be granted"),
        ([{"group": "policy.kubernetes.io", "resource": "things"}], "cannot be granted"),
        ([{"group": "example.com", "resource": "Widgets"}], "[0].resource"),
        ([{"group": "example.com", "resource": "widgets", "specFields": ["a.b"]}], "[0].specFields"),
        ([{"group": "example.com", "resource": "widgets"}, {"group": "example.com", "resource": "widgets"}], "granted twice"),
    ],
)
def test_custom_resources_refused_naming_the_entry(entries, words):
    with pytest.raises(pp.ProviderPolicyError) as error:
        pp.parse_policy({"customResources": entries})
    assert "spec.policy.customResources" in str(error.value) and words in str(error.value)
