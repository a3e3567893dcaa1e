"""The webhook over real HTTPS: gunicorn (gthread) serving TLS with a throwaway CA, fed
AdmissionReview JSON as kube-apiserver sends it (admission.k8s.io/v1)."""

from __future__ import annotations

import base64
import copy
import json
import re
import time
from pathlib import Path

import jsonpatch
import pytest
import requests

from kube_offload import constants as c
from kube_offload.admission import build_review
from webhook.namespace_cache import StaticNamespaceSource
from webhook.registration import NAMESPACE_WEBHOOK_NAME
from webhook.settings import DEFAULT_MAX_BODY_BYTES
from support import builders

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def session(webhook_server) -> requests.Session:
    s = requests.Session()
    # Otherwise REQUESTS_CA_BUNDLE from the environment silently replaces session.verify.
    s.trust_env = False
    s.verify = str(webhook_server.ca_cert)
    yield s
    s.close()


def pod(namespace: str, **spec) -> dict:
    return builders.pod(None, namespace, containers=[builders.container()], spec={
        "schedulerName": "default-scheduler",
        "tolerations": [
            # What the DefaultTolerationSeconds admission plugin has already added.
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
        ],
        **spec,
    }, generateName="web-", labels={"app": "web"})


def post(session: requests.Session, server, path: str, body) -> requests.Response:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return session.post(server.base_url + path, data=data, headers={"Content-Type": "application/json"}, timeout=10)


def admitted(response: requests.Response, uid: str) -> dict:
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"].startswith("application/json")
    review = response.json()
    assert review["apiVersion"] == "admission.k8s.io/v1"
    assert review["kind"] == "AdmissionReview"
    assert review["response"]["uid"] == uid
    return review["response"]


def patched(obj: dict, answer: dict) -> dict:
    assert answer["allowed"] is True
    if "patch" not in answer:
        return obj
    assert answer["patchType"] == "JSONPatch"
    return jsonpatch.apply_patch(obj, json.loads(base64.b64decode(answer["patch"])), in_place=False)


# --- TLS --------------------------------------------------------------------------------------


def test_serves_tls_verified_by_the_test_ca(webhook_server) -> None:
    assert requests.get(webhook_server.base_url + "/healthz", verify=str(webhook_server.ca_cert), timeout=5).text == "ok\n"
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(webhook_server.base_url + "/healthz", timeout=5)  # system CAs do not know it
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get(webhook_server.base_url.replace("https", "http") + "/healthz", timeout=5)


# --- /mutate/pods --------------------------------------------------------------------------------


def test_remote_pod_gets_toleration_affinity_and_scheduler(session, webhook_server) -> None:
    original = pod("remote-eu")
    answer = admitted(post(session, webhook_server, "/mutate/pods", build_review(original, uid="uid-remote")), "uid-remote")
    result = patched(original, answer)
    assert result["spec"]["tolerations"] == original["spec"]["tolerations"] + [
        {"key": c.TAINT_KEY, "operator": "Equal", "value": c.TAINT_VALUE, "effect": c.TAINT_EFFECT}
    ]
    assert result["spec"]["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"] == [
        {
            "matchExpressions": [
                {"key": c.LABEL_TYPE, "operator": "In", "values": [c.TYPE_VIRTUAL_NODE]},
                {"key": "region", "operator": "In", "values": ["eu-south", "eu-west"]},
            ]
        }
    ]
    assert result["spec"]["schedulerName"] == webhook_server.scheduler_name

    # The apiserver re-invokes with the patched pod (reinvocationPolicy: IfNeeded).
    again = admitted(post(session, webhook_server, "/mutate/pods", build_review(result, uid="uid-again")), "uid-again")
    assert again == {"uid": "uid-again", "allowed": True}


def test_local_and_remote_pod_keeps_user_affinity(session, webhook_server) -> None:
    user_terms = [
        {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
    ]
    original = pod("anywhere", affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": copy.deepcopy(user_terms)}}})
    result = patched(original, admitted(post(session, webhook_server, "/mutate/pods", build_review(original, uid="u")), "u"))
    terms = result["spec"]["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"]
    assert len(terms) == 4
    for term in terms:
        assert term.get("matchExpressions")
    assert {"key": "provider", "operator": "NotIn", "values": ["aws"]} in terms[1]["matchExpressions"]
    assert terms[2]["matchFields"] == user_terms[1]["matchFields"]
    assert terms[3]["matchFields"] == user_terms[1]["matchFields"]


def test_local_pod_gets_no_toleration(session, webhook_server) -> None:
    original = pod("local-only")
    result = patched(original, admitted(post(session, webhook_server, "/mutate/pods", build_review(original, uid="l")), "l"))
    assert result["spec"]["tolerations"] == original["spec"]["tolerations"]
    assert result["spec"]["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": c.LABEL_TYPE, "operator": "NotIn", "values": [c.TYPE_VIRTUAL_NODE]}]}
    ]


