"""A Pod far over the webhook's old 256 KiB body limit, created with kubectl through the
real kube-apiserver in an offloaded namespace: the apiserver sends its ~1.2 MB
AdmissionReview to our webhook, which reads it within its parse memory budget and
mutates the pod. Before, the webhook answered 413 and, with failurePolicy Fail, such a pod
could never be created there (docs/webhook.md, "Request size")."""

from __future__ import annotations

import json
import uuid

import pytest

from kube_offload import constants as C
from support.clusters import offloaded_namespace

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
# Long values keep the stored object (protobuf plus managedFields, ~70 bytes per env
# entry) under etcd's 1.5 MiB request limit, which a pod of ~1 MB of tiny entries passes.
ENTRIES = 2000
VALUE = "v" * 500


@pytest.fixture
def namespace(local):
    name = f"t-large-{uuid.uuid4().hex[:8]}"
    offloaded_namespace(local, name, C.PLACEMENT_LOCAL)
    yield name
    local.kubectl("delete", "namespace", "--wait=false", name, check=False)


def test_a_one_megabyte_pod_is_created_and_mutated_in_an_offloaded_namespace(local, namespace) -> None:
    env = [{"name": f"SETTING_{i:05d}", "value": VALUE} for i in range(ENTRIES)]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "large", "namespace": namespace},
        "spec": {"containers": [{"name": "c", "image": "busybox", "env": env,
                                 "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]},
    }
    body = json.dumps(pod)
    assert len(body) > 4 * 256 * 1024  # four times the old limit
    # create, not apply: apply would copy the pod into an annotation, which the apiserver
    # caps at 256 KiB.
    result = local.kubectl("create", "-f", "-", input=body, check=False)
    assert result.returncode == 0, result.stderr
    created = local.kubectl_json("get", "pod", "-n", namespace, "large")
    terms = created["spec"]["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": C.LABEL_TYPE, "operator": "NotIn", "values": [C.TYPE_VIRTUAL_NODE]}]}]
    assert created["spec"]["containers"][0]["env"] == env
