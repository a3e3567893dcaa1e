"""A resource slice's ShadowPods at the webhook (enforcer/admission/slice_rules.py and its
glue in shadowpod_webhook.py; docs/slices.md "Admission"): the slice must exist and be
accepted, its pods stay within status.accepted, the label is immutable, and a consumer
field that contradicts the pool's patch is refused. Caches are dictionaries here; the
real webhook against a real API server: tests/e2e/test_slices_provider.py."""

from __future__ import annotations

import threading
from typing import Any

import orjson

from enforcer.admission.ledger import Ledger
from enforcer.admission.shadowpod_webhook import ShadowPodValidator
from kube_offload import constants as c
from kube_offload.admission import Decision, build_review, parse_review
from support import builders

NS = "demo-local"
TENANT = c.tenant_namespace("local")
USER = f"system:serviceaccount:{TENANT}:consumer"
POOLS = [{"name": "gpu", "nodeSelector": {"pool": "gpu"}, "runtimeClassName": "nvidia",
          "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}]


class Cache:
    def __init__(self, objects: dict[str, dict] | None = None) -> None:
        self.objects = dict(objects or {})
        self.lock = threading.Lock()

    def get(self, key: str) -> dict | None:
        return self.objects.get(key)

    def list(self) -> list[dict]:
        return list(self.objects.values())

    def has_synced(self) -> bool:
        return True


class Caches:
    def __init__(self, slices: dict[str, dict], quota: dict[str, str] | None = None) -> None:
        self.namespaces = Cache({NS: {"metadata": {"name": NS, "labels": {
            c.LABEL_MANAGED_BY: c.MANAGED_BY_ENFORCER, c.LABEL_ORIGIN_CLUSTER_ID: "local"}}}})
        self.consumers = Cache({"local": {"metadata": {"name": "local"}, "spec": {"quota": quota or {}, "pools": POOLS}}})
        self.slices = slices

    def namespace(self, name: str) -> dict | None:
        return self.namespaces.get(name)

    def consumer(self, name: str) -> dict | None:
        return self.consumers.get(name)

    def service_account(self, namespace: str, name: str) -> None:
        return None

    def offload_slice(self, namespace: str, name: str) -> dict | None:
        return self.slices.get(f"{namespace}/{name}")

    def has_synced(self) -> bool:
        return True


def offload_slice(phase: str = "Accepted", **accepted: str) -> dict[str, Any]:
    return {"metadata": {"name": "train", "namespace": TENANT}, "spec": {"pool": "gpu", "resources": accepted},
            "status": {"phase": phase, "accepted": accepted, "message": "nothing left" if phase == "Refused" else ""}}


def shadowpod(name: str, cpu: str = "1", *, slice_name: str | None = "train", **spec: Any) -> dict[str, Any]:
    labels = {c.LABEL_SLICE: slice_name} if slice_name else {}
    return builders.shadowpod(name, NS, spec={"containers": [builders.container(requests={"cpu": cpu})], **spec},
                              origin="local", uid=f"uid-{name}", generation=1, labels=labels)


def review(obj: dict, *, operation: str = "CREATE", old: dict | None = None) -> Any:
    return parse_review(orjson.dumps(build_review(obj, operation=operation, old_object=old, user_info={"username": USER})))


def validator(slices: dict[str, dict], existing: list[dict] | None = None, quota: dict[str, str] | None = None):
    cache = Cache({f"{NS}/{sp['metadata']['name']}": sp for sp in existing or []})
    dry_runs: list[tuple[dict, Any]] = []

    def dry_run(namespace: str, obj: dict, operation: str, probe: bool, pool: Any = None) -> Decision:
        dry_runs.append((obj, pool))
        return Decision.allow()

    v = ShadowPodValidator(shadowpods=cache, caches=Caches(slices, quota), dry_run=dry_run, ledger=Ledger(cache.get))  # type: ignore[arg-type]
    return v, dry_runs


ACCEPTED = {f"{TENANT}/train": offload_slice(cpu="2", pods="2")}


def test_a_pod_of_an_accepted_slice_within_it_is_admitted() -> None:
    v, dry_runs = validator(ACCEPTED)
    assert v.review(review(shadowpod("a"))).allowed
    # The API server's dry run judges the Pod with the pool's patch.
    [(_, pool)] = dry_runs
    assert pool.name == "gpu" and pool.runtime_class_name == "nvidia"
    v, dry_runs = validator({})
    assert v.review(review(shadowpod("b", slice_name=None))).allowed
    assert dry_runs[0][1] is None


def test_a_pod_beyond_what_the_slice_accepted_is_refused_naming_each_resource() -> None:
    v, _ = validator(ACCEPTED, existing=[shadowpod("a", "1500m")])
    decision = v.review(review(shadowpod("b", "1")))
    assert not decision.allowed and decision.code == 403
    assert decision.message.startswith(
        f'exceeded OffloadSlice "train" in namespace "{TENANT}": cpu: requested 1, used 1500m, accepted 2; ')
    # pods is counted because the slice accepted a number of pods
    v, _ = validator(ACCEPTED, existing=[shadowpod("a", "100m"), shadowpod("b", "100m")])
    assert "pods: requested 1, used 2, accepted 2" in v.review(review(shadowpod("c", "100m"))).message


def test_a_slice_bounds_every_resource_its_pods_request_not_only_those_it_accepted() -> None:
    # A "pods: 1" slice of a GPU pool: the pool's toleration must not let its pod take GPUs
    # (or cpu, or memory) the slice was never given: what it did not ask for counts as 0.
    v, _ = validator({f"{TENANT}/train": offload_slice(pods="1")})
    gpu = {"containers": [builders.container(requests={"nvidia.com/gpu": "8"}, limits={"nvidia.com/gpu": "8"})]}
    decision = v.review(review(builders.shadowpod("g", NS, spec=gpu, origin="local", uid="uid-g", generation=1,
                                                  labels={c.LABEL_SLICE: "train"})))
    assert not decision.allowed and decision.code == 403
    assert "nvidia.com/gpu: requested 8, used 0, accepted 0 (the slice did not ask for it" in decision.message
    assert "limits." not in decision.message  # limits are bounded through the requests
    assert "cpu: requested 1, used 0, accepted 0" in v.review(review(shadowpod("c", "1"))).message
    # A pod requesting nothing the slice lacks passes; pods are bounded only when asked for.
    bare = builders.shadowpod("b", NS, spec={"containers": [builders.container()]}, origin="local", uid="uid-b",
                              generation=1, labels={c.LABEL_SLICE: "train"})
    assert v.review(review(bare)).allowed
    v, _ = validator({f"{TENANT}/train": offload_slice(cpu="2")}, existing=[shadowpod(f"p{i}", "100m") for i in range(5)])
    assert v.review(review(shadowpod("q", "100m"))).allowed


def test_a_pod_keeps_the_pool_its_first_pod_was_made_on() -> None:
    # The consumer points its slice at another pool once the first pod ran: the pod is not
    # made again on either (judge_pod reads the pool its status recorded).
    moved = offload_slice(cpu="2", pods="2")
    moved["spec"]["pool"] = "cpu-pool"
    v, _ = validator({f"{TENANT}/train": moved})
    made = shadowpod("a", "1")
    made["status"] = {"phase": "Running", "slicePool": "gpu", "podUID": "p1"}
    decision = v.judge_pod(made)
    assert not decision.allowed and decision.code == 403
    assert "made on pool 'gpu' (status.slicePool)" in decision.message and "now names pool 'cpu-pool'" in decision.message
    # Back on its pool: made again, with that pool's patch.
    v, _ = validator({f"{TENANT}/train": offload_slice(cpu="2", pods="2")})
    assert v.judge_pod(made).allowed


def test_pods_of_other_slices_and_ended_pods_do_not_count() -> None:
    other = shadowpod("x", "2", slice_name="other")
    ended = shadowpod("y", "2")
    ended["status"] = {"phase": "Succeeded"}
    v, _ = validator(ACCEPTED, existing=[other, ended, shadowpod("z", "2", slice_name=None)])
    assert v.review(review(shadowpod("a", "2"))).allowed


def test_concurrent_admissions_of_one_slice_see_each_other() -> None:
    v, _ = validator(ACCEPTED)
    assert v.review(review(shadowpod("a", "1500m"))).allowed
    refused = v.review(review(shadowpod("b", "1")))  # "a" is in the ledger, not yet in the cache
    assert not refused.allowed and "used 1500m" in refused.message


def test_an_update_counts_only_what_it_adds() -> None:
    old = shadowpod("a", "1500m")
    v, _ = validator(ACCEPTED, existing=[old])
    assert v.review(review(shadowpod("a", "1500m", activeDeadlineSeconds=5), operation="UPDATE", old=old)).allowed


def test_a_slice_that_is_missing_or_not_accepted_refuses_naming_the_label() -> None:
    v, _ = validator({})
    decision = v.review(review(shadowpod("a")))
    assert decision.code == 403
    assert decision.message.startswith(f"metadata.labels[{c.LABEL_SLICE}]='train': there is no OffloadSlice \"train\"")
    for phase in ("Pending", "Refused"):
        v, _ = validator({f"{TENANT}/train": offload_slice(phase)})
        decision = v.review(review(shadowpod("a")))
        assert not decision.allowed and f"is {phase}, not Accepted or PartiallyAccepted" in decision.message
    v, _ = validator({f"{TENANT}/train": offload_slice("PartiallyAccepted", cpu="1")})
    assert v.review(review(shadowpod("a", "1"))).allowed


def test_an_update_adding_nothing_passes_even_when_the_slice_was_refused_since() -> None:
    old = shadowpod("a", "1")
    v, _ = validator({f"{TENANT}/train": offload_slice("Refused")}, existing=[old])
    assert v.review(review(shadowpod("a", "1", activeDeadlineSeconds=5), operation="UPDATE", old=old)).allowed
    raised = v.review(review(shadowpod("a", "2"), operation="UPDATE", old=old))
    assert not raised.allowed and "is Refused" in raised.message


def test_the_label_is_immutable() -> None:
    old = shadowpod("a")
    v, _ = validator(ACCEPTED, existing=[old])
    for new_slice in ("other", None):
        relabelled = shadowpod("a", slice_name=new_slice)
        decision = v.review(review(relabelled, operation="UPDATE", old=old))
        assert decision.code == 422 and decision.message.startswith(f"metadata.labels[{c.LABEL_SLICE}]: immutable")
    unlabelled = shadowpod("b", slice_name=None)
    decision = v.review(review(shadowpod("b"), operation="UPDATE", old=unlabelled))
    assert decision.code == 422 and "(absent -> 'train')" in decision.message


def test_a_field_that_contradicts_the_pool_patch_is_refused() -> None:
    v, _ = validator(ACCEPTED)
    decision = v.review(review(shadowpod("a", nodeSelector={"pool": "general"})))
    assert decision.code == 422
    assert decision.message.startswith("spec.pod.spec.nodeSelector[pool]='general' conflicts with pool 'gpu'")
    # The same value as the pool's is no conflict (but the provider policy judges it: here
    # the key is not reserved, so it passes).
    assert v.review(review(shadowpod("b", nodeSelector={"pool": "gpu"}))).allowed


def test_a_pod_without_the_label_is_not_a_slice_pod() -> None:
    v, _ = validator({})
    assert v.review(review(shadowpod("a", slice_name=None))).allowed


def test_the_verdict_cache_key_holds_the_slice_and_its_pools_patch() -> None:
    from enforcer.admission import dry_run, verdict_cache
    from kube_offload.pools import parse_pools

    pool = parse_pools({"pools": POOLS})["gpu"]
    verdicts = dry_run.Verdicts(cache=verdict_cache.VerdictCache(), namespace=lambda _ns: None,
                                limit_ranges=lambda _ns: [], resource_quotas=lambda _ns: [])
    plain = verdicts.key(NS, shadowpod("a", slice_name=None))
    in_slice = verdicts.key(NS, shadowpod("a"), pool)
    other_slice = verdicts.key(NS, shadowpod("a", slice_name="other"), pool)
    assert len({plain, in_slice, other_slice}) == 3
    # The Pod judged is the enforcer's, patch included.
    assert dry_run.pod_for(shadowpod("a"), pool)["spec"]["nodeSelector"] == {"pool": "gpu"}


def _with_template_slice(sp: dict[str, Any], value: str) -> dict[str, Any]:
    sp["spec"]["pod"].setdefault("metadata", {}).setdefault("labels", {})[c.LABEL_SLICE] = value
    return sp


def test_the_pod_template_may_repeat_the_shadowpods_slice_and_nothing_else() -> None:
    """The consumer's vkubelet labels the pod too (it selects its remote pods by it:
    docs/slices.md); a template claiming another slice, or one its ShadowPod does not
    name, is refused before any count."""
    v, _ = validator(ACCEPTED)
    assert v.review(review(_with_template_slice(shadowpod("a"), "train"))).allowed
    for sp in (_with_template_slice(shadowpod("b"), "other"), _with_template_slice(shadowpod("c", slice_name=None), "train")):
        decision = v.review(review(sp))
        assert not decision.allowed and decision.code == 422
        assert decision.message.startswith(f"spec.pod.metadata.labels[{c.LABEL_SLICE}]: ")
        assert "may only repeat the ShadowPod's" in decision.message
