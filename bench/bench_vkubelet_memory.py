"""Memory the virtual kubelet's caches hold per offloaded pod, trimmed (vkubelet/shared/trim.py)
vs whole (the baseline, measured in the same run). A script, not a test: it prints figures.

No cluster: the objects one offloaded pod costs a vkubelet are real ones, dumped from the
loopback clusters of bench/bench_scale.py (tests/fixtures/vkubelet_pod_objects.json): the
local pod, its ShadowPod, its remote pod, its service-account token Secret and the two
remote Events about it (the scheduler's Scheduled, the enforcer's PodCreated). Each is
made unique per pod (names, UIDs, resourceVersions, IPs, timestamps), serialized, then
parsed back **one json.loads per object, as the informer parses a watch event** (the
steady state: every object of a running pod has been watched at least once; a LIST
parses a page of 500 at once, which shares key strings within the page: ``--parse
list`` shows that case), cleaned as the informer cleans it (managedFields dropped),
passed through the cache's transform and stored in a dict by ``namespace/name`` as the
informer's store holds it.

Profiles: ``scale`` is the dumped pod as it is (bench_scale's one-container busybox
pod); ``app`` gives the pod the container of a typical Deployment pod (bench_webhook's
realistic_pod: 8 env entries, a port, a readiness probe, requests and limits), in the
local pod, the ShadowPod's template and the remote pod alike.

Variants: ``baseline`` (what the caches held before: the objects whole, managedFields
dropped); ``whole, strings interned`` (no trimming, only ``trim.interned``);
``trimmed, nothing interned`` and ``trimmed, keys interned`` (vkubelet/shared/trim.py with
``interned`` replaced by a no-op, or by one that interns dict keys only); ``trimmed``
(vkubelet/shared/trim.py as shipped: trimmed, keys and string values interned). The
tracemalloc figure includes the interpreter's table of interned strings (the cost of
interning strings that are unique, UIDs and timestamps).

Three figures per case, each in a fresh subprocess (so one case's freed memory does not
serve the next): ``tracemalloc``, the Python allocations the store retains, over the pods;
``rss``, the growth of the process's RSS (``VmRSS``) over the same build, without
tracemalloc, over the pods (what the allocator really keeps, fragmentation included);
and the CPU time of parsing, cleaning, transforming and storing, per pod (the cost of
the transforms, paid once per watch event).

Usage: ``.venv/bin/python bench/bench_vkubelet_memory.py [--pods 1000 5000] [--parse watch|list] [--variants ...]``
(about 5 min on 2 vCPUs; ``--pods 1000`` alone, about 1 min).
"""

from __future__ import annotations

import argparse
import base64
import copy
import gc
import json
import os
import platform
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

FIXTURE = ROOT / "tests" / "fixtures" / "vkubelet_pod_objects.json"
MIB = 1024 * 1024
LIST_PAGE = 500  # the informer's LIST page size (kube_offload/runtime/informer.py)

# bench_scale.py --pods 10000 --remotes 3 with the caches untrimmed (2026-11-23 21:35,
# docs/performance.md "Scale"): each vkubelet 98-99 MiB idle, peak 347-350 MiB with
# 3,333 pods bound to it, all Running: ~77 KiB per offloaded pod, of which the caches
# (this script's baseline, profile scale: the same pods) are most; the rest (indexes,
# queues, the allocator's slack) is taken as unchanged by trimming.
IDLE_RSS_MIB = 98.5
OBSERVED_MIB_PER_POD = (350.0 - 98.5) / 3333
GOAL_MIB_AT_5000 = 300.0
GOAL_KIB_PER_POD = 30  # issue 39, every reading (the whole process / pods too)

VARIANTS = ("baseline", "interned-only", "trimmed-no-intern", "trimmed-keys", "trimmed")
VARIANT_TITLES = {
    "baseline": "baseline (whole, managedFields dropped)",
    "interned-only": "whole, strings interned",
    "trimmed-no-intern": "trimmed, nothing interned",
    "trimmed-keys": "trimmed, keys interned",
    "trimmed": "trimmed, keys+values interned (shipped)",
}
CACHES = ("local-pods", "remote-shadowpods", "remote-pods", "remote-secrets[tokens]", "remote-events")


