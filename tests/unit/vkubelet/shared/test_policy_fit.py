"""What the honest virtual kubelet takes out of an object before sending it, per the
provider's policy for it (vkubelet/shared/policy_fit.py), and the notes it tells the local user."""

import pytest

from kube_offload.provider_policy import DEFAULT_POLICY, parse_policy
from vkubelet.shared import policy_fit as pf

DEFAULT_TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
]


def _spec(**extra) -> dict:
    spec = {"containers": [{"name": "app", "image": "nginx:1.27", "imagePullPolicy": "IfNotPresent"}]}
    spec.update(extra)
    return spec


def _fit(spec: dict, policy=DEFAULT_POLICY, labels=None, annotations=None) -> pf.PodFit:
    return pf.fit_pod(labels or {}, annotations or {}, spec, policy)


# --- pods: ephemeral containers (kubectl debug), each judged on its own --------------------------
DEBUGGER = {"name": "debugger", "image": "busybox:1.36", "targetContainerName": "app", "imagePullPolicy": "IfNotPresent"}


def test_an_ephemeral_container_not_granted_is_taken_out_and_the_pod_still_sent():
    fit = _fit(_spec(ephemeralContainers=[DEBUGGER]))
    assert "ephemeralContainers" not in fit.spec and not fit.refused, "the pod runs on without it"
    [(name, why)] = fit.ephemeral_refused
    assert name == "debugger"
    assert "spec.policy.pods.ephemeralContainers: true" in why, "says how the provider grants it: key and value"


def test_an_ephemeral_container_granted_is_sent_pulling_always():
    fit = _fit(_spec(ephemeralContainers=[DEBUGGER]), parse_policy({"pods": {"ephemeralContainers": True}}))
    assert fit.spec["ephemeralContainers"] == [{**DEBUGGER, "imagePullPolicy": "Always"}]
    assert fit.ephemeral_refused == () and not fit.refused


def test_an_ephemeral_container_from_a_registry_not_granted_is_refused_alone():
    policy = parse_policy({"pods": {"ephemeralContainers": True, "imageRegistries": ["docker.io/library/"]}})
    other = {**DEBUGGER, "name": "other", "image": "quay.io/someone/tools:1"}
    fit = _fit(_spec(ephemeralContainers=[DEBUGGER, other]), policy)
    assert [c["name"] for c in fit.spec["ephemeralContainers"]] == ["debugger"]
    [(name, why)] = fit.ephemeral_refused
    assert name == "other" and "quay.io/someone/tools:1" in why and "pods.imageRegistries" in why
    assert not fit.refused, "the pod itself is still sent"


# --- pods: what is dropped, and the note that says so --------------------------------------------
@pytest.mark.parametrize(
    "extra, policy, gone, field, words",
    [
        # The class a local user could pick to preempt the provider's own components.
        ({"priorityClassName": "system-node-critical"}, {"pods": {"priorityClasses": ["batch"]}}, "priorityClassName",
         "spec.priorityClassName", ["dropped: 'system-node-critical'", "never granted"]),
        ({"priorityClassName": "high"}, {}, "priorityClassName",
         "spec.priorityClassName", ["dropped: priority class 'high'", "(granted: none)", "Consumer spec.policy.pods.priorityClasses"]),
        ({"runtimeClassName": "kata"}, {}, "runtimeClassName",
         "spec.runtimeClassName", ["dropped: runtime class 'kata'", "Consumer spec.policy.pods.runtimeClasses"]),
        ({"nodeSelector": {"kubernetes.io/hostname": "provider-node-1"}}, {}, "nodeSelector",
         "spec.nodeSelector[kubernetes.io/hostname]", ["dropped: 'kubernetes.io/hostname'", "reserves"]),
        ({"nodeSelector": {"node-role.kubernetes.io/control-plane": ""}}, {}, "nodeSelector",
         "spec.nodeSelector[node-role.kubernetes.io/control-plane]", ["reserves"]),
        ({"nodeSelector": {"pool": "blue"}}, {"pods": {"reservedNodeLabelKeys": ["pool"]}}, "nodeSelector",
         "spec.nodeSelector[pool]", ["Consumer spec.policy.pods.reservedNodeLabelKeys"]),
        ({"tolerations": [{"operator": "Exists"}]}, {}, "tolerations",
         "spec.tolerations[0]", ["tolerates every taint"]),
        ({"tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}]},
         {"pods": {"tolerations": ["node-role.kubernetes.io/control-plane"]}}, "tolerations",
         "spec.tolerations[0].key", ["node key the provider reserves"]),
        ({"tolerations": [{"key": "gpu", "operator": "Exists"}]}, {}, "tolerations",
         "spec.tolerations[0].key", ["toleration of taint 'gpu' is not granted", "Consumer spec.policy.pods.tolerations"]),
        ({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "node-role.kubernetes.io/worker", "whenUnsatisfiable": "DoNotSchedule"}]},
         {}, "topologySpreadConstraints", "spec.topologySpreadConstraints[0].topologyKey", ["'node-role.kubernetes.io/worker'"]),
        ({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "node-role.kubernetes.io/worker"}]}}},
         {}, "affinity", "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey", ["reserves"]),
    ],
)
def test_what_the_policy_does_not_grant_is_dropped_with_a_note_naming_field_and_key(extra, policy, gone, field, words):
    fit = _fit(_spec(**extra), parse_policy(policy))
    assert gone not in fit.spec
    assert not fit.refused
    assert [n.field for n in fit.adjusted] == [field]
    message = fit.adjusted[0].message
    assert message.startswith(field)
    for word in words:
        assert word in message


