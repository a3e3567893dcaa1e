"""Reflection policy and settings: which objects a deny-list or allow-list selects, and
the flags that set it (with their environment variables)."""

import argparse
from datetime import datetime, timedelta, timezone

import pytest

from kube_offload import constants as c
from vkubelet.reflection.flags import add_reflection_flags, reflection_settings_from_args
from vkubelet.reflection.forge import ForgeContext
from vkubelet.reflection.serviceaccounts import forge_token_secret, token_refresh_at, token_secret_is_current, token_sources
from vkubelet.reflection.policy import (
    BOOTSTRAP_TOKEN_TYPE,
    HELM_RELEASE_TYPE,
    SERVICE_ACCOUNT_TOKEN_TYPE,
    Policy,
    decide,
    never_reflected,
    should_reflect,
)
from vkubelet.reflection.settings import (
    RESOURCES,
    ReflectionSettings,
    ResourceSettings,
    parse_storage_classes,
)
from vkubelet.settings import Settings, SettingsError


def _obj(**annotations) -> dict:
    return {"metadata": {"name": "x", "namespace": "demo", "annotations": annotations}}


@pytest.mark.parametrize(
    "annotations, deny, allow",
    [
        ({}, True, False),
        ({c.ANNOTATION_SKIP_REFLECTION: "true"}, False, False),
        ({c.ANNOTATION_SKIP_REFLECTION: ""}, False, False),  # `kubectl annotate ... key=`
        ({c.ANNOTATION_SKIP_REFLECTION: "false"}, True, False),
        ({c.ANNOTATION_ALLOW_REFLECTION: "true"}, True, True),
        ({c.ANNOTATION_ALLOW_REFLECTION: "False"}, True, False),
        # Skipped wins over allowed.
        ({c.ANNOTATION_ALLOW_REFLECTION: "true", c.ANNOTATION_SKIP_REFLECTION: "true"}, False, False),
        ({"unrelated": "x"}, True, False),
    ],
)
def test_deny_list_and_allow_list(annotations, deny, allow):
    assert should_reflect(_obj(**annotations), Policy.DENY_LIST) is deny
    assert should_reflect(_obj(**annotations), Policy.ALLOW_LIST) is allow


def test_object_without_annotations_or_metadata():
    assert should_reflect({}, Policy.DENY_LIST) is True
    assert should_reflect({"metadata": {"annotations": None}}, Policy.ALLOW_LIST) is False


SKIP = {c.ANNOTATION_SKIP_REFLECTION: "true"}
ALLOW = {c.ANNOTATION_ALLOW_REFLECTION: "true"}


def _typed(kind: str, type_: str | None = None, name: str = "x", labels: dict | None = None, **annotations) -> dict:
    obj = {"kind": kind, "metadata": {"name": name, "namespace": "demo", "labels": labels or {}, "annotations": annotations}}
    if type_ is not None:
        obj["type"] = type_
    return obj


HELM_CM = {"name": "sh.helm.release.v1.web.v3", "labels": {"owner": "helm", "name": "web"}}


