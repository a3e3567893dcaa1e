"""Benchmark: one provider cluster holding N ShadowPods of one consumer (issue #27 item 3).
Goals: the enforcer's RSS per ShadowPod <= 20 KiB, ShadowPod admission p99 <= 20 ms.

    .venv/bin/python bench/bench_provider.py [--shadowpods 2000] [--clients 8]
    .venv/bin/python bench/bench_provider.py --shadowpods 10000 --probe-rates 5,10,20,40 [--probe-profile DIR]
    .venv/bin/python bench/bench_provider.py --shadowpods 10000 --probe-rates 10 --arms shared,own   (A/B, issue #39)
    .venv/bin/python bench/bench_provider.py --caches [--shadowpods 2000]   (no cluster, ~1 min)

One local cluster and one remote (provider) cluster from the harness, the enforcer as the
harness runs it (its chart identity, its webhook registered with the remote apiserver),
no virtual kubelet: the consumer's identity (the ServiceAccount the remote chart creates
for consumer ``local``) asks for one twin namespace, then creates N ShadowPods in it from
``--clients`` threads, as fast as the apiserver and the enforcer's webhook take them.
The enforcer creates a pod for each; kwok runs them (two kwok nodes big enough for all).

Figures:
- enforcer RSS (``VmRSS``) before the first create and once every pod runs and the
  enforcer has been idle a few seconds; the growth over N is the RSS per ShadowPod (it
  holds N ShadowPods, N managed pods, N trimmed pods of the capacity summary); the peak
  (``VmHWM``) too.
- admission latency, three ways: the enforcer's own webhook histogram
  (``kube_offload_shadowpod_webhook_request_duration_seconds``, on its webhook port's
  /metrics: the time spent in the webhook); the remote apiserver's
  ``apiserver_admission_webhook_admission_duration_seconds`` for the ShadowPod webhook (the
  call as the apiserver sees it: TLS, network, the webhook); the consumer's create call,
  end to end (apiserver, both admissions, etcd). p50/p99 from the histograms are
  interpolated inside the bucket (the bound of the bucket is printed beside them); the
  client's are exact.
- the creation rate and the enforcer's CPU per ShadowPod over the create window.

The creates above are a closed loop (``--clients`` in flight, as fast as taken): their
latency is queueing at saturation, not the cost of an admission. ``--probe-rates``
(or ``--probe-rate``) measures the admission itself: once the N are held, every pod
runs and the enforcer has idled ``--settle`` s, ``--probe-count`` more creates at each
fixed rate, open loop (the i-th starts at i/R s, from ``--probe-workers`` warmed
threads, so a slow create delays no other; the lag behind schedule is reported), each
timed end to end (exact p50/p99/max), with the enforcer's and the apiserver's admission
histograms diffed over the probe's window only, the enforcer's CPU per create and its
garbage collector's pauses over the window (``kube_offload_python_gc_pause_seconds`` on its
health port, or on the webhook port when the webhooks run in their own process: the
collector whose pauses an admission waits for). Between
probes the bench waits for the probe's pods to run and the enforcer to idle.
``--probe-profile DIR`` repeats each probe with py-spy on the enforcer, twice at once:
``--idle`` (wall time: a webhook request waiting for the GIL or a socket counts) and
without (running samples only); the report gives, for the samples inside a webhook
request (``WebhookRequestHandler.do_POST``), the functions by inclusive and by self
samples, and the process's samples by thread. The profiled probe's latencies are printed
too; py-spy costs the 2 cores some CPU.

``--arms A,B[,...]`` (issue #39: the webhooks in a process of their own): the same probes
in ONE run for each arm in turn, the enforcer restarted with the arm's flags between them
(:data:`ARMS`: ``shared``, the webhooks in the enforcer's process beside the controllers;
``own``, in a child process of their own; ``shared-1ms``, in the enforcer's
process with ``--gil-switch-interval=1ms``), each after the restarted enforcer's webhook and health port are ready (every cache of
both processes listed) and its CPU has stayed below 15 % of a core for three 5 s windows in
a row, and ``--settle`` s more; it
prints each arm's figures, then a table per rate: the enforcer's p50/p99 and the
consumer's, each arm's ratio to the first arm's p99, the goal beside them, and each arm's
RSS (the enforcer's and its child's, summed) and CPU per create. With ``--rounds 2`` the
arms run A, B, A, B: a drift of the machine's load shows as a difference between rounds.

``--caches``: no cluster; what the enforcer's three per-ShadowPod caches (ShadowPods,
managed pods, the capacity summary's pods) hold, before and after their transforms
(enforcer/shadowpods/trim.py, enforcer/consumers/trim.py), built from the real objects
bench_vkubelet_memory.py uses (tests/fixtures/vkubelet_pod_objects.json: a ShadowPod and
the pod the enforcer made for it, made unique per ShadowPod, parsed one json.loads per
object as a watch event is), in a fresh subprocess per case: the Python allocations
(tracemalloc) and the RSS growth, per ShadowPod; profiles ``scale`` and ``app`` as there.

Not a test: it never fails on a figure; it exits non-zero if a create failed or the pods
did not all run. It brings up its own environment in a temporary state directory and
tears it down at the end, stopping exactly the processes it started.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import queue
import re
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterable, Mapping

from kube_offload import constants as C

import apirequests
import controlplane

LOCAL_NAMESPACE = "bench-provider"
ENFORCER_WEBHOOK_METRIC = "kube_offload_shadowpod_webhook_request_duration_seconds"
WEBHOOK_ENDPOINT = "validate_shadowpods"  # the histogram's endpoint label (enforcer/admission/webhook_server.py)
APISERVER_WEBHOOK_METRIC = "apiserver_admission_webhook_admission_duration_seconds"
GC_PAUSE_METRIC = "kube_offload_python_gc_pause_seconds"  # kube_offload/runtime/metrics.py, on the health port
RSS_GOAL_KIB = 20.0
ADMISSION_P99_GOAL_S = 0.020
# --arms: the enforcer's flags for each (enforcer/cli.py --webhook-process, --gil-switch-interval).
ARMS: dict[str, tuple[str, ...]] = {
    "shared": ("--webhook-process=shared",),
    "own": ("--webhook-process=own",),
    "shared-1ms": ("--webhook-process=shared", "--gil-switch-interval=1ms"),
}
# The restarted enforcer is idle once its CPU over IDLE_WINDOW_S is below this share of a core.
IDLE_CPU_SHARE = 0.15
IDLE_WINDOW_S = 5.0
IDLE_WINDOWS = 3


def log(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


# --- pure: objects and figures ----------------------------------------------------------
def shadowpod(index: int, *, namespace: str, consumer_id: str, local_namespace: str = LOCAL_NAMESPACE,
              origin_uid: str | None = None) -> dict:
    """The ShadowPod a vkubelet writes for a one-container Deployment pod (bench_scale's:
    busybox, 1m CPU / 1Mi requests), without the service-account token volume (the
    bench makes no token Secrets; automountServiceAccountToken false, as the vkubelet sets)."""
    name = f"bench-{index:06d}"
    origin = {
        C.ANNOTATION_ORIGIN_NAME: name,
        C.ANNOTATION_ORIGIN_NAMESPACE: local_namespace,
        C.ANNOTATION_ORIGIN_UID: origin_uid or str(uuid.uuid4()),
    }
    return {
        "apiVersion": f"{C.SHADOWPOD_GROUP}/{C.SHADOWPOD_VERSION}",
        "kind": C.SHADOWPOD_KIND,
        "metadata": {"name": name, "namespace": namespace, "annotations": dict(origin),
                     "labels": {C.LABEL_ORIGIN_CLUSTER_ID: consumer_id}},
        "spec": {"pod": {
            "metadata": {"annotations": dict(origin),
                         "labels": {"app": "bench-provider", C.LABEL_ORIGIN_CLUSTER_ID: consumer_id}},
            "spec": {
                "automountServiceAccountToken": False,
                "containers": [{"name": "c", "image": "busybox", "imagePullPolicy": "Always",
                                "resources": {"requests": {"cpu": "1m", "memory": "1Mi"}}}],
                "restartPolicy": "Always",
                "terminationGracePeriodSeconds": 30,
            },
        }},
    }


def histogram(samples: Mapping[tuple[str, tuple], float], metric_name: str, /, **match: str) -> dict[float, float]:
    """The cumulative buckets ``le -> count`` of histogram ``metric_name`` (its ``_bucket`` series),
    summed over the series whose labels include ``match``."""
    buckets: dict[float, float] = {}
    for (metric, labels), value in samples.items():
        if metric != f"{metric_name}_bucket":
            continue
        label_map = dict(labels)
        if any(label_map.get(k) != v for k, v in match.items()):
            continue
        le = float(label_map["le"])
        buckets[le] = buckets.get(le, 0.0) + value
    return buckets


def bucket_delta(before: Mapping[float, float], after: Mapping[float, float]) -> dict[float, float]:
    return {le: after[le] - before.get(le, 0.0) for le in after}


def histogram_quantile(buckets: Mapping[float, float], q: float) -> tuple[float, float] | None:
    """(estimate, upper bound of its bucket) of quantile ``q`` of cumulative ``buckets``,
    linear inside the bucket as Prometheus' histogram_quantile does; None when empty. A
    quantile in the +Inf bucket is given as the largest finite bound (with bound +Inf)."""
    if not 0 <= q <= 1:
        raise ValueError(f"quantile {q} is not between 0 and 1")
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    rank = q * buckets[bounds[-1]]
    lower, below = 0.0, 0.0
    for le in bounds:
        count = buckets[le]
        if count >= rank and count > below:
            if math.isinf(le):
                return lower, le
            return lower + (le - lower) * (rank - below) / (count - below), le
        lower, below = (le if not math.isinf(le) else lower), count
    return lower, bounds[-1]


def percentile(samples: Iterable[float], q: float) -> float | None:
    """Nearest-rank percentile ``q`` (0..1) of ``samples``; None when there are none."""
    ordered = sorted(samples)
    if not ordered:
        return None
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


def histogram_sum(samples: Mapping[tuple[str, tuple], float], metric_name: str, /, **match: str) -> tuple[float, float]:
    """(sum, count) of histogram ``metric_name`` (its ``_sum`` and ``_count`` series),
    summed over the series whose labels include ``match``."""
    total, count = 0.0, 0.0
    for (metric, labels), value in samples.items():
        label_map = dict(labels)
        if any(label_map.get(k) != v for k, v in match.items()):
            continue
        if metric == f"{metric_name}_sum":
            total += value
        elif metric == f"{metric_name}_count":
            count += value
    return total, count


def max_bound(buckets: Mapping[float, float]) -> float | None:
    """The bound of the bucket of the largest observation of cumulative ``buckets``: the
    smallest bound that counts them all; None when empty."""
    total = max(buckets.values(), default=0.0)
    if total <= 0:
        return None
    return min(le for le, count in buckets.items() if count >= total)


def parse_rates(text: str) -> list[float]:
    """``--probe-rates``: comma-separated creates per second, each > 0, in the order given."""
    rates = [float(part) for part in text.split(",") if part.strip()]
    if not rates or any(not math.isfinite(rate) or rate <= 0 for rate in rates):
        raise ValueError(f"rates must be positive numbers, comma-separated: {text!r}")
    return rates


def probe_schedule(rate: float, count: int) -> list[float]:
    """Open loop: the i-th create is due ``i / rate`` seconds after the probe starts,
    whenever the ones before it end."""
    if rate <= 0 or count < 0:
        raise ValueError(f"a schedule needs a positive rate and a count >= 0 (rate {rate}, count {count})")
    return [index / rate for index in range(count)]


def latency_summary(seconds: Iterable[float]) -> dict[str, float | int | None]:
    """Exact (nearest-rank) p50/p99 and the max of ``seconds``, and how many."""
    values = list(seconds)
    return {"n": len(values), "p50": percentile(values, 0.5), "p99": percentile(values, 0.99),
            "max": max(values) if values else None}


# --- pure: a py-spy speedscope profile ------------------------------------------------------
WEBHOOK_HANDLER_FRAME = ("WebhookRequestHandler.do_POST", "webhook_server.py")
"""The frame every ShadowPod admission runs under (enforcer/admission/webhook_server.py)."""
PROFILE_MARKS = {
    # a new connection's TLS handshake, in its own thread (kube_offload/runtime/https_server.py)
    "tls handshake": ("SSLContext.wrap_socket", "ssl.py"),
    "dry run": ("dry_run_create", "dry_run.py"),
}


def thread_group(profile_name: str) -> str:
    """py-spy's ``Thread 1234 "Thread-7 (process_request_thread)"`` -> ``Thread-N
    (process_request_thread)``: the thread's name, numbers folded, so the threads of one
    pool count together."""
    quoted = profile_name.split('"', 1)
    name = quoted[1].rstrip('"') if len(quoted) == 2 else profile_name
    return re.sub(r"\d+", "N", name)


def frame_key(frame: Mapping) -> str:
    """``function (file)``: one entry per function, whatever its line."""
    return f"{frame.get('name')} ({Path(str(frame.get('file') or '?')).name})"


def speedscope_summary(doc: Mapping, *, within: tuple[str, str] = WEBHOOK_HANDLER_FRAME, top: int = 12,
                       marks: Mapping[str, tuple[str, str]] = PROFILE_MARKS) -> dict:
    """What a py-spy speedscope profile (``record -f speedscope``) says, in samples:

    - ``threads``: samples per thread group (:func:`thread_group`), whole process;
      ``thread_count``: how many threads of each group were seen (a webhook connection
      is a thread of its own); ``ticks``: the most samples of one thread (with
      ``--idle``, every live thread is sampled at every tick: the ticks py-spy managed);
    - ``marks``: per name of ``marks``, the samples whose stack holds that frame
      (function name, file name), anywhere in the process;
    - ``within``: samples whose stack holds the frame ``within`` (function name, file
      name), i.e. time inside a webhook request; ``inclusive``: for the frames below it,
      samples per function (a function counted once per sample), the ``top`` largest;
      ``self``: per leaf function, the ``top`` largest;
    - ``interval_s``: seconds per sample (py-spy's weight).

    Recorded with ``--idle``, a thread's samples are wall time (waiting for the GIL or a
    socket included); without, only the samples where the thread was running."""
    frames = doc["shared"]["frames"]
    keys = [frame_key(frame) for frame in frames]
    def matching(wanted: tuple[str, str]) -> set[int]:
        return {i for i, frame in enumerate(frames)
                if frame.get("name") == wanted[0] and Path(str(frame.get("file") or "")).name == wanted[1]}

    anchors = matching(within)
    marked = {name: matching(frame) for name, frame in marks.items()}
    marked_samples = dict.fromkeys(marks, 0)
    threads: dict[str, int] = {}
    thread_count: dict[str, int] = {}
    ticks = 0
    inclusive: dict[str, int] = {}
    leaf: dict[str, int] = {}
    inside = 0
    interval = 0.0
    for profile in doc["profiles"]:
        samples = profile.get("samples") or []
        group = thread_group(str(profile.get("name", "")))
        threads[group] = threads.get(group, 0) + len(samples)
        thread_count[group] = thread_count.get(group, 0) + 1
        ticks = max(ticks, len(samples))
        weights = profile.get("weights") or []
        if weights and not interval:
            interval = float(weights[0])
        for stack in samples:  # root first, leaf last
            for name, indices in marked.items():
                if not indices.isdisjoint(stack):
                    marked_samples[name] += 1
            at = next((depth for depth, index in enumerate(stack) if index in anchors), None)
            if at is None:
                continue
            inside += 1
            below = stack[at + 1:]
            for key in {keys[index] for index in below}:
                inclusive[key] = inclusive.get(key, 0) + 1
            key = keys[stack[-1]]
            leaf[key] = leaf.get(key, 0) + 1

    def largest(counts: dict[str, int]) -> list[tuple[str, int]]:
        return sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:top]

    return {"threads": dict(sorted(threads.items(), key=lambda item: (-item[1], item[0]))), "thread_count": thread_count,
            "ticks": ticks, "marks": marked_samples, "within": inside,
            "inclusive": largest(inclusive), "self": largest(leaf), "interval_s": interval}


def per_shadowpod_kib(before_kib: float, after_kib: float, count: int) -> float:
    if count <= 0:
        raise ValueError("per ShadowPod figures need at least one ShadowPod")
    return (after_kib - before_kib) / count


def verdict(value: float | None, goal: float) -> str:
    if value is None:
        return "no figure"
    return "meets" if value <= goal else "misses"


# --- I/O ---------------------------------------------------------------------------------
def metrics_text(url: str, ca: Path | None) -> str:
    context = ssl.create_default_context(cafile=str(ca)) if ca and ca.exists() else ssl._create_unverified_context()
    if ca and ca.exists():
        context.check_hostname = False  # the harness's certificate names the service, not 127.0.0.1
    with urllib.request.urlopen(url, timeout=30, context=context) as response:
        return response.read().decode()


def admission_figures(env, remote, spec) -> dict:
    """The two admission histograms now: ``enforcer``/``apiserver`` buckets, and under
    ``sums`` their (sum, count)."""
    ca = env.pki_dir / "ca.crt"
    enforcer = apirequests.parse_prometheus(
        metrics_text(f"https://127.0.0.1:{spec.enforcer_webhook_port}/metrics", ca),
        names=[f"{metric}_{part}" for metric in (ENFORCER_WEBHOOK_METRIC, GC_PAUSE_METRIC)
               for part in ("bucket", "sum", "count")])
    apiserver = apirequests.parse_prometheus(
        remote.kubectl("get", "--raw", "/metrics", timeout=120).stdout,
        names=[f"{APISERVER_WEBHOOK_METRIC}_{part}" for part in ("bucket", "sum", "count")])
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{spec.enforcer_health_port}/metrics", timeout=30) as response:
            process = apirequests.parse_prometheus(response.read().decode(), names=[f"{GC_PAUSE_METRIC}_{part}" for part in
                                                                                      ("bucket", "sum", "count")])
    except OSError as exc:
        log(f"enforcer /metrics on the health port: {exc}")
        process = {}
    process = gc_source(enforcer, process)
    return {
        "gc_full": histogram(process, GC_PAUSE_METRIC, generation="2"),
        "enforcer": histogram(enforcer, ENFORCER_WEBHOOK_METRIC, endpoint=WEBHOOK_ENDPOINT),
        "apiserver": histogram(apiserver, APISERVER_WEBHOOK_METRIC, name=C.SHADOWPOD_WEBHOOK_NAME),
        "sums": {"enforcer": histogram_sum(enforcer, ENFORCER_WEBHOOK_METRIC, endpoint=WEBHOOK_ENDPOINT),
                 "apiserver": histogram_sum(apiserver, APISERVER_WEBHOOK_METRIC, name=C.SHADOWPOD_WEBHOOK_NAME),
                 "gc_full": histogram_sum(process, GC_PAUSE_METRIC, generation="2"),
                 "gc_all": histogram_sum(process, GC_PAUSE_METRIC)},
    }


def gc_source(webhook_port: Mapping[tuple[str, tuple], float], health_port: Mapping[tuple[str, tuple], float]
              ) -> Mapping[tuple[str, tuple], float]:
    """Whose collector an admission waits for: the webhook process's (its pauses are on the
    webhook port when the webhooks run in a process of their own), else the enforcer's."""
    if any(name.startswith(GC_PAUSE_METRIC) for name, _ in webhook_port):
        return webhook_port
    return health_port