@pytest.mark.parametrize(
    "extra, policy",
    [
        ({"priorityClassName": "batch"}, {"pods": {"priorityClasses": ["batch"]}}),
        ({"runtimeClassName": "gvisor"}, {"pods": {"runtimeClasses": ["gvisor"]}}),
        ({"tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]}, {"pods": {"tolerations": ["gpu"]}}),
        ({"nodeSelector": {"topology.kubernetes.io/zone": "a", "disktype": "ssd"}}, {}),
        ({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"}]}, {}),
        ({"volumes": [{"name": "c", "configMap": {"name": "x"}}, {"name": "s", "secret": {"secretName": "y"}},
                      {"name": "t", "emptyDir": {}}, {"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}, {}),
    ],
)
def test_what_the_policy_grants_is_kept_as_written(extra, policy):
    spec = _spec(**extra)
    fit = _fit(spec, parse_policy(policy))
    assert fit.adjusted == () and fit.refused == ()
    for key, value in extra.items():
        assert fit.spec[key] == value


def test_kubernetes_default_tolerations_go_without_a_word():
    # Every pod carries them (DefaultTolerationSeconds); the provider adds its own again.
    fit = _fit(_spec(tolerations=DEFAULT_TOLERATIONS))
    assert "tolerations" not in fit.spec and fit.adjusted == ()
    # A user's own figure for them is how long the pod stays on a failed node, which the
    # provider admits: sent as written (before, it was dropped: the fit refused more than
    # the provider's check did).
    custom = [{**DEFAULT_TOLERATIONS[0], "tolerationSeconds": 30}]
    fit = _fit(_spec(tolerations=custom))
    assert fit.spec["tolerations"] == custom and fit.adjusted == ()


def test_a_required_node_affinity_loses_only_its_reserved_requirements():
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["provider-node-1"]},
            {"key": "disktype", "operator": "In", "values": ["ssd"]},
        ]},
    ]}}}
    fit = _fit(_spec(affinity=affinity))
    assert fit.spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "disktype", "operator": "In", "values": ["ssd"]}]}]
    }
    assert [n.field for n in fit.adjusted] == [
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key"
    ]


def test_a_required_term_left_empty_voids_the_requirement_as_the_scheduler_reads_it():
    affinity = {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}]},
            {"matchExpressions": [{"key": "disktype", "operator": "In", "values": ["ssd"]}]},
        ]},
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "preference": {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}},
        ],
    }}
    fit = _fit(_spec(affinity=affinity))
    # An empty term matches every node: OR-ed with the others, the requirement says nothing.
    assert "affinity" not in fit.spec
    assert len(fit.adjusted) == 2
    assert "metadata.name pins a node" in fit.adjusted[1].message


def test_image_pull_policy_is_always_and_only_never_is_told():
    spec = _spec(initContainers=[{"name": "init", "image": "busybox", "imagePullPolicy": "Never"}])
    fit = _fit(spec)
    assert [c["imagePullPolicy"] for c in fit.spec["initContainers"] + fit.spec["containers"]] == ["Always", "Always"]
    assert [n.field for n in fit.adjusted] == ["spec.initContainers[0].imagePullPolicy"]
    assert spec["containers"][0]["imagePullPolicy"] == "IfNotPresent"  # the input is not changed


