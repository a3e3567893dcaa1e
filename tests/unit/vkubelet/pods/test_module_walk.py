"""Walking one pod from the pod loop's reconcile to its ShadowPod's creation enters each
module of the virtual kubelet at most twice (issue 38): the reconcile reads what the steps
need once and hands it to them as a value, so no step calls back into the loop, and a
module's answers come in one call, not one per field. Counted with bench/module_walk.py's
own profiler hook, on the same pod and caches; a step that calls back (as the steps did
for the translation context and the API server mode) fails this."""

from __future__ import annotations

import logging
from collections import Counter

from support.bench_scripts import load_bench_script

walk = load_bench_script("module_walk.py")


def test_a_new_pod_to_its_shadowpod_enters_each_vkubelet_module_at_most_twice() -> None:
    logging.disable(logging.CRITICAL)
    try:
        loop, local, _twin, created = walk.new_pod_loop()
        key = f"{local['metadata']['namespace']}/{local['metadata']['name']}"
        entries = walk.walk(lambda: loop.reconcile(key), ("vkubelet",))
    finally:
        logging.disable(logging.NOTSET)
    assert len(created) == 1, "the walk must reach the ShadowPod's creation"
    counts = Counter(entries)
    assert "vkubelet.pods.shadowpods" in counts and "vkubelet.pods.translation" in counts
    over = {module: n for module, n in counts.items() if n > 2}
    assert not over, f"modules entered more than twice: {over}; path: {' > '.join(entries)}"
