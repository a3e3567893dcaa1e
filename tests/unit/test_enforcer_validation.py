"""The ShadowPod webhook's static rules (enforcer/validation.py), table by table: who may
write where, each forbidden field at each Pod Security level, service accounts, quota
(CREATE and UPDATE, extended resources, empty = unlimited) and cordon."""

from __future__ import annotations

import copy
import re

import pytest

from enforcer.validation import (
    ALLOWED_CAPABILITIES,
    ConsumerError,
    consumer_terms,
    decide,
    quota_excess,
    requests_delta,
)
from kube_offload import constants as c
from kube_offload.admission import build_review, parse_review
from kube_offload.resources import parse_resource_list
from kube_offload.shadowpod import build_shadowpod

import orjson

NS = "demo-local"
CONSUMER = "local"
USER = f"system:serviceaccount:{c.tenant_namespace(CONSUMER)}:{c.CONSUMER_SERVICE_ACCOUNT}"
WHO = f'consumer "{CONSUMER}" (Pod Security level baseline)'


def twin_namespace(name: str = NS, origin: str = CONSUMER, managed: bool = True, level: str = "baseline") -> dict:
    labels = {c.LABEL_ORIGIN_CLUSTER_ID: origin, c.LABEL_PSA_ENFORCE: level}
    if managed:
        labels[c.LABEL_MANAGED_BY] = c.MANAGED_BY_ENFORCER
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def consumer(name: str = CONSUMER, **spec) -> dict:
    return {"apiVersion": "kube-offload.io/v1alpha1", "kind": c.CONSUMER_KIND, "metadata": {"name": name}, "spec": spec}


SERVICE_ACCOUNTS = {
    "reflected": {"metadata": {"name": "reflected", "namespace": NS, "labels": {c.LABEL_ORIGIN_CLUSTER_ID: CONSUMER}}},
    "foreign": {"metadata": {"name": "foreign", "namespace": NS, "labels": {c.LABEL_ORIGIN_CLUSTER_ID: "other"}}},
    "provider-made": {"metadata": {"name": "provider-made", "namespace": NS}},
}