@pytest.mark.parametrize(
    "obj, kind, deny, allow",
    [
        # Ordinary Secrets follow the policy.
        (_typed("Secret", "Opaque"), "Secret", True, False),
        (_typed("Secret", "Opaque", **ALLOW), "Secret", True, True),
        (_typed("Secret", "Opaque", **SKIP), "Secret", False, False),
        (_typed("Secret", "kubernetes.io/tls", **ALLOW), "Secret", True, True),
        (_typed("Secret", "kubernetes.io/dockerconfigjson"), "Secret", True, False),
        (_typed("Secret"), "Secret", True, False),  # no type = Opaque
        # The local cluster's credentials and Helm releases: never, whatever is annotated.
        (_typed("Secret", SERVICE_ACCOUNT_TOKEN_TYPE), "Secret", False, False),
        (_typed("Secret", SERVICE_ACCOUNT_TOKEN_TYPE, **ALLOW), "Secret", False, False),
        (_typed("Secret", SERVICE_ACCOUNT_TOKEN_TYPE, **{c.ANNOTATION_SKIP_REFLECTION: "false"}), "Secret", False, False),
        (_typed("Secret", HELM_RELEASE_TYPE), "Secret", False, False),
        (_typed("Secret", HELM_RELEASE_TYPE, **ALLOW), "Secret", False, False),
        (_typed("Secret", BOOTSTRAP_TOKEN_TYPE, **ALLOW), "Secret", False, False),
        # Helm's ConfigMap storage driver: the same records, by name and owner label.
        (_typed("ConfigMap", **HELM_CM), "ConfigMap", False, False),
        (_typed("ConfigMap", **HELM_CM, **ALLOW), "ConfigMap", False, False),
        # ... but only with both: a user's ConfigMap named alike, or labelled alike, is data.
        (_typed("ConfigMap", name="sh.helm.release.v1.web.v3"), "ConfigMap", True, False),
        (_typed("ConfigMap", labels={"owner": "helm"}), "ConfigMap", True, False),
        # A type is a Secret's field: the same value on another kind means nothing.
        (_typed("ConfigMap", SERVICE_ACCOUNT_TOKEN_TYPE), "ConfigMap", True, False),
        (_typed("Service", **SKIP), "Service", False, False),
        (_typed("Ingress", **ALLOW), "Ingress", True, True),
    ],
)
def test_what_is_exported_under_each_policy(obj, kind, deny, allow):
    assert decide(obj, Policy.DENY_LIST, kind=kind).reflect is deny
    assert decide(obj, Policy.ALLOW_LIST, kind=kind).reflect is allow
    assert should_reflect(obj, Policy.DENY_LIST, kind=kind) is deny


def test_decisions_say_why():
    assert "service-account token" in decide(_typed("Secret", SERVICE_ACCOUNT_TOKEN_TYPE), Policy.DENY_LIST, kind="Secret").why
    assert "Helm release" in decide(_typed("Secret", HELM_RELEASE_TYPE), Policy.DENY_LIST, kind="Secret").why
    assert c.ANNOTATION_SKIP_REFLECTION in decide(_typed("Secret", "Opaque", **SKIP), Policy.DENY_LIST, kind="Secret").why
    assert c.ANNOTATION_ALLOW_REFLECTION in decide(_typed("Secret", "Opaque"), Policy.ALLOW_LIST, kind="Secret").why
    assert never_reflected(_typed("Secret", "Opaque"), "Secret") is None
    assert never_reflected({}, "Secret") is None


def _parse(argv: list[str], monkeypatch=None, env: dict | None = None) -> ReflectionSettings:
    for key, value in (env or {}).items():
        monkeypatch.setenv(key, value)
    parser = argparse.ArgumentParser()
    add_reflection_flags(parser, "vkubelet")
    return reflection_settings_from_args(parser.parse_args(argv))


def test_flag_defaults_reflect_everything_with_deny_list():
    settings = _parse([])
    # The kinds namespaces hold by the thousand get 8 workers (the reflection rate is
    # bounded by workers x one remote create: bench/bench_reflection.py), the rest 2.
    bulk = {"configmaps", "secrets", "services", "endpointslices"}
    for name in RESOURCES:
        assert settings.of(name) == ResourceSettings(workers=8 if name in bulk else 2, policy=Policy.DENY_LIST)
        assert ReflectionSettings().of(name) == settings.of(name)  # the same defaults without flags
    assert settings.token_seconds == 3600
    assert settings.storage_classes == {}
    assert settings.problem() is None


