"""Translation with service-account token reflection on: the offloaded pod reads its
tokens, namespace and CA from reflected objects instead of the remote cluster's."""

import copy

from vkubelet.shared import names as n
from vkubelet.pods.translation import TranslationContext, translate_pod

CTX = TranslationContext(local_cluster_id="local", virtual_node_name="kube-offload-remote-1", reflection=True)
MOUNT = {"name": "kube-api-access-x7k2p", "mountPath": n.SERVICE_ACCOUNT_MOUNT_PATH, "readOnly": True}


def _pod(volumes: list[dict] | None = None, **container) -> dict:
    return {
        "metadata": {"name": "web-1", "namespace": "demo", "uid": "u"},
        "spec": {
            "serviceAccountName": "builder",
            "serviceAccount": "builder",
            "containers": [{"name": "app", "image": "x", "volumeMounts": [MOUNT], **container}],
            "volumes": volumes if volumes is not None else [
                {
                    "name": "kube-api-access-x7k2p",
                    "projected": {
                        "defaultMode": 420,
                        "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
                        ],
                    },
                }
            ],
        },
    }


def test_service_account_volume_reads_the_reflected_token_secret_and_ca():
    spec = translate_pod(_pod(), CTX).spec
    secret = n.token_secret_name("web-1")
    assert spec["volumes"] == [
        {
            "name": "kube-api-access-x7k2p",
            "projected": {
                "defaultMode": 420,
                "sources": [
                    {"secret": {"name": secret, "items": [{"key": "token", "path": "token"}]}},
                    {"configMap": {"name": n.REFLECTED_ROOT_CA_CONFIGMAP, "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    # The LOCAL namespace: the downward API would give the twin's name.
                    {"secret": {"name": secret, "items": [{"key": "namespace", "path": "namespace"}]}},
                ],
            },
        }
    ]
    # Mounted where the projected volume was, under the same volume name.
    assert spec["containers"][0]["volumeMounts"] == [MOUNT]
    # The remote pod runs as the twin namespace's default account, without a remote token.
    assert spec["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in spec and "serviceAccount" not in spec


def test_tokens_with_an_audience_read_their_own_key():
    volume = {"name": "vault", "projected": {"sources": [
        {"serviceAccountToken": {"path": "vault-token", "audience": "vault", "expirationSeconds": 600}},
        {"secret": {"name": "creds"}},
        {"downwardAPI": {"items": [
            {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
            {"path": "ns", "fieldRef": {"fieldPath": "metadata.namespace"}, "mode": 256},
        ]}},
    ]}}
    sources = translate_pod(_pod([volume]), CTX).spec["volumes"][0]["projected"]["sources"]
    secret = n.token_secret_name("web-1")
    assert sources == [
        {"secret": {"name": secret, "items": [{"key": n.token_key("vault"), "path": "vault-token"}]}},
        {"secret": {"name": "creds"}},
        {"downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
        {"secret": {"name": secret, "items": [{"key": "namespace", "path": "ns", "mode": 256}]}},
    ]


def test_downward_api_without_a_token_is_left_alone():
    volume = {"name": "info", "projected": {"sources": [
        {"downwardAPI": {"items": [{"path": "ns", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
    ]}}
    assert translate_pod(_pod([copy.deepcopy(volume)]), CTX).spec["volumes"] == [volume]


def test_every_use_of_the_root_ca_reads_the_reflected_copy():
    pod = _pod(
        [{"name": "ca", "configMap": {"name": "kube-root-ca.crt", "optional": True}}],
        env=[{"name": "CA", "valueFrom": {"configMapKeyRef": {"name": "kube-root-ca.crt", "key": "ca.crt"}}},
             {"name": "OTHER", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "k"}}}],
        envFrom=[{"configMapRef": {"name": "kube-root-ca.crt"}}],
    )
    spec = translate_pod(pod, CTX).spec
    assert spec["volumes"] == [{"name": "ca", "configMap": {"name": n.REFLECTED_ROOT_CA_CONFIGMAP, "optional": True}}]
    container = spec["containers"][0]
    assert container["env"][0]["valueFrom"]["configMapKeyRef"]["name"] == n.REFLECTED_ROOT_CA_CONFIGMAP
    assert container["env"][1]["valueFrom"]["configMapKeyRef"]["name"] == "settings"
    assert container["envFrom"] == [{"configMapRef": {"name": n.REFLECTED_ROOT_CA_CONFIGMAP}}]


def test_local_pod_is_not_modified():
    pod = _pod()
    before = copy.deepcopy(pod)
    translate_pod(pod, CTX)
    assert pod == before


def test_without_reflection_the_token_is_still_dropped():
    spec = translate_pod(_pod(), TranslationContext(local_cluster_id="local")).spec
    assert "volumes" not in spec
    assert spec["automountServiceAccountToken"] is False
