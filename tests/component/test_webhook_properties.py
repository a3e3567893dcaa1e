"""Whatever arrives over HTTPS, the webhook answers either a valid AdmissionReview with the
request's uid echoed, or a 400 with a message; never a 5xx, never a dead worker.

Inputs: random bytes, random JSON, real AdmissionReviews with random fields replaced or
removed, and pods with randomly shaped tolerations/affinity. When a patch comes back, it
must apply to the object that was sent, and sending the patched object again must yield
no further patch (the apiserver's reinvocation).
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import jsonpatch
import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kube_offload.admission import build_review
from support import builders

ROUTES = ("/mutate/pods", "/validate/namespaces")
SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=16,
)


@pytest.fixture(scope="module")
def client(webhook_server):
    session = requests.Session()
    session.trust_env = False  # REQUESTS_CA_BUNDLE would replace verify
    session.verify = str(webhook_server.ca_cert)

    def post(route: str, body: bytes) -> requests.Response:
        return session.post(webhook_server.base_url + route, data=body, timeout=10,
                            headers={"Content-Type": "application/json"})

    yield post
    session.close()


def sent_uid(body: bytes) -> Any:
    return json.loads(body)["request"]["uid"]


def check(response: requests.Response, body: bytes) -> dict | None:
    """The property; returns the AdmissionResponse when the answer was one."""
    assert response.status_code < 500, response.text
    payload = response.json()
    if response.status_code != 200:
        assert response.status_code == 400, response.text
        assert payload["kind"] == "Status" and payload["code"] == 400
        assert isinstance(payload["message"], str) and payload["message"]
        return None
    assert payload["apiVersion"] == "admission.k8s.io/v1"
    assert payload["kind"] == "AdmissionReview"
    answer = payload["response"]
    assert answer["uid"] == sent_uid(body)
    assert isinstance(answer["allowed"], bool)
    if not answer["allowed"]:
        assert answer["status"]["message"]
        assert "patch" not in answer
    if "patch" in answer:
        assert answer["patchType"] == "JSONPatch"
        assert isinstance(json.loads(base64.b64decode(answer["patch"])), list)
    return answer


@SETTINGS
@given(route=st.sampled_from(ROUTES), body=st.binary(max_size=300))
def test_random_bytes(client, route: str, body: bytes) -> None:
    check(client(route, body), body)


@SETTINGS
@given(route=st.sampled_from(ROUTES), value=json_values)
def test_random_json(client, route: str, value: Any) -> None:
    body = json.dumps(value).encode()
    check(client(route, body), body)


def _pod(namespace: str) -> dict:
    return builders.pod("p", namespace, containers=[builders.container("c", "i")], spec={"schedulerName": "default-scheduler"},
                        labels={"app": "x"})


def _namespace() -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "x", "labels": {"kube-offload.io/pod-placement": "Remote"}},
    }


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    found = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            found += _paths(child, prefix + (key,))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found += _paths(child, prefix + (index,))
    return found


NAMESPACES = ["remote-eu", "local-only", "anywhere", "broken", "plain", "unknown"]


@SETTINGS
@given(data=st.data())
def test_corrupted_reviews(client, data: st.DataObject) -> None:
    route = data.draw(st.sampled_from(ROUTES))
    obj = _pod(data.draw(st.sampled_from(NAMESPACES))) if data.draw(st.booleans()) else _namespace()
    operation = data.draw(st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT"]))
    review = build_review(obj, operation=operation, uid=data.draw(st.text(min_size=1, max_size=36)),
                          old_object=copy.deepcopy(obj) if operation == "UPDATE" else None)
    for _ in range(data.draw(st.integers(1, 4))):
        paths = _paths(review)[1:]
        if not paths:
            break  # everything was deleted already
        path = data.draw(st.sampled_from(paths))
        parent = review
        for key in path[:-1]:
            parent = parent[key]
        if data.draw(st.booleans()):
            parent[path[-1]] = data.draw(json_values)
        elif isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent.pop(path[-1])
    body = json.dumps(review).encode()
    check(client(route, body), body)


REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
expression = st.one_of(
    st.fixed_dictionaries(
        {"key": st.sampled_from(["region", "disk", "kube-offload.io/type"]),
         "operator": st.sampled_from(["In", "NotIn"]),
         "values": st.lists(st.sampled_from(["a", "b", "virtual-node"]), min_size=1, max_size=3)}
    ),
    st.fixed_dictionaries({"key": st.sampled_from(["region", "disk"]), "operator": st.sampled_from(["Exists", "DoesNotExist"])}),
    json_values,
)
term = st.one_of(
    st.fixed_dictionaries({}, optional={"matchExpressions": st.one_of(st.none(), st.lists(expression, max_size=3)),
                                        "matchFields": st.lists(expression, max_size=1)}),
    json_values,
)
toleration = st.one_of(
    st.just({"key": "kube-offload.io/virtual-node", "operator": "Equal", "value": "true", "effect": "NoExecute"}),
    st.just({"key": "kube-offload.io/virtual-node", "value": "true", "effect": "NoExecute"}),
    st.fixed_dictionaries({"key": st.text(max_size=10), "operator": st.sampled_from(["Exists", "Equal"])}),
    json_values,
)
affinity = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {},
        optional={
            "nodeAffinity": st.one_of(
                st.none(),
                st.fixed_dictionaries(
                    {},
                    optional={
                        REQUIRED: st.one_of(
                            st.none(),
                            st.fixed_dictionaries({}, optional={"nodeSelectorTerms": st.one_of(st.none(), st.lists(term, max_size=3), json_values)}),
                            json_values,
                        ),
                        "preferredDuringSchedulingIgnoredDuringExecution": json_values,
                    },
                ),
                json_values,
            ),
            "podAffinity": json_values,
        },
    ),
    json_values,
)


@SETTINGS
@given(
    namespace=st.sampled_from(NAMESPACES),
    tolerations=st.one_of(st.none(), st.lists(toleration, max_size=3), json_values),
    node_affinity=affinity,
    scheduler=st.one_of(st.none(), st.sampled_from(["default-scheduler", "other", ""]), json_values),
    node_name=st.one_of(st.none(), st.just("worker-1")),
)
def test_randomly_shaped_pods(client, namespace, tolerations, node_affinity, scheduler, node_name) -> None:
    pod = _pod(namespace)
    for field, value in (("tolerations", tolerations), ("affinity", node_affinity),
                         ("schedulerName", scheduler), ("nodeName", node_name)):
        if value is not None:
            pod["spec"][field] = value
    body = json.dumps(build_review(pod, uid="shape")).encode()
    answer = check(client("/mutate/pods", body), body)
    if answer is None or "patch" not in answer:
        return
    # The patch must be valid against the very object sent (parents created, no bad index).
    patch = json.loads(base64.b64decode(answer["patch"]))
    result = jsonpatch.apply_patch(pod, patch, in_place=False)
    body = json.dumps(build_review(result, uid="again")).encode()
    again = check(client("/mutate/pods", body), body)
    assert again is not None and "patch" not in again, "re-invocation must add nothing"
