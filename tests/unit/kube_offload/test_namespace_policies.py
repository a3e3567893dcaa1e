"""The shared namespace-policy index fed by informer events."""

from kube_offload import constants as c
from kube_offload.namespace_policies import NamespacePolicies
from kube_offload.policy import NamespacePolicy, PolicyError


class Events:
    """Stands in for an Informer: only add_handler is used, and we fire the events."""

    def __init__(self):
        self.handlers = []

    def add_handler(self, handler):
        self.handlers.append(handler)

    def fire(self, event, old, new):
        for handler in self.handlers:
            handler(event, old, new)


def ns(name, rv, **labels):
    return {"metadata": {"name": name, "resourceVersion": rv, "labels": labels}}


def test_events_keep_the_index_current_and_invalid_policies_are_reported():
    events, invalid = Events(), []
    index = NamespacePolicies(events, on_invalid=lambda name, error: invalid.append(name))
    good = ns("a", "1", **{c.LABEL_ENABLED: "true", c.LABEL_POD_PLACEMENT: c.PLACEMENT_REMOTE})
    events.fire("ADDED", None, good)
    assert isinstance(index.get("a"), NamespacePolicy) and index.get("a").placement == c.PLACEMENT_REMOTE

    bad = ns("a", "2", **{c.LABEL_ENABLED: "true", c.LABEL_POD_PLACEMENT: "Everywhere"})
    events.fire("MODIFIED", good, bad)
    assert isinstance(index.get("a"), PolicyError) and invalid == ["a"]

    events.fire("DELETED", bad, bad)
    assert index.get("a") is None


def test_a_resync_with_the_same_resource_version_is_not_reparsed():
    events, invalid = Events(), []
    index = NamespacePolicies(events, on_invalid=lambda name, error: invalid.append(name))
    bad = ns("b", "7", **{c.LABEL_ENABLED: "yes"})
    events.fire("ADDED", None, bad)
    events.fire("MODIFIED", bad, bad)  # periodic resync delivers old == new
    assert invalid == ["b"]
    assert isinstance(index.get("b"), PolicyError)
