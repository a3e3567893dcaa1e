"""Ephemeral containers (kubectl debug) across the two hops (kube_offload/ephemeral_containers.py),
and the pod the enforcer builds from a template that has them (kube_offload/shadowpod.py)."""

from __future__ import annotations

from kube_offload import constants as C
from kube_offload import ephemeral_containers as ec
from kube_offload.shadowpod import build_pod
from support import builders

APP = {"name": "app", "image": "registry.k8s.io/pause:3.10"}
ONE = {"name": "debugger", "image": "busybox:1.36", "targetContainerName": "app"}
TWO = {"name": "debugger-2", "image": "busybox:1.36"}


def shadowpod(*ephemeral):
    spec = {"containers": [APP], **({"ephemeralContainers": [dict(c) for c in ephemeral]} if ephemeral else {})}
    return builders.shadowpod(spec=spec, uid="shp-1")


def test_the_template_list_only_grows_by_name():
    assert ec.grown_list({"ephemeralContainers": [ONE]}, {"ephemeralContainers": [ONE]}) is None
    assert ec.grown_list({}, {}) is None
    assert ec.grown_list({"ephemeralContainers": [ONE]}, {"ephemeralContainers": [TWO]}) == [ONE, TWO], \
        "one the local pod no longer shows (refused now) stays: the pod may have run it"
    changed = {**ONE, "image": "alpine:3"}
    assert ec.grown_list({"ephemeralContainers": [ONE]}, {"ephemeralContainers": [changed, TWO]}) == [ONE, TWO]


def test_admission_judges_only_what_a_request_adds():
    old, new = shadowpod(ONE), shadowpod(ONE, TWO)
    judged = ec.admission_view(new, old)
    assert judged["spec"]["pod"]["spec"]["ephemeralContainers"] == [TWO]
    assert "ephemeralContainers" not in ec.admission_view(shadowpod(ONE), old)["spec"]["pod"]["spec"]
    assert ec.admission_view(new, None) is new, "a CREATE is judged whole"
    assert new["spec"]["pod"]["spec"]["ephemeralContainers"] == [ONE, TWO], "the request itself is untouched"


def test_the_pod_created_is_judged_without_them_and_an_addition_with_only_those_added():
    shp = shadowpod(ONE, TWO)
    assert "ephemeralContainers" not in ec.for_pod_create(shp)["spec"]["pod"]["spec"]
    assert ec.for_pod_create(shadowpod()) is not None
    assert ec.for_adding(shp, ["debugger-2"])["spec"]["pod"]["spec"]["ephemeralContainers"] == [TWO]


def test_what_to_add_to_a_running_pod():
    template = {"ephemeralContainers": [ONE, TWO]}
    pod = {"metadata": {}, "spec": {"ephemeralContainers": [ONE]}}
    assert ec.to_add(template, pod) == [TWO]
    replaced = {"metadata": {"annotations": {C.ANNOTATION_EPHEMERAL_NOT_RUN: "debugger,debugger-2"}}, "spec": {}}
    assert ec.to_add(template, replaced) == []
    patch = ec.add_patch([TWO])
    assert patch == {"spec": {"ephemeralContainers": [{**TWO, "imagePullPolicy": "Always"}]}}


def test_the_enforcer_creates_a_pod_without_ephemeral_containers():
    first = build_pod(shadowpod(ONE))
    assert "ephemeralContainers" not in first["spec"], "the API server refuses a pod created with them"
    assert C.ANNOTATION_EPHEMERAL_NOT_RUN not in first["metadata"]["annotations"]
    replacement = build_pod(shadowpod(ONE, TWO), replacing=True)
    assert replacement["metadata"]["annotations"][C.ANNOTATION_EPHEMERAL_NOT_RUN] == "debugger,debugger-2"
    assert ec.not_run(replacement) == {"debugger", "debugger-2"}
    assert C.ANNOTATION_EPHEMERAL_NOT_RUN not in build_pod(shadowpod(), replacing=True)["metadata"]["annotations"]
