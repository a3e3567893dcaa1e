"""Local pod -> remote pod: what is dropped, what is kept, and the ShadowPod around it."""

import copy
import dataclasses

import pytest

from kube_offload import constants as c
from kube_offload.affinity import merge_required_terms, policy_node_terms, virtual_node_toleration
from kube_offload.policy import policy_from_namespace
from kube_offload.provider_policy import parse_policy
from vkubelet.home_api import HomeAPIEndpoint
from vkubelet.pods.translation import (
    TranslationContext,
    build_shadowpod_for,
    requirement_matches,
    term_matches,
    translate_pod,
)
from vkubelet.shared.origin import origin_key, origin_uid

NODE = "kube-offload-remote-1"
NODE_LABELS = {
    c.LABEL_TYPE: c.TYPE_VIRTUAL_NODE,
    c.LABEL_CLUSTER_ID: "remote-1",
    c.LABEL_HOSTNAME: NODE,
    "kubernetes.io/os": "linux",
    "topology.kubernetes.io/region": "eu-west",
    "kube-offload.io/provider": "acme",
}
CTX = TranslationContext(local_cluster_id="local", virtual_node_labels=NODE_LABELS, virtual_node_name=NODE)


def _pod(**spec_extra) -> dict:
    spec = {
        "nodeName": NODE,
        "schedulerName": "default-scheduler",
        "serviceAccountName": "builder",
        "serviceAccount": "builder",
        "priority": 0,
        "containers": [
            {
                "name": "app",
                "image": "nginx",
                "env": [{"name": "MODE", "value": "prod"}],
                "volumeMounts": [
                    {"name": "data", "mountPath": "/data"},
                    {"name": "kube-api-access-x7k2p", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": True},
                ],
            }
        ],
        "volumes": [
            {"name": "data", "emptyDir": {}},
            {
                "name": "kube-api-access-x7k2p",
                "projected": {
                    "sources": [
                        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
                    ]
                },
            },
        ],
        "tolerations": [
            virtual_node_toleration(),
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        ],
    }
    spec.update(spec_extra)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-1",
            "namespace": "demo",
            "uid": "uid-1",
            "labels": {"app": "web"},
            "annotations": {"note": "kept"},
            "ownerReferences": [{"kind": "ReplicaSet", "name": "web", "uid": "rs", "apiVersion": "apps/v1"}],
        },
        "spec": spec,
        "status": {"phase": "Pending", "qosClass": "BestEffort"},
    }


def _affinity(pod_affinity: dict) -> dict:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": pod_affinity}}}


def _ns(**labels) -> dict:
    annotations = {}
    selector = labels.pop("selector", None)
    if selector:
        annotations[c.ANNOTATION_CLUSTER_SELECTOR] = selector
    return {"metadata": {"name": "demo", "labels": {c.LABEL_ENABLED: "true", **labels}, "annotations": annotations}}


# --- what is dropped -----------------------------------------------------------------------
def test_node_name_scheduler_priority_and_our_toleration_are_dropped():
    spec = translate_pod(_pod(), CTX).spec
    assert "nodeName" not in spec
    assert "schedulerName" not in spec
    assert "priority" not in spec
    # The not-ready toleration local admission added (300 s) goes too: the provider's
    # admission adds its own, and a consumer may not tolerate node lifecycle taints.
    assert "tolerations" not in spec


