"""The enforcer's ShadowPod webhook over real HTTPS (the in-process threaded TLS server,
a throwaway CA), fed AdmissionReview JSON exactly as kube-apiserver sends it for a
custom resource.

The caches are in-memory stand-ins and the dry run a stub that answers like the API
server would: this tier checks the HTTP contract (status codes, uid echo, Status bodies,
readiness, bad input). The real informers and the real dry run against a real API
server are in tests/e2e/test_shadowpod_validation.py.
"""

from __future__ import annotations

import copy
import json
import socket
import ssl
import threading

import pytest
import requests

from enforcer.admission.ledger import Ledger
from enforcer.admission.shadowpod_webhook import ShadowPodValidator
from enforcer.admission.verdict_cache import VerdictCache
from enforcer.admission.webhook_server import MAX_BODY_BYTES, WebhookHTTPServer, WebhookSettings
from kube_offload import constants as c
from kube_offload.admission import Decision
from kube_offload.runtime.https_server import TLSSetupError

NS = "demo-local"
USER = "system:serviceaccount:kube-offload-tenant-local:consumer"
PATH = c.SHADOWPOD_WEBHOOK_PATH

# What kube-apiserver (1.3x) POSTs for `kubectl create -f shadowpod.yaml` by the consumer:
# every field it sets, including userInfo.uid/extra and the CreateOptions.
APISERVER_REVIEW = """
{
  "kind": "AdmissionReview",
  "apiVersion": "admission.k8s.io/v1",
  "request": {
    "uid": "3b1f1e4c-0d8c-4a5e-9a0e-6f0f2f6b9c11",
    "kind": {"group": "kube-offload.io", "version": "v1alpha1", "kind": "ShadowPod"},
    "resource": {"group": "kube-offload.io", "version": "v1alpha1", "resource": "shadowpods"},
    "requestKind": {"group": "kube-offload.io", "version": "v1alpha1", "kind": "ShadowPod"},
    "requestResource": {"group": "kube-offload.io", "version": "v1alpha1", "resource": "shadowpods"},
    "name": "web",
    "namespace": "demo-local",
    "operation": "CREATE",
    "userInfo": {
      "username": "system:serviceaccount:kube-offload-tenant-local:consumer",
      "uid": "8f0c0b5e-1111-4c1d-9a6b-0c9f0a7e5d21",
      "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-offload-tenant-local", "system:authenticated"],
      "extra": {
        "authentication.kubernetes.io/credential-id": ["JTI=5c4b3a29-8d7e-4f61-b2a0-9e8d7c6b5a40"]
      }
    },
    "object": {
      "apiVersion": "kube-offload.io/v1alpha1",
      "kind": "ShadowPod",
      "metadata": {
        "name": "web",
        "namespace": "demo-local",
        "uid": "0e6a1f2b-2222-4e3d-8c7b-6a5f4e3d2c1b",
        "generation": 1,
        "creationTimestamp": "2026-11-23T14:00:00Z",
        "labels": {"kube-offload.io/origin-cluster-id": "local"},
        "annotations": {"kube-offload.io/origin-namespace": "demo", "kube-offload.io/origin-name": "web"},
        "managedFields": [{"manager": "kubectl-create", "operation": "Update", "apiVersion": "kube-offload.io/v1alpha1",
                           "time": "2026-11-23T14:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]
      },
      "spec": {
        "pod": {
          "metadata": {"labels": {"app": "web", "kube-offload.io/origin-cluster-id": "local"}},
          "spec": {
            "containers": [{"name": "app", "image": "nginx", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}}]
          }
        }
      }
    },
    "oldObject": null,
    "dryRun": false,
    "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1", "fieldManager": "kubectl-create"}
  }
}
"""


class Cache:
    def __init__(self, objects=None):
        self.objects = dict(objects or {})
        self.synced = threading.Event()
        self.synced.set()

    def get(self, key):
        return self.objects.get(key)

    def list(self):
        return list(self.objects.values())

    def has_synced(self):
        return self.synced.is_set()


class Caches:
    namespaces = Cache(
        {NS: {"metadata": {"name": NS, "labels": {c.LABEL_MANAGED_BY: c.MANAGED_BY_ENFORCER, c.LABEL_ORIGIN_CLUSTER_ID: "local"}}}}
    )
    consumers = Cache({"local": {"metadata": {"name": "local"}, "spec": {"quota": {"pods": "5"}}}})

    def namespace(self, name):
        return self.namespaces.get(name)

    def consumer(self, name):
        return self.consumers.get(name)

    def service_account(self, namespace, name):
        return None

    def has_synced(self):
        return True


