"""The consumer's half of resource slices (kube_offload/slice_requests.py): the --slice
grammar and its messages, the OffloadSlice the consumer writes, and how the provider's
answer reads (docs/slices.md)."""

from __future__ import annotations

import pytest

from kube_offload import constants as c
from kube_offload import slice_requests as sr
from kube_offload.resources import parse_quantity


def test_a_slice_flag_parses_into_name_pool_and_exact_amounts():
    request = sr.parse_slice("gpu=a100:cpu=2,memory=4Gi,nvidia.com/gpu=1")
    assert request.name == "gpu" and request.pool == "a100"
    assert dict(request.resources) == {"cpu": 2000, "memory": parse_quantity("4Gi"), "nvidia.com/gpu": 1000}
    assert request.resource_strings() == {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"}
    assert sr.parse_slice(request.flag_value()) == request


@pytest.mark.parametrize(
    "value, says",
    [
        ("gpu", "no ':' between the pool and the resources"),
        ("gpu:cpu=1", "no '=' between the slice name and the pool"),
        ("GPU=gpu:cpu=1", "the slice name 'GPU' is not a DNS label"),
        ("gpu=:cpu=1", "the pool '' is empty"),
        ("gpu=a-very-long-pool-name-here:cpu=1", "longer than 20 characters"),
        ("gpu=gpu:", "no resources asked for"),
        ("gpu=gpu:cpu", "'cpu' is not RESOURCE=QUANTITY"),
        ("gpu=gpu:cpu=lots", "cpu='lots' is not a quantity"),
        ("gpu=gpu:cpu=0", "cpu=0 must be more than zero"),
        ("gpu=gpu:nvidia.com/gpu=500m", "must be a whole number"),
        ("gpu=gpu:cpu=1,cpu=2", "resource cpu is given twice"),
        ("gpu=gpu:cpu =1,!bad=1", "'!bad' is not a resource name"),
    ],
)
def test_a_bad_slice_flag_names_the_flag_what_is_wrong_and_the_form(value, says):
    with pytest.raises(sr.SliceError) as error:
        sr.parse_slice(value, flag="--slice")
    message = str(error.value)
    assert message.startswith(f"--slice={value!r}: ")
    assert says in message
    assert sr.FLAG_SYNTAX in message and sr.FLAG_EXAMPLE in message


def test_slice_names_must_differ_on_one_command_line():
    with pytest.raises(sr.SliceError, match="slice 'gpu' is given twice"):
        sr.parse_slices(["gpu=gpu:cpu=1", "gpu=general:cpu=1"])
    assert [r.name for r in sr.parse_slices(["gpu=gpu:cpu=1", "web=general:cpu=1"])] == ["gpu", "web"]


def test_the_object_written_is_ours_in_the_tenant_namespace():
    request = sr.parse_slice("gpu=gpu:cpu=2,memory=4Gi")
    body = sr.desired_slice(request, namespace="kube-offload-tenant-local", local_cluster_id="local")
    assert body == {
        "apiVersion": f"{c.SHADOWPOD_GROUP}/{c.SHADOWPOD_VERSION}",
        "kind": c.SLICE_KIND,
        "metadata": {
            "name": "gpu",
            "namespace": "kube-offload-tenant-local",
            "labels": {c.LABEL_ORIGIN_CLUSTER_ID: "local"},
        },
        "spec": {"pool": "gpu", "resources": {"cpu": "2", "memory": "4Gi"}},
    }
    assert not sr.spec_differs(body, request)
    # Same amounts, other spelling: no update.
    assert not sr.spec_differs({"spec": {"pool": "gpu", "resources": {"cpu": "2000m", "memory": "4096Mi"}}}, request)
    assert sr.spec_differs({"spec": {"pool": "gpu", "resources": {"cpu": "3", "memory": "4Gi"}}}, request)
    assert sr.spec_differs({"spec": {"pool": "other", "resources": {"cpu": "2", "memory": "4Gi"}}}, request)
    assert sr.spec_differs({"spec": {"pool": "gpu", "resources": {"cpu": "x"}}}, request)


def _slice(phase, accepted=None, *, generation=1, observed=1, labels=None, message=""):
    status = {"phase": phase, "observedGeneration": observed, "message": message}
    if accepted is not None:
        status["accepted"] = accepted
    if labels is not None:
        status["nodeLabels"] = labels
    return {"metadata": {"name": "gpu", "generation": generation}, "status": status}


def test_an_accepted_slice_sizes_its_node():
    answer = sr.read_answer(_slice(c.SLICE_PHASE_ACCEPTED, {"cpu": "2", "nvidia.com/gpu": "1"}, labels={"gpu": "a100"}))
    assert answer.usable
    # No pods asked: as many as the caller says the peering's node offers (a node without
    # pods allocatable takes none).
    assert sr.node_capacity(answer, default_pods=94000) == {"cpu": 2000, "nvidia.com/gpu": 1000, "pods": 94000}
    asked_pods = sr.read_answer(_slice(c.SLICE_PHASE_ACCEPTED, {"cpu": "2", "pods": "5"}))
    assert sr.node_capacity(asked_pods, default_pods=94000) == {"cpu": 2000, "pods": 5000}
    assert answer.node_labels == {"gpu": "a100"}


def test_a_partly_accepted_slice_offers_what_was_accepted():
    answer = sr.read_answer(_slice(c.SLICE_PHASE_PARTIAL, {"cpu": "1"}, message="cpu: asked 2, accepted 1 (quota cpu)"))
    assert answer.usable and sr.node_capacity(answer) == {"cpu": 1000, "pods": 0}
    assert answer.message == "cpu: asked 2, accepted 1 (quota cpu)"


@pytest.mark.parametrize(
    "obj",
    [
        None,  # not created yet
        {"metadata": {"name": "gpu"}},  # no answer yet
        _slice(c.SLICE_PHASE_PENDING),
        _slice(c.SLICE_PHASE_REFUSED, {"cpu": "2"}, message="no pool gpu"),
        # Accepted, but for an older request: the provider may be about to shrink it.
        _slice(c.SLICE_PHASE_ACCEPTED, {"cpu": "2"}, generation=2, observed=1),
    ],
)
def test_a_slice_not_accepted_for_its_current_request_offers_nothing(obj):
    answer = sr.read_answer(obj)
    assert not answer.usable
    assert sr.node_capacity(answer) == {"pods": 0}


def test_an_unreadable_amount_offers_nothing_and_says_why():
    answer = sr.read_answer(_slice(c.SLICE_PHASE_ACCEPTED, {"cpu": "lots"}))
    assert answer.accepted == {}
    assert answer.problems and "status.accepted does not parse" in answer.problems[0]


def test_the_not_accepted_message_says_the_phase_and_the_providers_word():
    assert sr.not_accepted_message("gpu", sr.read_answer(_slice(c.SLICE_PHASE_REFUSED, message="no pool gpu"))) == (
        "slice gpu is Refused: no pool gpu"
    )
    stale = sr.read_answer(_slice(c.SLICE_PHASE_ACCEPTED, {"cpu": "1"}, generation=3, observed=2))
    assert "has not decided its current request yet" in sr.not_accepted_message("gpu", stale)
