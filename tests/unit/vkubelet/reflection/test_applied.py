"""What reflection last applied (vkubelet/reflection/applied.py): an apply is skipped
only when the same body was applied and the remote object is still the version the
server answered."""

from vkubelet.reflection.applied import AppliedMemo, fingerprint

KEY = "demo-local/settings"


def _configmap(data: dict, resource_version: str = "7") -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "data": data,
            "metadata": {"name": "settings", "namespace": "demo-local", "labels": {"app": "web"},
                         "resourceVersion": resource_version}}


def _body(data: dict) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "data": data,
            "metadata": {"name": "settings", "namespace": "demo-local", "labels": {"app": "web"}}}


def test_applied_memo_skips_only_the_same_body_over_the_version_it_answered():
    memo = AppliedMemo()
    desired, served = _body({"a": "1"}), _configmap({"a": "1"})
    assert not memo.unchanged(KEY, desired, served), "nothing applied yet (a restart): apply once"
    memo.remember(KEY, desired, served)
    assert memo.unchanged(KEY, _body({"a": "1"}), served)
    assert not memo.unchanged(KEY, desired, None), "no remote object: apply"
    assert not memo.unchanged(KEY, _body({"a": "2"}), served), "a local change is applied"
    assert not memo.unchanged(KEY, desired, _configmap({"a": "1"}, "8")), "someone else wrote it: our fields again"
    assert not memo.unchanged(KEY, desired, _configmap({"a": "1"}, "")), "a version unknown: apply"
    memo.forget(KEY)
    assert not memo.unchanged(KEY, desired, served)


def test_fingerprint_ignores_key_order_and_sees_every_value():
    assert fingerprint({"a": 1, "b": {"c": 2, "d": 3}}) == fingerprint({"b": {"d": 3, "c": 2}, "a": 1})
    assert fingerprint({"a": 1}) != fingerprint({"a": 2})
    assert fingerprint({"a": [1, 2]}) != fingerprint({"a": [2, 1]}), "list order is content"
