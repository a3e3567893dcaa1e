"""The pure forges of resource reflection: local object in, desired remote object out,
and what is applied over an existing remote object."""

import base64
import copy
from datetime import datetime, timedelta, timezone

import pytest

from kube_offload import constants as c
from kube_offload.times import parse_time_or_none
from vkubelet.shared.ip_remapping import RemappingSettings
from vkubelet.reflection import forge as f
from vkubelet.reflection.configmaps import forge_configmap
from vkubelet.reflection.secrets import forge_secret
from vkubelet.reflection.services import forge_service
from vkubelet.reflection.ingresses import forge_ingress
from vkubelet.reflection.pvcs import forge_pvc, is_pvc_controller_annotation, pvc_apply_body
from vkubelet.reflection.endpointslices import forge_endpointslice, routable_address, unremapped_endpoint_addresses
from vkubelet.reflection.serviceaccounts import (
    TokenSource, forge_token_secret, service_account_name, token_refresh_at, token_secret_is_current, token_secret_selector,
    token_sources,
)
from vkubelet.shared.remote_events import says_something_new
from vkubelet.reflection.policy import SERVICE_ACCOUNT_TOKEN_TYPE
from vkubelet.shared import names as n

NODE = "kube-offload-remote-1"


def ctx(reflector: str = "configmaps", **extra) -> f.ForgeContext:
    return f.ForgeContext(local_cluster_id="local", remote_namespace="demo-local", reflector=reflector,
                          virtual_node_name=NODE, **extra)


def meta(name: str = "cfg", **extra) -> dict:
    return {
        "name": name,
        "namespace": "demo",
        "uid": "local-uid",
        "resourceVersion": "42",
        "creationTimestamp": "2026-01-01T00:00:00Z",
        "labels": {"app": "web"},
        "annotations": {"note": "kept", f.LAST_APPLIED: "{...}"},
        "ownerReferences": [{"kind": "Deployment", "name": "web", "uid": "d", "apiVersion": "apps/v1"}],
        "finalizers": ["example.com/local"],
        "managedFields": [{"manager": "kubectl"}],
        **extra,
    }


# --- metadata ---------------------------------------------------------------------------------
def test_metadata_keeps_labels_and_annotations_and_adds_ours_only():
    desired = forge_configmap({"kind": "ConfigMap", "metadata": meta(), "data": {"a": "1"}}, ctx())
    assert desired["metadata"] == {
        "name": "cfg",
        "namespace": "demo-local",
        "labels": {"app": "web", c.LABEL_ORIGIN_CLUSTER_ID: "local", n.LABEL_REFLECTOR: "configmaps"},
        "annotations": {"note": "kept", c.ANNOTATION_ORIGIN_NAMESPACE: "demo", c.ANNOTATION_ORIGIN_NAME: "cfg"},
    }


def test_a_local_origin_label_of_another_cluster_is_overwritten_with_ours():
    local = {"metadata": meta(labels={c.LABEL_ORIGIN_CLUSTER_ID: "elsewhere"})}
    assert forge_configmap(local, ctx())["metadata"]["labels"][c.LABEL_ORIGIN_CLUSTER_ID] == "local"


def test_ownership_needs_both_labels():
    ours = {"metadata": {"labels": {c.LABEL_ORIGIN_CLUSTER_ID: "local", n.LABEL_REFLECTOR: "secrets"}}}
    assert f.is_owned(ours, "local", "secrets")
    assert not f.is_owned(ours, "local", "serviceaccounts")  # the token Secrets' reflector
    assert not f.is_owned(ours, "other", "secrets")
    # The remote EndpointSlice controller copies a Service's labels onto its slices:
    # the origin label alone does not make an object ours.
    copied = {"metadata": {"labels": {c.LABEL_ORIGIN_CLUSTER_ID: "local", n.LABEL_REFLECTOR: "services"}}}
    assert not f.is_owned(copied, "local", "endpointslices")
    assert not f.is_owned({"metadata": {}}, "local", "secrets")


# --- ConfigMaps and Secrets ---------------------------------------------------------------------
def test_configmap_copies_data_binary_data_and_immutability():
    local = {"metadata": meta(), "data": {"a": "1"}, "binaryData": {"b": "AAE="}, "immutable": True}
    desired = forge_configmap(local, ctx())
    assert (desired["apiVersion"], desired["kind"]) == ("v1", "ConfigMap")
    assert desired["data"] == {"a": "1"} and desired["binaryData"] == {"b": "AAE="} and desired["immutable"] is True
    local["data"]["a"] = "changed"
    assert desired["data"] == {"a": "1"}, "the forge must not share structure with the cache"