def test_flags_set_workers_policy_storage_classes_and_token_lifetime():
    settings = _parse([
        "--reflect-configmaps-policy", "allow-list",
        "--reflect-ingresses-workers", "0",
        "--reflect-events-workers", "5",
        "--reflect-storage-class", "local-path=standard",
        "--reflect-storage-class", "*=",
        "--reflect-token-expiration", "2h",
    ])
    assert settings.of("configmaps").policy is Policy.ALLOW_LIST
    assert settings.of("secrets").policy is Policy.DENY_LIST
    assert not settings.enabled("ingresses")
    assert settings.of("events").workers == 5
    assert settings.storage_classes == {"local-path": "standard", "*": ""}
    assert settings.token_seconds == 7200


def test_environment_variables_set_the_same(monkeypatch):
    settings = _parse(
        [],
        monkeypatch,
        {
            "KUBE_OFFLOAD_VKUBELET_REFLECT_SECRETS_POLICY": "allow-list",
            "KUBE_OFFLOAD_VKUBELET_REFLECT_SERVICES_WORKERS": "0",
            "KUBE_OFFLOAD_VKUBELET_REFLECT_STORAGE_CLASS": "a=b,c=",
        },
    )
    assert settings.of("secrets").policy is Policy.ALLOW_LIST
    assert not settings.enabled("services")
    assert settings.storage_classes == {"a": "b", "c": ""}


def test_command_line_beats_environment(monkeypatch):
    settings = _parse(["--reflect-secrets-policy", "deny-list"], monkeypatch,
                      {"KUBE_OFFLOAD_VKUBELET_REFLECT_SECRETS_POLICY": "allow-list"})
    assert settings.of("secrets").policy is Policy.DENY_LIST


def test_bad_values_are_refused(monkeypatch):
    with pytest.raises(SystemExit):
        _parse(["--reflect-secrets-policy", "maybe"])
    with pytest.raises(SystemExit):
        _parse(["--reflect-secrets-workers", "-1"])
    with pytest.raises(SystemExit):
        _parse([], monkeypatch, {"KUBE_OFFLOAD_VKUBELET_REFLECT_EVENTS_POLICY": "nope"})
    with pytest.raises(ValueError):
        parse_storage_classes(["no-equals-sign"])


def test_serviceaccounts_has_no_policy_flag():
    parser = argparse.ArgumentParser()
    add_reflection_flags(parser, "vkubelet")
    with pytest.raises(SystemExit):
        parser.parse_args(["--reflect-serviceaccounts-policy", "allow-list"])


def test_settings_validation_names_the_flag():
    short = ReflectionSettings(token_seconds=60)
    assert "--reflect-token-expiration" in short.problem()
    no_ca = ReflectionSettings(resources={"configmaps": ResourceSettings(workers=0)})
    assert "--reflect-configmaps-workers" in no_ca.problem()
    both_off = ReflectionSettings(
        resources={"configmaps": ResourceSettings(workers=0), "serviceaccounts": ResourceSettings(workers=0)}
    )
    assert both_off.problem() is None
    assert not both_off.service_account_tokens
    with pytest.raises(SettingsError, match="--reflect-token-expiration"):
        Settings(cluster_id="remote-1", local_cluster_id="local", reflection=short).validate()


def test_vkubelet_cli_carries_reflection_settings():
    from vkubelet import cli

    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    args = parser.parse_args([
        "vkubelet", "--cluster-id", "remote-1", "--local-cluster-id", "local", "--remote-kubeconfig", "/dev/null",
        "--reflect-persistentvolumeclaims-workers", "0",
        # the virtual storage class needs claims reflected (vkubelet/settings.py refuses otherwise)
        "--virtual-storage-class", "",
    ])
    settings = cli.settings_from_args(args)
    assert not settings.reflection.enabled("persistentvolumeclaims")
    assert settings.reflection.enabled("configmaps")