def pod_spec(**overrides) -> dict:
    spec = {"containers": [{"name": "app", "image": "nginx", "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}}}]}
    spec.update(overrides)
    return spec


def shadowpod(spec: dict | None = None, *, name: str = "web", origin: str | None = CONSUMER, uid: str = "uid-1", generation: int = 1) -> dict:
    obj = build_shadowpod(
        name=name,
        namespace=NS,
        pod_metadata={"labels": {"app": "web"}},
        pod_spec=spec if spec is not None else pod_spec(),
        origin_labels={c.LABEL_ORIGIN_CLUSTER_ID: origin} if origin is not None else {},
    )
    obj["metadata"].update(uid=uid, generation=generation)
    return obj


def request(obj: dict, *, operation: str = "CREATE", old: dict | None = None, user: str = USER):
    review = build_review(obj, operation=operation, old_object=old, user_info={"username": user, "groups": ["system:serviceaccounts"]})
    return parse_review(orjson.dumps(review))


def run(obj: dict, *, operation: str = "CREATE", old: dict | None = None, user: str = USER, namespace: dict | None | str = "twin",
        the_consumer: dict | None | str = "default", usage: dict | None = None):
    if namespace == "twin":
        namespace = twin_namespace()
    if the_consumer == "default":
        the_consumer = consumer(quota={"cpu": "4", "memory": "8Gi", "pods": "10", "nvidia.com/gpu": "1"})
    return decide(
        request(obj, operation=operation, old=old, user=user),
        namespace=namespace,  # type: ignore[arg-type]
        consumer=the_consumer,  # type: ignore[arg-type]
        usage=usage or {"pods": 0},
        service_account=SERVICE_ACCOUNTS.get,
    )


def refused(decision, code: int, *fragments: str) -> str:
    assert not decision.allowed, "expected a refusal"
    assert decision.code == code, decision.message
    assert decision.reason == {403: "Forbidden", 422: "Invalid"}[code]
    for fragment in fragments:
        assert fragment in decision.message, f"{fragment!r} not in {decision.message!r}"
    return decision.message


# --- a good ShadowPod ------------------------------------------------------------------------------
def test_a_good_shadowpod_is_admitted():
    assert run(shadowpod()).allowed


def test_other_operations_and_subresources_are_not_judged():
    obj = shadowpod(pod_spec(hostNetwork=True))
    assert run(obj, operation="DELETE", old=obj).allowed
    review = build_review(obj, user_info={"username": "someone"})
    review["request"]["subResource"] = "status"
    assert decide(parse_review(orjson.dumps(review)), namespace=None, consumer=None, usage={}, service_account=SERVICE_ACCOUNTS.get).allowed


# --- 1-3: namespace, identity, origin --------------------------------------------------------------
@pytest.mark.parametrize(
    "namespace, fragment",
    [
        (None, f'namespace "{NS}" is not a twin namespace made by the enforcer'),
        ({"metadata": {"name": NS}}, "is not a twin namespace"),
        (twin_namespace(managed=False), "is not a twin namespace"),  # origin label alone is not enough
        ({"metadata": {"name": NS, "labels": {c.LABEL_MANAGED_BY: c.MANAGED_BY_ENFORCER}}}, "is not a twin namespace"),
    ],
)
def test_only_twin_namespaces(namespace, fragment):
    refused(run(shadowpod(), namespace=namespace), 403, fragment, "TwinNamespace")


def test_the_namespace_must_belong_to_an_admitted_consumer():
    refused(run(shadowpod(), the_consumer=None), 403, f'twin of consumer "{CONSUMER}"', f'no Consumer "{CONSUMER}"')


@pytest.mark.parametrize(
    "user",
    [
        "system:serviceaccount:kube-offload-tenant-other:consumer",  # a second consumer
        "system:serviceaccount:kube-offload-tenant-local:default",  # right namespace, wrong account
        "kubernetes-admin",
        "",
    ],
)
def test_only_the_consumers_identity_may_write(user):
    refused(run(shadowpod(), user=user), 403, f'user "{user}" may not write ShadowPods in namespace "{NS}"', f'consumer "{CONSUMER}"')


def test_the_identity_comes_from_the_consumer_spec():
    custom = consumer(serviceAccount={"namespace": "elsewhere", "name": "vk"})
    refused(run(shadowpod(), the_consumer=custom), 403, "may not write")
    assert run(shadowpod(), the_consumer=custom, user="system:serviceaccount:elsewhere:vk").allowed


def test_identity_is_checked_before_the_spec():
    # A second consumer learns nothing about the first one's rules from the refusal.
    message = refused(run(shadowpod(pod_spec(hostNetwork=True)), user="system:serviceaccount:x:consumer"), 403)
    assert "hostNetwork" not in message


@pytest.mark.parametrize(
    "origin, fragment",
    [
        (None, "is missing"),
        ("other", "got 'other'"),
    ],
)
def test_the_template_must_carry_the_consumers_origin(origin, fragment):
    refused(run(shadowpod(origin=origin)), 422, f"spec.pod.metadata.labels[{c.LABEL_ORIGIN_CLUSTER_ID}]: must be 'local'", fragment)


def test_an_origin_label_on_the_shadowpod_itself_must_match_too():
    obj = shadowpod()
    obj["metadata"]["labels"][c.LABEL_ORIGIN_CLUSTER_ID] = "other"
    obj["spec"]["pod"]["metadata"]["labels"][c.LABEL_ORIGIN_CLUSTER_ID] = CONSUMER
    refused(run(obj), 422, f"metadata.labels[{c.LABEL_ORIGIN_CLUSTER_ID}]: must be 'local' or absent")


# --- 4-9: the spec ---------------------------------------------------------------------------------
def container(name: str = "app", **security) -> dict:
    out = {"name": name, "image": "busybox"}
    if security:
        out["securityContext"] = security
    return out


FORBIDDEN_AT_BASELINE = [
    pytest.param(pod_spec(hostNetwork=True), "spec.pod.spec.hostNetwork: host namespaces are not allowed", "remove hostNetwork", id="hostNetwork"),
    pytest.param(pod_spec(hostPID=True), "spec.pod.spec.hostPID: host namespaces", "remove hostPID", id="hostPID"),
    pytest.param(pod_spec(hostIPC=True), "spec.pod.spec.hostIPC: host namespaces", "remove hostIPC", id="hostIPC"),
    pytest.param(
        pod_spec(containers=[container(privileged=True)]),
        'spec.pod.spec.containers[0].securityContext.privileged: container "app" may not be privileged',
        "remove privileged",
        id="privileged",
    ),
    pytest.param(
        pod_spec(containers=[container("app"), container("sidecar", privileged=True)]),
        'spec.pod.spec.containers[1].securityContext.privileged: container "sidecar"',
        "remove privileged",
        id="privileged-second-container",
    ),
    pytest.param(
        pod_spec(initContainers=[container("init", privileged=True)]),
        'spec.pod.spec.initContainers[0].securityContext.privileged: container "init"',
        "remove privileged",
        id="privileged-init-container",
    ),
    pytest.param(
        pod_spec(ephemeralContainers=[container("debug", privileged=True)]),
        'spec.pod.spec.ephemeralContainers[0].securityContext.privileged: container "debug"',
        "remove privileged",
        id="privileged-ephemeral-container",
    ),
    pytest.param(
        pod_spec(securityContext={"windowsOptions": {"hostProcess": True}}),
        "spec.pod.spec.securityContext.windowsOptions.hostProcess: HostProcess pods are not allowed",
        "remove hostProcess",
        id="hostProcess-pod-level",
    ),
    pytest.param(
        pod_spec(containers=[container(windowsOptions={"hostProcess": True})]),
        "spec.pod.spec.containers[0].securityContext.windowsOptions.hostProcess",
        "remove hostProcess",
        id="hostProcess-container-level",
    ),
    pytest.param(
        pod_spec(containers=[container(capabilities={"add": ["SYS_ADMIN"]})]),
        'spec.pod.spec.containers[0].securityContext.capabilities.add: container "app" may not add SYS_ADMIN',
        "remove SYS_ADMIN",
        id="SYS_ADMIN",
    ),
    pytest.param(
        pod_spec(initContainers=[container("init", capabilities={"add": ["CHOWN", "NET_ADMIN", "SYS_PTRACE"]})]),
        "spec.pod.spec.initContainers[0].securityContext.capabilities.add: container \"init\" may not add NET_ADMIN, SYS_PTRACE",
        "remove NET_ADMIN, SYS_PTRACE",
        id="capabilities-init-container",
    ),
    pytest.param(
        pod_spec(ephemeralContainers=[container("debug", capabilities={"add": ["SYS_PTRACE"]})]),
        "spec.pod.spec.ephemeralContainers[0].securityContext.capabilities.add",
        "SYS_PTRACE",
        id="capabilities-ephemeral-container",
    ),
    pytest.param(
        pod_spec(containers=[container(capabilities={"add": ["CAP_CHOWN"]})]),
        "may not add CAP_CHOWN",  # exact names, as Pod Security compares them
        "remove CAP_CHOWN",
        id="capability-with-CAP-prefix",
    ),
    pytest.param(
        pod_spec(volumes=[{"name": "data", "emptyDir": {}}, {"name": "root", "hostPath": {"path": "/"}}]),
        'spec.pod.spec.volumes[1].hostPath: volume "root" would mount a directory of the provider\'s node',
        "use another volume type",
        id="hostPath",
    ),
    pytest.param(
        pod_spec(nodeName="node-1"),
        "spec.pod.spec.nodeName: a consumer's pods may not name a node ('node-1')",
        "remove nodeName",
        id="nodeName",
    ),
    pytest.param(
        pod_spec(serviceAccountName="foreign"),
        'spec.pod.spec.serviceAccountName: ServiceAccount "foreign" is not one that consumer "local" reflected into namespace "demo-local"',
        f"labelled {c.LABEL_ORIGIN_CLUSTER_ID}=local",
        id="serviceAccountName-of-another-consumer",
    ),
    pytest.param(
        pod_spec(serviceAccountName="provider-made"),
        'ServiceAccount "provider-made" is not one that consumer "local" reflected',
        'use "default"',
        id="serviceAccountName-not-reflected",
    ),
    pytest.param(
        pod_spec(serviceAccountName="missing"),
        'ServiceAccount "missing"',
        'use "default"',
        id="serviceAccountName-missing",
    ),
    pytest.param(
        pod_spec(serviceAccount="foreign"),
        'spec.pod.spec.serviceAccount: ServiceAccount "foreign"',  # the deprecated alias is read too
        'use "default"',
        id="deprecated-serviceAccount",
    ),
]


@pytest.mark.parametrize("spec, field_message, fix", FORBIDDEN_AT_BASELINE)
def test_forbidden_fields_are_refused_naming_the_field_and_the_fix(spec, field_message, fix):
    message = refused(run(shadowpod(spec)), 422, field_message, fix)
    assert message.startswith("spec.pod.spec.")


def test_the_example_message_of_the_design():
    message = refused(run(shadowpod(pod_spec(hostNetwork=True))), 422)
    assert message == f"spec.pod.spec.hostNetwork: host namespaces are not allowed for {WHO}; remove hostNetwork"


def test_every_spec_problem_is_reported_at_once():
    spec = pod_spec(hostPID=True, nodeName="n1", containers=[container(privileged=True, capabilities={"add": ["SYS_ADMIN"]})])
    message = refused(run(shadowpod(spec)), 422)
    fields = [line.split(":", 1)[0] for line in message.splitlines()]
    assert fields == [
        "spec.pod.spec.hostPID",
        "spec.pod.spec.containers[0].securityContext.privileged",
        "spec.pod.spec.containers[0].securityContext.capabilities.add",
        "spec.pod.spec.nodeName",
    ]


@pytest.mark.parametrize(
    "spec",
    [
        pod_spec(hostNetwork=False, hostPID=False, hostIPC=False),
        pod_spec(containers=[container(privileged=False, allowPrivilegeEscalation=False)]),
        pod_spec(containers=[container(capabilities={"add": sorted(ALLOWED_CAPABILITIES["baseline"]), "drop": ["ALL"]})]),
        pod_spec(securityContext={"runAsNonRoot": True, "windowsOptions": {"hostProcess": False}}),
        pod_spec(volumes=[{"name": "cache", "emptyDir": {}}, {"name": "cfg", "configMap": {"name": "x"}}]),
        pod_spec(nodeName=""),
        pod_spec(serviceAccountName="default"),
        pod_spec(serviceAccountName="reflected"),
        pod_spec(serviceAccount="reflected", serviceAccountName="reflected"),
        pod_spec(serviceAccountName=""),
    ],
)
def test_what_baseline_allows(spec):
    assert run(shadowpod(spec)).allowed


def test_restricted_allows_only_net_bind_service():
    restricted = consumer(podSecurityLevel="restricted")
    ok = pod_spec(containers=[container(capabilities={"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]})])
    assert run(shadowpod(ok), the_consumer=restricted).allowed
    chown = pod_spec(containers=[container(capabilities={"add": ["CHOWN", "NET_BIND_SERVICE"]})])
    refused(
        run(shadowpod(chown), the_consumer=restricted),
        422,
        'container "app" may not add CHOWN for consumer "local" (Pod Security level restricted), which allows only NET_BIND_SERVICE',
    )


def test_privileged_level_spares_the_pod_security_rules_but_not_the_provider_rules():
    privileged = consumer(podSecurityLevel="privileged")
    spec = pod_spec(
        hostNetwork=True,
        hostPID=True,
        containers=[container(privileged=True, capabilities={"add": ["SYS_ADMIN", "NET_ADMIN"]})],
        volumes=[{"name": "root", "hostPath": {"path": "/"}}],
    )
    assert run(shadowpod(spec), the_consumer=privileged).allowed
    message = refused(run(shadowpod(pod_spec(nodeName="n1", serviceAccountName="foreign")), the_consumer=privileged), 422)
    assert "spec.pod.spec.nodeName" in message and "spec.pod.spec.serviceAccountName" in message


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"containers": "app"}, "spec.pod.spec.containers: must be a list"),
        ({"containers": ["app"]}, "spec.pod.spec.containers[0]: must be an object"),
        ({"containers": [{"name": "a", "securityContext": "privileged"}]}, "spec.pod.spec.containers[0].securityContext: must be an object"),
        ({"containers": [{"name": "a", "securityContext": {"privileged": "true"}}]}, "spec.pod.spec.containers[0].securityContext.privileged: must be true or false"),
        ({"containers": [], "hostNetwork": "yes"}, "spec.pod.spec.hostNetwork: must be true or false"),
        ({"containers": [{"name": "a", "securityContext": {"capabilities": {"add": "SYS_ADMIN"}}}]}, "capabilities.add: must be a list of capability names"),
        ({"containers": [], "volumes": {"a": {}}}, "spec.pod.spec.volumes: must be a list"),
        ({"containers": [], "serviceAccountName": 7}, "spec.pod.spec.serviceAccountName: must be a string"),
        ({"containers": [{"name": "a", "resources": {"requests": {"cpu": "lots"}}}]}, "spec.pod.spec: container 'a': requests: cpu"),
    ],
)
def test_malformed_templates_are_invalid_not_errors(spec, message):
    refused(run(shadowpod(spec)), 422, message)


def test_a_template_without_a_spec_is_invalid():
    obj = shadowpod()
    del obj["spec"]["pod"]["spec"]
    refused(run(obj), 422, "spec.pod.spec: must be an object")


# --- 10: quota -----------------------------------------------------------------------------------
def gpu_spec(gpus: str = "1", *, limits_only: bool = False) -> dict:
    resources = {"limits": {"nvidia.com/gpu": gpus}} if limits_only else {"requests": {"nvidia.com/gpu": gpus}, "limits": {"nvidia.com/gpu": gpus}}
    return pod_spec(containers=[{"name": "train", "image": "cuda", "resources": resources}])


def milli(**resources: str) -> dict:
    return parse_resource_list(resources)


def test_quota_refuses_with_the_numbers():
    big = pod_spec(containers=[{"name": "app", "image": "x", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}])
    used = milli(cpu="3", memory="1Gi", pods="2")
    message = refused(run(shadowpod(big), usage=used), 403)
    assert message == (
        'exceeded quota of consumer "local": cpu: requested 2, used 3, quota 4; wait until other ShadowPods of this '
        "consumer end, or ask the provider to raise Consumer spec.quota"
    )
    assert run(shadowpod(big), usage=milli(cpu="2", memory="1Gi", pods="2")).allowed  # exactly at the quota


def test_quota_counts_pods():
    message = refused(run(shadowpod(), usage=milli(pods="10")), 403, "pods: requested 1, used 10, quota 10")
    assert "cpu" not in message
    assert run(shadowpod(), usage=milli(pods="9")).allowed


def test_quota_lists_every_exceeded_resource_with_binary_units_for_bytes():
    big = pod_spec(containers=[{"name": "app", "image": "x", "resources": {"requests": {"cpu": "5", "memory": "9Gi"}}}])
    message = refused(run(shadowpod(big)), 403)
    assert "cpu: requested 5, used 0, quota 4; memory: requested 9Gi, used 0, quota 8Gi" in message


@pytest.mark.parametrize("limits_only", [False, True])
def test_quota_of_an_extended_resource(limits_only):
    spec = gpu_spec(limits_only=limits_only)
    assert run(shadowpod(spec)).allowed
    refused(run(shadowpod(spec), usage=parse_resource_list({"nvidia.com/gpu": "1"})), 403, "nvidia.com/gpu: requested 1, used 1, quota 1")


def test_quota_counts_init_containers_as_kubernetes_does():
    spec = pod_spec(initContainers=[{"name": "warm", "image": "x", "resources": {"requests": {"cpu": "3500m"}}}])
    refused(run(shadowpod(spec), usage=milli(cpu="1")), 403, "cpu: requested 3500m, used 1, quota 4")


@pytest.mark.parametrize("quota", [None, {}])
def test_no_quota_is_unlimited(quota):
    spec = gpu_spec("64")
    the_consumer = consumer(quota=quota) if quota is not None else consumer()
    assert run(shadowpod(spec), the_consumer=the_consumer, usage=milli(pods="100000", cpu="100000")).allowed


def test_a_resource_absent_from_the_quota_is_unlimited():
    assert run(shadowpod(pod_spec(containers=[{"name": "a", "image": "x", "resources": {"requests": {"ephemeral-storage": "1Ti"}}}]))).allowed


def test_update_counts_only_the_difference():
    old = shadowpod(generation=1)
    new = copy.deepcopy(old)
    new["metadata"]["generation"] = 2
    new["spec"]["pod"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1500m"
    # usage already holds the old object's 500m: 3500m in all, +1 cpu would make 4500m.
    refused(run(new, operation="UPDATE", old=old, usage=milli(cpu="3500m", pods="5")), 403, "cpu: added by this update 1, used 3500m, quota 4")
    assert run(new, operation="UPDATE", old=old, usage=milli(cpu="3", pods="5")).allowed
    # The slot is the old object's: an update never counts a second pod.
    assert run(new, operation="UPDATE", old=old, usage=milli(cpu="3", pods="10")).allowed


def test_an_update_that_does_not_raise_requests_passes_even_over_quota():
    old = shadowpod()
    new = copy.deepcopy(old)
    new["spec"]["pod"]["metadata"]["labels"]["tier"] = "front"
    assert run(new, operation="UPDATE", old=old, usage=milli(cpu="9", pods="12")).allowed


def test_a_metadata_only_update_is_admitted_from_anyone():
    # The garbage collector and the enforcer drop finalizers while deleting.
    old = shadowpod(pod_spec(hostNetwork=True))
    new = copy.deepcopy(old)
    new["metadata"]["finalizers"] = []
    new["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert run(new, operation="UPDATE", old=old, user="system:serviceaccount:kube-system:generic-garbage-collector", namespace=None).allowed


def test_requests_delta():
    obj = shadowpod()
    assert requests_delta(request(obj)) == {"cpu": 500, "memory": 256 * 2**20 * 1000, "pods": 1000}
    done = copy.deepcopy(obj)
    done["status"] = {"phase": "Succeeded"}
    bigger = copy.deepcopy(obj)
    bigger["spec"]["pod"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "2"
    assert requests_delta(request(bigger, operation="UPDATE", old=obj)) == {"cpu": 1500, "memory": 0, "pods": 0}
    # A finished old object held nothing: the update takes the whole new amount.
    assert requests_delta(request(bigger, operation="UPDATE", old=done))["pods"] == 1000


def test_quota_excess_ignores_what_a_request_does_not_add():
    quota = milli(cpu="1", pods="1")
    assert quota_excess(quota, milli(cpu="5", pods="5"), {"cpu": 0, "pods": -1000}) == []
    assert quota_excess(quota, milli(cpu="1"), {"cpu": 1}) == [("cpu", 1, 1000, 1000)]


# --- 11: cordon ------------------------------------------------------------------------------------
def test_a_cordoned_consumer_creates_nothing():
    cordoned = consumer(cordoned=True)
    refused(run(shadowpod(), the_consumer=cordoned), 403, 'consumer "local" is cordoned by the provider', "existing ones keep running")


def test_a_cordoned_consumer_may_update_without_raising_requests():
    cordoned = consumer(cordoned=True)
    old = shadowpod()
    other_image = copy.deepcopy(old)
    other_image["spec"]["pod"]["spec"]["containers"][0]["image"] = "nginx:2"
    assert run(other_image, operation="UPDATE", old=old, the_consumer=cordoned).allowed
    bigger = copy.deepcopy(old)
    bigger["spec"]["pod"]["spec"]["containers"][0]["resources"]["requests"]["memory"] = "1Gi"
    refused(run(bigger, operation="UPDATE", old=old, the_consumer=cordoned), 403, "may not raise requests (this one raises memory)")


def test_quota_is_checked_before_cordon():
    message = refused(run(shadowpod(), the_consumer=consumer(cordoned=True, quota={"pods": "1"}), usage=milli(pods="1")), 403)
    assert message.startswith("exceeded quota")


# --- the Consumer object -----------------------------------------------------------------------------
def test_an_unknown_level_counts_as_restricted():
    terms = consumer_terms(consumer(podSecurityLevel="open"))
    assert terms.level == "restricted"
    chown = pod_spec(containers=[container(capabilities={"add": ["CHOWN"]})])
    refused(run(shadowpod(chown), the_consumer=consumer(podSecurityLevel="open")), 422, "Pod Security level restricted")


def test_consumer_terms_defaults():
    terms = consumer_terms(consumer())
    assert (terms.username, terms.level, terms.quota, terms.cordoned) == (USER, "baseline", {}, False)


@pytest.mark.parametrize(
    "spec, fragment",
    [
        ({"quota": {"cpu": "lots"}}, "spec.quota: cpu"),
        ({"serviceAccount": "consumer"}, "spec.serviceAccount is not an object"),
    ],
)
def test_a_misconfigured_consumer_refuses_rather_than_guesses(spec, fragment):
    with pytest.raises(ConsumerError, match=re.escape(fragment)):
        consumer_terms(consumer(**spec))
    refused(run(shadowpod(), the_consumer=consumer(**spec)), 403, 'Consumer "local" is misconfigured', "the provider must fix it")