def test_root_ca_is_reflected_under_its_own_name_and_that_name_is_reserved():
    ca = forge_configmap({"metadata": meta(n.ROOT_CA_CONFIGMAP), "data": {"ca.crt": "PEM"}}, ctx())
    assert ca["metadata"]["name"] == n.REFLECTED_ROOT_CA_CONFIGMAP == "kube-offload-root-ca.crt"
    assert ca["metadata"]["annotations"][c.ANNOTATION_ORIGIN_NAME] == n.ROOT_CA_CONFIGMAP
    with pytest.raises(f.Unreflectable, match="reserved"):
        forge_configmap({"metadata": meta(n.REFLECTED_ROOT_CA_CONFIGMAP)}, ctx())


def test_secret_copies_type_and_data():
    local = {"metadata": meta("creds"), "type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": "e30="}}
    desired = forge_secret(local, ctx("secrets"))
    assert desired["type"] == "kubernetes.io/dockerconfigjson"
    assert desired["data"] == {".dockerconfigjson": "e30="}
    assert desired["metadata"]["labels"][n.LABEL_REFLECTOR] == "secrets"


def test_service_account_token_secrets_stay_home_and_token_names_are_reserved():
    legacy = {"metadata": meta("default-token-abc"), "type": SERVICE_ACCOUNT_TOKEN_TYPE, "data": {"token": "eA=="}}
    assert forge_secret(legacy, ctx("secrets")) is None
    helm = {"metadata": meta("sh.helm.release.v1.web.v1"), "type": "helm.sh/release.v1", "data": {"release": "eA=="}}
    assert forge_secret(helm, ctx("secrets")) is None
    with pytest.raises(f.Unreflectable):
        forge_secret({"metadata": meta(n.token_secret_name("web")), "type": "Opaque"}, ctx("secrets"))