def test_tolerations_the_provider_grants_are_kept():
    pod = _pod(tolerations=[virtual_node_toleration(), {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}])
    policy = parse_policy({"pods": {"tolerations": ["gpu"]}})
    remote = translate_pod(pod, TranslationContext(**{**CTX.__dict__, "policy": policy}))
    assert remote.spec["tolerations"] == [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert remote.adjusted == ()


def test_tolerations_list_removed_when_only_ours():
    spec = translate_pod(_pod(tolerations=[virtual_node_toleration()]), CTX).spec
    assert "tolerations" not in spec


def test_service_account_token_volume_and_mount_are_dropped_and_automount_off():
    spec = translate_pod(_pod(), CTX).spec
    assert spec["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in spec and "serviceAccount" not in spec
    assert [v["name"] for v in spec["volumes"]] == ["data"]
    assert spec["containers"][0]["volumeMounts"] == [{"name": "data", "mountPath": "/data"}]


def test_standalone_root_ca_volume_is_dropped_without_reflection_and_renamed_with_it():
    pod = _pod(
        volumes=[{"name": "ca", "configMap": {"name": "kube-root-ca.crt"}}],
        containers=[{"name": "app", "image": "x", "volumeMounts": [{"name": "ca", "mountPath": "/ca"}]}],
    )
    without = translate_pod(pod, CTX).spec
    assert "volumes" not in without
    assert "volumeMounts" not in without["containers"][0]
    with_reflection = translate_pod(pod, TranslationContext(**{**CTX.__dict__, "reflection": True})).spec
    # Reflection copies the local CA under another name (the remote has its own kube-root-ca.crt).
    assert with_reflection["volumes"] == [{"name": "ca", "configMap": {"name": "kube-offload-root-ca.crt"}}]
    # The account exists only locally; its tokens come from the reflected token Secret.
    assert "serviceAccountName" not in with_reflection


def test_user_projected_volume_loses_only_its_token_source():
    pod = _pod(
        volumes=[
            {
                "name": "mixed",
                "projected": {
                    "sources": [
                        {"serviceAccountToken": {"path": "token", "audience": "vault"}},
                        {"secret": {"name": "creds"}},
                    ]
                },
            }
        ],
        containers=[{"name": "app", "image": "x", "volumeMounts": [{"name": "mixed", "mountPath": "/m"}]}],
    )
    spec = translate_pod(pod, CTX).spec
    assert spec["volumes"] == [{"name": "mixed", "projected": {"sources": [{"secret": {"name": "creds"}}]}}]
    assert spec["containers"][0]["volumeMounts"] == [{"name": "mixed", "mountPath": "/m"}]


def test_init_container_mounts_of_dropped_volumes_go_too():
    pod = _pod()
    pod["spec"]["initContainers"] = [
        {"name": "init", "image": "busybox", "volumeMounts": [{"name": "kube-api-access-x7k2p", "mountPath": "/t"}]}
    ]
    spec = translate_pod(pod, CTX).spec
    assert "volumeMounts" not in spec["initContainers"][0]


def test_priority_class_kept_only_if_granted_and_the_remote_cluster_has_it():
    pod = _pod(priorityClassName="high", preemptionPolicy="Never")
    granted = parse_policy({"pods": {"priorityClasses": ["high"]}})
    assert "priorityClassName" not in translate_pod(pod, TranslationContext(**{**CTX.__dict__, "policy": granted})).spec
    # The remote cluster has it, but the provider does not grant it to us: dropped, said.
    has_it = TranslationContext(**{**CTX.__dict__, "remote_priority_classes": frozenset({"high"})})
    refused = translate_pod(pod, has_it)
    assert "priorityClassName" not in refused.spec
    assert [n.field for n in refused.adjusted] == ["spec.priorityClassName"]
    ctx = TranslationContext(**{**CTX.__dict__, "remote_priority_classes": frozenset({"high"}), "policy": granted})
    spec = translate_pod(pod, ctx).spec
    assert spec["priorityClassName"] == "high"
    # The number and policy come from the remote class, never from the local one.
    assert "priority" not in spec and "preemptionPolicy" not in spec


def test_ephemeral_containers_go_as_the_provider_grants_translated_like_the_others():
    pod = _pod(ephemeralContainers=[{"name": "debug", "image": "busybox", "targetContainerName": "app", "volumeMounts": [
        {"name": "kube-api-access-x7k2p", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]}])
    refused = translate_pod(pod, CTX)
    assert "ephemeralContainers" not in refused.spec and not refused.refused, "the pod goes; the debug container does not"
    assert [name for name, _why in refused.ephemeral_refused] == ["debug"]
    granted = TranslationContext(**{**CTX.__dict__, "policy": parse_policy({"pods": {"ephemeralContainers": True}})})
    remote = translate_pod(pod, granted)
    [debug] = remote.spec["ephemeralContainers"]
    assert debug["targetContainerName"] == "app" and debug["imagePullPolicy"] == "Always"
    assert "volumeMounts" not in debug, "the local token's mount goes with its volume, as for every container"
    assert remote.ephemeral_refused == ()


@pytest.mark.parametrize("field", ["overhead", "schedulingGates", "readinessGates"])
def test_fields_set_by_local_machinery_are_dropped(field):
    values = {
        "overhead": {"cpu": "250m"},
        "schedulingGates": [{"name": "x"}],
        "readinessGates": [{"conditionType": "example.com/lb"}],
    }
    assert field not in translate_pod(_pod(**{field: values[field]}), CTX).spec


# --- what is kept --------------------------------------------------------------------------
def test_user_content_is_kept_verbatim():
    pod = _pod(
        hostAliases=[{"ip": "127.0.0.1", "hostnames": ["x"]}],
        dnsPolicy="ClusterFirst",
        restartPolicy="Always",
        topologySpreadConstraints=[{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}],
    )
    spec = translate_pod(pod, CTX).spec
    assert spec["containers"][0]["env"] == [{"name": "MODE", "value": "prod"}]
    assert spec["containers"][0]["image"] == "nginx"
    assert spec["hostAliases"] == pod["spec"]["hostAliases"]
    assert spec["topologySpreadConstraints"] == pod["spec"]["topologySpreadConstraints"]
    assert spec["restartPolicy"] == "Always"


def test_translation_does_not_mutate_the_local_pod():
    pod = _pod(affinity=_affinity([{"matchExpressions": [{"key": c.LABEL_TYPE, "operator": "In", "values": ["virtual-node"]}]}]))
    before = copy.deepcopy(pod)
    translate_pod(pod, CTX)
    assert pod == before


def test_labels_and_annotations_are_copied_not_owner_references():
    remote = translate_pod(_pod(), CTX)
    assert remote.labels == {"app": "web"}
    assert remote.annotations == {"note": "kept"}


# --- node selection ----------------------------------------------------------------------------
def test_node_selector_keys_of_the_virtual_node_are_dropped_others_kept():
    pod = _pod(nodeSelector={"kubernetes.io/os": "linux", "disktype": "ssd", c.LABEL_HOSTNAME: NODE})
    assert translate_pod(pod, CTX).spec["nodeSelector"] == {"disktype": "ssd"}
    pod = _pod(nodeSelector={c.LABEL_HOSTNAME: NODE})
    assert "nodeSelector" not in translate_pod(pod, CTX).spec


def test_a_slice_pod_carries_its_slice_and_loses_what_chose_the_slice_node():
    """docs/slices.md: the slice label on the ShadowPod and its template (the provider
    applies the pool's patch by it), the slice's node labels stripped like any node label."""
    node = "kube-offload-remote-1-gpu"
    labels = {**NODE_LABELS, c.LABEL_HOSTNAME: node, c.LABEL_SLICE: "gpu", "accelerator": "a100"}
    ctx = dataclasses.replace(CTX, virtual_node_labels=labels, virtual_node_name=node, slice_name="gpu")
    pod = _pod(nodeSelector={c.LABEL_SLICE: "gpu", "accelerator": "a100", "disktype": "ssd"})
    pod["spec"]["nodeName"] = node
    shadowpod = build_shadowpod_for(pod, "demo-local", ctx)
    assert shadowpod["metadata"]["labels"] == {c.LABEL_ORIGIN_CLUSTER_ID: "local", c.LABEL_SLICE: "gpu"}
    assert shadowpod["spec"]["pod"]["metadata"]["labels"][c.LABEL_SLICE] == "gpu"
    assert shadowpod["spec"]["pod"]["spec"]["nodeSelector"] == {"disktype": "ssd"}
    # The peering's own node sends no slice label.
    assert c.LABEL_SLICE not in build_shadowpod_for(_pod(), "demo-local", CTX)["metadata"]["labels"]


@pytest.mark.parametrize(
    "placement, selector",
    [
        (c.PLACEMENT_REMOTE, ""),
        (c.PLACEMENT_REMOTE, "topology.kubernetes.io/region in (eu-west,eu-south),kube-offload.io/provider!=aws"),
        (c.PLACEMENT_LOCAL_AND_REMOTE, "topology.kubernetes.io/region=eu-west"),
    ],
)
def test_policy_affinity_added_by_the_webhook_disappears(placement, selector):
    """Whatever the webhook adds for a policy (via the shared affinity module) is about
    choosing the virtual node; none of it reaches the remote pod."""
    labels = {c.LABEL_POD_PLACEMENT: placement}
    if selector:
        labels["selector"] = selector
    terms = merge_required_terms(None, policy_node_terms(policy_from_namespace(_ns(**labels))))
    spec = translate_pod(_pod(affinity=_affinity(terms)), CTX).spec
    assert "affinity" not in spec


def test_user_terms_crossed_with_the_policy_keep_only_the_users_expressions():
    user_terms = [
        {"matchExpressions": [{"key": "disktype", "operator": "In", "values": ["ssd"]}]},
        {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]},
    ]
    policy = policy_from_namespace(_ns(**{c.LABEL_POD_PLACEMENT: c.PLACEMENT_LOCAL_AND_REMOTE, "selector": "kube-offload.io/provider=acme"}))
    merged = merge_required_terms(user_terms, policy_node_terms(policy))
    # A virtual node that carries "disktype": the disktype branch crossed with the remote
    # policy term matches it, and every expression of that branch is over one of its
    # labels, so the branch was entirely about the virtual node: no requirement remains.
    labels = {**NODE_LABELS, "disktype": "ssd"}
    ctx = TranslationContext(local_cluster_id="local", virtual_node_labels=labels, virtual_node_name=NODE)
    spec = translate_pod(_pod(affinity=_affinity(merged)), ctx).spec
    assert "affinity" not in spec

    # Without "disktype" (and without "gpu") no term matches the virtual node: the pod
    # got there some other way (an explicit nodeName), and nothing is imposed remotely.
    spec = translate_pod(_pod(affinity=_affinity(merged)), CTX).spec
    assert "affinity" not in spec


def test_user_expression_over_other_labels_survives_in_the_matching_term():
    terms = [
        {
            "matchExpressions": [
                {"key": c.LABEL_TYPE, "operator": "In", "values": [c.TYPE_VIRTUAL_NODE]},
                {"key": "disktype", "operator": "NotIn", "values": ["hdd"]},
            ]
        },
        {"matchExpressions": [{"key": c.LABEL_TYPE, "operator": "NotIn", "values": [c.TYPE_VIRTUAL_NODE]}]},
    ]
    spec = translate_pod(_pod(affinity=_affinity(terms)), CTX).spec
    assert spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "disktype", "operator": "NotIn", "values": ["hdd"]}]}]
    }