def test_labels_and_annotations_on_denied_prefixes_are_dropped():
    labels = {"app": "web", "kubernetes.io/metadata.name": "x", "team.example.com/owner": "a"}
    annotations = {
        "k8s.v1.cni.cncf.io/networks": "other-namespace/macvlan",
        "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
        "kubectl.kubernetes.io/default-container": "app",
        "example.com/internal": "1",
    }
    policy = parse_policy({"pods": {"deniedMetadataPrefixes": ["example.com/"]}})
    fit = _fit(_spec(), policy, labels, annotations)
    assert fit.labels == {"app": "web", "team.example.com/owner": "a"}
    assert fit.annotations == {"kubectl.kubernetes.io/default-container": "app"}
    assert sorted(n.field for n in fit.adjusted) == [
        "metadata.annotations[cluster-autoscaler.kubernetes.io/safe-to-evict]",
        "metadata.annotations[example.com/internal]",
        "metadata.annotations[k8s.v1.cni.cncf.io/networks]",
        "metadata.labels[kubernetes.io/metadata.name]",
    ]


@pytest.mark.parametrize(
    "volume, policy, field, words",
    [
        ({"name": "share", "nfs": {"server": "192.0.2.1", "path": "/"}}, {}, "spec.volumes[1].nfs",
         ["type nfs is not granted", "Consumer spec.policy.pods.volumeTypes"]),
        ({"name": "repo", "gitRepo": {"repository": "https://example.com/x.git"}}, {}, "spec.volumes[1].gitRepo", ["gitRepo"]),
        ({"name": "host", "hostPath": {"path": "/"}}, {}, "spec.volumes[1].hostPath", ["never granted"]),
        ({"name": "cm", "configMap": {"name": "x"}}, {"pods": {"volumeTypes": ["secret", "emptyDir"]}}, "spec.volumes[1].configMap",
         ["configMap is not granted"]),
        ({"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {"storageClassName": "fast"}}}},
         {"storage": {"classes": ["standard"]}}, "spec.volumes[1].ephemeral.volumeClaimTemplate.spec.storageClassName",
         ["storage class 'fast'", "Consumer spec.policy.storage.classes"]),
        ({"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}, {},
         "spec.volumes[1].ephemeral.volumeClaimTemplate.spec.storageClassName", ["names no storage class", "none"]),
    ],
)
def test_a_volume_the_policy_does_not_grant_refuses_the_pod(volume, policy, field, words):
    fit = _fit(_spec(volumes=[{"name": "ok", "emptyDir": {}}, volume]), parse_policy(policy))
    assert [n.field for n in fit.refused] == [field]
    assert fit.refused[0].message.startswith(f"{field}: ")
    assert f'"{volume["name"]}"' in fit.refused[0].message and "not sent" in fit.refused[0].message
    for word in words:
        assert word in fit.refused[0].message


def test_an_ephemeral_volume_of_a_granted_class_is_kept():
    volume = {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {"storageClassName": "standard"}}}}
    fit = _fit(_spec(volumes=[volume]), parse_policy({"storage": {"classes": ["standard"]}}))
    assert fit.refused == () and fit.spec["volumes"] == [volume]


# --- storage -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "storage_class, request_, policy, refused_field",
    [
        ("standard", "1Gi", {"storage": {"classes": ["standard"]}}, None),
        (None, "1Gi", {"storage": {"classes": ["standard"]}}, None),  # the provider's default class: its call
        (None, "1Gi", {}, "spec.storageClassName"),  # no class granted at all
        ("fast", "1Gi", {"storage": {"classes": ["standard"]}}, "spec.storageClassName"),
        ("standard", "20Gi", {"storage": {"classes": ["standard"], "maxClaimSize": "10Gi"}}, "spec.resources.requests.storage"),
        ("standard", "10Gi", {"storage": {"classes": ["standard"], "maxClaimSize": "10Gi"}}, None),
    ],
)
def test_a_claim_the_provider_would_not_make_is_refused(storage_class, request_, policy, refused_field):
    spec = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": request_}}}
    if storage_class:
        spec["storageClassName"] = storage_class
    fit = pf.fit_pvc({"kind": "PersistentVolumeClaim", "spec": spec}, parse_policy(policy))
    assert [n.field for n in fit.refused] == ([refused_field] if refused_field else [])


# --- Services ------------------------------------------------------------------------------------
def _service(**spec) -> dict:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "nodePort": 30080}], **spec}}


