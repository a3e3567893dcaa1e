"""Memory that parsing one request body costs the webhook and the extender, per body byte,
and the body limits that follow (a script, not a test: it prints figures).

Each case runs in a fresh subprocess and sends one body through the component's real
WSGI app (the webhook's, the extender's: the app reads the body, ``parse_review`` / ``wire`` parse it
with orjson, the route decides and answers), the body waiting in an in-memory
``wsgi.input`` as gunicorn's would. Two figures per case:

- ``tracemalloc``: peak of Python allocations during the request (the body read, the
  parsed objects, the answer) over the body's size;
- ``rss``: growth of the process's peak RSS (``VmHWM``, reset just before the call
  through ``/proc/self/clear_refs``) over the same call, without tracemalloc, over the
  body's size. It includes what the allocator keeps after objects
  are freed, which is what a memory limit sees.

Bodies: ``pod`` / ``nodes`` are what the apiserver and kube-scheduler really send (a Pod
grown with env entries, the most object-dense part of a Pod; Node objects as a large
cluster reports them); ``dense`` is the worst JSON for memory that still passes the
parsers' checks (``[{}, {}, ...]`` under Pod.spec, which neither parser reads): anyone
who can reach the Service can send it, so the limits are sized on it.

The baseline is measured on the real server at rest (gunicorn arbiter and
workers, the chart's workers and threads): the PSS of the process tree, so pages shared
after the fork count once, as the container's memory accounting counts them. The limit
printed for each component is the largest multiple of 64 KiB with::

    baseline + workers x threads x limit x amplification  <=  90 % of the memory limit

(10 % kept for the production caches and allocator fragmentation), the amplification
being the worst figure measured (the ``dense`` body): the old model (every thread at the
limit), printed for comparison. Both components now bound the bodies a worker parses
together with a parse memory budget (``ParseBudget``, kube_offload/runtime/body_limit.py),
and the figure printed is the budget per worker::

    baseline + workers x budget  <=  90 % of the memory limit

The webhook's hard cap is the apiserver's own (3 MiB); the extender's is the largest body
its budget parses alone at 37 B/B (kube-scheduler calls it one pod at a time).

Then, to show that bound at work, one worker's app (the chart's threads, each its own
thread, bodies in memory as above) under two loads, once with the chart's budget and once
with none (the old model: only the hard cap), in fresh processes, peak RSS growth
(``VmHWM``) measured over the load:

- ``all-max``: every thread sends a ``dense`` AdmissionReview at the hard cap at once (the
  worst anyone who reaches the Service can do);
- ``mixed``: one thread sends such bodies back to back while the others send the
  benchmark's 3 KiB pod admissions in a closed loop, whose latency is printed.

And the extender's worker (one, 8 threads): ``all-max``, every thread sends a ``dense``
ExtenderArgs just under its cap at once, with the chart's budget, with none, and with the
budget but glibc's default malloc arenas; ``in-turn``, the same eight bodies one after
the other, each on another thread (kube-scheduler's pattern: one call at a time), with 2
arenas and with glibc's default.

And what the budget costs a small request: an uncontended ``reserve`` / release pair
against the whole small admission through the app, in the same run.

Usage: ``.venv/bin/python bench/bench_parse_memory.py [--size-mib 4]`` (about 40 s; loopback only).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import shutil
import subprocess
import tempfile
import sys
import tracemalloc
from pathlib import Path

MIB = 1024 * 1024
KIB = 1024
ROOT = Path(__file__).resolve().parent.parent
# Chart defaults (charts/kube-offload-local/values.yaml); checked against the file below.
CHART = ROOT / "charts" / "kube-offload-local" / "values.yaml"


# --- bodies ------------------------------------------------------------------------------

def wsgi_post(app, path: str, body: bytes) -> str:
    """POST ``body`` to ``path`` through the app's WSGI entry, as gunicorn hands a
    request over (body in ``wsgi.input``); returns the status code as text."""
    status: list[str] = []
    environ = {
        "REQUEST_METHOD": "POST", "PATH_INFO": path, "SERVER_NAME": "bench", "SERVER_PORT": "443",
        "SERVER_PROTOCOL": "HTTP/1.1", "wsgi.url_scheme": "https", "wsgi.input": io.BytesIO(body),
        "wsgi.input_terminated": True, "wsgi.errors": sys.stderr,
        "CONTENT_TYPE": "application/json", "CONTENT_LENGTH": str(len(body)),
    }
    b"".join(app(environ, lambda s, h, e=None: status.append(s)))
    return status[0][:3]

def _pad_pod(pod: dict, size: int, dense: bool) -> dict:
    """``pod`` grown to about ``size`` bytes of JSON."""
    if dense:
        pod["spec"]["x-padding"] = [{}] * (size // 3)
    else:
        env = pod["spec"]["containers"][0]["env"]
        entry_size = len(json.dumps({"name": "SETTING_000000", "value": "value-000000"})) + 1
        env.extend({"name": f"SETTING_{i:06d}", "value": f"value-{i:06d}"} for i in range(size // entry_size))
    return pod


def webhook_body(shape: str, size: int) -> bytes:
    from bench_webhook import realistic_pod

    import orjson

    from kube_offload.admission import build_review

    pod = _pad_pod(realistic_pod(), size, dense=shape == "dense")
    return orjson.dumps(build_review(pod, uid="bench"))


def extender_body(shape: str, size: int) -> bytes:
    from datetime import datetime, timezone

    import orjson
    from bench_extender import make_node, make_pod

    pod = make_pod()
    if shape == "dense":
        pod = _pad_pod(pod, size, dense=True)
        nodes: list[dict] = []
    else:
        now = datetime.now(timezone.utc)
        one = len(orjson.dumps(make_node(1, False, now)))
        nodes = [make_node(i, i % 10 == 0, now) for i in range(max(1, size // one))]
    return orjson.dumps({"Pod": pod, "Nodes": {"metadata": {}, "items": nodes}, "NodeNames": None})


# --- one measurement (in a child process) ------------------------------------------------
def build_app(component: str):
    if component == "webhook":
        from bench_webhook import NAMESPACE

        from webhook.app import create_app
        from webhook.namespace_cache import StaticNamespaceSource
        from webhook.settings import WebhookSettings

        # No cap and no budget: the point is to measure what one body costs.
        return create_app(WebhookSettings(max_body_bytes=1 << 40, parse_memory_budget=1 << 50),
                          namespace_source=StaticNamespaceSource([NAMESPACE]))
    from bench_extender import make_node
    from datetime import datetime, timezone

    from extender.app import create_app
    from extender.caches import StaticCaches
    from extender.settings import ExtenderSettings

    namespace = {"metadata": {"name": "bench", "labels": {"kube-offload.io/enabled": "true"}}}
    caches = StaticCaches(nodes=[make_node(i, True, datetime.now(timezone.utc)) for i in range(3)],
                          namespaces=[namespace], node_cache=False)
    return create_app(caches, ExtenderSettings(max_body_bytes=1 << 40, parse_memory_budget=1 << 50))


def measure(component: str, body_file: str, mode: str) -> dict:
    app = build_app(component)
    # Built by the parent: building it here would raise the peak RSS before the call.
    body = Path(body_file).read_bytes()
    path = "/mutate/pods" if component == "webhook" else "/filter"
    status: list[str] = []

    def call() -> None:
        status.append(wsgi_post(app, path, body))

    # Warm up on a tiny body so first-call allocations (lazy imports, caches) are not counted.
    wsgi_post(app, path, (webhook_body if component == "webhook" else extender_body)("pod", 1))
    baseline_rss = _status_bytes("VmRSS")
    # Reset the peak RSS (VmHWM) to the current RSS: the imports peaked higher than where
    # they settled, and that would hide the start of the request's growth.
    Path("/proc/self/clear_refs").write_text("5")
    if mode == "tracemalloc":
        tracemalloc.start()
        call()
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        used = peak
    else:
        call()
        used = _status_bytes("VmHWM") - baseline_rss
    return {"body": len(body), "used": used, "status": status[0], "baseline_rss": baseline_rss}


def _status_bytes(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * KIB
    raise RuntimeError(f"no {field} in /proc/self/status")


def run_child(component: str, body_file: Path, mode: str, env: dict | None = None) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--child", component, str(body_file), mode],
        check=True, capture_output=True, text=True, cwd=ROOT, env={**os.environ, **(env or {})},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


# --- limits ------------------------------------------------------------------------------
def byte_size(text: str) -> int:
    from kube_offload.runtime.flags import byte_size as parse

    return parse(text)


def chart_values() -> dict:
    import yaml

    return yaml.safe_load(CHART.read_text())


def mebibytes(quantity: str) -> float:
    units = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024}
    for suffix, factor in units.items():
        if quantity.endswith(suffix):
            return float(quantity[: -len(suffix)]) * factor
    return float(quantity) / MIB


def _tree_pss(pid: int) -> int:
    """Proportional set size of ``pid`` and its descendants: pages shared after the fork
    counted once overall, as the container's memory accounting does."""
    total, pending = 0, [pid]
    while pending:
        current = pending.pop()
        for line in Path(f"/proc/{current}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                total += int(line.split()[1]) * KIB
        for task in Path(f"/proc/{current}/task").iterdir():
            pending += [int(child) for child in (task / "children").read_text().split()]
    return total


def server_baseline(component: str, workers: int, threads: int, tmp: str) -> float:
    """MiB held by the real server (arbiter and workers, PSS) once it answered a request."""
    import multiprocessing
    import ssl
    import time
    import urllib.request

    import bench_webhook

    port = bench_webhook.free_port()
    if component == "webhook":
        ca, cert, key = bench_webhook.make_tls(Path(tmp))
        process = multiprocessing.get_context("fork").Process(
            target=bench_webhook.run_server, args=(port, cert, key, workers, threads), daemon=True)
        process.start()
        pid, url, context = process.pid, f"https://127.0.0.1:{port}/readyz", ssl.create_default_context(cafile=str(ca))
        stop = process.terminate
    else:
        snapshot = Path(tmp) / "snapshot.json"
        snapshot.write_text(json.dumps({"namespaces": [{"metadata": {"name": "bench"}}], "nodes": []}))
        child = subprocess.Popen(
            [sys.executable, "-m", "extender.offline", str(snapshot), "--bind", f"127.0.0.1:{port}",
             "--threads", str(threads)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
        pid, url, context, stop = child.pid, f"http://127.0.0.1:{port}/readyz", None, child.terminate
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(url, timeout=2, context=context) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit(f"bench: the {component} server did not start") from None
                time.sleep(0.2)
        time.sleep(1.0)
        pss = _tree_pss(pid) / MIB
        print(f"{component} server at rest ({workers} workers x {threads} threads): {pss:.0f} MiB PSS")
        return pss
    finally:
        stop()


# Part of the memory limit kept out of the sum: the production caches (the namespace
# informer grows with the cluster, unlike the benchmark's static source) and allocator
# fragmentation after large requests.
RESERVE = 0.10


def limit_for(memory_limit: float, baseline: float, concurrency: int, amplification: float) -> int:
    budget = (memory_limit * (1 - RESERVE) - baseline) * MIB
    per_request = budget / (concurrency * amplification)
    return max(0, int(per_request // (64 * KIB)) * 64 * KIB)


# --- the webhook's parse budget -----------------------------------------------------------
def budget_lines(component: str, settings: dict, baseline: float, amplification: float) -> None:
    from kube_offload.runtime.body_limit import (
        PARSE_AMPLIFICATION,
        budget_peak_memory,
        largest_parseable_body,
        worker_parse_budget,
    )

    workers = int(settings.get("workers", 1))
    memory = mebibytes(settings["resources"]["limits"]["memory"])
    derived = worker_parse_budget(memory_limit=int(memory * MIB), baseline=int(baseline * MIB), workers=workers)
    chart = byte_size(str(settings["parseMemoryBudget"]))
    cap = byte_size(str(settings["maxBodyBytes"]))
    peak = budget_peak_memory(baseline=int(baseline * MIB), workers=workers, budget=chart) / MIB
    print(f"{component}: baseline {baseline:.0f} MiB, {workers} workers, worst amplification {amplification:.1f} B/B "
          f"(reserved at {PARSE_AMPLIFICATION}), memory limit {memory:.0f} Mi -> parse budget {derived // MIB} MiB "
          f"per worker")
    print(f"{'':10}chart parseMemoryBudget {settings['parseMemoryBudget']}: every worker's budget in use "
          f"{peak:.0f} MiB = {peak / memory:.0%} of the memory limit ({'fits' if chart <= derived else 'OVER'}); "
          f"a body at maxBodyBytes {settings['maxBodyBytes']} reserves {cap * PARSE_AMPLIFICATION / MIB:.0f} MiB "
          f"({'fits' if cap * PARSE_AMPLIFICATION <= chart else 'does NOT fit'} the budget)")
    if component == "extender":
        largest = largest_parseable_body(chart)
        print(f"{'':10}largest body the budget parses alone at {PARSE_AMPLIFICATION} B/B: {largest // MIB} MiB "
              f"(chart maxBodyBytes {settings['maxBodyBytes']}: {'the same' if largest == cap else 'DIFFERENT'}); "
              f"at the {amplification:.1f} B/B measured: {largest_parseable_body(chart, amplification=int(amplification + 1)) // MIB} MiB")


def measure_concurrent(scenario: str, budget_mode: str) -> dict:
    """One worker's app under ``scenario`` with the chart's budget (``budget``) or none
    (``none``): peak RSS growth, answers by status, small-request latencies."""
    import threading
    import time

    import orjson

    from webhook.app import create_app
    from webhook.namespace_cache import StaticNamespaceSource
    from webhook.settings import DEFAULT_MAX_BODY_BYTES, DEFAULT_THREADS, WebhookSettings
    from bench_webhook import NAMESPACE, realistic_pod
    from kube_offload.admission import build_review

    settings = WebhookSettings(parse_memory_budget=(1 << 50) if budget_mode == "none" else WebhookSettings().parse_memory_budget)
    app = create_app(settings, namespace_source=StaticNamespaceSource([NAMESPACE]))
    # A dense AdmissionReview just under the hard cap, and the benchmark's 3 KiB admission.
    large = webhook_body("dense", DEFAULT_MAX_BODY_BYTES - 4 * KIB)
    assert len(large) <= DEFAULT_MAX_BODY_BYTES, len(large)
    small = orjson.dumps(build_review(realistic_pod(), uid="small"))

    def call(body: bytes) -> str:
        return wsgi_post(app, "/mutate/pods", body)

    call(small)
    statuses: dict[str, int] = {}
    latencies: list[float] = []
    lock = threading.Lock()
    threads = DEFAULT_THREADS
    start = threading.Barrier(threads)
    large_done = threading.Event()

    def count(code: str) -> None:
        with lock:
            statuses[code] = statuses.get(code, 0) + 1

    def large_sender(repeat: int) -> None:
        start.wait()
        for _ in range(repeat):
            count("large " + call(large))
        large_done.set()

    def small_sender() -> None:
        start.wait()
        while not large_done.is_set():
            began = time.perf_counter()
            code = call(small)
            elapsed = time.perf_counter() - began
            with lock:
                latencies.append(elapsed)
            count("small " + code)

    if scenario == "all-max":
        workers = [threading.Thread(target=large_sender, args=(1,)) for _ in range(threads)]
    else:
        workers = [threading.Thread(target=large_sender, args=(10,))]
        workers += [threading.Thread(target=small_sender) for _ in range(threads - 1)]
    baseline_rss = _status_bytes("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")
    began = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    seconds = time.perf_counter() - began
    latencies.sort()

    def percentile(q: float) -> float:
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000 if latencies else 0.0

    return {"peak": _status_bytes("VmHWM") - baseline_rss, "statuses": statuses, "seconds": seconds,
            "p50": percentile(0.50), "p99": percentile(0.99), "small": len(latencies)}


def measure_concurrent_extender(scenario: str, budget_mode: str) -> dict:
    """One extender worker's app (the chart's threads), every thread sending one dense
    ExtenderArgs just under the cap, at once (``all-max``) or one after the other
    (``in-turn``: kube-scheduler's pattern, one call at a time, each on another thread),
    with the chart's budget (``budget``) or none (``none``): peak RSS growth and answers
    by status."""
    import threading
    import time

    from extender.settings import DEFAULT_MAX_BODY_BYTES, DEFAULT_PARSE_MEMORY_BUDGET, DEFAULT_THREADS, ExtenderSettings

    from datetime import datetime, timezone

    from bench_extender import make_node

    from extender.app import create_app
    from extender.caches import StaticCaches

    namespace = {"metadata": {"name": "bench", "labels": {"kube-offload.io/enabled": "true"}}}
    static = StaticCaches(nodes=[make_node(i, True, datetime.now(timezone.utc)) for i in range(3)],
                          namespaces=[namespace], node_cache=False)
    budget = (1 << 50) if budget_mode == "none" else DEFAULT_PARSE_MEMORY_BUDGET
    app = create_app(static, ExtenderSettings(parse_memory_budget=budget))
    large = extender_body("dense", DEFAULT_MAX_BODY_BYTES - 64 * KIB)
    assert len(large) <= DEFAULT_MAX_BODY_BYTES, len(large)
    small = extender_body("nodes", 1)

    def call(body: bytes) -> str:
        return wsgi_post(app, "/filter", body)

    call(small)
    statuses: dict[str, int] = {}
    lock = threading.Lock()
    start = threading.Barrier(DEFAULT_THREADS)

    turns = [threading.Event() for _ in range(DEFAULT_THREADS + 1)]
    turns[0].set()

    def sender(index: int) -> None:
        start.wait()
        if scenario == "in-turn":
            turns[index].wait()
        code = call(large)
        with lock:
            statuses["large " + code] = statuses.get("large " + code, 0) + 1
        turns[index + 1].set()

    threads = [threading.Thread(target=sender, args=(index,)) for index in range(DEFAULT_THREADS)]
    baseline_rss = _status_bytes("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {"peak": _status_bytes("VmHWM") - baseline_rss, "statuses": statuses,
            "seconds": time.perf_counter() - began, "body": len(large)}


def extender_concurrent_lines(settings: dict) -> None:
    from kube_offload.runtime.body_limit import MALLOC_ARENAS

    arenas = {"MALLOC_ARENA_MAX": str(MALLOC_ARENAS)}
    print(f"one extender worker, {settings['threads']} threads, each a dense ExtenderArgs just under the cap "
          f"({settings['maxBodyBytes']}), all at once (all-max) or one after the other (in-turn), "
          f"MALLOC_ARENA_MAX={MALLOC_ARENAS} as the chart sets it unless said; peak RSS growth over the load:")
    for scenario, runs in (
        ("all-max", (("none", "no budget (old model)", arenas),
                     ("budget", f"budget {settings['parseMemoryBudget']}", arenas),
                     ("budget", "budget, glibc arenas", {}))),
        ("in-turn", (("budget", f"budget {settings['parseMemoryBudget']}", arenas),
                     ("budget", "budget, glibc arenas", {}))),
    ):
        figures = {}
        for mode, label, env in runs:
            result = run_child("concurrent-extender", Path(scenario), mode, env=env)
            figures.setdefault(label, result)
            answers = ", ".join(f"{key} {value}" for key, value in sorted(result["statuses"].items()))
            print(f"  {scenario:8} {label:22} peak {result['peak'] / MIB:6.0f} MiB  {result['seconds']:5.1f} s  "
                  f"answers: {answers}  (body {result['body'] / MIB:.2f} MiB)")
        first, *_, last = figures.values()
        name = "with budget / without" if scenario == "all-max" else "glibc arenas / 2 arenas"
        ratio = (figures[f"budget {settings['parseMemoryBudget']}"]["peak"] / max(1, first["peak"])
                 if scenario == "all-max" else last["peak"] / max(1, first["peak"]))
        print(f"  {scenario:8} peak {name}: {ratio:.2f}")


def reserve_cost() -> tuple[float, float]:
    """Microseconds of an uncontended reserve/release pair, and of one small admission
    through the app (same process, same run)."""
    import time

    import orjson

    from bench_webhook import NAMESPACE, realistic_pod
    from kube_offload.admission import build_review
    from kube_offload.runtime.body_limit import ParseBudget
    from webhook.app import create_app
    from webhook.namespace_cache import StaticNamespaceSource
    from webhook.settings import WebhookSettings

    budget = ParseBudget(component="webhook", capacity=137 * MIB, max_body=3 * MIB, wait_seconds=2)
    rounds = 200_000
    began = time.perf_counter()
    for _ in range(rounds):
        with budget.reserve(3 * KIB):
            pass
    pair = (time.perf_counter() - began) / rounds * 1e6
    app = create_app(WebhookSettings(), namespace_source=StaticNamespaceSource([NAMESPACE]))
    small = orjson.dumps(build_review(realistic_pod(), uid="small"))
    calls = 5_000
    began = time.perf_counter()
    for _ in range(calls):
        environ = {
            "REQUEST_METHOD": "POST", "PATH_INFO": "/mutate/pods", "SERVER_NAME": "bench", "SERVER_PORT": "443",
            "SERVER_PROTOCOL": "HTTP/1.1", "wsgi.url_scheme": "https", "wsgi.input": io.BytesIO(small),
            "wsgi.input_terminated": True, "wsgi.errors": sys.stderr,
            "CONTENT_TYPE": "application/json", "CONTENT_LENGTH": str(len(small)),
        }
        b"".join(app(environ, lambda s, h, e=None: None))
    request = (time.perf_counter() - began) / calls * 1e6
    return pair, request


def concurrent_lines(settings: dict) -> None:
    from kube_offload.runtime.body_limit import MALLOC_ARENAS

    threads = int(settings["threads"])
    arenas = {"MALLOC_ARENA_MAX": str(MALLOC_ARENAS)}
    print(f"one webhook worker, {threads} threads, dense AdmissionReviews at the hard cap "
          f"({settings['maxBodyBytes']}), MALLOC_ARENA_MAX={MALLOC_ARENAS} as the chart sets it; "
          f"peak RSS growth over the load:")
    for scenario in ("all-max", "mixed"):
        figures = {}
        runs = [("none", "no budget (old model)", arenas), ("budget", f"budget {settings['parseMemoryBudget']}", arenas)]
        if scenario == "all-max":
            runs.append(("budget", "budget, glibc arenas", {}))
        for mode, label, env in runs:
            result = run_child("concurrent", Path(scenario), mode, env=env)
            figures.setdefault(mode, result)
            answers = ", ".join(f"{key} {value}" for key, value in sorted(result["statuses"].items()))
            line = (f"  {scenario:8} {label:22} peak {result['peak'] / MIB:6.0f} MiB  {result['seconds']:5.1f} s  "
                    f"answers: {answers}")
            if result["small"]:
                line += (f"  small: {result['small'] / result['seconds']:.0f}/s p50 {result['p50']:.2f} ms "
                         f"p99 {result['p99']:.2f} ms")
            print(line)
        ratio = figures["budget"]["peak"] / max(1, figures["none"]["peak"])
        print(f"  {scenario:8} peak with budget / without: {ratio:.2f}")
    pair, request = reserve_cost()
    print(f"uncontended reserve+release {pair:.2f} us vs one small admission through the app {request:.0f} us: "
          f"{pair / request:.1%} of it")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=float, default=4.0, help="body size per case (default 4 MiB)")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    options = parser.parse_args()
    sys.path.insert(0, str(ROOT / "bench"))
    if options.child:
        component, body_file, mode = options.child
        if component == "concurrent":
            print(json.dumps(measure_concurrent(body_file, mode)))
        elif component == "concurrent-extender":
            print(json.dumps(measure_concurrent_extender(body_file, mode)))
        else:
            print(json.dumps(measure(component, body_file, mode)))
        return 0

    size = int(options.size_mib * MIB)
    print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} cpus; "
          f"bodies of ~{options.size_mib:g} MiB, one fresh process per figure")
    worst: dict[str, float] = {}
    baselines: dict[str, float] = {}
    tmp = tempfile.mkdtemp(prefix="kube-offload-bench-")
    for component, shapes in (("webhook", ("pod", "dense")), ("extender", ("nodes", "dense"))):
        for shape in shapes:
            body_file = Path(tmp) / f"{component}-{shape}.json"
            body_file.write_bytes((webhook_body if component == "webhook" else extender_body)(shape, size))
            traced = run_child(component, body_file, "tracemalloc")
            rss = run_child(component, body_file, "rss")
            amp_traced = traced["used"] / traced["body"]
            amp_rss = rss["used"] / rss["body"]
            worst[component] = max(worst.get(component, 0.0), amp_traced, amp_rss)
            print(f"{component:8} {shape:6} body {traced['body'] / MIB:6.2f} MiB  status {traced['status'][:3]}  "
                  f"tracemalloc {amp_traced:5.1f} B/B  rss {amp_rss:5.1f} B/B")
    values = chart_values()
    print()
    for component in ("webhook", "extender"):
        settings = values[component]
        baselines[component] = server_baseline(component, int(settings.get("workers", 1)), int(settings["threads"]), tmp)
    shutil.rmtree(tmp, ignore_errors=True)
    print()
    budget_lines("webhook", values["webhook"], baselines["webhook"], worst["webhook"])
    budget_lines("extender", values["extender"], baselines["extender"], worst["extender"])
    for component in ("extender",):
        # The old model, for comparison: every thread at the limit.
        settings = values[component]
        workers = int(settings.get("workers", 1))
        threads = int(settings["threads"])
        memory = mebibytes(settings["resources"]["limits"]["memory"])
        limit = limit_for(memory, baselines[component], workers * threads, worst[component])
        print(f"{'':10}old model ({workers} workers x {threads} threads each at the limit, {worst[component]:.1f} B/B): "
              f"body limit {limit // KIB} KiB")
    print()
    concurrent_lines(values["webhook"])
    print()
    extender_concurrent_lines(values["extender"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
