"""The kubelet API's gate over real HTTPS sockets: 401 without credentials, 403 with the
kubelet's message for a user RBAC does not allow, 500 when the review cannot be made,
anonymous only when allowed, all before routing; the reviews answer in the API's JSON
(``kubelet_auth`` fixture, tests/unit/conftest.py), the real apiserver in
tests/e2e/test_kubelet_api_auth.py. Settings and flags of the feature at the end."""

import base64
import http.client
import json
import os
import ssl
import threading

import pytest
from kubernetes import client

from kube_offload.runtime.kube import ApiError
from vkubelet.kubeletapi.paths import RequestError
from vkubelet.kubeletapi.resolver import RemotePod
from vkubelet.kubeletapi.server import KubeletApi, KubeletHTTPServer
from vkubelet.kubeletapi.tls import ServerContext, serving_files
from vkubelet.settings import Settings, SettingsError


class Resolver:
    def resolve(self, namespace, pod, pod_uid=""):
        if f"{namespace}/{pod}" != "demo/web":
            raise RequestError(404, f"pod {namespace}/{pod} is not bound to virtual node kube-offload-r1")
        return RemotePod("demo-local", pod)


@pytest.fixture
def make_server(kubelet_auth):
    started = []

    def make(reviews, **options):
        files = serving_files("", "", node_address="127.0.0.1", node_name=kubelet_auth.NODE)
        configuration = client.Configuration()
        configuration.host = "https://127.0.0.1:1"  # nothing there: remote calls fail fast
        app = KubeletApi(
            resolver=Resolver(),
            remote=client.ApiClient(configuration),
            cluster_id="r1",
            access=kubelet_auth.access_control(reviews, **options),
        )
        srv = KubeletHTTPServer(("127.0.0.1", 0), app, ServerContext(files))
        threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
        started.append(srv)
        return srv

    yield make
    for srv in started:
        srv.shutdown()
        srv.server_close()


def call(srv, method, path, token=None, headers=None):
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    conn = http.client.HTTPSConnection("127.0.0.1", srv.server_address[1], context=context, timeout=10)
    headers = dict(headers or {})
    if token:
        headers["Authorization"] = f"Bearer {token}"
    conn.request(method, path, headers=headers)
    response = conn.getresponse()
    body = response.read().decode()
    conn.close()
    return response.status, body.strip()


PATHS = ["/healthz", "/containerLogs/demo/web/app", "/exec/demo/web/app?command=ls", "/stats/summary", "/no/such/endpoint"]


@pytest.mark.parametrize("path", PATHS)
def test_no_credentials_is_401_whatever_the_path(make_server, kubelet_auth, path):
    reviews = kubelet_auth.Reviews()
    srv = make_server(reviews)
    assert call(srv, "GET", path) == (401, "Unauthorized")
    assert call(srv, "GET", path, token="not-a-token") == (401, "Unauthorized")
    assert reviews.sar_calls == []  # refused before any authorization question


def test_a_user_without_nodes_proxy_gets_the_kubelets_403(make_server, kubelet_auth):
    reviews = kubelet_auth.Reviews()
    srv = make_server(reviews)
    reader = kubelet_auth.READER
    assert call(srv, "GET", "/containerLogs/demo/web/app", kubelet_auth.READER_TOKEN) == (
        403, f"Forbidden (user={reader}, verb=get, resource=nodes, subresource=proxy)"
    )
    assert call(srv, "POST", "/exec/demo/web/app?command=ls&output=1", kubelet_auth.READER_TOKEN) == (
        403, f"Forbidden (user={reader}, verb=create, resource=nodes, subresource=proxy)"
    )
    # A path that does not exist is not revealed to a caller who may not ask.
    assert call(srv, "GET", "/no/such/endpoint", kubelet_auth.READER_TOKEN)[0] == 403
    # What the reader holds (get nodes/log) is what the kubelet maps /logs/ to: it passes
    # the gate and meets the router (no node log files on a virtual node).
    assert call(srv, "GET", "/logs/", kubelet_auth.READER_TOKEN)[0] == 404
    spec = reviews.sar_calls[0]
    assert spec["user"] == reader
    assert spec["uid"] == "u-reader"
    assert spec["resourceAttributes"] == {
        "verb": "get", "group": "", "version": "v1", "resource": "nodes", "subresource": "proxy", "name": kubelet_auth.NODE,
    }