def test_a_nodeport_service_with_external_ips_becomes_a_plain_clusterip_one():
    service = _service(type="NodePort", externalIPs=["192.0.2.10", "10.200.0.5"], externalTrafficPolicy="Local")
    fit = pf.fit_service(service, parse_policy({"services": {"externalIPCIDRs": ["10.200.0.0/16"]}}))
    spec = fit.obj["spec"]
    assert spec["type"] == "ClusterIP"
    assert "nodePort" not in spec["ports"][0]
    assert spec["externalIPs"] == ["10.200.0.5"]
    assert "externalTrafficPolicy" not in spec
    assert [n.message for n in fit.adjusted] == [
        'spec.type NodePort changed to ClusterIP: NodePort is not granted to this consumer (granted: none); the provider '
        "grants it with Consumer spec.policy.services.types",
        "spec.externalIPs[0] dropped: 192.0.2.10 is not inside a range granted to this consumer (granted: 10.200.0.0/16): "
        "an external IP captures that address for every pod of the provider; the provider grants it with Consumer "
        "spec.policy.services.externalIPCIDRs",
    ]
    assert service["spec"]["type"] == "NodePort"  # the input is not changed


@pytest.mark.parametrize(
    "spec, policy, adjusted, refused",
    [
        ({"type": "LoadBalancer", "loadBalancerSourceRanges": ["0.0.0.0/0"]}, {}, ["spec.type"], []),
        ({"type": "LoadBalancer"}, {"services": {"types": ["LoadBalancer"]}}, [], []),
        ({"type": "NodePort"}, {"services": {"types": ["NodePort"]}}, [], []),
        ({"externalIPs": ["203.0.113.1"]}, {}, ["spec.externalIPs[0]"], []),
        # node ports and load-balancer fields on a type that has none: never (the CEL's)
        ({"loadBalancerIP": "203.0.113.9"}, {}, ["spec.ports[0].nodePort", "spec.loadBalancerIP"], []),
        ({"type": "ExternalName", "externalName": "db.example.com"}, {}, [], ["spec.type"]),
        ({"type": "ExternalName", "externalName": "db.example.com"}, {"services": {"externalName": True}}, [], []),
        ({"clusterIP": "None"}, {}, [], []),
    ],
)
def test_service_types_and_external_ips_follow_the_grants(spec, policy, adjusted, refused):
    service = _service(**spec)
    if not spec.get("type") or spec.get("type") in ("ClusterIP", "ExternalName"):
        service["spec"]["ports"][0].pop("nodePort")  # what only NodePort and LoadBalancer have
    if spec.get("loadBalancerIP"):
        service["spec"]["ports"][0]["nodePort"] = 30080
    fit = pf.fit_service(service, parse_policy(policy))
    assert [n.field for n in fit.adjusted] == adjusted
    assert [n.field for n in fit.refused] == refused
    if not adjusted and not refused:
        assert fit.obj == service


