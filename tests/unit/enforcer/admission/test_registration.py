"""Registering the ShadowPod webhook: ``kube-offload enforcer configuration`` and the
``--webhook-*`` flags of ``kube-offload enforcer``."""

from __future__ import annotations

import argparse
import base64

import pytest
import yaml

from enforcer.cli import _webhook_settings, print_configuration, register
from enforcer.admission.registration import validating_configuration
from kube_offload import constants as c
from kube_offload.webhook_target import ServiceRef, WebhookTarget

CA_PEM = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="kube-offload")
    register(parser.add_subparsers())
    return parser.parse_args(["enforcer", *argv])


def test_the_configuration_by_url():
    config = validating_configuration(WebhookTarget(ca_bundle="Q0E=", url="https://127.0.0.1:9443/"))
    assert config["kind"] == "ValidatingWebhookConfiguration"
    assert config["metadata"]["name"] == c.SHADOWPOD_WEBHOOK_CONFIGURATION
    webhook, endpointslices, custom, tokens, tenant = config["webhooks"]
    assert webhook == {
        "name": c.SHADOWPOD_WEBHOOK_NAME,
        "clientConfig": {"url": f"https://127.0.0.1:9443{c.SHADOWPOD_WEBHOOK_PATH}", "caBundle": "Q0E="},
        "rules": [
            {
                "operations": ["CREATE", "UPDATE"],
                "apiGroups": ["kube-offload.io"],
                "apiVersions": ["v1alpha1"],
                "resources": ["shadowpods"],
                "scope": "Namespaced",
            }
        ],
        "failurePolicy": "Fail",
        "matchPolicy": "Equivalent",
        "sideEffects": "None",
        "timeoutSeconds": 10,
        "admissionReviewVersions": ["v1"],
    }
    # Consumers' EndpointSlices: only in twin namespaces, never the provider's controllers.
    assert endpointslices["name"] == c.ENDPOINTSLICE_WEBHOOK_NAME
    assert endpointslices["clientConfig"]["url"] == f"https://127.0.0.1:9443{c.ENDPOINTSLICE_WEBHOOK_PATH}"
    assert endpointslices["rules"][0]["resources"] == ["endpointslices"]
    assert endpointslices["rules"][0]["apiGroups"] == ["discovery.k8s.io"]
    assert endpointslices["namespaceSelector"] == {"matchLabels": {c.LABEL_MANAGED_BY: c.MANAGED_BY_ENFORCER}}
    assert endpointslices["failurePolicy"] == "Fail"
    condition = endpointslices["matchConditions"][0]["expression"]
    assert "system:serviceaccount:kube-system:endpointslice-controller" in condition
    # Consumers' custom resources: every custom kind and its status, twins only, ServiceAccounts only.
    assert custom["name"] == c.CUSTOM_RESOURCE_WEBHOOK_NAME
    assert custom["clientConfig"]["url"] == f"https://127.0.0.1:9443{c.CUSTOM_RESOURCE_WEBHOOK_PATH}"
    assert custom["rules"][0]["resources"] == ["*", "*/status"]
    assert custom["namespaceSelector"] == {"matchLabels": {c.LABEL_MANAGED_BY: c.MANAGED_BY_ENFORCER}}
    assert custom["failurePolicy"] == "Fail"
    # Consumers' TokenRequests: in tenant namespaces only, by their own ServiceAccounts only.
    assert tokens["name"] == c.TOKEN_WEBHOOK_NAME
    assert tokens["clientConfig"]["url"] == f"https://127.0.0.1:9443{c.TOKEN_WEBHOOK_PATH}"
    assert tokens["rules"] == [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                                "resources": ["serviceaccounts/token"], "scope": "Namespaced"}]
    assert tokens["namespaceSelector"] == {"matchExpressions": [{"key": c.LABEL_TENANT, "operator": "Exists"}]}
    assert tokens["matchConditions"][0]["expression"] == (
        "request.userInfo.username.startsWith('system:serviceaccount:' + request.namespace + ':')")
    assert tokens["failurePolicy"] == "Fail"
    # What consumers keep in their tenant namespaces: counted, by the same condition.
    assert tenant["name"] == c.TENANT_OBJECTS_WEBHOOK_NAME
    assert tenant["clientConfig"]["url"] == f"https://127.0.0.1:9443{c.TENANT_OBJECTS_WEBHOOK_PATH}"
    assert tenant["rules"] == [{"operations": ["CREATE"], "apiGroups": [c.SHADOWPOD_GROUP], "apiVersions": [c.SHADOWPOD_VERSION],
                                "resources": [c.TWIN_NAMESPACE_PLURAL, c.SLICE_PLURAL], "scope": "Namespaced"}]
    assert tenant["namespaceSelector"] == tokens["namespaceSelector"]
    assert tenant["matchConditions"] == tokens["matchConditions"] and tenant["failurePolicy"] == "Fail"