def parse_arms(text: str) -> list[str]:
    arms = [arm.strip() for arm in text.split(",") if arm.strip()]
    unknown = [arm for arm in arms if arm not in ARMS]
    if unknown:
        raise SystemExit(f"--arms: unknown {', '.join(unknown)} (known: {', '.join(ARMS)})")
    return arms


def arm_order(arms: list[str], rounds: int) -> list[str]:
    """A, B, A, B ...: each round runs every arm once, in the order given."""
    return [arm for _ in range(rounds) for arm in arms]


def arm_table(probes: list[dict]) -> list[str]:
    """Per rate, each arm's (and round's) admission figures beside the first arm's: the
    enforcer's own histogram (p50/p99, the p99's ratio to the first arm's) and the
    consumer's exact p99, the goal beside them."""
    lines = []
    for rate in sorted({probe["rate"] for probe in probes}):
        rows = [probe for probe in probes if probe["rate"] == rate and probe.get("arm")]
        if not rows:
            continue
        base = histogram_quantile(rows[0]["enforcer_buckets"], 0.99)
        lines.append(f"\n== A/B at {rate:g}/s: the enforcer's ShadowPod admission, goal p99 <= "
                     f"{ADMISSION_P99_GOAL_S * 1000:g} ms (ratio: p99 / the first arm's)")
        lines.append(f"{'arm':<12} {'held':>6} {'p50':>9} {'p99':>9} {'ratio':>6} {'goal':<7} {'client p99':>11} "
                     f"{'RSS MiB':>8} {'CPU/create':>10} {'load':>5}")
        for probe in rows:
            p50, p99 = histogram_quantile(probe["enforcer_buckets"], 0.5), histogram_quantile(probe["enforcer_buckets"], 0.99)
            ratio = p99[0] / base[0] if p99 and base and base[0] else float("nan")
            lines.append(
                f"{probe['arm']:<12} {probe['held']:>6} {ms(p50[0] if p50 else None):>9} {ms(p99[0] if p99 else None):>9} "
                f"{ratio:>6.2f} {verdict(p99[0] if p99 else None, ADMISSION_P99_GOAL_S):<7} "
                f"{ms(probe['client']['p99']):>11} {probe.get('rss_kib', 0) / 1024:>8.1f} "
                f"{probe['cpu_s'] / probe['count'] * 1000:>8.1f}ms {probe['load']:>5.1f}")
    return lines