def test_match_fields_naming_the_virtual_node_are_dropped():
    terms = [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}]
    spec = translate_pod(_pod(affinity=_affinity(terms)), CTX).spec
    assert "affinity" not in spec


def test_preferred_terms_lose_virtual_node_expressions_and_empty_ones_go():
    affinity = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 10, "preference": {"matchExpressions": [{"key": "topology.kubernetes.io/region", "operator": "In", "values": ["eu-west"]}]}},
                {
                    "weight": 5,
                    "preference": {
                        "matchExpressions": [
                            {"key": "kube-offload.io/provider", "operator": "In", "values": ["acme"]},
                            {"key": "zone", "operator": "In", "values": ["a"]},
                        ]
                    },
                },
            ]
        },
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []},
    }
    spec = translate_pod(_pod(affinity=affinity), CTX).spec
    assert spec["affinity"]["nodeAffinity"] == {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 5, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}}
        ]
    }
    assert "podAntiAffinity" in spec["affinity"]


@pytest.mark.parametrize(
    "requirement, labels, expected",
    [
        ({"key": "a", "operator": "In", "values": ["1"]}, {"a": "1"}, True),
        ({"key": "a", "operator": "In", "values": ["1"]}, {}, False),
        ({"key": "a", "operator": "NotIn", "values": ["1"]}, {}, True),
        ({"key": "a", "operator": "NotIn", "values": ["1"]}, {"a": "1"}, False),
        ({"key": "a", "operator": "Exists"}, {"a": ""}, True),
        ({"key": "a", "operator": "DoesNotExist"}, {"a": ""}, False),
        ({"key": "a", "operator": "Gt", "values": ["3"]}, {"a": "4"}, True),
        ({"key": "a", "operator": "Gt", "values": ["3"]}, {"a": "3"}, False),
        ({"key": "a", "operator": "Lt", "values": ["3"]}, {"a": "x"}, False),
        ({"key": "a", "operator": "Bogus", "values": ["3"]}, {"a": "3"}, False),
    ],
)
def test_requirement_semantics(requirement, labels, expected):
    assert requirement_matches(requirement, labels) is expected