# --- Services --------------------------------------------------------------------------------------
def _service(**spec) -> dict:
    base = {
        "type": "LoadBalancer",
        "selector": {"app": "web"},
        "clusterIP": "10.96.0.10",
        "clusterIPs": ["10.96.0.10"],
        "ipFamilies": ["IPv4"],
        "ipFamilyPolicy": "SingleStack",
        "externalTrafficPolicy": "Local",
        "healthCheckNodePort": 31000,
        "sessionAffinity": "None",
        "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP", "nodePort": 30080}],
    }
    base.update(spec)
    return {"metadata": meta("web"), "spec": base, "status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}}


def test_service_allocations_are_cleared_and_the_rest_kept():
    desired = forge_service(_service(), ctx("services"))
    spec = desired["spec"]
    for key in ("clusterIP", "clusterIPs", "ipFamilies", "healthCheckNodePort"):
        assert key not in spec
    assert spec["ports"] == [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]
    assert spec["selector"] == {"app": "web"}
    assert spec["type"] == "LoadBalancer" and spec["externalTrafficPolicy"] == "Local"
    assert "status" not in desired


def test_headless_service_stays_headless():
    spec = forge_service(_service(type="ClusterIP", clusterIP="None", clusterIPs=["None"]), ctx("services"))["spec"]
    assert spec["clusterIP"] == "None" and spec["clusterIPs"] == ["None"]


# --- EndpointSlices -------------------------------------------------------------------------------
def _slice(endpoints: list[dict]) -> dict:
    return {
        "metadata": meta(
            "web-abc12",
            labels={"kubernetes.io/service-name": "web", n.ENDPOINTSLICE_MANAGED_BY_LABEL: "endpointslice-controller.k8s.io"},
        ),
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    }


def _endpoint(ip: str, node: str = "local-node-0", **extra) -> dict:
    return {
        "addresses": [ip],
        "conditions": {"ready": True, "serving": True, "terminating": False},
        "nodeName": node,
        "zone": "zone-a",
        "hints": {"forZones": [{"name": "zone-a"}]},
        "targetRef": {"kind": "Pod", "name": "web-1", "namespace": "demo", "uid": "p"},
        **extra,
    }


def test_endpointslice_keeps_local_endpoints_only_and_is_not_the_remote_controllers():
    local = _slice([_endpoint("10.244.1.5", hostname="web-1"), _endpoint("10.0.0.7", node=NODE)])
    desired = forge_endpointslice(local, ctx("endpointslices"))
    assert desired["endpoints"] == [
        {"addresses": ["10.244.1.5"], "conditions": {"ready": True, "serving": True, "terminating": False}, "hostname": "web-1"}
    ]
    assert desired["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}]
    labels = desired["metadata"]["labels"]
    assert labels[n.ENDPOINTSLICE_MANAGED_BY_LABEL] == n.ENDPOINTSLICE_MANAGER
    assert labels["kubernetes.io/service-name"] == "web"
    assert desired["addressType"] == "IPv4"


@pytest.mark.parametrize("address", ["127.0.0.1", "127.9.9.9", "169.254.1.1", "0.0.0.0", "::1", "fe80::1", "224.0.0.1"])
def test_endpointslice_drops_addresses_that_mean_this_host_everywhere(address):
    assert not routable_address(address)
    assert forge_endpointslice(_slice([_endpoint(address)]), ctx("endpointslices")) is None


def test_endpointslice_with_only_offloaded_endpoints_is_not_reflected():
    assert forge_endpointslice(_slice([_endpoint("10.0.0.7", node=NODE)]), ctx("endpointslices")) is None
    assert forge_endpointslice(_slice([]), ctx("endpointslices")) is None
    assert routable_address("10.0.0.7") and routable_address("web.example.com")


def test_endpointslice_local_endpoints_are_written_as_the_remote_cluster_reaches_them():
    remapping = RemappingSettings(local_pod_cidr="10.0.0.0/16", local_pod_cidr_remapped="10.200.0.0/16").local_pod_ips
    local = _slice([
        _endpoint("10.0.1.5"),
        {**_endpoint("10.0.2.6"), "addresses": ["10.0.2.6", "192.168.0.9"]},  # the second: outside, kept as is
        _endpoint("10.0.0.7", node=NODE),  # offloaded here: the remote controller lists it
    ])
    context = ctx("endpointslices", endpoint_addresses=remapping)
    desired = forge_endpointslice(local, context)
    assert [e["addresses"] for e in desired["endpoints"]] == [["10.200.1.5"], ["10.200.2.6", "192.168.0.9"]]
    assert unremapped_endpoint_addresses(local, context) == ["192.168.0.9"]
    assert local["endpoints"][0]["addresses"] == ["10.0.1.5"]  # the local slice is not touched
    # Without a remapping, addresses are as the local cluster reports them and none is "not remapped".
    assert [e["addresses"] for e in forge_endpointslice(local, ctx("endpointslices"))["endpoints"]][0] == ["10.0.1.5"]
    assert unremapped_endpoint_addresses(local, ctx("endpointslices")) == []


# --- Ingresses and PVCs ------------------------------------------------------------------------------
def test_ingress_spec_kept_status_dropped():
    spec = {"ingressClassName": "nginx", "rules": [{"host": "a.example"}], "tls": [{"secretName": "cert"}]}
    local = {"metadata": meta("ing"), "spec": spec, "status": {"loadBalancer": {}}}
    desired = forge_ingress(local, ctx("ingresses"))
    assert desired["spec"] == spec and "status" not in desired
    assert (desired["apiVersion"], desired["kind"]) == ("networking.k8s.io/v1", "Ingress")


def _pvc(**spec) -> dict:
    base = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "1Gi"}},
        "storageClassName": "local-path",
        "volumeMode": "Filesystem",
        "volumeName": "pvc-123",
        "selector": {"matchLabels": {"disk": "ssd"}},
        "dataSource": {"kind": "VolumeSnapshot", "name": "snap", "apiGroup": "snapshot.storage.k8s.io"},
        "dataSourceRef": {"kind": "VolumeSnapshot", "name": "snap", "apiGroup": "snapshot.storage.k8s.io"},
    }
    base.update(spec)
    annotations = {
        "note": "kept",
        "pv.kubernetes.io/bind-completed": "yes",
        "volume.kubernetes.io/selected-node": "local-node-0",
        "volume.beta.kubernetes.io/storage-provisioner": "rancher.io/local-path",
    }
    return {"metadata": meta("data", annotations=annotations), "spec": base, "status": {"phase": "Bound"}}