@pytest.mark.parametrize("namespace", ["plain", "never-heard-of"])
def test_pod_outside_offloaded_namespaces_is_allowed_unchanged(session, webhook_server, namespace: str) -> None:
    answer = admitted(post(session, webhook_server, "/mutate/pods", build_review(pod(namespace), uid="p")), "p")
    assert answer == {"uid": "p", "allowed": True}


def test_daemonset_pod_is_left_alone(session, webhook_server) -> None:
    original = pod("remote-eu")
    original["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": "1", "controller": True, "blockOwnerDeletion": True}
    ]
    assert admitted(post(session, webhook_server, "/mutate/pods", build_review(original, uid="d")), "d") == {"uid": "d", "allowed": True}


def test_pod_in_a_namespace_with_a_broken_policy_is_admitted_unchanged_with_a_warning(session, webhook_server) -> None:
    answer = admitted(post(session, webhook_server, "/mutate/pods", build_review(pod("broken"), uid="b")), "b")
    assert answer["allowed"] is True
    assert "patch" not in answer
    assert 'kube-offload.io/pod-placement: "remote" is not valid' in answer["warnings"][0]


def test_unknown_kind_is_allowed_unchanged(session, webhook_server) -> None:
    review = build_review({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "remote-eu"}}, uid="cm")
    assert admitted(post(session, webhook_server, "/mutate/pods", review), "cm") == {"uid": "cm", "allowed": True}


# --- /validate/namespaces --------------------------------------------------------------------------


def namespace(labels: dict, annotations: dict | None = None) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x", "labels": labels, "annotations": annotations or {}}}


def test_bad_placement_label_is_denied_with_a_message_for_kubectl(session, webhook_server) -> None:
    old = namespace({"kubernetes.io/metadata.name": "x"})
    new = namespace({"kubernetes.io/metadata.name": "x", c.LABEL_POD_PLACEMENT: "bogus"})
    answer = admitted(
        post(session, webhook_server, "/validate/namespaces", build_review(new, operation="UPDATE", old_object=old, uid="n1")),
        "n1",
    )
    assert answer["allowed"] is False
    assert answer["status"]["code"] == 422
    # What `kubectl label ns x kube-offload.io/pod-placement=bogus` prints after the prefix.
    printed = f'admission webhook "{NAMESPACE_WEBHOOK_NAME}" denied the request: {answer["status"]["message"]}'
    assert printed == (
        'admission webhook "namespaces.webhook.kube-offload.io" denied the request: '
        'kube-offload.io/pod-placement: "bogus" is not valid; use one of Local, Remote, LocalAndRemote'
    )


def test_bad_selector_annotation_is_denied(session, webhook_server) -> None:
    new = namespace({}, {c.ANNOTATION_CLUSTER_SELECTOR: "region in eu-west"})
    answer = admitted(post(session, webhook_server, "/validate/namespaces", build_review(new, uid="n2")), "n2")
    assert answer["allowed"] is False
    assert "expected '(' after 'in'" in answer["status"]["message"]


def test_good_namespace_is_allowed(session, webhook_server) -> None:
    new = namespace({c.LABEL_ENABLED: "true", c.LABEL_POD_PLACEMENT: "LocalAndRemote"}, {c.ANNOTATION_CLUSTER_SELECTOR: "region=eu"})
    assert admitted(post(session, webhook_server, "/validate/namespaces", build_review(new, uid="n3")), "n3") == {
        "uid": "n3",
        "allowed": True,
    }


# --- client mistakes: 400 with a message, never a 5xx ------------------------------------------------


def _drop(review: dict, *path: str) -> dict:
    review = copy.deepcopy(review)
    target = review
    for key in path[:-1]:
        target = target[key]
    del target[path[-1]]
    return review


GOOD = build_review(pod("remote-eu"), uid="x")


@pytest.mark.parametrize(
    ("path", "body", "fragment"),
    [
        ("/mutate/pods", b"not json", "not valid JSON"),
        ("/mutate/pods", b"", "not valid JSON"),
        ("/mutate/pods", {**GOOD, "apiVersion": "admission.k8s.io/v1beta1"}, "apiVersion must be 'admission.k8s.io/v1'"),
        ("/mutate/pods", {**GOOD, "kind": "Pod"}, "kind must be 'AdmissionReview'"),
        ("/mutate/pods", _drop(GOOD, "request"), "request is missing"),
        ("/mutate/pods", _drop(GOOD, "request", "uid"), "request.uid is missing"),
        ("/mutate/pods", _drop(GOOD, "request", "object"), "request.object is missing"),
        ("/mutate/pods", build_review(namespace({})), "received a Namespace review"),
        ("/validate/namespaces", GOOD, "received a Pod review"),
        ("/validate/namespaces", [1, 2], "must be a JSON object"),
    ],
)
def test_bad_requests_are_400_with_a_message(session, webhook_server, path: str, body, fragment: str) -> None:
    response = post(session, webhook_server, path, body)
    assert response.status_code == 400
    status = response.json()
    assert status["kind"] == "Status" and status["code"] == 400 and status["reason"] == "BadRequest"
    assert fragment in status["message"]


