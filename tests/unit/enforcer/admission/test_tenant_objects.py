"""How many TwinNamespace requests and OffloadSlices a consumer keeps in its tenant
namespace (enforcer/admission/tenant_objects.py and its glue): counted from the informers
plus what was admitted and not cached yet, for the consumer's identity only."""

from __future__ import annotations

import threading

import orjson

from enforcer.admission.tenant_objects_webhook import RESERVATION_SECONDS, TenantObjectValidator
from kube_offload import constants as c
from kube_offload.admission import build_review, parse_review
from kube_offload.runtime.indexer import Indexer
from enforcer.consumers.slices import NAMESPACE_INDEX, namespace_of

TENANT = c.tenant_namespace("local")
USER = f"system:serviceaccount:{TENANT}:{c.CONSUMER_SERVICE_ACCOUNT}"


class Caches:
    def __init__(self, policy: dict | None = None) -> None:
        self.consumer_obj = {"metadata": {"name": "local"}, "spec": {"policy": policy or {}}}

    def namespace(self, name):
        return {"metadata": {"name": name, "labels": {c.LABEL_TENANT: "local"}}} if name == TENANT else {"metadata": {"name": name}}

    def consumer(self, name):
        return self.consumer_obj if name == "local" else None

    def has_synced(self):
        return True


class Informer(Indexer):
    def __init__(self) -> None:
        super().__init__({NAMESPACE_INDEX: namespace_of})

    def has_synced(self) -> bool:
        return True


def slice_obj(name: str, namespace: str = TENANT) -> dict:
    return {"apiVersion": f"{c.DOMAIN}/{c.SHADOWPOD_VERSION}", "kind": c.SLICE_KIND,
            "metadata": {"name": name, "namespace": namespace}, "spec": {"pool": "gpu", "resources": {"cpu": "1"}}}


def create(obj: dict, *, user: str = USER, resource: str = c.SLICE_PLURAL, dry: bool = False):
    review = build_review(obj, operation="CREATE", user_info={"username": user}, dry_run=dry)
    review["request"]["resource"] = {"group": c.DOMAIN, "version": c.SHADOWPOD_VERSION, "resource": resource}
    review["request"]["namespace"] = obj["metadata"]["namespace"]
    review["request"]["name"] = obj["metadata"]["name"]
    return parse_review(orjson.dumps(review))


def validator(policy: dict | None = None, now: list[float] | None = None):
    slices, requests = Informer(), Informer()
    clock = now or [0.0]
    v = TenantObjectValidator(Caches(policy), {c.SLICE_PLURAL: slices, c.TWIN_NAMESPACE_PLURAL: requests}, clock=lambda: clock[0])
    return v, slices, requests, clock


def test_a_consumer_keeps_at_most_its_limit_of_slices_counting_what_is_not_cached_yet():
    v, slices, _, clock = validator({"slices": {"maxCount": 2}})
    slices.put(slice_obj("a"))
    assert v.review(create(slice_obj("b"))).allowed  # reserved: the informer has not shown it yet
    refused = v.review(create(slice_obj("c")))
    assert not refused.allowed and refused.code == 403
    assert 'consumer "local" holds 2 OffloadSlices in namespace "kube-offload-tenant-local", the most it may' in refused.message
    assert "Consumer spec.policy.slices.maxCount: 2" in refused.message
    slices.put(slice_obj("b"))  # the informer catches up: still two
    assert not v.review(create(slice_obj("c"))).allowed
    slices.pop(f"{TENANT}/a")
    assert v.review(create(slice_obj("c"))).allowed
    # A reservation the informer never confirms (the create failed later) runs out.
    v2, _, _, clock2 = validator({"slices": {"maxCount": 1}})
    assert v2.review(create(slice_obj("x"))).allowed and not v2.review(create(slice_obj("y"))).allowed
    clock2[0] += RESERVATION_SECONDS + 1
    assert v2.review(create(slice_obj("y"))).allowed


def test_concurrent_creates_cannot_pass_the_limit_together():
    v, _, _, _ = validator({"twinNamespaces": {"maxRequests": 3}})
    barrier = threading.Barrier(12)
    answers = []

    def ask(i: int) -> None:
        barrier.wait()
        request = {"apiVersion": f"{c.DOMAIN}/{c.SHADOWPOD_VERSION}", "kind": c.TWIN_NAMESPACE_KIND,
                   "metadata": {"name": f"t{i}-local", "namespace": TENANT}, "spec": {"localNamespace": f"t{i}"}}
        answers.append(v.review(create(request, resource=c.TWIN_NAMESPACE_PLURAL)))

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sum(a.allowed for a in answers) == 3
    assert all("twinNamespaces.maxRequests: 3" in a.message for a in answers if not a.allowed)


def test_the_default_bounds_and_who_is_judged():
    v, slices, _, _ = validator()
    for i in range(20):
        slices.put(slice_obj(f"s{i}"))
    assert not v.review(create(slice_obj("s20"))).allowed  # 20 by default
    assert v.review(create(slice_obj("s20"), user="kubernetes-admin")).allowed  # the provider's admins
    assert v.review(create(slice_obj("s20"), dry=True, user="kubernetes-admin")).allowed
    assert v.review(create(slice_obj("s0", namespace="elsewhere"))).allowed  # not a tenant namespace
    # A dry run reserves nothing.
    w, _, _, _ = validator({"slices": {"maxCount": 1}})
    assert w.review(create(slice_obj("a"), dry=True)).allowed and w.review(create(slice_obj("a"))).allowed
