"""What the ShadowPod webhook's quota check costs per admission as a provider fills up:
the consumer's usage summed by walking every cached ShadowPod (the code before the
running sums, still the fallback for non-informer caches) against the running sums kept
with the informer's store (enforcer/consumers/quota.py, LIVE_REQUESTS_BY_NAMESPACE) — a script,
not a test: it prints figures and the ratio, measured in the same run.

    .venv/bin/python bench/bench_quota.py [--shadowpods 1000,3333,10000] [--calls 200]

No cluster: the store is the informer's own (kube_offload/runtime/indexer.py), filled
with ShadowPods shaped as the vkubelet writes them (kube_offload.shadowpod), all in one
twin namespace of one consumer, as in bench_scale.py's 10,000-pod run.
"""

from __future__ import annotations

import argparse
import os
import time

from enforcer.consumers.quota import (
    LIVE_REQUESTS_BY_NAMESPACE, TWIN_NAMESPACES_BY_CONSUMER, consumer_usage, live_requests, twin_owner_index,
    usage_of_namespaces,
)
from kube_offload import constants as c
from kube_offload.runtime.indexer import Indexer
from kube_offload.shadowpod import build_shadowpod

TWIN = "bench-local"


def shadowpod(i: int) -> dict:
    obj = build_shadowpod(
        name=f"web-{i}", namespace=TWIN, pod_metadata={"labels": {"app": "web"}},
        pod_spec={"containers": [{"name": "app", "image": "nginx",
                                  "resources": {"requests": {"cpu": "1m", "memory": "1Mi"}}}]},
        origin_labels={c.LABEL_ORIGIN_CLUSTER_ID: "local"},
    )
    obj["metadata"].update(uid=f"uid-{i}", resourceVersion=str(1000 + i), generation=1)
    return obj


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shadowpods", default="1000,3333,10000", help="cache sizes, comma-separated")
    parser.add_argument("--calls", type=int, default=200, help="usage computations timed per size and method")
    args = parser.parse_args()
    namespaces = Indexer({TWIN_NAMESPACES_BY_CONSUMER: twin_owner_index})
    namespaces.put({"metadata": {"name": TWIN, "labels": {c.LABEL_MANAGED_BY: c.MANAGED_BY_ENFORCER,
                                                          c.LABEL_ORIGIN_CLUSTER_ID: "local"}}})
    print(f"machine: {os.uname().machine}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; "
          f"{args.calls} calls per figure, CPU time (time.process_time)")
    print(f"{'ShadowPods':>10} {'walk µs/call':>13} {'tally µs/call':>14} {'ratio':>8}")
    for size in (int(s) for s in args.shadowpods.split(",")):
        store = Indexer()
        store.add_tally(LIVE_REQUESTS_BY_NAMESPACE, live_requests)
        for i in range(size):
            store.put(shadowpod(i))

        def walk() -> dict:
            return consumer_usage(store.list(), "local", namespace_of=namespaces.get)  # noqa: B023 (called in this iteration)

        def tally() -> dict:
            twins = namespaces.index_keys(TWIN_NAMESPACES_BY_CONSUMER, "local")
            return usage_of_namespaces(lambda ns: store.tally(LIVE_REQUESTS_BY_NAMESPACE, ns), twins)  # noqa: B023 (called in this iteration)

        assert walk() == tally(), "the two sums disagree"
        timings = {}
        for name, fn in (("walk", walk), ("tally", tally)):
            fn()  # warm the per-version requests cache, as a running enforcer has it
            start = time.process_time()
            for _ in range(args.calls):
                fn()
            timings[name] = (time.process_time() - start) / args.calls * 1e6
        print(f"{size:>10} {timings['walk']:>13.1f} {timings['tally']:>14.2f} {timings['tally'] / timings['walk']:>7.4f}x")


if __name__ == "__main__":
    main()