def restart_enforcer(env, spec, argv: list[str], extra: Iterable[str]) -> int:
    """The enforcer stopped and started again with ``extra`` flags; its PID once its
    webhook is ready (every cache listed) and it has idled."""
    name = f"enforcer-{spec.cluster_id}"
    env.processes.stop(name, timeout=30)
    record = env.processes.start(name, [*argv, *extra], log=env.log_path(name), env=env._process_env())
    env._wait_https_ready(name, spec.enforcer_webhook_port, timeout=600)
    # The webhook's /readyz says only that its caches listed; with the webhooks in a process
    # of their own the enforcer's controllers may still be listing: its /readyz covers them.
    wait_health_ready(spec.enforcer_health_port)
    wait_idle(record.pid)
    return record.pid


def wait_health_ready(port: int, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    log(f"enforcer /readyz not 200 after {timeout:.0f}s; probing anyway")


def wait_idle(pid: int, timeout: float = 600) -> None:
    """Until the process tree's CPU over :data:`IDLE_WINDOW_S` is below
    :data:`IDLE_CPU_SHARE` of a core: the restarted enforcer has reconciled everything."""
    deadline = time.monotonic() + timeout
    quiet = 0
    while time.monotonic() < deadline:
        before = controlplane.cpu_seconds(pid)
        time.sleep(IDLE_WINDOW_S)
        share = (controlplane.cpu_seconds(pid) - before) / IDLE_WINDOW_S
        # Several windows in a row: the enforcer's loops start in stages (the controllers,
        # then the consumer loops' lists), with lulls between them.
        quiet = quiet + 1 if share < IDLE_CPU_SHARE else 0
        if quiet >= IDLE_WINDOWS:
            return
        log(f"  enforcer busy ({share * 100:.0f}% of a core), waiting")
    log(f"enforcer not idle after {timeout:.0f}s; probing anyway")


def tree_kib(pid: int, key: str) -> int:
    return sum(controlplane.status_kib(p, key) for p in controlplane.tree_pids(pid))


def running_count(remote, namespace: str) -> tuple[int, int]:
    out = remote.kubectl("get", "pods", "-n", namespace, "--no-headers", "--chunk-size=0", timeout=120).stdout
    rows = [line.split() for line in out.splitlines() if line.strip()]
    return sum(1 for row in rows if len(row) > 2 and row[2] == "Running"), len(rows)


def create_all(kubeconfig: Path, namespace: str, consumer_id: str, count: int, clients: int) -> tuple[list[float], list[str]]:
    """Create ``count`` ShadowPods from ``clients`` threads, each with its own connection
    pool; the latency of every create, and the errors."""
    from kubernetes import client, config

    local = threading.local()

    def api() -> client.CustomObjectsApi:
        if not hasattr(local, "api"):
            local.api = client.CustomObjectsApi(config.new_client_from_config(str(kubeconfig)))
        return local.api

    def one(index: int) -> tuple[float, str | None]:
        body = shadowpod(index, namespace=namespace, consumer_id=consumer_id)
        started = time.perf_counter()
        try:
            api().create_namespaced_custom_object(C.SHADOWPOD_GROUP, C.SHADOWPOD_VERSION, namespace, C.SHADOWPOD_PLURAL, body)
        except Exception as exc:  # noqa: BLE001 (reported, the bench goes on)
            return time.perf_counter() - started, f"{body['metadata']['name']}: {exc}"[:300]
        return time.perf_counter() - started, None

    latencies, errors = [], []
    with ThreadPoolExecutor(max_workers=clients) as pool:
        for done, (seconds, error) in enumerate(pool.map(one, range(count)), 1):
            latencies.append(seconds)
            if error:
                errors.append(error)
            if done % 500 == 0:
                log(f"  {done}/{count} created, load {os.getloadavg()[0]:.1f}")
    return latencies, errors


def create_at_rate(kubeconfig: Path, namespace: str, consumer_id: str, *, rate: float, count: int, first_index: int,
                   workers: int) -> list[tuple[float, float, str | None]]:
    """Open loop: create ``count`` ShadowPods, the i-th due at ``i / rate`` s
    (:func:`probe_schedule`), from ``workers`` threads (each with its own client, warmed by
    one GET, so no create pays a TLS handshake), so a slow create delays no other while a
    worker is free. Per create: (lag behind its due time, seconds end to end, error)."""
    from kubernetes import client, config

    bodies = [shadowpod(first_index + i, namespace=namespace, consumer_id=consumer_id) for i in range(count)]
    due: queue.Queue[tuple[int, float] | None] = queue.Queue()
    results: list[tuple[float, float, str | None]] = [(math.nan, math.nan, "not run")] * count
    ready = threading.Barrier(workers + 1)

    def work() -> None:
        api = client.CustomObjectsApi(config.new_client_from_config(str(kubeconfig)))
        try:
            api.list_namespaced_custom_object(C.SHADOWPOD_GROUP, C.SHADOWPOD_VERSION, namespace, C.SHADOWPOD_PLURAL, limit=1)
        except Exception:  # noqa: BLE001 (only warms the connection)
            pass
        ready.wait()
        while (item := due.get()) is not None:
            index, at = item
            started = time.perf_counter()
            error = None
            try:
                api.create_namespaced_custom_object(C.SHADOWPOD_GROUP, C.SHADOWPOD_VERSION, namespace, C.SHADOWPOD_PLURAL,
                                                    bodies[index])
            except Exception as exc:  # noqa: BLE001 (reported, the bench goes on)
                error = f"{bodies[index]['metadata']['name']}: {exc}"[:300]
            results[index] = (started - at, time.perf_counter() - started, error)

    threads = [threading.Thread(target=work, name=f"probe-{i}", daemon=True) for i in range(workers)]
    for thread in threads:
        thread.start()
    ready.wait()
    begin = time.perf_counter() + 0.2
    for index, offset in enumerate(probe_schedule(rate, count)):
        wait = begin + offset - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        due.put((index, begin + offset))
    for _ in threads:
        due.put(None)
    for thread in threads:
        thread.join()
    return results


def wait_running(remote, namespace: str, expected: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running, _ = running_count(remote, namespace)
        if running >= expected:
            return True
        time.sleep(3)
    return False


def probe_once(env, remote, spec, consumer: Path, namespace: str, consumer_id: str, pid: int, *, rate: float, count: int,
               first_index: int, workers: int, profile_dir: Path | None) -> dict:
    """One probe at ``rate``: the creates, the histograms' deltas over its window and,
    with ``profile_dir``, two py-spy profiles of the enforcer over it (wall: ``--idle``;
    cpu: running samples only)."""
    before = admission_figures(env, remote, spec)
    cpu_before = controlplane.cpu_seconds(pid)
    spies: dict[str, tuple[subprocess.Popen, Path]] = {}
    if profile_dir is not None:
        for kind, extra in (("wall", ["--idle"]), ("cpu", [])):
            out = profile_dir / f"probe-{rate:g}-{kind}.json"
            spy = profile_enforcer(pid, int(count / rate) + 120, out, extra)
            if spy is not None:
                spies[kind] = (spy, out)
        time.sleep(1)  # py-spy attached
    spied_from = time.monotonic()
    started = time.monotonic()
    creates = create_at_rate(consumer, namespace, consumer_id, rate=rate, count=count, first_index=first_index, workers=workers)
    window = time.monotonic() - started
    cpu = controlplane.cpu_seconds(pid) - cpu_before
    profiles = {}
    spied_s = time.monotonic() - spied_from + 1
    for kind, (spy, out) in spies.items():
        spy.send_signal(signal.SIGINT)
        spy.wait(timeout=120)
        if out.exists():
            profiles[kind] = speedscope_summary(json.loads(out.read_text()))
    after = admission_figures(env, remote, spec)
    return {
        "rate": rate, "count": count, "window_s": window, "profiled": profile_dir is not None, "cpu_s": cpu,
        "lag": latency_summary(lag for lag, _, _ in creates),
        "client": latency_summary(seconds for _, seconds, error in creates if error is None),
        "errors": [error for _, _, error in creates if error],
        "enforcer_buckets": bucket_delta(before["enforcer"], after["enforcer"]),
        "apiserver_buckets": bucket_delta(before["apiserver"], after["apiserver"]),
        "gc_full_buckets": bucket_delta(before["gc_full"], after["gc_full"]),
        "sums": {name: tuple(a - b for a, b in zip(after["sums"][name], before["sums"][name], strict=True)) for name in after["sums"]},
        "profiles": profiles, "spied_s": spied_s if spies else None,
    }


def twin_namespace(env, remote, consumer_kubeconfig: Path, consumer_id: str) -> str:
    name = C.twin_namespace_name(LOCAL_NAMESPACE, consumer_id)
    request = {
        "apiVersion": f"{C.SHADOWPOD_GROUP}/{C.SHADOWPOD_VERSION}", "kind": C.TWIN_NAMESPACE_KIND,
        "metadata": {"name": name, "namespace": C.tenant_namespace(consumer_id)},
        "spec": {"localNamespace": LOCAL_NAMESPACE},
    }
    made = remote.kubectl_as(consumer_kubeconfig, "apply", "-f", "-", input=json.dumps(request))
    if made.returncode != 0:
        raise RuntimeError(f"twin namespace request refused: {made.stderr}")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        phase = remote.kubectl_as(consumer_kubeconfig, "get", "twinnamespace", name, "-n", C.tenant_namespace(consumer_id),
                                  "-o", "jsonpath={.status.phase}").stdout
        if phase == C.TWIN_PHASE_READY and remote.kubectl_as(
                consumer_kubeconfig, "auth", "can-i", "create", "shadowpods.kube-offload.io", "-n", name).stdout.strip() == "yes":
            return name
        time.sleep(1)
    raise RuntimeError(f"twin namespace {name} not ready after 120s")


def profile_enforcer(pid: int, seconds: int, out: Path, extra: Iterable[str] = ()) -> subprocess.Popen | None:
    spy = Path(sys.executable).parent / "py-spy"
    if not spy.exists():
        log(f"--profile: no {spy} (pip install py-spy)")
        return None
    def unniced() -> None:  # the bench runs under nice; the sampler must keep its rate
        try:
            os.nice(-os.nice(0))
        except OSError:
            pass

    return subprocess.Popen([str(spy), "record", "-p", str(pid), "-d", str(seconds), "-o", str(out), "-f", "speedscope",
                             "--nonblocking", *extra], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=unniced)


# --- --caches: the informers' stores without a cluster -------------------------------------
CACHE_VARIANTS = ("before", "after")


def build_caches(texts: list[dict[str, list[str]]], variant: str) -> dict[str, dict]:
    """The enforcer's three per-ShadowPod stores, as its informers fill them: managedFields
    dropped, then the transform (``before``: the ShadowPod and pod whole, the capacity
    pod trimmed without interning, as they were)."""
    from enforcer.consumers import trim as consumer_trim
    from enforcer.shadowpods.trim import keep_shadowpod, trim_managed_pod

    if variant == "before":
        consumer_trim.interned = lambda value: value  # type: ignore[assignment]
    keep = keep_shadowpod if variant == "after" else (lambda obj: obj)
    trim = trim_managed_pod if variant == "after" else (lambda obj: obj)
    stores: dict[str, dict] = {"shadowpods": {}, "managed-pods": {}, "capacity-pods": {}}
    for pod in texts:
        for store, text, transform in (("shadowpods", pod["remote-shadowpods"][0], keep),
                                       ("managed-pods", pod["remote-pods"][0], trim),
                                       ("capacity-pods", pod["remote-pods"][0], consumer_trim.trim_pod)):
            obj = json.loads(text)
            obj["metadata"].pop("managedFields", None)
            obj = transform(obj)
            stores[store][f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"] = obj
    return stores


def cache_case(profile: str, count: int, variant: str, metric: str) -> dict:
    import gc

    import bench_vkubelet_memory as memory

    objects = memory.load_fixture(profile)
    texts = [memory.pod_texts(objects, i) for i in range(count)]
    import enforcer.shadowpods.trim  # noqa: F401  (imported before the baseline is taken)

    gc.collect()
    if metric == "tracemalloc":
        import tracemalloc

        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        stores = build_caches(texts, variant)
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        split = {name: memory._deep_size(store) / count for name, store in stores.items()}
    else:
        before = memory.rss_bytes()
        stores = build_caches(texts, variant)
        gc.collect()
        after = memory.rss_bytes()
        split = {}
    return {"bytes_per_shadowpod": (after - before) / count, "per_cache": split}


def caches_report(count: int) -> int:
    print(f"machine: {platform.machine()}, Linux {platform.release()}, Python {platform.python_version()}, "
          f"{os.cpu_count()} CPUs; {count} ShadowPods; load {os.getloadavg()[0]:.1f}")
    for profile in ("scale", "app"):
        print(f"\n== profile {profile}: the enforcer's stores per ShadowPod (ShadowPod, managed pod, capacity pod)")
        for variant in CACHE_VARIANTS:
            figures = {}
            for metric in ("tracemalloc", "rss"):
                out = subprocess.run([sys.executable, __file__, "--cache-case", profile, str(count), variant, metric],
                                     check=True, capture_output=True, text=True)
                figures[metric] = json.loads(out.stdout.strip().splitlines()[-1])
            split = figures["tracemalloc"]["per_cache"]
            print(f"{variant:<7} tracemalloc {figures['tracemalloc']['bytes_per_shadowpod'] / 1024:5.1f} KiB, "
                  f"RSS {figures['rss']['bytes_per_shadowpod'] / 1024:5.1f} KiB; deep size by cache: "
                  + ", ".join(f"{name} {size:.0f} B" for name, size in split.items()))
    return 0


def ms(seconds: float | None) -> str:
    return "-" if seconds is None or math.isnan(seconds) else f"{seconds * 1000:.1f} ms"


def print_probe(probe: dict) -> None:
    """The report of one probe (:func:`probe_once`)."""
    n, rate = probe["count"], probe["rate"]
    print(f"\n== probe: {n} creates at {rate:g}/s (open loop) holding {probe['held']} ShadowPods"
          + (f", arm {probe['arm']}" if probe.get("arm") else "")
          + (", py-spy attached (wall + cpu)" if probe["profiled"] else "")
          + f": {probe['window_s']:.1f}s ({n / probe['window_s']:.1f}/s), {len(probe['errors'])} failed, "
          f"load {probe['load']:.1f}; enforcer CPU {probe['cpu_s'] / n * 1000:.2f} ms per create")
    lag, client = probe["lag"], probe["client"]
    print(f"schedule lag: p50 {ms(lag['p50'])}, p99 {ms(lag['p99'])}, max {ms(lag['max'])}")
    for label, key in (("enforcer webhook (own histogram)", "enforcer"), ("apiserver -> webhook", "apiserver")):
        buckets = probe[f"{key}_buckets"]
        p50, p99 = histogram_quantile(buckets, 0.5), histogram_quantile(buckets, 0.99)
        total, count = probe["sums"][key]
        if p50 is None or p99 is None:
            print(f"{label}: no observations")
            continue
        print(f"{label}: {count:.0f} calls, mean {ms(total / count if count else None)}, "
              f"p50 {ms(p50[0])} (bucket <= {p50[1] * 1000:g}), p99 {ms(p99[0])} (bucket <= {p99[1] * 1000:g}) "
              f"-> {verdict(p99[0], ADMISSION_P99_GOAL_S)}")
    print(f"consumer create, end to end: p50 {ms(client['p50'])}, p99 {ms(client['p99'])}, max {ms(client['max'])}")
    full_s, full = probe["sums"]["gc_full"]
    all_s, collections = probe["sums"]["gc_all"]
    longest = max_bound(probe["gc_full_buckets"])
    print(f"enforcer's garbage collector: {collections:.0f} collections, {ms(all_s)} in all; {full:.0f} full, "
          f"{ms(full_s)}" + (f", the longest <= {longest * 1000:g} ms" if longest is not None and full else ""))
    for kind, summary in probe["profiles"].items():
        ticks = summary["ticks"]
        print(f"py-spy {kind}: {summary['within']} samples in webhook requests; " + (
            # with --idle every live thread is in every tick: Little's law gives the wall time per request
            f"{ticks} ticks over {probe['spied_s']:.1f}s ({ticks / probe['spied_s']:.0f}/s): "
            f"{summary['within'] / ticks * probe['spied_s'] / n * 1000:.1f} ms in do_POST per create; "
            if kind == "wall" and ticks and probe.get("spied_s") else "")
            + "marks: " + ", ".join(f"{name} {count}" for name, count in summary["marks"].items()) + "; threads (samples/count): "
            + ", ".join(f"{name} {count}/{summary['thread_count'][name]}" for name, count in list(summary["threads"].items())[:8]))
        print("  inclusive: " + "; ".join(f"{key} {count * 100 / max(summary['within'], 1):.0f}%"
                                          for key, count in summary["inclusive"]))
        print("  self:      " + "; ".join(f"{key} {count * 100 / max(summary['within'], 1):.0f}%"
                                          for key, count in summary["self"]))


def main() -> int:
    if len(sys.argv) == 6 and sys.argv[1] == "--cache-case":
        profile, count, variant, metric = sys.argv[2:]
        print(json.dumps(cache_case(profile, int(count), variant, metric)))
        return 0
    from kube_offload_harness import identities
    from kube_offload_harness.cluster import Environment, default_topology

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shadowpods", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=8, help="threads creating ShadowPods (default 8)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds for every pod to run")
    parser.add_argument("--settle", type=float, default=15, help="seconds idle before the RSS is read (default 15)")
    parser.add_argument("--profile", type=Path, default=None, help="py-spy the enforcer over the creates into this file")
    parser.add_argument("--probe-rates", default="", metavar="R[,R...]",
                        help="after the N are held and every pod runs: a probe of --probe-count creates at each fixed "
                             "rate R (creates/s, open loop), e.g. 5,10,20,40 (default: no probe)")
    parser.add_argument("--probe-rate", type=float, default=None, metavar="R", help="one probe rate (as --probe-rates R)")
    parser.add_argument("--probe-count", type=int, default=500, help="creates per probe (default 500)")
    parser.add_argument("--probe-workers", type=int, default=32,
                        help="threads the probe's creates start from (default 32; a create waits only when all are busy)")
    parser.add_argument("--probe-profile", type=Path, default=None, metavar="DIR",
                        help="after each probe, the same probe again with py-spy on the enforcer (wall and cpu "
                             "profiles into DIR, summarised: where a webhook request spends its time)")
    parser.add_argument("--arms", default="", metavar="A,B[,...]",
                        help=f"run the probes once per arm, the enforcer restarted with its flags between them "
                             f"(known: {', '.join(ARMS)}; default: no restart, the harness's enforcer as it is)")
    parser.add_argument("--rounds", type=int, default=1, help="with --arms: run every arm this many times (A, B, A, B)")
    parser.add_argument("--keep", action="store_true", help="leave the environment up at the end")
    parser.add_argument("--caches", action="store_true", help="no cluster: the caches' bytes per ShadowPod, before/after")
    args = parser.parse_args()
    rates = parse_rates(args.probe_rates) if args.probe_rates else []
    if args.probe_rate is not None:
        rates.append(args.probe_rate)
    arms = arm_order(parse_arms(args.arms), args.rounds) if args.arms else []
    if arms and not rates:
        parser.error("--arms needs --probe-rates (what each arm is measured with)")
    if args.probe_profile is not None:
        args.probe_profile.mkdir(parents=True, exist_ok=True)
    if args.caches:
        return caches_report(args.shadowpods)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda number, frame: sys.exit(128 + number))

    state = Path(tempfile.mkdtemp(prefix="kube-offload-bench-provider-"))
    env = Environment(state, say=log)
    probes = len(rates) * args.probe_count * (2 if args.probe_profile else 1) * max(len(arms), 1)
    per_node = math.ceil((args.shadowpods + probes) * 1.5 / 2) + 50
    topology = default_topology(prefix="prov", remotes=1, local_nodes=1, remote_nodes=2,
                                node_cpu="1000", node_memory="4Ti", node_pods=per_node)
    topology.virtual_kubelets = False
    problems: list[str] = []
    result: dict = {"shadowpods": args.shadowpods, "clients": args.clients, "probes": []}
    load_before = os.getloadavg()
    try:
        env.up(topology)
        spec = topology.remotes[0]
        remote = env.cluster(spec)
        consumer_id = topology.local.cluster_id
        consumer = env.identity_kubeconfig(remote, identities.consumer_sa(consumer_id))
        namespace = twin_namespace(env, remote, consumer, consumer_id)
        record = env.processes.get(f"enforcer-{spec.cluster_id}")
        assert record is not None
        pid = record.pid
        time.sleep(args.settle)
        rss_idle = tree_kib(pid, "VmRSS")
        cpu_before = controlplane.cpu_seconds(pid)
        hist_before = admission_figures(env, remote, spec)
        log(f"enforcer PID {pid}: idle RSS {rss_idle / 1024:.1f} MiB; creating {args.shadowpods} ShadowPods in {namespace}")
        spy = profile_enforcer(pid, 600, args.profile) if args.profile else None
        started = time.monotonic()
        latencies, errors = create_all(consumer, namespace, consumer_id, args.shadowpods, args.clients)
        created_s = time.monotonic() - started
        cpu_created = controlplane.cpu_seconds(pid)
        hist_after = admission_figures(env, remote, spec)
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(timeout=60)
        problems += [f"create failed: {e}" for e in errors[:5]]
        if len(errors) > 5:
            problems.append(f"... {len(errors)} creates failed in all")
        expected = args.shadowpods - len(errors)
        log(f"created in {created_s:.1f}s ({args.shadowpods / created_s:.1f}/s); waiting for {expected} pods to run")
        ran = None
        while time.monotonic() - started < args.timeout:
            running, existing = running_count(remote, namespace)
            if running >= expected:
                ran = time.monotonic() - started
                break
            log(f"  {running}/{expected} Running ({existing} exist), enforcer RSS {tree_kib(pid, 'VmRSS') / 1024:.0f} MiB")
            time.sleep(10)
        if ran is None:
            problems.append(f"pods not all running after {args.timeout}s")
        time.sleep(args.settle)
        rss_after = tree_kib(pid, "VmRSS")
        result.update({
            "created_s": created_s, "ran_s": ran, "errors": len(errors),
            "rss_idle_kib": rss_idle, "rss_after_kib": rss_after, "rss_peak_kib": tree_kib(pid, "VmHWM"),
            "cpu_create_s": cpu_created - cpu_before, "cpu_total_s": controlplane.cpu_seconds(pid) - cpu_before,
            "client_latencies": latencies,
            "enforcer_buckets": bucket_delta(hist_before["enforcer"], hist_after["enforcer"]),
            "apiserver_buckets": bucket_delta(hist_before["apiserver"], hist_after["apiserver"]),
        })
        held = expected
        base_argv = list(record.argv)
        for arm in arms or [None]:
            if arm is not None:
                log(f"arm {arm}: restarting the enforcer with {' '.join(ARMS[arm])}, holding {held}")
                try:
                    pid = restart_enforcer(env, spec, base_argv, ARMS[arm])
                except Exception as exc:  # noqa: BLE001 - the arms measured so far are still reported
                    kept = Path(tempfile.gettempdir()) / f"bench-provider-enforcer-{arm}-{os.getpid()}.log"
                    kept.write_bytes(env.log_path(f"enforcer-{spec.cluster_id}").read_bytes())
                    problems.append(f"arm {arm}: the enforcer did not come back ({str(exc).splitlines()[0]}); its log: {kept}")
                    break
                time.sleep(args.settle)
                log(f"arm {arm}: enforcer PID {pid} ready and idle, RSS (with its child) {tree_kib(pid, 'VmRSS') / 1024:.0f} MiB")
            for rate in rates:
                for profile_dir in ((None, args.probe_profile) if args.probe_profile else (None,)):
                    log(f"probe: {args.probe_count} creates at {rate:g}/s holding {held}" + (f", arm {arm}" if arm else "")
                        + (f", py-spy into {profile_dir}" if profile_dir else "") + f", load {os.getloadavg()[0]:.1f}")
                    probe = probe_once(env, remote, spec, consumer, namespace, consumer_id, pid, rate=rate,
                                       count=args.probe_count,
                                       first_index=args.shadowpods + len(result["probes"]) * args.probe_count,
                                       workers=args.probe_workers, profile_dir=profile_dir)
                    probe["held"] = held
                    probe["load"] = os.getloadavg()[0]
                    probe["arm"] = arm
                    probe["rss_kib"] = tree_kib(pid, "VmRSS")
                    result["probes"].append(probe)
                    print_probe(probe)  # now as well as in the report: a later failure loses no arm
                    sys.stdout.flush()
                    problems += [f"probe create failed: {e}" for e in probe["errors"][:3]]
                    held += args.probe_count - len(probe["errors"])
                    if not wait_running(remote, namespace, held, 300):
                        problems.append(f"probe at {rate:g}/s: pods not all running after 300s")
                    time.sleep(args.settle)  # the enforcer idle again before the next probe
    finally:
        if not args.keep:
            env.down()

    if "rss_after_kib" not in result:
        print("the environment did not come up", file=sys.stderr)
        return 1
    n = args.shadowpods
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print()
    print(f"machine: {platform.machine()}, {platform.system()} {platform.release()}, {os.cpu_count()} cores; "
          f"python {platform.python_version()}; commit {commit}; load {load_before[0]:.1f} before, {os.getloadavg()[0]:.1f} after")
    print(f"{n} ShadowPods of one consumer, {args.clients} client threads: created in {result['created_s']:.1f}s "
          f"({n / result['created_s']:.1f}/s), all pods Running after {result['ran_s'] or float('nan'):.1f}s; "
          f"{result['errors']} creates failed")
    per = per_shadowpod_kib(result["rss_idle_kib"], result["rss_after_kib"], n)
    print(f"enforcer RSS: idle {result['rss_idle_kib'] / 1024:.1f} MiB, after {result['rss_after_kib'] / 1024:.1f} MiB, "
          f"peak {result['rss_peak_kib'] / 1024:.1f} MiB -> {per:.1f} KiB per ShadowPod "
          f"({verdict(per, RSS_GOAL_KIB)} the goal <= {RSS_GOAL_KIB:.0f} KiB)")
    print(f"enforcer CPU: {result['cpu_create_s'] / n * 1000:.2f} ms per ShadowPod over the creates, "
          f"{result['cpu_total_s'] / n * 1000:.2f} ms until all ran")
    rows = [("enforcer webhook (own histogram)", result["enforcer_buckets"]),
            ("apiserver -> webhook (admission_duration)", result["apiserver_buckets"])]
    for label, buckets in rows:
        p50, p99 = histogram_quantile(buckets, 0.5), histogram_quantile(buckets, 0.99)
        count = max(buckets.values()) if buckets else 0
        if p50 is None or p99 is None:
            print(f"{label}: no observations")
            continue
        print(f"{label}: {count:.0f} calls, p50 {p50[0] * 1000:.1f} ms (bucket <= {p50[1] * 1000:g}), "
              f"p99 {p99[0] * 1000:.1f} ms (bucket <= {p99[1] * 1000:g}) -> {verdict(p99[0], ADMISSION_P99_GOAL_S)}")
    lat = result["client_latencies"]
    c50, c99 = percentile(lat, 0.5), percentile(lat, 0.99)
    print(f"consumer create, end to end: p50 {(c50 or 0) * 1000:.1f} ms, p99 {(c99 or 0) * 1000:.1f} ms, "
          f"max {max(lat) * 1000:.1f} ms")
    for probe in result["probes"]:
        print_probe(probe)
    for line in arm_table(result["probes"]):
        print(line)
    summary = {k: v for k, v in result.items() if k not in ("client_latencies", "probes")}
    summary.update({"client_p50_s": c50, "client_p99_s": c99, "rss_kib_per_shadowpod": per})
    print(json.dumps({k: ({str(le): c for le, c in v.items()} if isinstance(v, dict) else v) for k, v in summary.items()}))
    for probe in result["probes"]:
        print(json.dumps({k: ({str(le): c for le, c in v.items()} if k.endswith("_buckets") else v)
                          for k, v in probe.items() if k != "profiles"}))
    for problem in problems:
        print(f"PROBLEM: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