def dry_run(namespace, shadowpod, operation, probe):
    """Answers as the API server's Pod Security admission would for a baseline namespace."""
    for container in shadowpod["spec"]["pod"]["spec"].get("containers", []):
        if any("hostPort" in port for port in container.get("ports", [])):
            return Decision.deny(403, "Forbidden", 'the provider would refuse this Pod: violates PodSecurity "baseline:latest": hostPort')
    return Decision.allow()


@pytest.fixture(scope="module")
def served(tls_files):
    shadowpods = Cache()
    validator = ShadowPodValidator(shadowpods=shadowpods, caches=Caches(), dry_run=dry_run, ledger=Ledger(shadowpods.get),
                                   verdicts=VerdictCache())
    server = WebhookHTTPServer(
        WebhookSettings(bind="127.0.0.1:0", tls_cert=str(tls_files.cert), tls_key=str(tls_files.key)), validator
    )
    server.start()
    yield server, shadowpods
    server.stop()


@pytest.fixture(scope="module")
def base_url(served):
    return f"https://127.0.0.1:{served[0].port}"


@pytest.fixture
def session(tls_files):
    s = requests.Session()
    s.trust_env = False  # REQUESTS_CA_BUNDLE would silently replace verify
    s.verify = str(tls_files.ca_cert)
    yield s
    s.close()


def review(**changes) -> dict:
    body = json.loads(APISERVER_REVIEW)
    for path, value in changes.items():
        target = body["request"]
        keys = path.split("__")
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value
    return body


def post(session, base_url, body, path=PATH):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return session.post(base_url + path, data=data, headers={"Content-Type": "application/json"}, timeout=10)