def test_pvc_keeps_the_claim_and_drops_what_names_local_volumes():
    desired = forge_pvc(_pvc(), ctx("persistentvolumeclaims"))
    assert desired["spec"] == {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "1Gi"}},
        "storageClassName": "local-path",
        "volumeMode": "Filesystem",
    }
    annotations = desired["metadata"]["annotations"]
    assert "note" in annotations
    assert not any(is_pvc_controller_annotation(k) for k in annotations)
    assert "status" not in desired


@pytest.mark.parametrize(
    "local_class, mapping, remote_class",
    [
        ("local-path", {}, "local-path"),
        ("local-path", {"local-path": "standard"}, "standard"),
        ("local-path", {"local-path": ""}, None),
        ("fast", {"local-path": "standard", "*": "default-ssd"}, "default-ssd"),
        ("fast", {"*": ""}, None),
        (None, {"*": "standard"}, None),
    ],
)
def test_pvc_storage_class_mapping(local_class, mapping, remote_class):
    desired = forge_pvc(_pvc(storageClassName=local_class), ctx("persistentvolumeclaims", storage_classes=mapping))
    assert desired["spec"].get("storageClassName") == remote_class


def test_pvc_legacy_class_annotation_is_read_and_not_copied():
    local = _pvc()
    del local["spec"]["storageClassName"]
    local["metadata"]["annotations"]["volume.beta.kubernetes.io/storage-class"] = "old"
    desired = forge_pvc(local, ctx("persistentvolumeclaims", storage_classes={"old": "new"}))
    assert desired["spec"]["storageClassName"] == "new"
    assert "volume.beta.kubernetes.io/storage-class" not in desired["metadata"]["annotations"]


# --- what is applied ---------------------------------------------------------------------------------
def _as_served(desired: dict, **server_fields) -> dict:
    """What the remote API server returns for ``desired``: its metadata and defaults added."""
    served = copy.deepcopy(desired)
    served["metadata"].update(uid="remote-uid", resourceVersion="7", creationTimestamp="2026-01-01T00:00:00Z")
    for key, value in server_fields.items():
        served[key] = value
    return served


def test_service_forge_never_applies_what_a_cluster_allocates():
    local = _service()
    local["spec"].update(clusterIP="10.0.0.9", clusterIPs=["10.0.0.9"], ipFamilies=["IPv4"], healthCheckNodePort=32000)
    local["spec"]["ports"][0]["nodePort"] = 31111
    desired = forge_service(local, ctx("services"))
    for key in ("clusterIP", "clusterIPs", "ipFamilies", "healthCheckNodePort"):
        assert key not in desired["spec"], key
    assert all("nodePort" not in port for port in desired["spec"]["ports"])


def test_pvc_apply_body_is_the_forged_claim_until_it_exists():
    desired = forge_pvc(_pvc(), ctx("persistentvolumeclaims"))
    assert pvc_apply_body(desired, None) == desired
    assert pvc_apply_body(desired, None) is not desired


def test_pvc_apply_body_keeps_the_immutable_spec_as_the_remote_claim_has_it():
    desired = forge_pvc(_pvc(), ctx("persistentvolumeclaims"))
    current = _as_served(desired)
    current["spec"]["volumeName"] = "pvc-remote-9"
    current["spec"]["storageClassName"] = "remote-default"
    current["spec"]["accessModes"] = ["ReadWriteOnce"]
    current["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"] = "yes"
    grown = copy.deepcopy(desired)
    grown["spec"]["resources"]["requests"]["storage"] = "2Gi"
    grown["spec"]["storageClassName"] = "mapped-since"  # a mapping changed after creation
    grown["spec"]["accessModes"] = ["ReadWriteMany"]
    body = pvc_apply_body(grown, current)
    assert body["spec"]["storageClassName"] == "remote-default", "immutable: applied as the remote has it"
    assert body["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert body["spec"]["resources"]["requests"] == {"storage": "2Gi"}, "expansion follows the local claim"
    assert "volumeName" not in body["spec"], "the remote binder's field is never ours to apply"
    assert "pv.kubernetes.io/bind-completed" not in body["metadata"]["annotations"]
    assert body["metadata"]["labels"] == grown["metadata"]["labels"]


# --- service-account tokens ----------------------------------------------------------------------------
def _pod(volumes: list[dict], **spec) -> dict:
    return {
        "metadata": {"name": "web-1", "namespace": "demo", "uid": "pod-uid"},
        "spec": {"serviceAccountName": "builder", "volumes": volumes, "containers": [{"name": "c"}], **spec},
    }


SA_VOLUME = {
    "name": "kube-api-access-x",
    "projected": {
        "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
        ]
    },
}


