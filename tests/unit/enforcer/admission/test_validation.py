"""The ShadowPod webhook's static rules (enforcer/admission/validation.py), table by table: who may
write where, each forbidden field at each Pod Security level, service accounts, quota
(CREATE and UPDATE, extended resources, empty = unlimited) and cordon."""

from __future__ import annotations

import copy
import re

import pytest

from enforcer.admission.validation import (
    ALLOWED_CAPABILITIES,
    ConsumerError,
    consumer_terms,
    decide,
    judge_pod_create,
    quota_excess,
    requests_delta,
)
from kube_offload import constants as c
from kube_offload.admission import build_review, parse_review
from kube_offload.provider_policy import DEFAULT_POLICY
from kube_offload.resources import parse_resource_list

import orjson
from support import builders

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
    return builders.shadowpod(name, NS, spec=spec if spec is not None else pod_spec(), pod_labels={"app": "web"},
                              origin=origin, uid=uid, generation=generation)


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
    )
    assert run(shadowpod(spec), the_consumer=privileged).allowed
    message = refused(run(shadowpod(pod_spec(nodeName="n1", serviceAccountName="foreign")), the_consumer=privileged), 422)
    assert "spec.pod.spec.nodeName" in message and "spec.pod.spec.serviceAccountName" in message
    # hostPath is the provider policy's now (never grantable), at every level.
    host_path = pod_spec(volumes=[{"name": "root", "hostPath": {"path": "/"}}])
    refused(run(shadowpod(host_path), the_consumer=privileged), 422, "spec.pod.spec.volumes[0].hostPath", "spec.policy.pods.volumeTypes")


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


# --- 11: quota -----------------------------------------------------------------------------------
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


# --- 10: cordon, drain ------------------------------------------------------------------------------------
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