# --- when tokens are renewed (--reflect-token-renew-after-fraction) -------------------------------
def test_the_renewal_point_defaults_to_the_kubelets_and_is_a_flag(monkeypatch):
    assert _parse([]).token_renew_fraction == 0.8
    assert _parse(["--reflect-token-renew-after-fraction", "0.01"]).token_renew_fraction == 0.01
    env = {"KUBE_OFFLOAD_VKUBELET_REFLECT_TOKEN_RENEW_AFTER_FRACTION": "0.5"}
    assert _parse([], monkeypatch, env).token_renew_fraction == 0.5
    with pytest.raises(SystemExit):
        _parse(["--reflect-token-renew-after-fraction", "soon"])


@pytest.mark.parametrize("fraction", [0, 1, 1.5, -0.2])
def test_a_renewal_point_outside_the_lifetime_names_the_flag(fraction):
    problem = ReflectionSettings(token_renew_fraction=fraction).problem()
    assert problem is not None and "--reflect-token-renew-after-fraction" in problem and "between 0 and 1" in problem
    with pytest.raises(SettingsError, match="--reflect-token-renew-after-fraction"):
        Settings(cluster_id="remote-1", local_cluster_id="local",
                 reflection=ReflectionSettings(token_renew_fraction=fraction)).validate()


def test_the_renewal_schedule_follows_the_flag():
    # The shortest token the API server issues (10 minutes), renewed after 1 % of it: the
    # token Secret is due 6 s after it was issued, so a test sees rotations within seconds.
    settings = _parse(["--reflect-token-expiration", "10m", "--reflect-token-renew-after-fraction", "0.01"])
    issued = datetime(2026, 1, 1, tzinfo=timezone.utc)
    pod = {"metadata": {"name": "web", "namespace": "demo", "uid": "u1"},
           "spec": {"volumes": [{"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}]}}
    sources = token_sources(pod)
    secret = forge_token_secret(
        pod, ForgeContext(local_cluster_id="local", remote_namespace="demo-local", reflector="serviceaccounts"),
        tokens={s.key: "jwt" for s in sources}, issued=issued, expires=issued + timedelta(seconds=settings.token_seconds),
    )
    fraction = settings.token_renew_fraction
    assert token_refresh_at(secret, fraction) == issued + timedelta(seconds=6)
    assert token_secret_is_current(secret, pod, sources, now=issued + timedelta(seconds=5), refresh_fraction=fraction)
    assert not token_secret_is_current(secret, pod, sources, now=issued + timedelta(seconds=6), refresh_fraction=fraction)
    # The default keeps the kubelet's 80 %.
    assert token_refresh_at(secret, _parse([]).token_renew_fraction) == issued + timedelta(minutes=8)


def test_a_slice_vkubelet_reflects_only_its_own_pods_events_and_tokens():
    # docs/slices.md: namespace objects are the peering's (its own vkubelet reflects them
    # once); a slice's process reflects what is its pods' alone.
    from vkubelet.reflection.settings import EVENTS, RESOURCES, SERVICEACCOUNTS, slice_reflection

    kept = slice_reflection(ReflectionSettings())
    assert {name for name in RESOURCES if kept.enabled(name)} == {EVENTS, SERVICEACCOUNTS}
    # Tokens mount the twin's reflected kube-root-ca.crt, which the peering's own vkubelet
    # reflects: a slice's settings are valid without ConfigMap reflection of their own...
    assert kept.problem() is None
    # ... but not when the peering's own reflects no ConfigMaps either.
    no_configmaps = ReflectionSettings(resources={"configmaps": ResourceSettings(workers=0),
                                                  "serviceaccounts": ResourceSettings(workers=2)})
    assert "needs --reflect-configmaps-workers" in (slice_reflection(no_configmaps).problem() or "")
    # The claims are the peering's too: a slice's node serves the virtual storage class
    # (its stand-ins) while the peering's own vkubelet reflects them.
    assert kept.claims_by_peering and not kept.enabled("persistentvolumeclaims")
    assert not slice_reflection(ReflectionSettings(resources={"persistentvolumeclaims": ResourceSettings(workers=0)})).claims_by_peering