def test_a_user_with_nodes_proxy_gets_through_to_the_endpoint(make_server, kubelet_auth):
    srv = make_server(kubelet_auth.Reviews())
    assert call(srv, "GET", "/healthz", kubelet_auth.ADMIN_TOKEN) == (200, "ok")
    # Past the gate: the router and the resolver answer.
    assert call(srv, "GET", "/containerLogs/demo/other/app", kubelet_auth.ADMIN_TOKEN)[0] == 404
    assert call(srv, "GET", "/stats/summary", kubelet_auth.ADMIN_TOKEN)[0] == 404


def test_healthz_is_allowed_by_nodes_healthz_alone(make_server, kubelet_auth):
    reviews = kubelet_auth.Reviews({kubelet_auth.READER: {("get", "healthz")}})
    srv = make_server(reviews)
    assert call(srv, "GET", "/healthz", kubelet_auth.READER_TOKEN) == (200, "ok")
    assert call(srv, "GET", "/exec/demo/web/app", kubelet_auth.READER_TOKEN)[0] == 403


def test_websocket_exec_is_authorized_as_get_like_on_a_kubelet(make_server, kubelet_auth):
    reviews = kubelet_auth.Reviews({kubelet_auth.READER: {("get", "proxy")}})
    srv = make_server(reviews)
    token = base64.urlsafe_b64encode(kubelet_auth.READER_TOKEN.encode()).decode().rstrip("=")
    headers = {
        "Connection": "Upgrade",
        "Upgrade": "websocket",
        "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": base64.b64encode(os.urandom(16)).decode(),
        # The token as a subprotocol (browsers cannot set Authorization), next to the
        # channel protocol; an unsupported channel protocol makes the answer a 400 that
        # proves the request passed the gate without opening a relay.
        "Sec-WebSocket-Protocol": f"channel.k8s.io, base64url.bearer.authorization.k8s.io.{token}",
    }
    status, body = call(srv, "GET", "/exec/demo/web/app?command=ls&output=1", headers=headers)
    assert status == 400
    assert "none of the offered stream protocols (channel.k8s.io)" in json.loads(body)["message"]  # token not echoed
    assert reviews.sar_calls[-1]["resourceAttributes"]["verb"] == "get"


def test_anonymous_when_allowed_is_still_authorized(make_server, kubelet_auth):
    reviews = kubelet_auth.Reviews(anonymous_grants={("get", "healthz")})
    srv = make_server(reviews, anonymous=True)
    assert call(srv, "GET", "/healthz") == (200, "ok")
    assert call(srv, "GET", "/containerLogs/demo/web/app") == (
        403, "Forbidden (user=system:anonymous, verb=get, resource=nodes, subresource=proxy)"
    )
    assert reviews.sar_users[0] == ("system:anonymous", ("system:unauthenticated",))


def test_a_review_that_cannot_be_made_is_500_never_an_allow(make_server, kubelet_auth):
    reviews = kubelet_auth.Reviews()
    reviews.fail_sar = ApiError(403, "Forbidden", "cannot create resource subjectaccessreviews")
    srv = make_server(reviews)
    assert call(srv, "GET", "/containerLogs/demo/web/app", kubelet_auth.ADMIN_TOKEN) == (
        500, f"Authorization error (user={kubelet_auth.ADMIN}, verb=get, resource=nodes, subresource=proxy)"
    )
    reviews.fail_sar = None
    reviews.fail_token = ApiError(0, "Unreachable", "connection refused")
    assert call(srv, "GET", "/healthz", kubelet_auth.ADMIN_TOKEN) == (401, "Unauthorized")


