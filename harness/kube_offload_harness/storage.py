"""A real dynamic provisioner in every loopback cluster, for the virtual storage class
(docs/storage.md): Rancher's local-path-provisioner, built from its Go module into the
binary cache (binaries.py) and run as a process against each cluster.

* remote clusters: its class ``local-path`` is the cluster's default class, so a claim
  of the virtual class reflected there (mapped to the remote default) is provisioned by
  it when the remote pod is scheduled;
* the local cluster: the same class, not default, is the real local class the physical
  delegate provisions through (``--virtual-storage-local-class local-path``).

The provisioner creates a volume's directory with a helper pod on the selected node and
waits for that pod to reach ``Succeeded``. kwok simulates pods: by its default stages a
pod stays Running forever unless a Job owns it. The helper pods therefore carry
HELPER_LABEL (from the helper pod template below), and one extra kwok Stage completes
Running pods with that label - the same status kwok's own "pod-complete" stage writes for
Jobs. The stage file is given to the kwok controller as a second ``--config`` next to the
one kwokctl writes (the controller reads every file it is given; kwokctl itself would
replace ALL its default stages by any stage passed to ``kwokctl --config``).

The provisioner is the provider's own infrastructure, not a kube-offload component: it
runs with the cluster's admin kubeconfig. Nothing is ever written on the host: kwok runs
no helper pod, so the directories under the state directory are never made.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kube_offload_harness.cluster import Cluster, Environment

LOCAL_PATH_CLASS = "local-path"
LOCAL_PATH_PROVISIONER = "rancher.io/local-path"
LOCAL_PATH_NAMESPACE = "local-path-storage"
LOCAL_PATH_ACCOUNT = "local-path-provisioner-service-account"
LOCAL_PATH_CONFIGMAP = "local-path-config"
HELPER_LABEL = "harness.kube-offload.io/kwok-completes"
DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"
STAGES_FILE = "kwok-storage-stages.yaml"

# kwok's own pod-complete status (kustomize/stage/pod/fast/pod-complete.yaml, v0.8.0).
_COMPLETED_STATUS = """{{ $now := Now }}
{{ $root := . }}
containerStatuses:
{{ range $index, $item := .spec.containers }}
- image: {{ $item.image | Quote }}
  name: {{ $item.name | Quote }}
  ready: false
  restartCount: 0
  started: false
  state:
    terminated:
      exitCode: 0
      finishedAt: {{ $now | Quote }}
      reason: Completed
      startedAt: {{ $now | Quote }}
{{ end }}
phase: Succeeded
"""


def kwok_stage_documents() -> list[dict]:
    """The kwok Stage that completes local-path-provisioner's helper pods."""
    return [{
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": "harness-helper-pod-complete"},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {
                "matchLabels": {HELPER_LABEL: "true"},
                "matchExpressions": [
                    {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                    {"key": ".status.phase", "operator": "In", "values": ["Running"]},
                ],
            },
            "next": {"statusTemplate": _COMPLETED_STATUS},
        },
    }]


def helper_pod_template() -> str:
    return json.dumps({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "helper-pod", "labels": {HELPER_LABEL: "true"}},
        "spec": {"containers": [{"name": "helper-pod", "image": "busybox", "imagePullPolicy": "IfNotPresent"}]},
    })


def local_path_objects(*, base_path: Path, default_class: bool) -> list[dict]:
    """Namespace, ServiceAccount, configuration and StorageClass of local-path-provisioner
    (as its deploy/local-path-storage.yaml has them, the helper pod labelled for kwok)."""
    config = {"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": [str(base_path)]}]}
    storage_class = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": LOCAL_PATH_CLASS},
        "provisioner": LOCAL_PATH_PROVISIONER,
        "volumeBindingMode": "WaitForFirstConsumer",
        "reclaimPolicy": "Delete",
        # The API server admits a claim's resize only where the class allows it; the
        # remote claim's request then follows the local one (local-path itself does not
        # grow directories).
        "allowVolumeExpansion": True,
    }
    if default_class:
        storage_class["metadata"]["annotations"] = {DEFAULT_CLASS_ANNOTATION: "true"}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": LOCAL_PATH_NAMESPACE}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": LOCAL_PATH_ACCOUNT, "namespace": LOCAL_PATH_NAMESPACE}},
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": LOCAL_PATH_CONFIGMAP, "namespace": LOCAL_PATH_NAMESPACE},
            "data": {
                "config.json": json.dumps(config),
                "setup": '#!/bin/sh\nset -eu\nmkdir -m 0777 -p "$VOL_DIR"\n',
                "teardown": '#!/bin/sh\nset -eu\nrm -rf "$VOL_DIR"\n',
                "helperPod.yaml": helper_pod_template(),
            },
        },
        storage_class,
    ]


def local_path_argv(binary: Path, kubeconfig: Path) -> list[str]:
    return [
        str(binary), "start",
        "--kubeconfig", str(kubeconfig),
        "--provisioner-name", LOCAL_PATH_PROVISIONER,
        "--namespace", LOCAL_PATH_NAMESPACE,
        "--configmap-name", LOCAL_PATH_CONFIGMAP,
        "--service-account-name", LOCAL_PATH_ACCOUNT,
        "--helper-image", "busybox",
    ]


def write_stages(state_dir: Path) -> Path:
    import yaml

    path = state_dir / STAGES_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump_all(kwok_stage_documents()))
    return path


def start_local_path_provisioner(env: "Environment", cluster: "Cluster", *, default_class: bool) -> None:
    """Install local-path-provisioner's objects in ``cluster`` and start it there."""
    cluster.apply(local_path_objects(base_path=env.state_dir / "local-path" / cluster.name, default_class=default_class))
    name = f"local-path-{cluster.spec.cluster_id}"
    argv = local_path_argv(env.bins.local_path_provisioner, cluster.kubeconfig)
    env.processes.start(name, argv, log=env.log_path(name), env=env._process_env())