# --- objects ------------------------------------------------------------------------------------
def load_fixture(profile: str) -> dict:
    objects = json.loads(FIXTURE.read_text())
    if profile == "app":
        from bench_webhook import realistic_pod

        container = realistic_pod()["spec"]["containers"][0]
        for pod_spec in (
            objects["local_pod"]["spec"],
            objects["shadowpod"]["spec"]["pod"]["spec"],
            objects["remote_pod"]["spec"],
        ):
            mounts = pod_spec["containers"][0].get("volumeMounts")
            grown = copy.deepcopy(container)
            grown["name"] = pod_spec["containers"][0]["name"]
            grown["volumeMounts"] = mounts
            pod_spec["containers"] = [grown]
    return objects


_TIME = re.compile(r"2026-11-23T21:(\d\d):(\d\d)")
_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def pod_texts(objects: dict, index: int) -> dict[str, list[str]]:
    """The JSON texts of one offloaded pod's objects, by cache, unique to pod ``index``
    as they are in a cluster: a new name, new UIDs, resourceVersions, IPs, token and
    service-account volume name (random per pod), timestamps a few pods per second."""
    name = objects["local_pod"]["metadata"]["name"]
    new_name = f"{name[:-5]}{index:05x}"
    uids: dict[str, str] = {}
    seconds = index // 8
    token = objects["token_secret"]["data"]["token"]
    new_token = base64.b64encode(os.urandom(len(base64.b64decode(token)))).decode()
    volume = next(v["name"] for v in objects["local_pod"]["spec"]["volumes"] if v["name"].startswith("kube-api-access-"))
    new_volume = f"kube-api-access-{uuid.uuid4().hex[:5]}"

    def unique(obj: dict) -> str:
        text = json.dumps(obj, separators=(",", ":"))
        text = text.replace(name, new_name)
        text = _UID.sub(lambda m: uids.setdefault(m.group(0), str(uuid.uuid4())), text)
        text = _TIME.sub(lambda m: _shift(int(m.group(1)), int(m.group(2)), seconds), text)
        text = re.sub(r'"resourceVersion":"(\d+)"', lambda m: f'"resourceVersion":"{int(m.group(1)) + 7 * index}"', text)
        text = re.sub(r"10\.(\d+)\.0\.168", lambda m: f"10.{m.group(1)}.{index // 250}.{index % 250}", text)
        text = text.replace(".18eac", f".{index:05x}")  # Event names: <pod>.<hex>
        text = text.replace(token, new_token).replace(volume, new_volume)
        return text

    return {
        "local-pods": [unique(objects["local_pod"])],
        "remote-shadowpods": [unique(objects["shadowpod"])],
        "remote-pods": [unique(objects["remote_pod"])],
        "remote-secrets[tokens]": [unique(objects["token_secret"])],
        "remote-events": [unique(event) for event in objects["events"]],
    }


def _shift(minute: int, second: int, by: int) -> str:
    total = 21 * 3600 + minute * 60 + second + by
    return f"2026-11-23T{total // 3600:02d}:{total // 60 % 60:02d}:{total % 60:02d}"


# --- the transforms -----------------------------------------------------------------------------
def transforms(variant: str) -> dict:
    from vkubelet.shared import trim

    if variant == "baseline":
        return {cache: None for cache in CACHES}
    if variant == "interned-only":
        return {cache: trim.interned for cache in CACHES}
    if variant == "trimmed-no-intern":
        trim.interned = lambda value: value  # type: ignore[assignment]
    elif variant == "trimmed-keys":

        def keys_only(value):
            if isinstance(value, dict):
                return {sys.intern(k) if type(k) is str else k: keys_only(v) for k, v in value.items()}
            if isinstance(value, list):
                return [keys_only(item) for item in value]
            return value

        trim.interned = keys_only  # type: ignore[assignment]
    return {
        "local-pods": trim.keep_whole,
        "remote-shadowpods": trim.trim_shadowpod,
        "remote-pods": trim.trim_remote_pod,
        "remote-secrets[tokens]": trim.trim_token_secret,
        "remote-events": trim.trim_event,
    }


def clean(obj: dict, transform) -> dict:
    """What Informer._clean does: managedFields dropped, then the transform."""
    (obj.get("metadata") or {}).pop("managedFields", None)
    return transform(obj) if transform else obj