@pytest.mark.parametrize(
    "group, judged",
    [("example.com", True), ("db.example.org", True), ("", False), ("apps", False), ("discovery.k8s.io", False),
     ("k8s.io", False), ("policy.kubernetes.io", False), ("kube-offload.io", False), ("x.kube-offload.io", False)],
)
def test_the_custom_resource_condition_leaves_out_kubernetes_and_our_groups(group, judged):
    # The CEL of the match condition, read as the API server would for these groups.
    from enforcer.admission.registration import custom_resource_match_condition
    from kube_offload.provider_policy import never_granted_group

    expression = custom_resource_match_condition()["expression"]
    assert "request.resource.group.contains('.')" in expression
    assert (("." in group) and not never_granted_group(group)) is judged
    for never in ("k8s.io", "kubernetes.io", "kube-offload.io"):
        assert f"request.resource.group != '{never}' && !request.resource.group.endsWith('.{never}')" in expression


def test_the_configuration_by_service():
    target = WebhookTarget(ca_bundle="Q0E=", service=ServiceRef("kube-offload", "kube-offload-enforcer", 443))
    client_config = validating_configuration(target)["webhooks"][0]["clientConfig"]
    assert client_config["service"] == {
        "namespace": "kube-offload",
        "name": "kube-offload-enforcer",
        "path": c.SHADOWPOD_WEBHOOK_PATH,
        "port": 443,
    }


def test_configuration_command_prints_yaml(tmp_path, capsys):
    ca = tmp_path / "ca.crt"
    ca.write_bytes(CA_PEM)
    args = parse(["configuration", "--url", "https://127.0.0.1:9443", "--ca-file", str(ca)])
    assert args.func(args) == 0
    config = yaml.safe_load(capsys.readouterr().out)
    assert config["webhooks"][0]["clientConfig"]["caBundle"] == base64.b64encode(CA_PEM).decode()
    assert args.func is print_configuration


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--url", "https://x"], "--ca-file is required"),
        (["--ca-file", "{ca}"], "give either --url or --service-namespace and --service-name"),
        (["--ca-file", "{ca}", "--service-name", "x"], "needs both --service-namespace and --service-name"),
        (["--ca-file", "{ca}", "--url", "http://127.0.0.1:9443"], "must start with https://"),
        (["--ca-file", "{ca}", "--url", "https://x", "--timeout-seconds", "31"], "timeoutSeconds must be between 1 and 30"),
        (["--ca-file", "/nonexistent/ca.crt", "--url", "https://x"], "cannot be read"),
    ],
)
def test_configuration_command_usage_errors(tmp_path, capsys, argv, message):
    ca = tmp_path / "ca.crt"
    ca.write_bytes(CA_PEM)
    args = parse(["configuration", *[a.replace("{ca}", str(ca)) for a in argv]])
    assert args.func(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("kube-offload enforcer configuration: ") and message in err


def test_webhook_is_off_without_a_certificate():
    args = parse([])
    assert args.webhook_bind == "0.0.0.0:9443"
    assert _webhook_settings(args) is None


def test_webhook_flags_and_environment(monkeypatch):
    monkeypatch.setenv("KUBE_OFFLOAD_ENFORCER_WEBHOOK_BIND", "127.0.0.1:19443")
    settings = _webhook_settings(parse(["--webhook-tls-cert", "/c", "--webhook-tls-key", "/k"]))
    assert (settings.bind, settings.tls_cert, settings.tls_key) == ("127.0.0.1:19443", "/c", "/k")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--webhook-tls-cert", "/c"], "--webhook-tls-cert and --webhook-tls-key must be given together"),
        (["--webhook-tls-key", "/k"], "must be given together"),
        (["--webhook-tls-cert", "/c", "--webhook-tls-key", "/k", "--namespace", "a"], "drop --namespace"),
    ],
)
def test_webhook_flag_mistakes(argv, message):
    with pytest.raises(SystemExit, match=message):
        _webhook_settings(parse(argv))