def test_other_methods_are_authorized_first_then_refused(make_server, kubelet_auth):
    reviews = kubelet_auth.Reviews()
    srv = make_server(reviews)
    assert call(srv, "PUT", "/healthz") == (401, "Unauthorized")
    assert call(srv, "DELETE", "/healthz", kubelet_auth.READER_TOKEN)[0] == 403
    assert call(srv, "PUT", "/healthz", kubelet_auth.ADMIN_TOKEN)[0] == 405
    # HEAD maps to no verb (auth.go): only a "*" rule allows it; the answer has no body.
    assert call(srv, "HEAD", "/healthz", kubelet_auth.ADMIN_TOKEN) == (405, "")
    assert reviews.sar_calls[-1]["resourceAttributes"]["verb"] == ""


def test_answers_are_cached(make_server, kubelet_auth):
    from vkubelet.kubeletapi.decision_cache import CacheTTL

    reviews = kubelet_auth.Reviews()
    srv = make_server(reviews, ttl=CacheTTL(allowed=60, denied=60))
    for _ in range(3):
        assert call(srv, "GET", "/healthz", kubelet_auth.ADMIN_TOKEN)[0] == 200
    assert reviews.token_calls == 1
    assert len(reviews.sar_calls) == 1


# --- settings ------------------------------------------------------------------------------------------
def test_auth_defaults_are_the_kubelets_and_anonymous_is_off():
    settings = Settings(cluster_id="r", local_cluster_id="l")
    assert settings.kubelet_anonymous_auth is False
    assert (settings.kubelet_authn_cache_ttl, settings.kubelet_authz_cache_authorized_ttl,
            settings.kubelet_authz_cache_unauthorized_ttl) == (120.0, 300.0, 30.0)


def test_negative_cache_ttls_are_refused_naming_the_flag():
    with pytest.raises(SettingsError, match="--kubelet-authorization-cache-unauthorized-ttl"):
        Settings(cluster_id="r", local_cluster_id="l", kubelet_authz_cache_unauthorized_ttl=-1).validate()


def test_flags():
    import argparse

    from vkubelet import cli

    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    args = parser.parse_args(
        ["vkubelet", "--cluster-id", "r", "--local-cluster-id", "l", "--remote-kubeconfig", "/k",
         "--kubelet-anonymous-auth", "true", "--kubelet-authentication-cache-ttl", "0",
         "--kubelet-authorization-cache-authorized-ttl", "1m", "--kubelet-authorization-cache-unauthorized-ttl", "5s"]
    )
    settings = cli.settings_from_args(args)
    assert settings.kubelet_anonymous_auth is True
    assert (settings.kubelet_authn_cache_ttl, settings.kubelet_authz_cache_authorized_ttl,
            settings.kubelet_authz_cache_unauthorized_ttl) == (0.0, 60.0, 5.0)
    defaults = cli.settings_from_args(
        parser.parse_args(["vkubelet", "--cluster-id", "r", "--local-cluster-id", "l", "--remote-kubeconfig", "/k"])
    )
    assert defaults.kubelet_anonymous_auth is False and defaults.kubelet_authn_cache_ttl == 120.0


# --- the chart keeps the identity's RBAC in step with the reviews made here -----------------------
def test_the_charts_vkubelet_role_may_create_both_reviews():
    from pathlib import Path

    import yaml

    template = Path(__file__).resolve().parents[4] / "charts" / "kube-offload-local" / "templates" / "vkubelet.yaml"
    documents = template.read_text().split("\n---\n")
    [role] = [d for d in documents if "\nkind: ClusterRole\n" in f"\n{d}"]
    # The rules block is plain YAML apart from whole-line conditionals (the serving
    # certificate's optional rules, which tests/unit/test_charts.py renders): dropped here.
    block = "\n".join(line for line in role[role.index("rules:"):].splitlines() if not line.strip().startswith("{{"))
    rules = yaml.safe_load(block)["rules"]
    granted = {(group, resource, verb) for r in rules for group in r["apiGroups"] for resource in r["resources"] for verb in r["verbs"]}
    assert ("authentication.k8s.io", "tokenreviews", "create") in granted
    assert ("authorization.k8s.io", "subjectaccessreviews", "create") in granted
