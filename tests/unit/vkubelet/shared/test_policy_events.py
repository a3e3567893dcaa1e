"""The local user is told each policy note once per object, not at every resync
(vkubelet/shared/policy_events.py), through the real Event recorder."""

from kube_offload.runtime.events import EventRecorder
from kube_offload import reasons
from vkubelet.shared.policy_events import PolicyNotices
from vkubelet.shared.policy_fit import Note


class MemorySink:
    """Where the recorder writes: the Events it created and patched, kept in order."""

    def __init__(self):
        self.created: list[dict] = []
        self.patched: list[tuple[str, dict]] = []

    def create_event(self, namespace, event):
        self.created.append(event)
        return event

    def patch_event(self, namespace, name, patch):
        self.patched.append((name, patch))
        return patch


POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "demo", "uid": "u1"}}
CLASS = Note("spec.priorityClassName", 'spec.priorityClassName "system-node-critical" dropped: ...')
VOLUME = Note("spec.volumes[0]", "spec.volumes[0] (share): volume type nfs is not granted ...")


def _notices():
    sink = MemorySink()
    recorder = EventRecorder(sink, component="c", reporting_controller="r", instance="node")
    return PolicyNotices(recorder), recorder, sink


def test_each_note_is_one_warning_event_and_a_resync_adds_none():
    notices, recorder, sink = _notices()
    for _resync in range(5):
        notices.tell(POD, adjusted=[CLASS], refused=[VOLUME])
    recorder.stop(2.0)
    assert [(e["type"], e["reason"], e["message"]) for e in sink.created] == [
        ("Warning", reasons.REASON_POLICY_ADJUSTED, CLASS.message),
        ("Warning", reasons.REASON_POLICY_REFUSED, VOLUME.message),
    ]
    assert sink.patched == []  # not even a count bump
    assert {e["involvedObject"]["uid"] for e in sink.created} == {"u1"}


def test_a_note_gone_and_back_is_told_again_and_another_object_has_its_own():
    notices, recorder, sink = _notices()
    assert notices.tell(POD, adjusted=[CLASS])
    assert notices.tell(POD) == []  # fixed: forgotten
    assert notices.tell(POD, adjusted=[CLASS])  # broken again: told again
    other = {**POD, "metadata": {**POD["metadata"], "uid": "u2"}}
    assert notices.tell(other, adjusted=[CLASS])
    assert notices.tell(POD, adjusted=[CLASS]) == []
    recorder.stop(2.0)
    # One Event per object; POD's second telling folds into its Event (count 2), whether
    # it was still queued (created with count 2) or written already (patched to 2).
    assert sorted(e["involvedObject"]["uid"] for e in sink.created) == ["u1", "u2"]
    pod_event = next(e for e in sink.created if e["involvedObject"]["uid"] == "u1")
    counts = [pod_event["count"]] + [p["count"] for name, p in sink.patched if name == pod_event["metadata"]["name"]]
    assert counts[-1] == 2


def test_only_new_notes_are_told_when_the_notes_change():
    notices, recorder, _sink = _notices()
    notices.tell(POD, adjusted=[CLASS])
    told = notices.tell(POD, adjusted=[CLASS], refused=[VOLUME])
    recorder.stop(2.0)
    assert told == [(reasons.REASON_POLICY_REFUSED, VOLUME)]