def answer(response, uid="3b1f1e4c-0d8c-4a5e-9a0e-6f0f2f6b9c11") -> dict:
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"] == "application/json"
    body = response.json()
    assert (body["apiVersion"], body["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
    assert body["response"]["uid"] == uid
    return body["response"]


# --- TLS, health, readiness --------------------------------------------------------------------
def test_tls_verified_by_the_test_ca_only(base_url, session):
    assert session.get(base_url + "/healthz", timeout=5).text == "ok\n"
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(base_url + "/healthz", timeout=5, verify=True)


def test_plain_http_gets_no_answer(served):
    with socket.create_connection(("127.0.0.1", served[0].port), timeout=5) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            data = sock.recv(100)
        except ConnectionResetError:  # the failed handshake closes the connection
            data = b""
    assert not data.startswith(b"HTTP/1.1")


def test_readyz_follows_the_caches(served, base_url, session):
    _, shadowpods = served
    shadowpods.synced.clear()
    try:
        response = session.get(base_url + "/readyz", timeout=5)
        assert response.status_code == 503 and "not synced" in response.text
        denied = answer(post(session, base_url, review()))
        assert denied["allowed"] is False and denied["status"]["code"] == 503
        assert "could not verify" in denied["status"]["message"]
    finally:
        shadowpods.synced.set()
    assert session.get(base_url + "/readyz", timeout=5).status_code == 200


def test_metrics(base_url, session):
    post(session, base_url, review())
    text = session.get(base_url + "/metrics", timeout=5).text
    assert 'kube_offload_shadowpod_webhook_requests_total{endpoint="validate_shadowpods",outcome="allowed"}' in text
    assert "kube_offload_shadowpod_webhook_caches_synced 1.0" in text
    # The verdict cache's counters, every result present from the start (this fake dry run
    # does not use it).
    for result in ("hit", "miss", "bypass"):
        assert f'kube_offload_shadowpod_webhook_verdict_cache_total{{result="{result}"}} 0.0' in text
    assert "kube_offload_shadowpod_webhook_verdict_cache_entries 0.0" in text


# --- decisions --------------------------------------------------------------------------------------
def test_the_apiservers_review_is_admitted(base_url, session):
    response = answer(post(session, base_url, review()))
    assert response == {"uid": "3b1f1e4c-0d8c-4a5e-9a0e-6f0f2f6b9c11", "allowed": True}


def test_a_refusal_names_the_field(base_url, session):
    body = review()
    body["request"]["object"]["spec"]["pod"]["spec"]["hostNetwork"] = True
    response = answer(post(session, base_url, body))
    assert response["allowed"] is False
    assert response["status"] == {
        "status": "Failure",
        "code": 422,
        "reason": "Invalid",
        "message": 'spec.pod.spec.hostNetwork: host namespaces are not allowed for consumer "local" '
        "(Pod Security level baseline); remove hostNetwork",
    }


def test_another_user_is_forbidden(base_url, session):
    body = review(userInfo={"username": "system:serviceaccount:kube-offload-tenant-other:consumer", "groups": []})
    status = answer(post(session, base_url, body))["status"]
    assert (status["code"], status["reason"]) == (403, "Forbidden")
    assert 'belongs to consumer "local"' in status["message"]


def test_the_dry_runs_refusal_is_passed_on(base_url, session):
    body = review()
    body["request"]["object"]["spec"]["pod"]["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
    status = answer(post(session, base_url, body))["status"]
    assert (status["code"], status["message"]) == (403, 'the provider would refuse this Pod: violates PodSecurity "baseline:latest": hostPort')


def test_an_update_of_metadata_only_is_admitted(base_url, session):
    obj = json.loads(APISERVER_REVIEW)["request"]["object"]
    new = copy.deepcopy(obj)
    new["metadata"]["finalizers"] = ["foregroundDeletion"]
    body = review(operation="UPDATE", object=new, oldObject=obj,
                  userInfo={"username": "system:serviceaccount:kube-system:generic-garbage-collector"})
    body["request"]["options"] = {"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"}
    assert answer(post(session, base_url, body))["allowed"] is True


def test_keep_alive_serves_several_reviews_on_one_connection(base_url, session):
    for _ in range(3):
        assert answer(post(session, base_url, review()))["allowed"] is True


# --- client mistakes: 4xx with a Status naming the problem, never a 500 ------------------------
@pytest.mark.parametrize(
    "body, fragment",
    [
        (b"{not json", "request body is not valid JSON"),
        (b"[]", "request body must be a JSON object"),
        (json.dumps({**json.loads(APISERVER_REVIEW), "apiVersion": "admission.k8s.io/v1beta1"}).encode(), "apiVersion must be 'admission.k8s.io/v1'"),
        (json.dumps({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1"}).encode(), "review.request is missing"),
        (json.dumps(review(uid="")).encode(), "request.uid is empty"),
        (json.dumps(review(operation="PATCH")).encode(), "request.operation must be one of"),
        (json.dumps(review(object=None)).encode(), "request.object is missing"),
        (json.dumps(review(userInfo={"username": 5})).encode(), "request.userInfo.username must be a string"),
        (b"[" * 5000 + b"]" * 5000, "nested too deeply"),
    ],
)
def test_malformed_reviews_are_400(base_url, session, body, fragment):
    response = post(session, base_url, body)
    assert response.status_code == 400, response.text
    status = response.json()
    assert (status["kind"], status["code"], status["reason"]) == ("Status", 400, "BadRequest")
    assert fragment in status["message"]


def test_a_malformed_shadowpod_is_a_refusal_not_an_error(base_url, session):
    body = review()
    body["request"]["object"]["spec"]["pod"]["spec"] = {"containers": "nginx"}
    status = answer(post(session, base_url, body))["status"]
    assert (status["code"], status["message"]) == (422, "spec.pod.spec.containers: must be a list")


def test_oversized_body_is_413(base_url, tls_files):
    context = ssl.create_default_context(cafile=str(tls_files.ca_cert))
    with socket.create_connection(("127.0.0.1", int(base_url.rsplit(":", 1)[1])), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
            sock.sendall(f"POST {PATH} HTTP/1.1\r\nHost: x\r\nContent-Length: {MAX_BODY_BYTES + 1}\r\n\r\n".encode())
            received = b""
            while chunk := sock.recv(4096):  # the server answers, then closes
                received += chunk
    head, _, body = received.decode().partition("\r\n\r\n")
    assert head.startswith("HTTP/1.1 413")
    assert json.loads(body)["message"] == f"request body of {MAX_BODY_BYTES + 1} bytes exceeds {MAX_BODY_BYTES}"


def test_unknown_paths_and_methods(base_url, session):
    assert post(session, base_url, review(), path="/validate").status_code == 404
    assert session.get(base_url + PATH, timeout=5).status_code == 404
    response = session.put(base_url + PATH, data=b"{}", timeout=5)
    assert response.status_code == 405 and response.json()["reason"] == "MethodNotAllowed"


def test_an_internal_failure_is_a_500_without_a_stack_trace(tls_files, session):
    class Broken:
        ledger = Ledger(lambda key: None)

        def ready(self):
            return True

        def review(self, request):
            raise RuntimeError("boom")

    server = WebhookHTTPServer(WebhookSettings(bind="127.0.0.1:0", tls_cert=str(tls_files.cert), tls_key=str(tls_files.key)), Broken())
    server.start()
    try:
        response = post(session, f"https://127.0.0.1:{server.port}", review())
    finally:
        server.stop()
    assert response.status_code == 500
    assert response.json()["message"] == "the ShadowPod webhook failed unexpectedly; see the enforcer's log"
    assert "Traceback" not in response.text and "boom" not in response.text


@pytest.mark.parametrize(
    "settings, fragment",
    [
        (WebhookSettings(bind="127.0.0.1:0", tls_cert="/nonexistent.crt", tls_key="/nonexistent.key"), "cannot load the ShadowPod webhook serving certificate"),
        (WebhookSettings(bind="127.0.0.1", tls_cert="x", tls_key="y"), "--webhook-bind: '127.0.0.1' is not HOST:PORT"),
        (WebhookSettings(bind="127.0.0.1:0", tls_cert="x"), "must be given together"),
    ],
)
def test_setup_errors_name_the_flag(settings, fragment):
    with pytest.raises(TLSSetupError, match=fragment):
        WebhookHTTPServer(settings, None)  # type: ignore[arg-type]


# --- the EndpointSlice webhook on the same server --------------------------------------------------
class PodIndex(Cache):
    """Managed pods with the validator's IP index (the informer's, computed the same way)."""

    def __init__(self, pods):
        super().__init__({f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in pods})
        self.funcs = {}

    def add_indexer(self, name, func):
        self.funcs[name] = func

    def by_index(self, name, value):
        return [p for p in self.objects.values() if value in self.funcs[name](p)]


def slice_review(*addresses: str) -> dict:
    body = review()
    request = body["request"]
    request["kind"] = {"group": "discovery.k8s.io", "version": "v1", "kind": "EndpointSlice"}
    request["resource"] = {"group": "discovery.k8s.io", "version": "v1", "resource": "endpointslices"}
    request["object"] = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": {"name": "db-1", "namespace": NS},
                         "addressType": "IPv4", "endpoints": [{"addresses": [a]} for a in addresses]}
    return body


@pytest.fixture(scope="module")
def served_both(tls_files):
    from enforcer.admission.endpointslice_webhook import EndpointSliceValidator

    shadowpods = Cache()
    validator = ShadowPodValidator(shadowpods=shadowpods, caches=Caches(), dry_run=dry_run, ledger=Ledger(shadowpods.get))
    pods = PodIndex([{"metadata": {"namespace": NS, "name": "web"}, "status": {"podIP": "10.0.0.7"}}])
    nodes = Cache({"n1": {"metadata": {"name": "n1"}, "status": {"addresses": [{"type": "InternalIP", "address": "172.18.0.3"}]}}})
    endpointslices = EndpointSliceValidator(caches=Caches(), pods=pods, nodes=nodes, service_cidrs=Cache(), api_server_slices=Cache())
    server = WebhookHTTPServer(WebhookSettings(bind="127.0.0.1:0", tls_cert=str(tls_files.cert), tls_key=str(tls_files.key)),
                               validator, endpointslices=endpointslices)
    server.start()
    yield server
    server.stop()


def test_endpointslices_have_their_own_path(served_both, session):
    base = f"https://127.0.0.1:{served_both.port}"
    own_pod = answer(post(session, base, slice_review("10.0.0.7"), path=c.ENDPOINTSLICE_WEBHOOK_PATH))
    assert own_pod["allowed"] is True
    node = answer(post(session, base, slice_review("172.18.0.3"), path=c.ENDPOINTSLICE_WEBHOOK_PATH))
    assert node["allowed"] is False
    assert "172.18.0.3 is an address of provider node n1" in node["status"]["message"]
    # The ShadowPod path still judges ShadowPods only.
    assert answer(post(session, base, review()))["allowed"] is True
    wrong = answer(post(session, base, slice_review("172.18.0.3")))
    assert wrong["allowed"] is True and "does not validate" in " ".join(wrong.get("warnings") or [])