def test_wrong_method_and_unknown_path_answer_json(session, webhook_server) -> None:
    response = session.get(webhook_server.base_url + "/mutate/pods", timeout=5)
    assert response.status_code == 405 and response.json()["code"] == 405
    response = session.post(webhook_server.base_url + "/nowhere", data=b"{}", timeout=5)
    assert response.status_code == 404 and response.json()["code"] == 404


def test_echo_is_not_served_unless_enabled(session, webhook_server) -> None:
    assert post(session, webhook_server, "/echo", b"{}").status_code == 404


def _env_padded_review(namespace: str, size: int, uid: str) -> bytes:
    """An AdmissionReview of a pod grown with env entries to about ``size`` bytes."""
    # json.dumps writes each entry in 53 bytes ({"name": "SETTING_000000", "value": ...}, ).
    env = [{"name": f"SETTING_{i:06d}", "value": f"value-{i:06d}"} for i in range(size // 53)]
    body = pod(namespace, containers=[{"name": "app", "image": "nginx", "env": env}])
    return json.dumps(build_review(body, uid=uid)).encode()


def _chunks(body: bytes, size: int = 16 * 1024):
    for start in range(0, len(body), size):
        yield body[start:start + size]


def test_oversized_body_is_413_from_content_length(webhook_server) -> None:
    import http.client
    import ssl

    # Announce a body one byte over the limit without sending it: the server must refuse
    # from the Content-Length alone instead of reading it.
    context = ssl.create_default_context(cafile=str(webhook_server.ca_cert))
    host, port = webhook_server.base_url.removeprefix("https://").split(":")
    connection = http.client.HTTPSConnection(host, int(port), context=context, timeout=5)
    try:
        connection.putrequest("POST", "/mutate/pods")
        connection.putheader("Content-Type", "application/json")
        connection.putheader("Content-Length", str(DEFAULT_MAX_BODY_BYTES + 1))
        connection.endheaders()
        response = connection.getresponse()
        assert response.status == 413
        status = json.loads(response.read())
        assert status["code"] == 413 and status["reason"] == "RequestEntityTooLarge"
        assert f"of {DEFAULT_MAX_BODY_BYTES + 1} bytes" in status["message"]
        assert f"limit of {DEFAULT_MAX_BODY_BYTES} bytes" in status["message"] and "--max-body-bytes" in status["message"]
    finally:
        connection.close()


def test_oversized_chunked_body_is_413_while_reading(session, webhook_server) -> None:
    body = _env_padded_review("remote-eu", DEFAULT_MAX_BODY_BYTES + 64 * 1024, uid="big")
    assert len(body) > DEFAULT_MAX_BODY_BYTES
    # A generator body goes out with Transfer-Encoding: chunked and no Content-Length.
    response = session.post(webhook_server.base_url + "/mutate/pods", data=_chunks(body),
                            headers={"Content-Type": "application/json"}, timeout=10)
    assert response.request.headers.get("Transfer-Encoding") == "chunked"
    assert response.status_code == 413
    status = response.json()
    assert status["code"] == 413 and "(chunked)" in status["message"]
    assert f"limit of {DEFAULT_MAX_BODY_BYTES} bytes" in status["message"]
    # The server is fine afterwards.
    assert session.get(webhook_server.base_url + "/healthz", timeout=5).status_code == 200


@pytest.mark.parametrize("chunked", [False, True])
def test_bodies_up_to_the_limit_are_admitted(session, webhook_server, chunked: bool) -> None:
    body = _env_padded_review("remote-eu", DEFAULT_MAX_BODY_BYTES - 8 * 1024, uid="near-limit")
    assert DEFAULT_MAX_BODY_BYTES - 16 * 1024 < len(body) <= DEFAULT_MAX_BODY_BYTES
    response = session.post(webhook_server.base_url + "/mutate/pods", data=_chunks(body) if chunked else body,
                            headers={"Content-Type": "application/json"}, timeout=10)
    assert admitted(response, "near-limit")["patchType"] == "JSONPatch"


def test_a_one_mib_pod_is_admitted_and_patched(session, webhook_server) -> None:
    """A valid Pod of ~1 MiB (the apiserver accepts up to 3 MiB bodies and 1.5 MiB in
    etcd) gets its patch; with the old 256 KiB limit it was a 413, and with failurePolicy
    Fail such a pod could never be created in an offloaded namespace."""
    env = [{"name": f"SETTING_{i:06d}", "value": f"value-{i:06d}"} for i in range(MIB // 53)]
    original = pod("remote-eu", containers=[{"name": "app", "image": "nginx", "env": env}])
    body = json.dumps(build_review(original, uid="one-mib")).encode()
    assert MIB <= len(body) < 2 * MIB
    result = patched(original, admitted(post(session, webhook_server, "/mutate/pods", body), "one-mib"))
    assert result["spec"]["tolerations"][-1]["key"] == c.TAINT_KEY
    assert result["spec"]["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"][0]["matchExpressions"][0] == {
        "key": c.LABEL_TYPE, "operator": "In", "values": [c.TYPE_VIRTUAL_NODE]}
    assert result["spec"]["schedulerName"] == webhook_server.scheduler_name
    assert result["spec"]["containers"][0]["env"] == env  # the user's pod is otherwise untouched


def test_server_survives_garbage_on_the_socket(webhook_server, session) -> None:
    import socket
    import ssl

    context = ssl.create_default_context(cafile=str(webhook_server.ca_cert))
    host, port = webhook_server.base_url.removeprefix("https://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname=host) as tls:
            tls.sendall(b"\x00\x01garbage that is not HTTP\r\n\r\n")
            tls.recv(1024)
    assert session.get(webhook_server.base_url + "/healthz", timeout=5).status_code == 200


# --- health, readiness, metrics ------------------------------------------------------------------------


def test_metrics_count_requests_by_endpoint_and_outcome(session, webhook_server) -> None:
    def counter(endpoint: str, outcome: str) -> float:
        text = session.get(webhook_server.base_url + "/metrics", timeout=5).text
        match = re.search(
            rf'^kube_offload_webhook_requests_total{{endpoint="{endpoint}",outcome="{outcome}"}} (\S+)$', text, re.M
        )
        return float(match.group(1)) if match else 0.0

    before_patched = counter("mutate_pods", "patched")
    before_bad = counter("validate_namespaces", "bad_request")
    post(session, webhook_server, "/mutate/pods", build_review(pod("remote-eu"), uid="m1"))
    post(session, webhook_server, "/mutate/pods", build_review(pod("remote-eu"), uid="m2"))
    post(session, webhook_server, "/validate/namespaces", b"{")
    assert counter("mutate_pods", "patched") == before_patched + 2
    assert counter("validate_namespaces", "bad_request") == before_bad + 1
    text = session.get(webhook_server.base_url + "/metrics", timeout=5).text
    assert 'kube_offload_webhook_request_duration_seconds_bucket{endpoint="mutate_pods",le="0.005"}' in text
    assert "kube_offload_webhook_namespace_cache_synced 1.0" in text


class GatedSource(StaticNamespaceSource):
    """Ready only once a file exists: stands in for a cache that has not synced yet."""

    def __init__(self, namespaces: list[dict], gate: Path) -> None:
        super().__init__(namespaces)
        self._gate = gate

    def ready(self) -> bool:
        return self._gate.exists()


def test_readyz_is_503_until_the_namespace_cache_syncs(start_webhook, tmp_path: Path) -> None:
    gate = tmp_path / "synced"
    server = start_webhook(lambda: GatedSource([], gate), enable_echo=True)
    verify = str(server.ca_cert)
    response = requests.get(server.base_url + "/readyz", verify=verify, timeout=5)
    assert response.status_code == 503 and "not synced" in response.text
    assert "kube_offload_webhook_namespace_cache_synced 0.0" in requests.get(server.base_url + "/metrics", verify=verify, timeout=5).text
    gate.touch()
    # Every worker must see its cache synced; the pod is ready within a poll period of the
    # last one (kube_offload.runtime.workers.SYNC_POLL_SECONDS), once all workers have booted.
    deadline = time.monotonic() + 10
    while requests.get(server.base_url + "/readyz", verify=verify, timeout=5).status_code != 200:
        assert time.monotonic() < deadline, "/readyz still 503 10 s after the caches synced"
        time.sleep(0.05)
    assert "kube_offload_webhook_namespace_cache_synced 1.0" in requests.get(server.base_url + "/metrics", verify=verify, timeout=5).text
    # This server also has the bench-only echo route.
    body = json.dumps(build_review(pod("x"))).encode()
    echoed = requests.post(server.base_url + "/echo", data=body, verify=verify, timeout=5)
    assert echoed.status_code == 200 and echoed.content == body