def object_key(obj: dict) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def build_stores(texts: list[dict[str, list[str]]], variant: str, parse: str) -> dict[str, dict]:
    fns = transforms(variant)
    stores: dict[str, dict] = {cache: {} for cache in CACHES}
    for cache in CACHES:
        store, fn = stores[cache], fns[cache]
        items = [text for pod in texts for text in pod[cache]]
        if parse == "watch":
            for text in items:
                obj = clean(json.loads(text), fn)
                store[object_key(obj)] = obj
        else:  # one json.loads per LIST page, as _list_all does
            for start in range(0, len(items), LIST_PAGE):
                page = json.loads("[" + ",".join(items[start : start + LIST_PAGE]) + "]")
                for item in page:
                    obj = clean(item, fn)
                    store[object_key(obj)] = obj
                del page
    return stores


# --- one case, in a subprocess ------------------------------------------------------------------
def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def run_case(profile: str, pods: int, variant: str, metric: str, parse: str) -> dict:
    objects = load_fixture(profile)
    texts = [pod_texts(objects, i) for i in range(pods)]
    import vkubelet.shared.trim  # noqa: F401  (imported before the baseline is taken)

    gc.collect()
    cpu = 0.0
    if metric == "gc":
        return gc_case(texts, variant, parse)
    if metric == "tracemalloc":
        import tracemalloc

        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        stores = build_stores(texts, variant, parse)
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
    else:
        before = rss_bytes()
        cpu = time.process_time()
        stores = build_stores(texts, variant, parse)
        cpu = time.process_time() - cpu
        gc.collect()
        after = rss_bytes()
    per_cache = {}
    if metric == "tracemalloc" and pods <= 1000:
        per_cache = {cache: _deep_size(store) / pods for cache, store in stores.items()}
    return {
        "bytes_per_pod": (after - before) / pods,
        "per_cache": per_cache,
        "objects": sum(len(s) for s in stores.values()),
        "cpu_us_per_pod": cpu * 1e6 / pods if metric == "rss" else None,
    }


def gc_case(texts: list[dict[str, list[str]]], variant: str, parse: str) -> dict:
    """gc.freeze A/B in one process over the same caches: a full collection's pause with
    every cached object walked (as the vkubelet ran until now), then after ``gc.freeze()``
    (kube_offload/runtime/gc_freeze.py, ``--gc-thaw-period``), and what the freeze does to
    RSS (nothing is copied: it only moves the objects to the permanent generation)."""
    stores = build_stores(texts, variant, parse)
    del texts
    gc.collect()
    tracked = len(gc.get_objects())
    unfrozen = _full_collection_ms()
    rss_before = rss_bytes()
    gc.freeze()
    frozen = _full_collection_ms()
    result = {"tracked": tracked, "full_ms_unfrozen": unfrozen, "full_ms_frozen": frozen,
              "frozen": gc.get_freeze_count(), "rss_change": rss_bytes() - rss_before,
              "objects": sum(len(s) for s in stores.values())}
    gc.unfreeze()
    return result


