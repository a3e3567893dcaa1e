"""kube_offload/runtime/interning.py: equal strings become one object; values unchanged."""

from __future__ import annotations

import json

from kube_offload.runtime.interning import interned


def test_equal_strings_become_one_object_and_the_value_is_unchanged() -> None:
    text = '{"metadata": {"namespace": "team-a", "labels": {"app": "web"}}, "items": ["x", 1, 2.5, null, true]}'
    one, two = interned(json.loads(text)), interned(json.loads(text))
    assert one == json.loads(text)
    assert one["metadata"]["namespace"] is two["metadata"]["namespace"]
    key_one = next(iter(one["metadata"]["labels"]))
    key_two = next(iter(two["metadata"]["labels"]))
    assert key_one is key_two
    assert one["items"][0] is two["items"][0]
    assert one["items"][1:] == [1, 2.5, None, True]