def test_token_sources_one_per_audience():
    vault = {"name": "vault", "projected": {"sources": [{"serviceAccountToken": {"path": "t", "audience": "vault"}}]}}
    again = {"name": "again", "projected": {"sources": [{"serviceAccountToken": {"path": "u"}}]}}
    sources = token_sources(_pod([SA_VOLUME, vault, again, {"name": "e", "emptyDir": {}}]))
    assert sources == [TokenSource("token", None), TokenSource(n.token_key("vault"), "vault")]
    assert n.token_key("vault") != n.token_key("other") and n.token_key("vault").startswith("token-")
    assert token_sources(_pod([{"name": "e", "emptyDir": {}}])) == []
    assert service_account_name(_pod([])) == "builder"
    assert service_account_name({"spec": {}}) == "default"


def _token_secret(issued: datetime, *, lifetime: timedelta = timedelta(hours=1)) -> dict:
    return forge_token_secret(
        _pod([SA_VOLUME]), ctx("serviceaccounts"), tokens={"token": "jwt"}, issued=issued, expires=issued + lifetime
    )


def test_a_slice_pods_token_secret_is_labelled_with_its_slice_and_selected_by_that_slice_only():
    # docs/slices.md: one vkubelet per slice, each deleting the token Secrets of pods it
    # does not know; the label and the selectors keep their sets apart.
    issued = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
    secret = forge_token_secret(_pod([SA_VOLUME]), ctx("serviceaccounts"), tokens={"token": "jwt"}, issued=issued,
                                expires=issued + timedelta(hours=1), slice_name="gpu")
    assert secret["metadata"]["labels"][c.LABEL_SLICE] == "gpu"
    assert token_secret_selector("local", "gpu") == (
        f"{c.LABEL_ORIGIN_CLUSTER_ID}=local,{n.LABEL_REFLECTOR}=serviceaccounts,{c.LABEL_SLICE}=gpu")
    assert token_secret_selector("local", "") == (
        f"{c.LABEL_ORIGIN_CLUSTER_ID}=local,{n.LABEL_REFLECTOR}=serviceaccounts,!{c.LABEL_SLICE}")


def test_token_secret_holds_tokens_and_the_local_namespace():
    issued = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
    secret = _token_secret(issued)
    assert secret["metadata"]["name"] == n.token_secret_name("web-1") == "kube-offload-token-web-1"
    assert secret["metadata"]["namespace"] == "demo-local"
    assert base64.b64decode(secret["data"]["token"]) == b"jwt"
    assert base64.b64decode(secret["data"][n.NAMESPACE_KEY]) == b"demo"
    assert secret["metadata"]["labels"] == {c.LABEL_ORIGIN_CLUSTER_ID: "local", n.LABEL_REFLECTOR: "serviceaccounts"}
    annotations = secret["metadata"]["annotations"]
    assert annotations[c.ANNOTATION_ORIGIN_UID] == "pod-uid"
    assert annotations[c.ANNOTATION_TOKEN_EXPIRES_AT] == "2026-01-01T13:00:00Z"
    assert token_refresh_at(secret, 0.8) == issued + timedelta(minutes=48)


def test_token_secret_is_renewed_at_80_percent_and_for_another_pod_or_audience():
    issued = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
    secret = _token_secret(issued)
    pod = _pod([SA_VOLUME])
    sources = token_sources(pod)
    current = lambda at, p=pod, s=sources: token_secret_is_current(secret, p, s, now=at, refresh_fraction=0.8)  # noqa: E731
    assert current(issued + timedelta(minutes=47))
    assert not current(issued + timedelta(minutes=48))
    recreated = copy.deepcopy(pod)
    recreated["metadata"]["uid"] = "new-uid"  # same name, new pod: its own bound token
    assert not current(issued, recreated)
    assert not current(issued, pod, [*sources, TokenSource(n.token_key("vault"), "vault")])
    no_annotations = copy.deepcopy(secret)
    del no_annotations["metadata"]["annotations"][c.ANNOTATION_TOKEN_ISSUED_AT]
    assert not token_secret_is_current(no_annotations, pod, sources, now=issued, refresh_fraction=0.8)