def test_a_drained_consumer_creates_nothing_and_is_told_how_it_ends():
    drained = consumer(drain={"startedAt": "2026-11-27T03:00:00Z", "gracePeriodSeconds": 60})
    refused(run(shadowpod(), the_consumer=drained), 403, 'consumer "local" is drained by the provider',
            "existing ones are removed when the drain's grace ends", "kube-offload undrain")
    old = shadowpod()
    bigger = copy.deepcopy(old)
    bigger["spec"]["pod"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "2"
    refused(run(bigger, operation="UPDATE", old=old, the_consumer=drained), 403, "is drained by the provider: an update may not raise requests")


DRAIN = {"startedAt": "2026-11-27T03:00:00Z", "gracePeriodSeconds": 60}


@pytest.mark.parametrize("standing", [{"drain": DRAIN}, {"cordoned": True}], ids=["drained", "cordoned"])
def test_a_drain_or_cordon_is_named_before_the_quota(standing):
    # Freeing quota ends neither: a consumer both over quota and drained (cordoned) is told
    # the reason that stays, whatever else is wrong with its quota.
    state = "drained" if "drain" in standing else "cordoned"
    over = consumer(quota={"pods": "1"}, **standing)
    message = refused(run(shadowpod(), the_consumer=over, usage=milli(pods="1")), 403)
    assert message.startswith(f'consumer "local" is {state} by the provider'), message
    # An update that raises a request past the quota: the same.
    old = shadowpod()
    bigger = copy.deepcopy(old)
    bigger["spec"]["pod"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "2"
    message = refused(run(bigger, operation="UPDATE", old=old, the_consumer=consumer(quota={"cpu": "1"}, **standing),
                          usage=milli(cpu="500m", pods="1")), 403)
    assert f"is {state} by the provider: an update may not raise requests" in message, message
    # Missing limits the quota mode counts come after it too.
    limits = consumer(quota={"limits.cpu": "4"}, **standing)
    message = refused(run(shadowpod(), the_consumer=limits), 403)
    assert message.startswith(f'consumer "local" is {state} by the provider'), message


def test_a_pod_of_a_drained_consumer_over_quota_is_refused_for_the_drain():
    message = refused(judged(shadowpod(), the_consumer=consumer(quota={"cpu": "1"}, drain=DRAIN), usage=milli(cpu="800m")), 403)
    assert message.startswith('consumer "local" is drained by the provider: no pod is made'), message


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


# --- 9: the provider policy's pod rules (enforcer/admission/pod_policy.py) ------------------------------------
def with_metadata(spec: dict | None = None, *, labels: dict | None = None, annotations: dict | None = None) -> dict:
    obj = shadowpod(spec)
    meta = obj["spec"]["pod"]["metadata"]
    meta["labels"].update(labels or {})
    meta.setdefault("annotations", {}).update(annotations or {})
    return obj


def term(key: str, *values: str, operator: str = "In") -> dict:
    return {"matchExpressions": [{"key": key, "operator": operator, "values": list(values)}]}


def ephemeral(storage_class: str | None) -> dict:
    claim: dict = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    if storage_class is not None:
        claim["storageClassName"] = storage_class
    return {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": claim}}}


def projected(*sources: dict) -> dict:
    return {"name": "bundle", "projected": {"sources": list(sources)}}


NEVER = "never granted"
# (ShadowPod, the field, the policy key a provider would change - or that no key grants it)
POLICY_REFUSALS = [
    pytest.param(shadowpod(pod_spec(priorityClassName="system-node-critical")),
                 "spec.pod.spec.priorityClassName: 'system-node-critical' is a system priority class",
                 "spec.policy.pods.priorityClasses cannot hold system-*", id="priority-system-node-critical"),
    pytest.param(shadowpod(pod_spec(priorityClassName="system-cluster-critical")),
                 "spec.pod.spec.priorityClassName", "never granted", id="priority-system-cluster-critical"),
    pytest.param(shadowpod(pod_spec(priorityClassName="high")),
                 "spec.pod.spec.priorityClassName: priority class 'high' is not granted", "spec.policy.pods.priorityClasses",
                 id="priority-not-granted"),
    pytest.param(shadowpod(pod_spec(tolerations=[{"operator": "Exists"}])),
                 "spec.pod.spec.tolerations[0]: a toleration without a key tolerates every taint", "spec.policy.pods.tolerations",
                 id="tolerate-all"),
    pytest.param(shadowpod(pod_spec(tolerations=[{"operator": "Exists", "effect": "NoSchedule"}])),
                 "spec.pod.spec.tolerations[0]: a toleration without a key", NEVER, id="tolerate-all-of-an-effect"),
    pytest.param(shadowpod(pod_spec(tolerations=[{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}])),
                 "spec.pod.spec.tolerations[0].key: 'node-role.kubernetes.io/control-plane' is a node key the provider reserves",
                 "spec.policy.pods.reservedNodeLabelKeys", id="tolerate-control-plane"),
    pytest.param(shadowpod(pod_spec(tolerations=[{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}])),
                 "spec.pod.spec.tolerations[0].key: 'node.kubernetes.io/unschedulable'", NEVER, id="tolerate-cordoned-nodes"),
    pytest.param(shadowpod(pod_spec(tolerations=[{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoSchedule"}])),
                 "spec.pod.spec.tolerations[0].key: 'node.kubernetes.io/not-ready'", NEVER, id="schedule-onto-not-ready-nodes"),
    pytest.param(shadowpod(pod_spec(tolerations=[{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}])),
                 "spec.pod.spec.tolerations[0].key: toleration of taint 'dedicated' is not granted", "spec.policy.pods.tolerations",
                 id="toleration-not-granted"),
    pytest.param(shadowpod(pod_spec(nodeSelector={"kubernetes.io/hostname": "provider-node-1"})),
                 "spec.pod.spec.nodeSelector[kubernetes.io/hostname]: 'kubernetes.io/hostname' is a node label key the provider reserves",
                 "spec.policy.pods.reservedNodeLabelKeys", id="hostname-selector"),
    pytest.param(shadowpod(pod_spec(nodeSelector={"node-role.kubernetes.io/control-plane": ""})),
                 "spec.pod.spec.nodeSelector[node-role.kubernetes.io/control-plane]", NEVER, id="control-plane-selector"),
    pytest.param(shadowpod(pod_spec(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                     "nodeSelectorTerms": [term("topology.kubernetes.io/zone", "a"), term("kubernetes.io/hostname", "provider-node-1")]}}})),
                 "spec.pod.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[1]"
                 ".matchExpressions[0].key: 'kubernetes.io/hostname'", "spec.policy.pods.reservedNodeLabelKeys", id="hostname-affinity"),
    pytest.param(shadowpod(pod_spec(affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                     {"weight": 1, "preference": term("node-role.kubernetes.io/control-plane", operator="Exists")}]}})),
                 "preferredDuringSchedulingIgnoredDuringExecution[0].preference.matchExpressions[0].key", NEVER,
                 id="control-plane-preference"),
    pytest.param(shadowpod(pod_spec(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                     {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["provider-node-1"]}]}]}}})),
                 "nodeSelectorTerms[0].matchFields: a consumer's pods may not select nodes by their fields", NEVER, id="matchFields"),
    pytest.param(shadowpod(pod_spec(topologySpreadConstraints=[{"maxSkew": 1, "topologyKey": "node-role.kubernetes.io/control-plane",
                                                                "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {}}])),
                 "spec.pod.spec.topologySpreadConstraints[0].topologyKey: 'node-role.kubernetes.io/control-plane'",
                 "spec.policy.pods.reservedNodeLabelKeys", id="spread-over-control-plane"),
    pytest.param(shadowpod(pod_spec(affinity={"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                     {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "node-role.kubernetes.io/control-plane"}]}})),
                 "spec.pod.spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey", NEVER,
                 id="pod-affinity-on-reserved-key"),
    pytest.param(shadowpod(pod_spec(affinity={"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                     {"labelSelector": {"matchLabels": {"k8s-app": "kube-dns"}}, "namespaces": ["kube-system"],
                      "topologyKey": "kubernetes.io/hostname"}]}})),
                 "podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].namespaces: a consumer's pods may relate only to pods "
                 "of their own namespace", NEVER, id="pod-affinity-to-kube-system"),
    pytest.param(shadowpod(pod_spec(affinity={"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                     {"weight": 1, "podAffinityTerm": {"labelSelector": {}, "namespaceSelector": {}, "topologyKey": "kubernetes.io/hostname"}}]}})),
                 "podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].podAffinityTerm.namespaceSelector", NEVER,
                 id="pod-anti-affinity-across-namespaces"),
    pytest.param(shadowpod(pod_spec(nodeSelector={"tenant.example.com/pool": "provider"})),
                 "spec.pod.spec.nodeSelector[tenant.example.com/pool]", "spec.policy.pods.reservedNodeLabelKeys",
                 id="selector-on-a-key-the-provider-reserved"),
    *(
        pytest.param(shadowpod(pod_spec(volumes=[{"name": "data", "emptyDir": {}}, {"name": "remote", kind: source}])),
                     f'spec.pod.spec.volumes[1].{kind}: volume "remote" of type {kind} is not granted', "spec.policy.pods.volumeTypes",
                     id=f"volume-{kind}")
        for kind, source in [
            ("nfs", {"server": "192.0.2.10", "path": "/exports"}),
            ("iscsi", {"targetPortal": "192.0.2.10:3260", "iqn": "iqn.2001-04.com.example:storage", "lun": 0}),
            ("rbd", {"monitors": ["192.0.2.10:6789"], "image": "foo"}),
            ("cephfs", {"monitors": ["192.0.2.10:6789"]}),
            ("flexVolume", {"driver": "example.com/driver"}),
            ("gitRepo", {"repository": "https://example.com/repo.git"}),
            ("csi", {"driver": "example.csi.k8s.io"}),
        ]
    ),
    pytest.param(shadowpod(pod_spec(volumes=[ephemeral(None)])),
                 "spec.pod.spec.volumes[0].ephemeral.volumeClaimTemplate.spec.storageClassName: volume \"scratch\" names no storage class",
                 "spec.policy.storage.classes", id="ephemeral-without-class"),
    pytest.param(shadowpod(pod_spec(volumes=[ephemeral("fast")])),
                 "spec.pod.spec.volumes[0].ephemeral.volumeClaimTemplate.spec.storageClassName: volume \"scratch\": storage class 'fast' is not granted",
                 "spec.policy.storage.classes", id="ephemeral-class-not-granted"),
    pytest.param(shadowpod(pod_spec(volumes=[projected({"configMap": {"name": "cfg"}}, {"serviceAccountToken": {"path": "token"}})])),
                 'spec.pod.spec.volumes[0].projected.sources[1].serviceAccountToken: projected volume "bundle" may combine only',
                 "a token of the provider's ServiceAccount", id="projected-provider-token"),
    pytest.param(shadowpod(pod_spec(volumes=[projected({"clusterTrustBundle": {"name": "x", "path": "ca"}})])),
                 "spec.pod.spec.volumes[0].projected.sources[0].clusterTrustBundle", NEVER, id="projected-cluster-trust-bundle"),
    pytest.param(shadowpod(pod_spec(runtimeClassName="kata")),
                 "spec.pod.spec.runtimeClassName: runtime class 'kata' is not granted", "spec.policy.pods.runtimeClasses",
                 id="runtime-class-not-granted"),
    pytest.param(with_metadata(annotations={"k8s.v1.cni.cncf.io/networks": "kube-system/provider-net"}),
                 "spec.pod.metadata.annotations[k8s.v1.cni.cncf.io/networks]: keys under 'k8s.v1.cni.cncf.io/'", NEVER,
                 id="multus-attachment"),
    pytest.param(with_metadata(annotations={"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}),
                 "spec.pod.metadata.annotations[cluster-autoscaler.kubernetes.io/safe-to-evict]", NEVER, id="autoscaler-block"),
    pytest.param(with_metadata(annotations={"karpenter.sh/do-not-disrupt": "true"}),
                 "spec.pod.metadata.annotations[karpenter.sh/do-not-disrupt]", NEVER, id="karpenter-block"),
    pytest.param(with_metadata(annotations={"kubernetes.io/egress-bandwidth": "10G"}),
                 "spec.pod.metadata.annotations[kubernetes.io/egress-bandwidth]", NEVER, id="cni-bandwidth"),
    pytest.param(with_metadata(labels={c.LABEL_MANAGED_BY: "enforcer"}),
                 f"spec.pod.metadata.labels[{c.LABEL_MANAGED_BY}]: keys under 'kube-offload.io/'", NEVER, id="kube-offload-own-label"),
]


@pytest.mark.parametrize("obj, field_message, key", POLICY_REFUSALS)
def test_the_pod_rules_of_the_policy_refuse_naming_the_field_and_the_key(obj, field_message, key):
    # The default policy, but for one node label prefix the provider reserves.
    the_consumer = consumer(policy={"pods": {"reservedNodeLabelKeys": ["tenant.example.com/"]}})
    message = refused(run(obj, the_consumer=the_consumer), 422, field_message, key)
    assert len(message.splitlines()) == 1, message


def test_a_provider_extends_the_denied_metadata_prefixes():
    obj = with_metadata(labels={"billing.example.com/tier": "free"})
    assert run(obj).allowed
    refused(run(obj, the_consumer=consumer(policy={"pods": {"deniedMetadataPrefixes": ["billing.example.com/"]}})), 422,
            "spec.pod.metadata.labels[billing.example.com/tier]", "spec.policy.pods.deniedMetadataPrefixes")


GRANTS = {
    "pods": {
        "priorityClasses": ["high"],
        "tolerations": ["dedicated"],
        "runtimeClasses": ["kata"],
        "volumeTypes": ["configMap", "secret", "projected", "ephemeral", "nfs"],
    },
    "storage": {"classes": ["local-path"]},
}


@pytest.mark.parametrize(
    "obj",
    [
        pytest.param(shadowpod(pod_spec(priorityClassName="high")), id="granted-priority-class"),
        pytest.param(shadowpod(pod_spec(tolerations=[{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}])),
                     id="granted-toleration"),
        pytest.param(shadowpod(pod_spec(runtimeClassName="kata")), id="granted-runtime-class"),
        pytest.param(shadowpod(pod_spec(volumes=[{"name": "share", "nfs": {"server": "192.0.2.10", "path": "/exports"}}])), id="granted-nfs"),
        pytest.param(shadowpod(pod_spec(volumes=[ephemeral("local-path")])), id="granted-ephemeral-class"),
    ],
)
def test_what_the_provider_grants_is_admitted(obj):
    refused(run(obj), 422)  # not by default
    assert run(obj, the_consumer=consumer(policy=GRANTS)).allowed


def test_the_grants_do_not_reach_what_is_never_granted():
    # Granting volumeTypes without emptyDir refuses it; system classes and tolerate-all stay out.
    message = refused(run(shadowpod(pod_spec(volumes=[{"name": "tmp", "emptyDir": {}}], tolerations=[{"operator": "Exists"}])),
                          the_consumer=consumer(policy=GRANTS)), 422)
    assert "volumes[0].emptyDir" in message and "tolerations[0]" in message


@pytest.mark.parametrize(
    "spec",
    [
        # The node lifecycle tolerations every pod carries (DefaultTolerationSeconds), with or without seconds.
        pod_spec(tolerations=[{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                              {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"}]),
        # Spreading and keeping replicas apart per node selects no node.
        pod_spec(topologySpreadConstraints=[{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"},
                                            {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"}]),
        pod_spec(affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname", "namespaces": [NS]}]}}),
        pod_spec(nodeSelector={"topology.kubernetes.io/zone": "a", "kubernetes.io/arch": "amd64"}),
        pod_spec(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term("disktype", "ssd")]}}}),
        pod_spec(volumes=[projected({"configMap": {"name": "cfg"}}, {"secret": {"name": "s"}}, {"downwardAPI": {"items": []}}),
                          {"name": "claim", "persistentVolumeClaim": {"claimName": "data"}}, {"name": "tmp", "emptyDir": {}},
                          {"name": "info", "downwardAPI": {"items": []}}, {"name": "s", "secret": {"secretName": "s"}}]),
        pod_spec(priorityClassName=""),
    ],
)
def test_what_the_default_policy_admits(spec):
    assert run(shadowpod(spec)).allowed


def test_the_keys_ordinary_workloads_carry_pass():
    obj = with_metadata(
        labels={"pod-template-hash": "5d8f", "app.kubernetes.io/name": "web", "controller-revision-hash": "web-7f",
                "statefulset.kubernetes.io/pod-name": "web-0", "apps.kubernetes.io/pod-index": "0",
                "batch.kubernetes.io/job-name": "j", "e2e.kube-offload.io/test": "x"},
        annotations={"kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z", c.ANNOTATION_ORIGIN_NAMESPACE: "demo",
                     c.ANNOTATION_ORIGIN_NAME: "web-0", c.ANNOTATION_ORIGIN_UID: "u"},
    )
    assert run(obj).allowed


def test_what_the_honest_virtual_kubelet_sends_is_admitted():
    # A Deployment's pod as the local apiserver stores it, translated as the vkubelet does.
    from vkubelet.pods.translation import TranslationContext, build_shadowpod_for

    local_pod = {
        "metadata": {"name": "web-5d8f-abcde", "namespace": "demo", "uid": "u1",
                     "labels": {"app": "web", "pod-template-hash": "5d8f"},
                     "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z"}},
        "spec": {
            "nodeName": "kube-offload-remote", "schedulerName": "default-scheduler", "priority": 0,
            "serviceAccountName": "default",
            "containers": [{"name": "app", "image": "nginx:1.27", "imagePullPolicy": "IfNotPresent",
                            "volumeMounts": [{"name": "kube-api-access-x1", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]}],
            "tolerations": [
                {"key": c.TAINT_KEY, "operator": "Exists", "effect": c.TAINT_EFFECT},
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            ],
            "volumes": [{"name": "kube-api-access-x1", "projected": {"sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
            ]}}],
        },
    }
    for reflection in (False, True):
        obj = build_shadowpod_for(local_pod, NS, TranslationContext(local_cluster_id=CONSUMER, reflection=reflection))
        obj["metadata"].update(uid="uid-1", generation=1)
        assert run(obj).allowed, (reflection, run(obj).message)


def test_every_policy_problem_is_reported_at_once_with_the_pod_security_ones():
    spec = pod_spec(hostPID=True, priorityClassName="system-node-critical", tolerations=[{"operator": "Exists"}],
                    nodeSelector={"node-role.kubernetes.io/control-plane": ""}, volumes=[{"name": "n", "nfs": {"server": "192.0.2.1", "path": "/"}}])
    message = refused(run(with_metadata(spec, annotations={"k8s.v1.cni.cncf.io/networks": "x"})), 422)
    fields = [line.split(":", 1)[0] for line in message.splitlines()]
    assert fields == [
        "spec.pod.spec.hostPID",
        "spec.pod.spec.priorityClassName",
        "spec.pod.spec.tolerations[0]",
        "spec.pod.spec.nodeSelector[node-role.kubernetes.io/control-plane]",
        "spec.pod.spec.volumes[0].nfs",
        "spec.pod.metadata.annotations[k8s.v1.cni.cncf.io/networks]",
    ]


def test_an_update_is_held_to_the_policy_too():
    old = shadowpod()
    new = copy.deepcopy(old)
    new["spec"]["pod"]["spec"]["tolerations"] = [{"operator": "Exists"}]
    refused(run(new, operation="UPDATE", old=old), 422, "spec.pod.spec.tolerations[0]")


@pytest.mark.parametrize(
    "policy, fragment",
    [
        ({"pods": {"priorityClasses": ["system-node-critical"]}}, "spec.policy.pods.priorityClasses: 'system-node-critical' cannot be granted"),
        ({"pods": {"volumeTypes": ["hostPath"]}}, "spec.policy.pods.volumeTypes: 'hostPath'"),
        ({"pods": {"tolerations": "all"}}, "spec.policy.pods.tolerations: must be a list of non-empty strings"),
        ({"pods": {"priorityClass": ["high"]}}, "spec.policy.pods: unknown key(s) priorityClass"),
    ],
)
def test_a_policy_that_does_not_parse_is_the_providers_mistake(policy, fragment):
    with pytest.raises(ConsumerError, match=re.escape(fragment)):
        consumer_terms(consumer(policy=policy))
    refused(run(shadowpod(), the_consumer=consumer(policy=policy)), 403, 'Consumer "local" is misconfigured', fragment,
            "the provider must fix it")


def test_consumer_terms_carry_the_policy():
    assert consumer_terms(consumer()).policy == DEFAULT_POLICY
    assert consumer_terms(consumer(policy=GRANTS)).policy.pods.priority_classes == ("high",)


# --- the offload chain (docs/multihop.md) -----------------------------------------------------------
def chained(value: str | None) -> dict:
    annotations = {c.ANNOTATION_OFFLOAD_CHAIN: value} if value is not None else None
    return builders.shadowpod("web", NS, spec=pod_spec(), pod_labels={"app": "web"}, pod_annotations=annotations,
                              origin=CONSUMER)


def judge(obj: dict, cluster_id: str):
    return decide(
        request(obj),
        namespace=twin_namespace(),
        consumer=consumer(),
        usage={"pods": 0},
        service_account=SERVICE_ACCOUNTS.get,
        cluster_id=cluster_id,
    )


@pytest.mark.parametrize("value", [None, CONSUMER, f"far-away,{CONSUMER}"])
def test_a_chain_ending_with_the_consumer_is_admitted(value):
    assert judge(chained(value), "provider").allowed


def test_a_loop_back_to_this_provider_is_refused_naming_the_chain():
    refused(judge(chained(f"provider,{CONSUMER}"), "provider"), 422,
            f"spec.pod.metadata.annotations[{c.ANNOTATION_OFFLOAD_CHAIN}]", f"provider -> {CONSUMER} -> provider")


def test_a_chain_that_does_not_end_with_the_consumer_is_refused():
    refused(judge(chained("someone-else"), "provider"), 422, f"must end with {CONSUMER!r}")


def test_without_its_own_cluster_id_the_provider_skips_only_the_loop_check():
    assert judge(chained(f"provider,{CONSUMER}"), "").allowed
    refused(judge(chained("a,,b"), ""), 422, "not a cluster id")


# --- a ShadowPod whose run ended ---------------------------------------------------------------------
@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_the_spec_of_a_finished_shadowpod_is_immutable(phase):
    old = shadowpod(pod_spec(restartPolicy="Never"))
    old["status"] = {"phase": phase, "runCompleted": True}
    rewritten = copy.deepcopy(old)
    rewritten["spec"]["pod"]["spec"]["restartPolicy"] = "Always"
    rewritten["spec"]["pod"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "3"
    refused(run(rewritten, operation="UPDATE", old=old), 422, f"spec: immutable once the ShadowPod's status.phase is {phase}",
            "delete the ShadowPod and create a new one")
    # Metadata stays writable (the garbage collector and the vkubelet's deletion write it).
    relabelled = copy.deepcopy(old)
    relabelled["metadata"]["labels"] = {**relabelled["metadata"].get("labels", {}), "x": "y"}
    assert run(relabelled, operation="UPDATE", old=old).allowed
    # A running one's spec is judged as before.
    running = copy.deepcopy(old)
    running["status"] = {"phase": "Running"}
    image = copy.deepcopy(running)
    image["spec"]["pod"]["spec"]["containers"][0]["image"] = "nginx:2"
    assert run(image, operation="UPDATE", old=running).allowed


# --- every pod the enforcer makes is judged (judge_pod_create) -----------------------------------------
def judged(obj: dict, *, the_consumer: dict | None = None, usage: dict | None = None, namespace: dict | None | str = "twin"):
    if namespace == "twin":
        namespace = twin_namespace()
    return judge_pod_create(
        obj,
        namespace=namespace,  # type: ignore[arg-type]
        consumer=the_consumer if the_consumer is not None else consumer(quota={"cpu": "4", "pods": "10"}),
        usage=usage or {"pods": 0},
        service_account=SERVICE_ACCOUNTS.get,
    )


def test_a_pod_is_judged_against_the_consumer_as_it_is_now():
    tolerating = shadowpod(pod_spec(tolerations=[{"key": "gpu", "operator": "Exists"}]))
    granted = consumer(policy={"pods": {"tolerations": ["gpu"]}})
    assert judged(tolerating, the_consumer=granted).allowed
    # The provider took the toleration back since the ShadowPod was admitted: no new pod.
    refused(judged(tolerating, the_consumer=consumer()), 422, "spec.pod.spec.tolerations[0].key: toleration of taint 'gpu' is not granted",
            "spec.policy.pods.tolerations")
    # The status that records an earlier pod is not what is judged.
    ran = copy.deepcopy(tolerating)
    ran["status"] = {"phase": "Running", "podUID": "p-1"}
    refused(judged(ran, the_consumer=consumer()), 422, "tolerations[0].key")


def test_a_pod_is_judged_against_the_quota_without_its_own_shadowpod():
    obj = shadowpod()  # 500m cpu, 1 pod
    assert judged(obj, the_consumer=consumer(quota={"pods": "1"}), usage=milli(pods="0")).allowed
    message = refused(judged(obj, the_consumer=consumer(quota={"cpu": "1"}), usage=milli(cpu="800m")), 403)
    assert message.startswith('exceeded quota of consumer "local": cpu: requested 500m, used 800m, quota 1'), message


def test_a_drain_refuses_a_pod_but_a_cordon_does_not():
    drained = consumer(drain={"startedAt": "2026-11-27T03:00:00Z", "gracePeriodSeconds": 60})
    refused(judged(shadowpod(), the_consumer=drained), 403, 'consumer "local" is drained by the provider: no pod is made')
    # A cordon stops new ShadowPods; an existing one's pod runs on (recreated if lost).
    assert judged(shadowpod(), the_consumer=consumer(cordoned=True)).allowed


def test_a_pod_of_a_namespace_or_consumer_gone_is_refused():
    refused(judged(shadowpod(), namespace=None), 403, "is not a twin namespace")
    assert not judged(shadowpod(), the_consumer={"metadata": {"name": CONSUMER}, "spec": {"policy": {"pods": {"priorityClasses": ["system-x"]}}}}).allowed


def test_an_ephemeral_volume_claims_no_more_than_the_largest_claim():
    def ephemeral(size: str) -> dict:
        claim = {"storageClassName": "standard", "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}
        return shadowpod(pod_spec(volumes=[{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": claim}}}]))

    granted = consumer(policy={"storage": {"classes": ["standard"]}})
    assert run(ephemeral("100Gi"), the_consumer=granted).allowed
    # The provider's ephemeral volume controller makes this claim, which the PVC policy
    # (the consumer's writes only) never sees: the default bound holds here.
    refused(run(ephemeral("1Ei"), the_consumer=granted), 422,
            "spec.pod.spec.volumes[0].ephemeral.volumeClaimTemplate.spec.resources.requests.storage: "
            'volume "scratch" claims 1Ei, more than the 100Gi consumer "local" may claim at once',
            "spec.policy.storage.maxClaimSize")
    bigger = consumer(policy={"storage": {"classes": ["standard"], "maxClaimSize": "2Ei"}})
    assert run(ephemeral("1Ei"), the_consumer=bigger).allowed


# --- sidecars (restartable init containers) count and are limited like containers, in every mode ------------
def sidecar_pod(sidecar_resources: dict) -> dict:
    app = {"name": "app", "image": "x", "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "500m"}}}
    sidecar = {"name": "proxy", "image": "y", "restartPolicy": "Always", "resources": sidecar_resources}
    return shadowpod(pod_spec(containers=[app], initContainers=[sidecar]))


@pytest.mark.parametrize("mode, quota", [
    ("requests", {"cpu": "1"}), ("limits", {"cpu": "1"}), ("both", {"cpu": "1"}), ("hard", {"cpu": "1"}),
    ("requests", {"requests.cpu": "1"}), ("requests", {"limits.cpu": "1"}),
])
def test_a_sidecar_counts_against_the_quota_in_every_mode(mode, quota):
    the_consumer = consumer(quota=quota, policy={"quotaMode": mode})
    within = sidecar_pod({"requests": {"cpu": "500m"}, "limits": {"cpu": "500m"}})
    assert run(within, the_consumer=the_consumer).allowed
    # The app alone fits; with its sidecar, the pod holds 1500m: over.
    over = sidecar_pod({"requests": {"cpu": "1"}, "limits": {"cpu": "1"}})
    message = refused(run(over, the_consumer=the_consumer), 403)
    assert "exceeded quota" in message and "1500m" in message, message


@pytest.mark.parametrize("mode, quota, fragment", [
    ("limits", {"cpu": "1"}, "spec.pod.spec.initContainers[0].resources.limits.cpu: must be set"),
    ("both", {"cpu": "1"}, "spec.pod.spec.initContainers[0].resources.limits.cpu: must be set"),
    ("requests", {"limits.cpu": "1"}, "spec.pod.spec.initContainers[0].resources.limits.cpu: must be set"),
    ("hard", {"cpu": "1"}, 'spec.pod.spec.initContainers[0].resources.limits.cpu (container "proxy"): must equal requests.cpu'),
])
def test_a_sidecar_must_set_the_limits_the_quota_counts(mode, quota, fragment):
    the_consumer = consumer(quota=quota, policy={"quotaMode": mode})
    unlimited = sidecar_pod({"requests": {"cpu": "100m"}} if mode != "hard" else {"requests": {"cpu": "100m"}, "limits": {"cpu": "200m"}})
    refused(run(unlimited, the_consumer=the_consumer), 403, fragment)


def test_a_sidecar_is_judged_when_its_pod_is_made_too():
    over = sidecar_pod({"requests": {"cpu": "1"}, "limits": {"cpu": "1"}})
    refused(judged(over, the_consumer=consumer(quota={"cpu": "1"})), 403, "exceeded quota")


# --- ephemeral containers (kubectl debug) -------------------------------------------------------------
DEBUG = {"name": "debugger", "image": "busybox:1.36", "targetContainerName": "app"}


def test_an_ephemeral_container_is_refused_unless_granted_naming_key_and_value():
    debugged = shadowpod(pod_spec(ephemeralContainers=[DEBUG]))
    refused(run(debugged, operation="UPDATE", old=shadowpod()), 422, "spec.pod.spec.ephemeralContainers[0]",
            "spec.policy.pods.ephemeralContainers: true")
    granted = consumer(quota={"pods": "10"}, policy={"pods": {"ephemeralContainers": True}})
    assert run(debugged, operation="UPDATE", old=shadowpod(), the_consumer=granted).allowed


def test_only_the_ephemeral_containers_an_update_adds_are_judged():
    # Added while granted, then the grant withdrawn: the pod's other updates still pass...
    debugged = shadowpod(pod_spec(ephemeralContainers=[DEBUG]))
    relabelled = copy.deepcopy(debugged)
    relabelled["spec"]["pod"]["metadata"]["labels"]["tier"] = "web"
    relabelled["spec"]["pod"]["spec"]["containers"][0]["image"] = "nginx:2"
    assert run(relabelled, operation="UPDATE", old=debugged).allowed
    # ...and a new debug container is refused; privileged is refused by the baseline rules.
    more = shadowpod(pod_spec(ephemeralContainers=[DEBUG, {**DEBUG, "name": "debugger-2"}]))
    refused(run(more, operation="UPDATE", old=debugged), 422, "spec.pod.spec.ephemeralContainers[0]", "debugger-2")
    granted = consumer(quota={"pods": "10"}, policy={"pods": {"ephemeralContainers": True}})
    privileged = shadowpod(pod_spec(ephemeralContainers=[DEBUG, {**DEBUG, "name": "root", "securityContext": {"privileged": True}}]))
    refused(run(privileged, operation="UPDATE", old=debugged, the_consumer=granted), 422, "may not be privileged")
