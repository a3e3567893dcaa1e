"""The local reflection scope: which namespaces the vkubelet's local informers of
reflected kinds watch, as namespaces opt in and out, without an API server. Namespace
events are fed through Informer._apply (the path a watch event takes); nothing is
started, so no list or watch is ever sent. That the scoped informers really list and
watch only offloaded namespaces is tests/e2e/test_reflection_scope.py's job."""

from __future__ import annotations

from kubernetes import client

from kube_offload.runtime import kinds
from kube_offload import constants as c
from kube_offload.runtime.informer import ADDED, DELETED, MODIFIED, Informer
from vkubelet.shared.informers import SharedInformers
from vkubelet.twins.namespaces import plan_twin
from vkubelet.reflection.scope import offloaded_namespaces
from vkubelet.settings import Settings
from support.informers import never_listed


class Twins:
    """What the scope reads of TwinNamespaces: its caches (namespaces, our Consumer, our
    twin requests) and plan(), here with the real rule and a node label set a test may
    change (as a provider's suggested labels do)."""

    def __init__(self) -> None:
        self.local_namespaces = Informer(name="local-namespaces", list_func=never_listed)
        self.consumer = Informer(name="remote-consumer", list_func=never_listed)
        self.requests = Informer(name="remote-twinnamespaces", list_func=never_listed)
        self.labels = {c.LABEL_CLUSTER_ID: "remote-1"}

    def plan(self, name: str):
        return plan_twin(
            self.local_namespaces.get(name), name=name, virtual_node_labels=self.labels, local_cluster_id="local",
        )


def _namespace(name: str, offloaded: bool, **labels) -> dict:
    if offloaded:
        labels[c.LABEL_ENABLED] = c.ENABLED_VALUE
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels, "resourceVersion": "1"}}


def _setup():
    settings = Settings(cluster_id="remote-1", local_cluster_id="local")
    informers = SharedInformers(settings, client.ApiClient(), client.ApiClient())
    twins = Twins()
    return informers, twins


def test_scope_follows_namespaces_opting_in_and_out():
    informers, twins = _setup()
    ns = twins.local_namespaces
    ns.apply(ADDED, _namespace("early", True))  # listed before the scope was made
    ns.apply(ADDED, _namespace("plain", False))
    scope = offloaded_namespaces(informers, twins)
    assert offloaded_namespaces(informers, twins) is scope  # one per process
    assert scope.namespaces() == {"early"}

    secrets = scope.local_informer("secrets", kinds.SECRETS)
    configmaps = scope.local_informer("configmaps", kinds.CONFIG_MAPS)
    assert scope.local_informer("secrets", kinds.SECRETS) is secrets  # shared by name
    assert secrets.namespaces() == ["early"] and configmaps.namespaces() == ["early"]

    ns.apply(MODIFIED, _namespace("plain", True))  # kubectl label ns plain kube-offload.io/enabled=true
    assert secrets.namespaces() == ["early", "plain"] == configmaps.namespaces()

    # pod-placement=Local keeps the namespace extended (service offloading): still reflected.
    ns.apply(MODIFIED, _namespace("early", True, **{c.LABEL_POD_PLACEMENT: c.PLACEMENT_LOCAL}))
    assert secrets.namespaces() == ["early", "plain"]

    ns.apply(MODIFIED, _namespace("early", False))  # kubectl label ns early kube-offload.io/enabled-
    assert secrets.namespaces() == ["plain"]

    ns.apply(DELETED, _namespace("plain", True))
    assert secrets.namespaces() == [] == configmaps.namespaces()
    assert scope.namespaces() == set()


def test_a_cluster_selector_that_does_not_match_keeps_the_namespace_out():
    informers, twins = _setup()
    scope = offloaded_namespaces(informers, twins)
    services = scope.local_informer("services", kinds.SERVICES)
    other = _namespace("elsewhere", True)
    other["metadata"]["annotations"] = {c.ANNOTATION_CLUSTER_SELECTOR: f"{c.LABEL_CLUSTER_ID}=remote-2"}
    twins.local_namespaces.apply(ADDED, other)
    assert services.namespaces() == []


def test_reflection_waits_until_the_namespaces_are_known():
    informers, twins = _setup()
    scope = offloaded_namespaces(informers, twins)
    scope.local_informer("secrets", kinds.SECRETS)
    # Namespaces not listed yet: an empty scope would look "synced" and let reflectors
    # decide that every remote copy's local object is gone.
    assert scope.has_synced() is False
    twins.local_namespaces.apply(ADDED, _namespace("demo", True))
    twins.local_namespaces._synced.set()  # what the first list does
    # Listed, but the scoped informer has not listed namespace demo (never started).
    assert scope.has_synced() is False


def test_provider_suggested_labels_can_bring_a_namespace_in():
    informers, twins = _setup()
    scope = offloaded_namespaces(informers, twins)
    ingresses = scope.local_informer("ingresses", kinds.INGRESSES)
    eu = _namespace("eu-only", True)
    eu["metadata"]["annotations"] = {c.ANNOTATION_CLUSTER_SELECTOR: "topology.kubernetes.io/region=eu-west"}
    twins.local_namespaces.apply(ADDED, eu)
    assert ingresses.namespaces() == []

    consumer = {"metadata": {"name": "local", "resourceVersion": "1"}, "spec": {"nodeLabels": {}}}
    twins.consumer.apply(ADDED, consumer)
    twins.labels = {**twins.labels, "topology.kubernetes.io/region": "eu-west"}
    # A status-only change of the Consumer is not looked at ...
    twins.consumer.apply(MODIFIED, {**consumer, "metadata": {"name": "local", "resourceVersion": "2"}, "status": {"x": 1}})
    assert ingresses.namespaces() == []
    # ... its suggested labels are.
    relabelled = {"metadata": {"name": "local", "resourceVersion": "3"},
                  "spec": {"nodeLabels": {"topology.kubernetes.io/region": "eu-west"}}}
    twins.consumer.apply(MODIFIED, relabelled)
    assert ingresses.namespaces() == ["eu-only"]