def test_parse_time_reads_api_timestamps():
    assert parse_time_or_none("2026-01-01T12:00:00Z") == datetime(2026, 1, 1, 12, tzinfo=timezone.utc)
    assert parse_time_or_none("2026-01-01T12:00:00.123456Z").microsecond == 123456
    assert parse_time_or_none("2026-01-01T13:00:00+01:00") == datetime(2026, 1, 1, 12, tzinfo=timezone.utc)
    assert parse_time_or_none("garbage") is None and parse_time_or_none(None) is None


# --- Events ---------------------------------------------------------------------------------------------
def _remote_event(**extra) -> dict:
    event = {
        "metadata": {"name": "web-1.18a1", "namespace": "demo-local", "uid": "remote-event-uid",
                     "creationTimestamp": "2026-01-01T12:00:00Z"},
        "involvedObject": {"kind": "Pod", "namespace": "demo-local", "name": "web-1", "uid": "remote-pod-uid",
                           "fieldPath": "spec.containers{c}"},
        "type": "Warning",
        "reason": "BackOff",
        "message": "Back-off restarting failed container",
        "count": 3,
        "firstTimestamp": "2026-01-01T12:00:00Z",
        "lastTimestamp": "2026-01-01T12:05:00Z",
        "source": {"component": "kubelet", "host": "remote-node-0"},
    }
    event.update(extra)
    return event


def test_the_enforcers_routine_pod_created_is_not_copied_the_rest_is():
    # The local pod's own Offloaded Event already says its ShadowPod made a pod.
    shadowpod = {"kind": "ShadowPod", "namespace": "demo-local", "name": "web-1", "uid": "shp-uid"}
    assert not says_something_new(_remote_event(involvedObject=shadowpod, type="Normal", reason="PodCreated"))
    # A recreation, a refusal on the ShadowPod, and a PodCreated Warning say something new.
    assert says_something_new(_remote_event(involvedObject=shadowpod, type="Normal", reason="PodRecreated"))
    assert says_something_new(_remote_event(involvedObject=shadowpod, type="Warning", reason="PodCreationFailed"))
    assert says_something_new(_remote_event(involvedObject=shadowpod, type="Warning", reason="PodCreated"))
    # What the remote scheduler and kubelet say about the remote pod is what `kubectl describe` shows.
    for reason in ("Scheduled", "Pulled", "Created", "Started"):
        assert says_something_new(_remote_event(type="Normal", reason=reason))
    assert says_something_new(_remote_event())  # a Warning BackOff
    # A Pod's Event named like the enforcer's is not the enforcer's: copied.
    assert says_something_new(_remote_event(type="Normal", reason="PodCreated"))


# --- names ------------------------------------------------------------------------------------------------
def test_long_names_stay_valid_and_distinct():
    long_a, long_b = "a" * 250, "a" * 249 + "b"
    for name in (n.token_secret_name(long_a), n.local_event_name(long_a, "uid")):
        assert len(name) <= 253
    assert n.token_secret_name(long_a) != n.token_secret_name(long_b)
    assert n.local_event_name("p", "u1") == n.local_event_name("p", "u1") != n.local_event_name("p", "u2")


def test_every_label_reflection_writes_is_a_valid_label():
    from kube_offload.selector import label_key_problem, label_value_problem

    issued = datetime(2026, 1, 1, tzinfo=timezone.utc)
    objects = [
        forge_configmap({"metadata": meta()}, ctx()),
        forge_secret({"metadata": meta(), "type": "Opaque"}, ctx("secrets")),
        forge_service(_service(), ctx("services")),
        forge_endpointslice(_slice([_endpoint("10.244.1.5")]), ctx("endpointslices")),
        forge_ingress({"metadata": meta(), "spec": {}}, ctx("ingresses")),
        forge_pvc(_pvc(), ctx("persistentvolumeclaims")),
        forge_token_secret(_pod([SA_VOLUME]), ctx("serviceaccounts"), tokens={"token": "t"}, issued=issued,
                             expires=issued + timedelta(hours=1)),
    ]
    for obj in objects:
        for key, value in obj["metadata"]["labels"].items():
            assert label_key_problem(key) is None and label_value_problem(value) is None, (key, value)