def _full_collection_ms(times: int = 5) -> float:
    pauses = []
    for _ in range(times):
        started = time.perf_counter()
        gc.collect()
        pauses.append((time.perf_counter() - started) * 1000)
    return sorted(pauses)[times // 2]


def _deep_size(value, seen: set | None = None) -> int:
    """Bytes of ``value`` and everything it holds (shared objects once), for the split by cache."""
    seen = set() if seen is None else seen
    if id(value) in seen:
        return 0
    seen.add(id(value))
    size = sys.getsizeof(value)
    if isinstance(value, dict):
        size += sum(_deep_size(k, seen) + _deep_size(v, seen) for k, v in value.items())
    elif isinstance(value, list):
        size += sum(_deep_size(item, seen) for item in value)
    return size


def subprocess_case(profile: str, pods: int, variant: str, metric: str, parse: str) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--case", profile, str(pods), variant, metric, parse],
        check=True, capture_output=True, text=True, cwd=ROOT,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


# --- main ---------------------------------------------------------------------------------------
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--profiles", nargs="+", default=["scale", "app"], choices=["scale", "app"])
    parser.add_argument("--parse", default="watch", choices=["watch", "list"])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS,
                        help="the variants measured (default all; the ratio is to the baseline when it is among them)")
    parser.add_argument("--case", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        profile, pods, variant, metric, parse = args.case
        print(json.dumps(run_case(profile, int(pods), variant, metric, parse)))
        return 0

    print(f"machine: {platform.machine()}, Linux {platform.release()}, Python {platform.python_version()}, "
          f"{os.cpu_count()} CPUs; parse: {args.parse} (one json.loads per {'object' if args.parse == 'watch' else 'page of 500'})")
    results: dict = {}
    for profile in args.profiles:
        for pods in args.pods:
            print(f"\n== profile {profile}, {pods} pods (objects per pod: 1 local pod, 1 ShadowPod, 1 remote pod, "
                  "1 token Secret, 2 Events)")
            print(f"{'variant':<42} {'tracemalloc KiB/pod':>20} {'RSS KiB/pod':>12} {'vs baseline':>12} {'parse+transform us/pod':>23}")
            for variant in args.variants:
                traced = subprocess_case(profile, pods, variant, "tracemalloc", args.parse)
                rss = subprocess_case(profile, pods, variant, "rss", args.parse)
                results[(profile, pods, variant)] = (traced, rss)
                base = results.get((profile, pods, "baseline"), (traced,))[0]["bytes_per_pod"]
                print(f"{VARIANT_TITLES[variant]:<42} {traced['bytes_per_pod'] / 1024:>20.1f} "
                      f"{rss['bytes_per_pod'] / 1024:>12.1f} {traced['bytes_per_pod'] / base:>11.2f}x {rss['cpu_us_per_pod']:>23.0f}")
            split_base = results.get((profile, pods, "baseline"), ({"per_cache": {}},))[0]["per_cache"]
            split_trim = results.get((profile, pods, "trimmed"), ({"per_cache": {}},))[0]["per_cache"]
            if split_base and split_trim:
                print("  per cache (deep getsizeof, bytes/pod): " + "; ".join(
                    f"{cache} {split_base[cache]:.0f} -> {split_trim[cache]:.0f}" for cache in CACHES))

    largest = max(args.pods)
    print(f"\n== gc.freeze A/B, shipped caches, {largest} pods (one process, the same objects; "
          "kube_offload/runtime/gc_freeze.py)")
    for profile in args.profiles:
        freeze = subprocess_case(profile, largest, "trimmed", "gc", args.parse)
        print(f"profile {profile}: {freeze['tracked']:,} objects tracked by the collector; a full collection "
              f"{freeze['full_ms_unfrozen']:.1f} ms walking them all, {freeze['full_ms_frozen']:.2f} ms after gc.freeze() "
              f"({freeze['frozen']:,} frozen); RSS change from the freeze {freeze['rss_change'] / 1024:.0f} KiB")

    print(f"\n== goal (issue 39): <= {GOAL_KIB_PER_POD} KiB per offloaded pod at 5,000 pods in every reading")
    for profile in args.profiles:
        if (profile, largest, "trimmed") in results:
            caches = results[(profile, largest, "trimmed")][1]["bytes_per_pod"] / 1024
            print(f"profile {profile}: the caches alone {caches:.1f} KiB/pod RSS ({largest} pods); the whole process "
                  f"and what the pods add are bench_scale.py's readings (--pods 5000 --remotes 1)")

    print("\n== projection at 5,000 pods per vkubelet (goal of issue 27: <= 300 MiB peak RSS)")
    print(f"observed untrimmed (bench_scale.py, 10,000 pods / 3 remotes): {IDLE_RSS_MIB:.1f} MiB idle + "
          f"{OBSERVED_MIB_PER_POD * 1024:.1f} KiB/pod -> {IDLE_RSS_MIB + OBSERVED_MIB_PER_POD * 5000:.0f} MiB at 5,000")
    if ("scale", largest, "baseline") not in results:
        print("(the projection needs the scale profile: the pods bench_scale.py runs)")
        return 0
    # What a pod costs beyond the caches, from the run whose pods are the scale profile's.
    rest = OBSERVED_MIB_PER_POD - results[("scale", largest, "baseline")][1]["bytes_per_pod"] / MIB
    print(f"of which beyond the caches (observed - baseline, profile scale): {rest * 1024:.1f} KiB/pod")
    for profile in args.profiles:
        base = results[(profile, largest, "baseline")][1]["bytes_per_pod"] / MIB
        trimmed = results[(profile, largest, "trimmed")][1]["bytes_per_pod"] / MIB
        before = IDLE_RSS_MIB + (rest + base) * 5000
        after = IDLE_RSS_MIB + (rest + trimmed) * 5000
        print(f"profile {profile}: caches {base * 1024:.1f} -> {trimmed * 1024:.1f} KiB/pod RSS (ratio {trimmed / base:.2f}); "
              f"at 5,000 pods {before:.0f} -> {after:.0f} MiB "
              f"({'meets' if after <= GOAL_MIB_AT_5000 else 'misses'} the goal)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
