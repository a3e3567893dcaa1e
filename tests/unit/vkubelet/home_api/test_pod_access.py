"""Which API server an offloaded pod reaches (the annotation on the pod, else its
namespace, else home), and how its spec is pointed at the home API server's relay."""

import copy

import pytest

from kube_offload import constants as c
from tests.support.builders import pod
from vkubelet.home_api import HomeAPIEndpoint
from vkubelet.home_api.pod_access import (
    APIServerMode,
    home_api_env,
    home_api_hostnames,
    point_at_home_api,
    resolve_mode,
)

RELAY = HomeAPIEndpoint(ip="10.96.12.34", port=443)


def _annotated(value: str | None) -> dict:
    return pod(annotations={c.ANNOTATION_API_SERVER: value} if value is not None else {})


def _namespace(value: str | None, name: str = "ns") -> dict:
    annotations = {c.ANNOTATION_API_SERVER: value} if value is not None else {}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "annotations": annotations}}


@pytest.mark.parametrize(
    "pod_value, namespace_value, expected",
    [
        (None, None, APIServerMode("home", "default")),
        (None, "disabled", APIServerMode("disabled", "namespace")),
        ("remote", "disabled", APIServerMode("remote", "pod")),
        ("home", "disabled", APIServerMode("home", "pod")),
        (" disabled ", None, APIServerMode("disabled", "pod")),
    ],
)
def test_the_pod_wins_over_its_namespace_which_wins_over_home(pod_value, namespace_value, expected):
    assert resolve_mode(_annotated(pod_value), _namespace(namespace_value)) == expected


def test_no_namespace_in_the_cache_means_home():
    assert resolve_mode(_annotated(None), None) == APIServerMode("home")


@pytest.mark.parametrize(
    "pod_value, namespace_value, where",
    [("disable", None, "the pod"), ("", None, "the pod"), (None, "Remote", "namespace ns")],
)
def test_an_unknown_value_runs_the_pod_with_no_api_access_and_says_why(pod_value, namespace_value, where):
    mode = resolve_mode(_annotated(pod_value), _namespace(namespace_value))
    assert mode.mode == "disabled"
    assert mode.problem is not None
    assert c.ANNOTATION_API_SERVER in mode.problem
    assert where in mode.problem
    for allowed in c.API_SERVER_MODES:
        assert allowed in mode.problem


def test_an_unknown_value_on_the_pod_is_not_overridden_by_a_valid_namespace():
    # The pod's own (mistyped) choice is the one that counts: never its namespace's "home".
    mode = resolve_mode(_annotated("homme"), _namespace("home"))
    assert (mode.mode, mode.source) == ("disabled", "pod")


def test_the_env_names_the_api_server_by_a_name_in_its_certificate_and_the_relay_port():
    env = {e["name"]: e["value"] for e in home_api_env(HomeAPIEndpoint(ip="10.96.0.9", port=8443))}
    assert env == {
        "KUBERNETES_SERVICE_HOST": "kubernetes.default.svc",
        "KUBERNETES_SERVICE_PORT": "8443",
        "KUBERNETES_SERVICE_PORT_HTTPS": "8443",
        "KUBERNETES_PORT": "tcp://kubernetes.default.svc:8443",
        "KUBERNETES_PORT_8443_TCP": "tcp://kubernetes.default.svc:8443",
        "KUBERNETES_PORT_8443_TCP_PROTO": "tcp",
        "KUBERNETES_PORT_8443_TCP_PORT": "8443",
        "KUBERNETES_PORT_8443_TCP_ADDR": "kubernetes.default.svc",
    }
    assert "10.96.0.9" not in str(env)  # the relay's address is not in the home certificate


def test_hostnames_are_the_short_names_and_the_long_one_of_the_home_domain():
    assert home_api_hostnames("corp.example") == [
        "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.corp.example",
    ]


def _spec() -> dict:
    return {
        "initContainers": [{"name": "init", "image": "busybox"}],
        "containers": [
            {"name": "app", "image": "nginx", "env": [{"name": "MODE", "value": "$(KUBERNETES_SERVICE_HOST)"}]},
            {"name": "side", "image": "envoy"},
        ],
    }


def test_every_container_and_init_container_gets_the_env_first():
    spec = _spec()
    point_at_home_api(spec, RELAY)
    wanted = home_api_env(RELAY)
    assert spec["initContainers"][0]["env"] == wanted
    assert spec["containers"][1]["env"] == wanted
    # First, so the user's $(KUBERNETES_SERVICE_HOST) expands to ours, and the user's own stay.
    assert spec["containers"][0]["env"] == [*wanted, {"name": "MODE", "value": "$(KUBERNETES_SERVICE_HOST)"}]


def test_the_relay_address_is_a_host_alias_of_every_name():
    spec = _spec()
    point_at_home_api(spec, RELAY, "cluster.local")
    assert spec["hostAliases"] == [{"ip": "10.96.12.34", "hostnames": home_api_hostnames("cluster.local")}]


def test_a_container_that_sets_the_service_host_itself_is_left_as_written():
    spec = _spec()
    own = [{"name": "KUBERNETES_SERVICE_HOST", "value": "api.example"}, {"name": "KUBERNETES_SERVICE_PORT", "value": "6443"}]
    spec["containers"][0]["env"] = copy.deepcopy(own)
    point_at_home_api(spec, RELAY)
    assert spec["containers"][0]["env"] == own
    assert spec["containers"][1]["env"] == home_api_env(RELAY)  # the others still get ours


def test_a_variable_the_container_sets_keeps_the_users_value():
    spec = _spec()
    spec["containers"][0]["env"] = [{"name": "KUBERNETES_SERVICE_PORT", "value": "6443"}]
    point_at_home_api(spec, RELAY)
    env = spec["containers"][0]["env"]
    assert [e for e in env if e["name"] == "KUBERNETES_SERVICE_PORT"] == [{"name": "KUBERNETES_SERVICE_PORT", "value": "6443"}]
    assert {"name": "KUBERNETES_SERVICE_HOST", "value": "kubernetes.default.svc"} in env


def test_a_name_the_user_aliases_keeps_the_users_address():
    spec = _spec()
    spec["hostAliases"] = [{"ip": "192.0.2.1", "hostnames": ["kubernetes", "db"]}]
    point_at_home_api(spec, RELAY)
    assert spec["hostAliases"] == [
        {"ip": "192.0.2.1", "hostnames": ["kubernetes", "db"]},
        {"ip": "10.96.12.34", "hostnames": ["kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"]},
    ]