# --- Ingresses -----------------------------------------------------------------------------------
def _ingress(hosts=("shop.apps.example.com",), class_name="nginx", annotations=None, **spec) -> dict:
    rules = [{"host": h, "http": {"paths": [{"path": "/", "pathType": "Prefix",
                                              "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}} for h in hosts]
    body = {"rules": rules, **spec}
    if class_name:
        body["ingressClassName"] = class_name
    return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": "site", "annotations": dict(annotations or {})}, "spec": body}


GRANTED = {"ingress": {"hostDomains": ["apps.example.com"], "classes": ["nginx"], "annotations": ["nginx.ingress.kubernetes.io/rewrite-target"]}}


@pytest.mark.parametrize(
    "ingress, refused",
    [
        (_ingress(), []),
        (_ingress(hosts=("*.apps.example.com",)), []),
        (_ingress(hosts=("apps.example.com.evil.org",)), ["spec.rules[0].host"]),
        (_ingress(hosts=("provider.example.com",)), ["spec.rules[0].host"]),
        (_ingress(hosts=("",)), ["spec.rules[0].host"]),  # a catch-all rule
        (_ingress(class_name="other"), ["spec.ingressClassName"]),
        (_ingress(class_name=None), ["spec.ingressClassName"]),
        (_ingress(tls=[{"hosts": ["bank.example.org"], "secretName": "tls"}]), ["spec.tls[0].hosts[0]"]),
        (_ingress(hosts=(), defaultBackend={"service": {"name": "web", "port": {"number": 80}}}), ["spec.defaultBackend"]),
    ],
)
def test_an_ingress_outside_the_grants_is_not_reflected(ingress, refused):
    fit = pf.fit_ingress(ingress, parse_policy(GRANTED))
    assert [n.field for n in fit.refused] == refused


def test_ingress_annotations_not_granted_and_a_default_backend_beside_rules_are_dropped():
    annotations = {
        "nginx.ingress.kubernetes.io/configuration-snippet": "more_set_headers ...",
        "nginx.ingress.kubernetes.io/rewrite-target": "/",
        "kube-offload.io/origin-name": "site",  # reflection's own: never the user's to be granted
    }
    ingress = _ingress(annotations=annotations, defaultBackend={"service": {"name": "web", "port": {"number": 80}}})
    fit = pf.fit_ingress(ingress, parse_policy(GRANTED))
    assert fit.refused == ()
    assert fit.obj["metadata"]["annotations"] == {
        "nginx.ingress.kubernetes.io/rewrite-target": "/", "kube-offload.io/origin-name": "site",
    }
    assert "defaultBackend" not in fit.obj["spec"]
    assert [n.field for n in fit.adjusted] == [
        "metadata.annotations[nginx.ingress.kubernetes.io/configuration-snippet]", "spec.defaultBackend",
    ]


def test_the_legacy_class_annotation_moves_to_the_field_the_policy_reads():
    ingress = _ingress(class_name=None, annotations={"kubernetes.io/ingress.class": "nginx"})
    fit = pf.fit_ingress(ingress, parse_policy(GRANTED))
    assert fit.refused == ()
    assert fit.obj["spec"]["ingressClassName"] == "nginx"
    assert "kubernetes.io/ingress.class" not in fit.obj["metadata"]["annotations"]


def test_by_default_no_ingress_is_reflected():
    assert pf.fit_ingress(_ingress(), DEFAULT_POLICY).refused


# --- EndpointSlices --------------------------------------------------------------------------------
def _slice(*addresses_per_endpoint) -> dict:
    return {"kind": "EndpointSlice", "addressType": "IPv4",
            "endpoints": [{"addresses": list(a), "conditions": {"ready": True}} for a in addresses_per_endpoint]}


def test_endpoint_addresses_outside_the_granted_ranges_are_dropped_with_one_stable_note():
    policy = parse_policy({"endpoints": {"cidrs": ["10.200.0.0/16"]}})
    fit = pf.fit_endpointslice(_slice(["10.200.0.7"], ["10.96.0.1"], ["10.200.3.3", "192.0.2.1"]), policy)
    assert [e["addresses"] for e in fit.obj["endpoints"]] == [["10.200.0.7"], ["10.200.3.3"]]
    assert fit.refused == ()
    [note] = fit.adjusted
    assert "Consumer spec.policy.endpoints.cidrs: 10.200.0.0/16" in note.message
    assert "10.96.0.1" not in note.message  # the same note whichever pods come and go
    other = pf.fit_endpointslice(_slice(["10.200.0.8"], ["10.96.0.2"]), policy)
    assert other.adjusted == fit.adjusted


@pytest.mark.parametrize(
    "policy, refused, adjusted",
    [
        ({}, ["endpoints"], []),  # by default no range: nothing of a local slice may go
        ({"endpoints": {"cidrs": ["10.200.0.0/16"]}}, [], []),
    ],
)
def test_a_slice_with_no_granted_address_left_is_not_reflected(policy, refused, adjusted):
    fit = pf.fit_endpointslice(_slice(["10.200.0.7"]), parse_policy(policy))
    assert [n.field for n in fit.refused] == refused
    assert [n.field for n in fit.adjusted] == adjusted


def test_spreading_by_hostname_is_kept_as_the_provider_admits_it():
    # Every node has the hostname label: spreading or anti-affinity by it selects no node,
    # and the ShadowPod webhook admits it (provider_policy.reserved_topology_key).
    spread = [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"}]
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    fit = _fit(_spec(topologySpreadConstraints=spread, affinity=anti), parse_policy({}))
    assert fit.spec["topologySpreadConstraints"] == spread
    assert fit.spec["affinity"] == anti
    assert fit.adjusted == () and fit.refused == ()


# --- the provider's API (API server mode "remote") -----------------------------------------------
def test_a_pod_asking_for_the_providers_api_is_not_sent_unless_granted():
    fit = _fit(_spec(automountServiceAccountToken=True))
    [note] = fit.refused
    assert note.field == "spec.automountServiceAccountToken"
    assert "Consumer spec.policy.pods.remoteAPIAccess" in note.message and "kube-offload.io/api-server" in note.message
    granted = _fit(_spec(automountServiceAccountToken=True), parse_policy({"pods": {"remoteAPIAccess": True}}))
    assert granted.refused == () and granted.spec["automountServiceAccountToken"] is True
    assert _fit(_spec(automountServiceAccountToken=False)).refused == ()