def test_empty_term_matches_nothing():
    assert term_matches({}, NODE_LABELS, NODE) is False
    assert term_matches({"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}, {}, NODE)


# --- the ShadowPod -----------------------------------------------------------------------------
def test_shadowpod_carries_origin_labels_annotations_and_the_translated_spec():
    shp = build_shadowpod_for(_pod(), "demo-local", CTX)
    assert shp["apiVersion"] == f"{c.SHADOWPOD_GROUP}/{c.SHADOWPOD_VERSION}"
    assert shp["kind"] == c.SHADOWPOD_KIND
    assert shp["metadata"]["name"] == "web-1"
    assert shp["metadata"]["namespace"] == "demo-local"
    assert shp["metadata"]["labels"] == {c.LABEL_ORIGIN_CLUSTER_ID: "local"}
    assert shp["metadata"]["annotations"] == {
        c.ANNOTATION_ORIGIN_NAMESPACE: "demo",
        c.ANNOTATION_ORIGIN_NAME: "web-1",
        c.ANNOTATION_ORIGIN_UID: "uid-1",
    }
    template = shp["spec"]["pod"]
    assert template["metadata"]["labels"] == {"app": "web", c.LABEL_ORIGIN_CLUSTER_ID: "local"}
    assert template["metadata"]["annotations"][c.ANNOTATION_ORIGIN_UID] == "uid-1"
    assert template["metadata"]["annotations"]["note"] == "kept"
    assert "nodeName" not in template["spec"]
    assert origin_key(shp) == "demo/web-1"
    assert origin_uid(shp) == "uid-1"


def test_a_pod_cannot_forge_its_origin():
    pod = _pod()
    pod["metadata"]["annotations"][c.ANNOTATION_ORIGIN_UID] = "someone-else"
    pod["metadata"]["labels"][c.LABEL_ORIGIN_CLUSTER_ID] = "other"
    shp = build_shadowpod_for(pod, "demo-local", CTX)
    assert shp["spec"]["pod"]["metadata"]["annotations"][c.ANNOTATION_ORIGIN_UID] == "uid-1"
    assert shp["spec"]["pod"]["metadata"]["labels"][c.LABEL_ORIGIN_CLUSTER_ID] == "local"


def test_origin_key_needs_both_annotations():
    assert origin_key({"metadata": {"annotations": {c.ANNOTATION_ORIGIN_NAME: "x"}}}) is None
    assert origin_key({}) is None


# --- the provider's policy ------------------------------------------------------------------
def test_system_node_critical_is_dropped_even_though_the_provider_has_it():
    # Every Kubernetes cluster has it built in; before, the pod kept it and preempted the
    # provider's own components.
    pod = _pod(priorityClassName="system-node-critical")
    ctx = TranslationContext(**{**CTX.__dict__, "remote_priority_classes": frozenset({"system-node-critical"})})
    remote = translate_pod(pod, ctx)
    assert "priorityClassName" not in remote.spec
    assert [n.message for n in remote.adjusted] == [
        "spec.priorityClassName dropped: 'system-node-critical' is a system priority class, which preempts the provider's "
        "own components and is never granted to a consumer (spec.policy.pods.priorityClasses cannot hold system-* classes)"
    ]
    shadow = build_shadowpod_for(pod, "demo-twin", ctx)
    assert "priorityClassName" not in shadow["spec"]["pod"]["spec"]


def test_a_pod_mounting_a_volume_not_granted_carries_the_refusal():
    pod = _pod(volumes=[{"name": "share", "nfs": {"server": "192.0.2.1", "path": "/export"}}])
    remote = translate_pod(pod, CTX)
    assert [n.field for n in remote.refused] == ["spec.volumes[0].nfs"]
    assert "Consumer spec.policy.pods.volumeTypes" in remote.refused[0].message


def test_what_local_admission_adds_to_every_pod_draws_no_note():
    # A pod as the local API server stores it: default tolerations, IfNotPresent, the
    # token volume; nothing of it is the user's choice, so nothing is told.
    remote = translate_pod(_pod(), CTX)
    assert remote.adjusted == () and remote.refused == ()
    assert remote.spec["containers"][0]["imagePullPolicy"] == "Always"


# --- which API server the pod reaches (vkubelet/home_api/pod_access.py) ---------------------
RELAY = HomeAPIEndpoint(ip="10.96.12.34", port=443)
HOME_CTX = dataclasses.replace(CTX, reflection=True, home_api=RELAY, home_cluster_domain="corp.example")


def _env_names(container: dict) -> list[str]:
    return [e["name"] for e in container.get("env") or []]


def test_home_with_a_relay_keeps_the_home_token_and_points_the_pod_at_the_relay():
    spec = translate_pod(_pod(), HOME_CTX).spec
    # The home identity, as with reflection alone: the reflected token Secret.
    [volume] = [v for v in spec["volumes"] if v["name"] == "kube-api-access-x7k2p"]
    assert any("secret" in s for s in volume["projected"]["sources"])
    assert spec["automountServiceAccountToken"] is False
    # The in-cluster configuration: the name in the home certificate, the relay's port.
    env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    assert env["KUBERNETES_SERVICE_HOST"] == "kubernetes.default.svc"
    assert env["KUBERNETES_SERVICE_PORT"] == "443"
    assert env["MODE"] == "prod"
    assert spec["hostAliases"] == [{
        "ip": "10.96.12.34",
        "hostnames": ["kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.corp.example"],
    }]


def test_home_is_the_default_mode():
    assert translate_pod(_pod(), HOME_CTX) == translate_pod(_pod(), HOME_CTX, api_server=c.API_SERVER_HOME)


def test_home_without_a_known_relay_is_todays_pod():
    without = dataclasses.replace(HOME_CTX, home_api=None)
    spec = translate_pod(_pod(), without).spec
    assert _env_names(spec["containers"][0]) == ["MODE"]
    assert "hostAliases" not in spec
    assert spec == translate_pod(_pod(), dataclasses.replace(CTX, reflection=True)).spec


def test_home_without_reflection_has_no_token_so_no_address_either():
    spec = translate_pod(_pod(), dataclasses.replace(HOME_CTX, reflection=False)).spec
    assert _env_names(spec["containers"][0]) == ["MODE"]
    assert "hostAliases" not in spec
    assert spec["automountServiceAccountToken"] is False


def test_disabled_gets_no_token_and_no_address():
    spec = translate_pod(_pod(), HOME_CTX, api_server=c.API_SERVER_DISABLED).spec
    assert spec["automountServiceAccountToken"] is False
    assert [v["name"] for v in spec["volumes"]] == ["data"]
    assert spec["containers"][0]["volumeMounts"] == [{"name": "data", "mountPath": "/data"}]
    assert _env_names(spec["containers"][0]) == ["MODE"]
    assert "hostAliases" not in spec
    assert "serviceAccountName" not in spec


def test_remote_runs_as_the_twins_default_account_with_the_providers_token():
    spec = translate_pod(_pod(), HOME_CTX, api_server=c.API_SERVER_REMOTE).spec
    assert spec["automountServiceAccountToken"] is True
    assert "serviceAccountName" not in spec and "serviceAccount" not in spec
    # No home token volume: the provider's admission mounts its own at the standard path.
    assert [v["name"] for v in spec["volumes"]] == ["data"]
    assert _env_names(spec["containers"][0]) == ["MODE"]
    assert "hostAliases" not in spec


def test_remote_is_refused_before_sending_unless_the_provider_grants_it():
    refused = translate_pod(_pod(), HOME_CTX, api_server=c.API_SERVER_REMOTE)
    [note] = refused.refused
    assert note.field == "spec.automountServiceAccountToken"
    assert "remoteAPIAccess" in note.message and c.ANNOTATION_API_SERVER in note.message
    granted = dataclasses.replace(HOME_CTX, policy=parse_policy({"pods": {"remoteAPIAccess": True}}))
    assert translate_pod(_pod(), granted, api_server=c.API_SERVER_REMOTE).refused == ()
    # The other modes never ask for it.
    assert translate_pod(_pod(), HOME_CTX).refused == ()
    assert translate_pod(_pod(), HOME_CTX, api_server=c.API_SERVER_DISABLED).refused == ()


def test_the_mode_annotation_is_the_consumers_and_is_not_sent():
    pod = _pod()
    pod["metadata"]["annotations"][c.ANNOTATION_API_SERVER] = c.API_SERVER_DISABLED
    remote = translate_pod(pod, HOME_CTX, api_server=c.API_SERVER_DISABLED)
    assert remote.annotations == {"note": "kept"}
    assert remote.adjusted == ()  # not dropped with a policy note: it was never the provider's


def test_the_opt_in_runtime_class_is_stripped_other_classes_go_to_the_policy():
    opted = translate_pod(_pod(runtimeClassName=c.RUNTIME_CLASS_OPT_IN), CTX)
    assert "runtimeClassName" not in opted.spec
    # Our own marker: nothing for the user to be told about.
    assert not [n for n in opted.adjusted if "runtimeClassName" in n.field]
    # Any other class is the provider policy's to judge (not granted by default: dropped, with a note).
    other = translate_pod(_pod(runtimeClassName="gvisor"), CTX)
    assert "runtimeClassName" not in other.spec
    assert [n for n in other.adjusted if n.field == "spec.runtimeClassName"]


# --- offloading over several hops (docs/multihop.md) ---------------------------------------------
def _forwarded_pod() -> dict:
    """A pod the enforcer of this (middle) cluster made for consumer "first", with the marks
    of that previous hop."""
    pod = _pod()
    pod["metadata"]["labels"] = {"app": "web", c.LABEL_ORIGIN_CLUSTER_ID: "first", c.LABEL_MANAGED_BY: c.MANAGED_BY_ENFORCER}
    pod["metadata"]["annotations"] = {
        "team": "x",
        c.ANNOTATION_ORIGIN_NAMESPACE: "demo", c.ANNOTATION_ORIGIN_NAME: "web-0", c.ANNOTATION_ORIGIN_UID: "u-first",
        c.ANNOTATION_APPLIED_TEMPLATE: "{}", c.ANNOTATION_OFFLOAD_CHAIN: "first",
    }
    return pod


def test_a_pod_made_here_starts_its_chain_with_this_cluster():
    assert translate_pod(_pod(), CTX).chain == ("local",)
    # ... which its origin label says already: no annotation (the provider reads it so)
    shp = build_shadowpod_for(_pod(), "demo-local", CTX)
    assert c.ANNOTATION_OFFLOAD_CHAIN not in shp["metadata"]["annotations"]
    assert c.ANNOTATION_OFFLOAD_CHAIN not in shp["spec"]["pod"]["metadata"]["annotations"]


def test_a_chain_written_by_the_pods_author_is_not_believed():
    pod = _pod()
    pod["metadata"]["annotations"] = {c.ANNOTATION_OFFLOAD_CHAIN: "remote-1"}
    remote = translate_pod(pod, dataclasses.replace(CTX, remote_cluster_id="remote-1"))
    assert remote.chain == ("local",) and remote.loop == ""


def test_a_forwarded_pod_extends_its_chain_and_loses_the_previous_hops_marks():
    remote = translate_pod(_forwarded_pod(), CTX)
    assert remote.chain == ("first", "local")
    assert remote.labels == {"app": "web"}
    assert remote.annotations == {"team": "x"}
    assert remote.adjusted == ()  # no "dropped" note for marks that were never the user's
    shp = build_shadowpod_for(_forwarded_pod(), "demo-first-local", CTX)
    template = shp["spec"]["pod"]["metadata"]
    assert template["labels"] == {"app": "web", c.LABEL_ORIGIN_CLUSTER_ID: "local"}
    assert template["annotations"][c.ANNOTATION_OFFLOAD_CHAIN] == "first,local"
    assert template["annotations"][c.ANNOTATION_ORIGIN_UID] == _forwarded_pod()["metadata"]["uid"]


def test_a_forwarded_pod_whose_chain_is_unreadable_still_counts_its_origin():
    pod = _forwarded_pod()
    pod["metadata"]["annotations"][c.ANNOTATION_OFFLOAD_CHAIN] = "not,,a chain"
    assert translate_pod(pod, CTX).chain == ("first", "local")


def test_a_pod_is_not_sent_back_to_a_cluster_it_came_through():
    remote = translate_pod(_forwarded_pod(), dataclasses.replace(CTX, remote_cluster_id="first"))
    assert "first -> local -> first" in remote.loop
    assert translate_pod(_forwarded_pod(), dataclasses.replace(CTX, remote_cluster_id="third")).loop == ""


def test_a_drained_or_cordoned_provider_is_left_to_refuse_a_pod_before_its_quota_limits():
    # The quota counts limits.cpu and the pod sets none: refused by the fit, not sent...
    counted = TranslationContext(**{**CTX.__dict__, "quota": {"limits.cpu": 4000}})
    refused = translate_pod(_pod(), counted).refused
    assert [note.field for note in refused] == ["spec.containers[0].resources.limits.cpu"], refused
    # ...unless the provider drains or cordons us: it refuses every new ShadowPod for that
    # first (rule 10 before the quota's 11), so the pod is sent and its refusal names the drain.
    closed = TranslationContext(**{**counted.__dict__, "provider_closed": True})
    assert translate_pod(_pod(), closed).refused == ()
