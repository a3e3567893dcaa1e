"""Where the CPU goes: sampling profiles of the kube-apiservers (Go's pprof) and of our
Python processes (py-spy) over a benchmark's phase windows, summarised per pod by category.

The /proc CPU of apirequests.py says *how much* each process spent per pod; a profile says
*on what*. Each profile is reduced to shares by category, and the shares are scaled by the
process's /proc CPU over the same window (``Window.cpu``), so the table is in CPU ms per
pod and adds up to the CPU table's rows whatever the sampling rate and however much of the
window the profile covered (its coverage, profiled CPU / /proc CPU, is printed beside it).

Go (``go tool pprof -traces``: every sample with its whole stack), two views:

- **work** (:func:`go_work_category`): what the CPU was spent doing. The stack is walked
  from the leaf upwards past the frames of generic packages (runtime, reflect, sync,
  bytes, strconv...) to the first frame that names a kind of work: TLS handshake,
  TLS/crypto, JSON, protobuf, conversion/defaulting/deep copy, managed fields, etcd
  client/grpc, watch cache, admission, validation, authn/authz, audit, flow control,
  metrics, logging, HTTP/2 & net. Allocation and GC assists are charged to the code that
  allocates; stacks of the runtime alone are "GC (background)" (the mark workers, the
  sweeper) or "Go scheduler & runtime" (finding work, netpoll, timers).
- **path** (:func:`go_path_category`): on whose behalf, from markers anywhere in the
  stack: the admission webhook calls out, watch serving and the watch cache, each request
  handler (create, update, patch, get, list, delete), the filters before it (authn,
  authz, APF, audit), etcd, connection handling, background GC.

Python (py-spy's ``raw`` output: collapsed stacks; samples of a waiting thread, whose
leaf is a wait in :data:`IDLE_LEAVES`, left out), two
views: by the leaf frame's package (:func:`python_work_category`: our module, a
third-party package, a standard library module) and by the frame of ours nearest the
leaf (:func:`python_caller_category`: which of our modules caused the work).

The parsing and grouping are pure functions, unit-tested in
tests/unit/bench/test_profiles.py; :class:`Profiler` is the thin I/O: back-to-back
``/debug/pprof/profile?seconds=N`` chunks through ``kubectl get --raw`` with the admin
kubeconfig (the kube-controller-manager, kube-scheduler and etcd too where their flags
say pprof is served, over HTTPS with the admin certificate; the bench says which were
not and why), and ``py-spy record --nonblocking -f raw`` per process, stopped with SIGINT.
"""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import sys
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping

GO = Path(os.environ.get("GO", "/usr/local/go/bin/go"))
# Each Go profile request lasts this long; the benches stop a phase's profiling when its
# pods run and the last chunk ends within their settle time.
CHUNK_SECONDS = 5


@dataclass(frozen=True)
class Sample:
    """One stack and what it weighs (seconds for Go, samples for py-spy); leaf first."""

    value: float
    stack: tuple[str, ...]


# --- Go: `go tool pprof -traces` ---------------------------------------------------------

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ns|us|µs|ms|s|min|hrs?)$")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "hr": 3600.0, "hrs": 3600.0}
_SEPARATOR = re.compile(r"^-+\+-+$")
_LABEL_LINE = re.compile(r"^\s*\S+:\s")


class ProfileFormatError(ValueError):
    """Text that is not what ``go tool pprof -traces`` or py-spy's raw format writes."""


def parse_duration(text: str) -> float:
    """pprof's durations ("10ms", "1.50s", "250us") in seconds."""
    match = _DURATION.match(text.strip())
    if match is None:
        raise ProfileFormatError(f"not a pprof duration: {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def _frame(text: str) -> str:
    return text.strip().removesuffix(" (inline)")


def parse_traces(text: str) -> list[Sample]:
    """The samples of ``go tool pprof -traces``: a header, then blocks between separator
    lines, each a value and the leaf function on its first stack line and one caller per
    following line (sample labels, "key:value" lines, come before the stack)."""
    samples: list[Sample] = []
    value: float | None = None
    stack: list[str] = []
    in_blocks = False

    def flush() -> None:
        if value is not None and stack:
            samples.append(Sample(value, tuple(stack)))

    for line in text.splitlines():
        if _SEPARATOR.match(line.strip()):
            flush()
            value, stack, in_blocks = None, [], True
            continue
        if not in_blocks or not line.strip():
            continue
        if value is None:
            head = line.split(None, 1)
            if len(head) == 2 and _DURATION.match(head[0]):
                value, stack = parse_duration(head[0]), [_frame(head[1])]
            elif _LABEL_LINE.match(line):
                continue
            else:
                raise ProfileFormatError(f"a trace should start with a value and a function: {line[:120]!r}")
        else:
            stack.append(_frame(line))
    flush()
    return samples


def go_package(frame: str) -> str:
    """The import path of a Go function name: "k8s.io/apiserver/pkg/storage/cacher" of
    "k8s.io/apiserver/pkg/storage/cacher.(*Cacher).Watch.func1", "runtime" of
    "runtime.mallocgc", "" for assembly without a package (gcWriteBarrier)."""
    slash = frame.rfind("/")
    dot = frame.find(".", slash + 1)
    return frame[:dot] if dot > 0 else ""


# Packages whose frames say nothing about the work: walked past towards the caller.
_GENERIC = ("runtime", "reflect", "sync", "sync/atomic", "internal/", "strconv", "bytes", "strings", "unicode",
            "unicode/utf8", "sort", "slices", "maps", "math", "math/bits", "io", "bufio", "fmt", "time", "errors",
            "context", "container/", "iter", "unique", "weak", "hash/", "encoding/base64", "encoding/binary",
            "k8s.io/utils/", "k8s.io/apimachinery/pkg/util/runtime", "k8s.io/apimachinery/pkg/util/sets", "")


def _generic(package: str) -> bool:
    return any(package == g or (g.endswith("/") and package.startswith(g)) for g in _GENERIC)


# (category, prefixes of function names), first match wins; checked for each frame from
# the leaf upwards once the generic ones are passed.
GO_WORK_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("TLS/crypto", ("crypto/", "vendor/golang.org/x/crypto/", "golang.org/x/crypto/")),
    ("JSON", ("encoding/json.", "sigs.k8s.io/json", "github.com/json-iterator/", "github.com/modern-go/",
              "k8s.io/apimachinery/pkg/util/json", "k8s.io/apimachinery/pkg/runtime/serializer/json",
              "github.com/go-json-experiment/", "k8s.io/kube-openapi/pkg/internal/third_party/go-json-experiment/",
              "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured.", "k8s.io/apimachinery/pkg/runtime.DefaultUnstructuredConverter",
              "k8s.io/apimachinery/pkg/runtime.(*unstructuredConverter)", "k8s.io/apimachinery/pkg/runtime.toUnstructured",
              "k8s.io/apimachinery/pkg/runtime.fromUnstructured")),
    ("protobuf", ("github.com/gogo/protobuf/", "google.golang.org/protobuf/", "github.com/golang/protobuf/",
                  "k8s.io/apimachinery/pkg/runtime/serializer/protobuf")),
    ("managed fields (server-side apply)", ("sigs.k8s.io/structured-merge-diff/", "k8s.io/apimachinery/pkg/util/managedfields",
                                            "k8s.io/apiserver/pkg/endpoints/handlers/fieldmanager")),
    ("etcd client/grpc", ("go.etcd.io/", "google.golang.org/grpc", "k8s.io/apiserver/pkg/storage/etcd3",
                          "k8s.io/apiserver/pkg/storage/cacher.(*CacheDelegator)")),
    ("watch cache & dispatch", ("k8s.io/apiserver/pkg/storage/cacher", "k8s.io/apimachinery/pkg/watch",
                                "k8s.io/apiserver/pkg/endpoints/handlers.(*WatchServer)",
                                "k8s.io/apiserver/pkg/endpoints/handlers.serveWatch")),
    ("admission", ("k8s.io/apiserver/pkg/admission", "k8s.io/kubernetes/plugin/pkg/admission",
                   "k8s.io/apiserver/pkg/cel", "github.com/google/cel-go/")),
    ("validation", ("k8s.io/kubernetes/pkg/apis/core/validation", "k8s.io/apimachinery/pkg/api/validation",
                    "k8s.io/apimachinery/pkg/util/validation", "k8s.io/kube-openapi/pkg/validation",
                    "k8s.io/apiextensions-apiserver/pkg/apiserver/schema", "k8s.io/apiextensions-apiserver/pkg/apiserver/validation",
                    "k8s.io/apiserver/pkg/registry/rest.BeforeCreate", "k8s.io/apiserver/pkg/registry/rest.BeforeUpdate")),
    ("authn/authz", ("k8s.io/apiserver/pkg/authentication", "k8s.io/apiserver/pkg/authorization",
                     "k8s.io/apiserver/plugin/pkg/authenticator", "k8s.io/kubernetes/plugin/pkg/auth",
                     "k8s.io/kubernetes/pkg/auth", "k8s.io/kubernetes/pkg/serviceaccount",
                     "k8s.io/apiserver/pkg/endpoints/filters.WithAuthentication",
                     "k8s.io/apiserver/pkg/endpoints/filters.WithAuthorization", "k8s.io/kubernetes/pkg/registry/rbac",
                     "k8s.io/kubernetes/pkg/registry/authentication")),
    ("audit", ("k8s.io/apiserver/pkg/audit", "k8s.io/apiserver/plugin/pkg/audit")),
    ("flow control (APF)", ("k8s.io/apiserver/pkg/util/flowcontrol",)),
    ("metrics", ("github.com/prometheus/", "k8s.io/component-base/metrics")),
    ("logging & tracing", ("k8s.io/klog", "go.uber.org/zap", "go.opentelemetry.io/", "k8s.io/component-base/tracing",
                           "k8s.io/utils/trace")),
    ("conversion, defaulting, deep copy", ("k8s.io/apimachinery/pkg/conversion", "k8s.io/apimachinery/pkg/runtime.(*Scheme)",
                                           "k8s.io/kubernetes/pkg/apis/", "k8s.io/api/", "k8s.io/apimachinery/pkg/apis/")),
    ("HTTP/2 & net", ("golang.org/x/net/", "vendor/golang.org/x/net/", "net/", "net.", "syscall.",
                      "k8s.io/apiserver/pkg/endpoints/handlers/responsewriters", "k8s.io/apimachinery/pkg/util/net")),
)
_PROTOBUF_METHOD = re.compile(r"\.(?:Unmarshal|Marshal|MarshalTo|MarshalToSizedBuffer|Size|XXX_\w+|sov\w*|skip\w*|encodeVarint\w*)$")
GC_RUNTIME = "Go scheduler & runtime"
GC_BACKGROUND = "GC (background)"
_GC_BACKGROUND = ("runtime.gcBgMarkWorker", "runtime.bgsweep", "runtime.bgscavenge", "runtime.gcStart")
OTHER = "other"
TLS_HANDSHAKE = "TLS handshake"


def _is_handshake(frame: str) -> bool:
    return frame.startswith("crypto/tls.") and "andshake" in frame


def go_work_category(stack: tuple[str, ...]) -> str:
    """What a sample's CPU was spent doing (see the module docstring)."""
    if any(_is_handshake(frame) for frame in stack):
        return TLS_HANDSHAKE
    for frame in stack:
        package = go_package(frame)
        if _generic(package) and not frame.startswith("syscall."):
            continue
        # Generated protobuf code lives in the API types' packages: its methods say it.
        if frame.startswith(("k8s.io/api/", "k8s.io/apimachinery/pkg/apis/", "k8s.io/apiextensions-apiserver/pkg/apis/",
                             "k8s.io/apimachinery/pkg/api/resource", "k8s.io/apimachinery/pkg/runtime.")) \
                and _PROTOBUF_METHOD.search(frame):
            return "protobuf"
        for category, prefixes in GO_WORK_RULES:
            if frame.startswith(prefixes):
                return category
        return OTHER
    if any(frame.startswith(_GC_BACKGROUND) for frame in stack):
        return GC_BACKGROUND
    return GC_RUNTIME


# (category, substrings of a frame), first rule with a matching frame anywhere in the
# stack wins: the more specific purposes first.
GO_PATH_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (GC_BACKGROUND, _GC_BACKGROUND),
    ("admission webhooks (calls out)", ("k8s.io/apiserver/pkg/admission/plugin/webhook",)),
    ("create requests", ("k8s.io/apiserver/pkg/endpoints/handlers.createHandler", "k8s.io/apiserver/pkg/endpoints/handlers.CreateResource",
                         "k8s.io/apiserver/pkg/endpoints/handlers.CreateNamedResource")),
    ("update requests", ("k8s.io/apiserver/pkg/endpoints/handlers.UpdateResource",)),
    ("patch requests", ("k8s.io/apiserver/pkg/endpoints/handlers.PatchResource", "k8s.io/apiserver/pkg/endpoints/handlers.(*patcher)")),
    ("delete requests", ("k8s.io/apiserver/pkg/endpoints/handlers.DeleteResource", "k8s.io/apiserver/pkg/endpoints/handlers.DeleteCollection")),
    ("get requests", ("k8s.io/apiserver/pkg/endpoints/handlers.GetResource", "k8s.io/apiserver/pkg/endpoints/handlers.getResourceHandler")),
    ("list requests", ("k8s.io/apiserver/pkg/endpoints/handlers.ListResource",)),
    # After the requests: every write goes through the cacher's CacheDelegator to etcd.
    ("watch: cache and dispatch", ("k8s.io/apiserver/pkg/storage/cacher.(*Cacher)", "k8s.io/apiserver/pkg/storage/cacher.(*cacheWatcher)",
                                   "k8s.io/apiserver/pkg/storage/cacher.(*watchCache)", "k8s.io/apiserver/pkg/storage/cacher.(*cachingObject)",
                                   "k8s.io/apiserver/pkg/storage/cacher.(*watcherBookmarkTimeBuckets)")),
    ("watch: serving", ("k8s.io/apiserver/pkg/endpoints/handlers.(*WatchServer)", "k8s.io/apiserver/pkg/endpoints/handlers.serveWatch")),
    ("audit", ("k8s.io/apiserver/pkg/audit", "k8s.io/apiserver/plugin/pkg/audit")),
    ("filters: authn, authz, APF", ("k8s.io/apiserver/pkg/endpoints/filters", "k8s.io/apiserver/pkg/server/filters",
                                    "k8s.io/apiserver/pkg/util/flowcontrol")),
    ("etcd (storage, client)", ("k8s.io/apiserver/pkg/storage/etcd3", "go.etcd.io/", "google.golang.org/grpc")),
    ("TLS handshakes", ("crypto/tls.(*Conn).Handshake", "crypto/tls.(*Conn).handshakeContext")),
    ("connections: HTTP/2, TLS I/O", ("golang.org/x/net/http2", "net/http.(*http2", "net/http.http2", "crypto/tls.(*Conn)",
                                      "net/http.(*conn)", "net/http.(*persistConn)")),
)


def go_path_category(stack: tuple[str, ...]) -> str:
    """On whose behalf a sample's CPU was spent (see the module docstring)."""
    for category, markers in GO_PATH_RULES:
        if any(marker in frame for frame in stack for marker in markers):
            return category
    return GC_RUNTIME if all(_generic(go_package(frame)) for frame in stack) else OTHER


def tally(samples: Iterable[Sample], categorize: Callable[[tuple[str, ...]], str]) -> Counter[str]:
    totals: Counter[str] = Counter()
    for sample in samples:
        totals[categorize(sample.stack)] += sample.value
    return totals


def top_packages(samples: Iterable[Sample], categorize: Callable[[tuple[str, ...]], str], category: str,
                 *, count: int = 8) -> list[tuple[str, float]]:
    """The packages of the first non-generic frames of the samples put in ``category``:
    what to add a rule for when "other" is large."""
    totals: Counter[str] = Counter()
    for sample in samples:
        if categorize(sample.stack) != category:
            continue
        frame = next((f for f in sample.stack if not _generic(go_package(f))), sample.stack[0])
        totals[go_package(frame) or frame] += sample.value
    return totals.most_common(count)


# --- Python: py-spy raw (collapsed stacks) ---------------------------------------------

_PY_FRAME = re.compile(r"^(?P<function>.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")
_OURS = ("kube_offload", "webhook", "extender", "vkubelet", "enforcer", "certs", "relay")
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ()))


# Leaf functions where a thread waits (py-spy's --nonblocking sampling does not always see
# that a thread is idle): blocking reads, selectors, locks, condition variables, queues.
IDLE_LEAVES = frozenset({
    "Condition.wait", "Event.wait", "Thread.join", "Queue.get", "SimpleQueue.get", "sleep",
    "select", "_PollLikeSelector.select", "EpollSelector.select", "PollSelector.select", "SelectSelector.select",
    "SocketIO.readinto", "SSLSocket.read", "SSLSocket.recv_into", "SSLSocket.recv", "socket.accept", "accept",
    "_wait_for_tstate_lock", "Semaphore.acquire", "Lock.acquire", "RLock.acquire", "poll", "serve_forever",
})


def is_idle(stack: tuple[str, ...]) -> bool:
    """A sample of a thread waiting (its leaf function is a wait of :data:`IDLE_LEAVES`)."""
    match = _PY_FRAME.match(stack[0]) if stack else None
    return match is not None and match.group("function") in IDLE_LEAVES


def busy(samples: Iterable[Sample]) -> list[Sample]:
    return [s for s in samples if not is_idle(s.stack)]


def parse_collapsed(text: str) -> list[Sample]:
    """py-spy's raw output: "frame;frame;...;leaf count" per line, root first; returned
    leaf first like the Go samples. With --threads or --subprocesses, py-spy puts the
    thread or process first, as a frame without a file: kept, and ignored by the
    categories."""
    samples = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.rstrip()
        if not line:
            continue
        stack_text, _, count = line.rpartition(" ")
        if not stack_text.strip() and count.isdigit():
            continue  # a thread sampled without a Python frame (py-spy writes " <count>")
        if not stack_text or not count.isdigit():
            raise ProfileFormatError(f"line {number} is not 'stack count': {line[:120]!r}")
        samples.append(Sample(float(count), tuple(reversed(stack_text.split(";")))))
    return samples


def python_file(frame: str) -> str:
    """The file of a py-spy frame, as py-spy shortens it ("kube_offload/vkubelet/pods.py",
    "json/encoder.py", "urllib3/connectionpool.py", "/abs/path.py" outside sys.path)."""
    match = _PY_FRAME.match(frame)
    # A thread's or a process's name ("Thread 0x7f12 (idle)") has no source file.
    if match is None or not (match.group("line") or match.group("file").endswith(".py")):
        return ""
    return match.group("file")


def _module_parts(path: str) -> list[str]:
    parts = [p for p in path.replace("\\", "/").split("/") if p]
    # An absolute path (a file outside sys.path, or py-spy not shortening it): from the
    # last site-packages or project root onwards.
    for anchor in ("site-packages", "dist-packages"):
        if anchor in parts:
            parts = parts[len(parts) - parts[::-1].index(anchor):]
    for index, part in enumerate(parts):
        if part in _OURS:
            return parts[index:]
    if path.startswith("/"):
        for index, part in enumerate(parts):
            if re.fullmatch(r"python3\.\d+", part):
                return parts[index + 1:]
    return parts


def python_package(frame: str) -> str:
    """"ours/<module>" for our code ("ours/kube_offload.runtime.informer"), "stdlib/<module>"
    ("stdlib/ssl", "stdlib/json"), the top-level package for third-party code
    ("urllib3"), "" for a frame without a file (a thread or process name)."""
    path = python_file(frame)
    if not path:
        return ""
    parts = _module_parts(path)
    if not parts:
        return ""
    top = parts[0].removesuffix(".py")
    if top in _OURS:
        return "ours/" + ".".join(parts).removesuffix(".py").removesuffix(".__init__")
    if top in _STDLIB or top in ("<frozen importlib._bootstrap>",):
        return f"stdlib/{top}"
    return top


def python_work_category(stack: tuple[str, ...]) -> str:
    """The package of the leaf frame: where the interpreter was."""
    for frame in stack:
        package = python_package(frame)
        if package:
            return package
    return OTHER


def python_caller_category(stack: tuple[str, ...]) -> str:
    """Our module nearest the leaf: which of our modules the work was done for."""
    for frame in stack:
        package = python_package(frame)
        if package.startswith("ours/"):
            return package
    return "(no frame of ours)"


# --- per pod -----------------------------------------------------------------------------


@dataclass
class ProcessProfile:
    """One process's profile over one phase: profile units (seconds or samples) by
    category for each view, and the profile's total in CPU seconds when known (Go)."""

    views: dict[str, Counter[str]]
    profiled_s: float | None = None
    notes: list[str] = field(default_factory=list)


def per_pod_ms(shares: Mapping[str, float], cpu_s: float, pods: int) -> dict[str, float]:
    """Each category's share of the profile times the process's CPU over the window
    (/proc), in ms per pod. An empty profile or no pods: nothing."""
    total = sum(shares.values())
    if not total or not pods:
        return {}
    return {category: value / total * cpu_s * 1000 / pods for category, value in shares.items()}


def category_table(phases: Mapping[str, Mapping[str, ProcessProfile]], cpu: Mapping[str, Mapping[str, float]],
                   pods: Mapping[str, int], view: str, *, min_ms: float = 0.3) -> list[str]:
    """CPU ms per pod by process and category for ``view``, one column per phase; a
    process's categories under ``min_ms`` in every phase folded into "(rest)"; each
    process's total (its /proc CPU per pod) and the profile's coverage at the end of its
    block. ``cpu``: phase -> process -> CPU seconds of the window; ``pods``: phase -> pods."""
    names = list(phases)
    processes: list[str] = []
    for profiles in phases.values():
        processes += [p for p in profiles if p not in processes]
    lines = [f"{'process':<28} {'category':<38}" + "".join(f" {n:>14}" for n in names)]
    for process in processes:
        values = {n: per_pod_ms(phases[n][process].views.get(view, Counter()) if process in phases[n] else Counter(),
                                cpu[n].get(process, 0.0), pods[n]) for n in names}
        categories = sorted({c for v in values.values() for c in v}, key=lambda c: -max(v.get(c, 0.0) for v in values.values()))
        rest = {n: 0.0 for n in names}
        for category in categories:
            if all(values[n].get(category, 0.0) < min_ms for n in names):
                for n in names:
                    rest[n] += values[n].get(category, 0.0)
                continue
            lines.append(f"{process:<28} {category:<38}" + "".join(f" {values[n].get(category, 0.0):>14.1f}" for n in names))
        if any(rest.values()):
            lines.append(f"{process:<28} {'(rest)':<38}" + "".join(f" {rest[n]:>14.1f}" for n in names))
        totals = [f" {cpu[n].get(process, 0.0) * 1000 / pods[n] if pods[n] else math.nan:>14.1f}" for n in names]
        lines.append(f"{process:<28} {'all (/proc CPU)':<38}" + "".join(totals))
        lines.append(f"{process:<28} {'profile coverage':<38}" + "".join(f" {coverage(phases[n].get(process), cpu[n].get(process, 0.0)):>14}"
                                                                        for n in names))
    return lines


def coverage(profile: ProcessProfile | None, cpu_s: float) -> str:
    """Profiled CPU over /proc CPU, as a percentage ("-" when unknown: py-spy counts
    samples, not CPU time)."""
    if profile is None:
        return "none"
    if profile.profiled_s is None or not cpu_s:
        return "-"
    return f"{profile.profiled_s / cpu_s * 100:.0f}%"


# --- thin I/O ----------------------------------------------------------------------------


def file_name(process: str) -> str:
    """A process's name as a file name: "bench-remote-1/kube-apiserver" ->
    "bench-remote-1_kube-apiserver"."""
    return process.replace("/", "_")


class GoTarget:
    """A Go process whose CPU profile is fetched over HTTP(S); ``fetch(seconds)`` returns
    the profile's bytes (or raises OSError / subprocess.SubprocessError)."""

    def __init__(self, name: str, fetch: Callable[[int], bytes]) -> None:
        self.name = name
        self.fetch = fetch


def apiserver_target(name: str, kubectl: Path, kubeconfig: Path, env: Mapping[str, str]) -> GoTarget:
    def fetch(seconds: int) -> bytes:
        argv = [str(kubectl), "--kubeconfig", str(kubeconfig), "get", "--raw", f"/debug/pprof/profile?seconds={seconds}"]
        result = subprocess.run(argv, capture_output=True, timeout=seconds + 60, check=False, env=dict(env))
        if result.returncode != 0:
            raise OSError(f"kubectl get --raw /debug/pprof/profile: {result.stderr.decode(errors='replace').strip()[:300]}")
        return result.stdout

    return GoTarget(name, fetch)


class Profiler:
    """Profiles a phase: ``start(phase)`` starts a thread per Go target taking back-to-back
    CPU profiles of ``chunk`` seconds until ``stop()`` (the last chunk ends at most
    ``chunk`` seconds after it: keep the bench's settle time at least that long), and a
    ``py-spy record`` per Python process, stopped by SIGINT. Files under ``out/<phase>/``."""

    def __init__(self, out: Path, go: list[GoTarget], python: Mapping[str, int], *, chunk: int = CHUNK_SECONDS,
                 rate: int = 100, say: Callable[[str], None] = print) -> None:
        self.out = out
        self.go = go
        self.python = dict(python)
        self.chunk = chunk
        self.rate = rate
        self.say = say
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._spies: dict[str, subprocess.Popen] = {}
        self.phase = ""
        self.problems: list[str] = []

    def start(self, phase: str) -> None:
        self.phase = phase
        directory = self.out / phase
        directory.mkdir(parents=True, exist_ok=True)
        self._stop.clear()
        self._threads = [threading.Thread(target=self._go_loop, args=(t, directory), daemon=True) for t in self.go]
        for thread in self._threads:
            thread.start()
        py_spy = Path(sys.executable).with_name("py-spy")
        self._spies = {}
        for name, pid in self.python.items():
            argv = [str(py_spy), "record", "--nonblocking", "-f", "raw", "-r", str(self.rate), "-p", str(pid),
                    "-o", str(directory / f"{file_name(name)}.raw")]
            with (directory / f"{file_name(name)}.py-spy.log").open("w") as log:
                self._spies[name] = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log)

    def _go_loop(self, target: GoTarget, directory: Path) -> None:
        index = 0
        while not self._stop.is_set():
            try:
                data = target.fetch(self.chunk)
            except (OSError, subprocess.SubprocessError) as error:
                self.problems.append(f"{self.phase}: {target.name}: {error}")
                return
            (directory / f"{file_name(target.name)}.{index:03d}.pprof").write_bytes(data)
            index += 1

    def stop(self) -> None:
        """Stops py-spy now and the Go loops after their current chunk (waited for)."""
        self._stop.set()
        for name, spy in self._spies.items():
            spy.send_signal(signal.SIGINT)
            try:
                spy.wait(timeout=60)
            except subprocess.TimeoutExpired:
                spy.kill()
                spy.wait()
                self.problems.append(f"{self.phase}: py-spy of {name} did not stop on SIGINT; killed")
        for thread in self._threads:
            thread.join(timeout=self.chunk + 90)

    def summarise(self, phase: str) -> dict[str, ProcessProfile]:
        """Each profiled process of ``phase``: the Go chunks merged by ``go tool pprof``,
        py-spy's raw file; also writes ``<name>.top.txt`` (pprof -top) beside them."""
        directory = self.out / phase
        profiles: dict[str, ProcessProfile] = {}
        for target in self.go:
            chunks = sorted(directory.glob(f"{file_name(target.name)}.*.pprof"))
            if not chunks:
                continue
            env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": ""}
            traces = subprocess.run([str(GO), "tool", "pprof", "-traces", *map(str, chunks)], capture_output=True,
                                    text=True, timeout=600, check=True, env=env).stdout
            top = subprocess.run([str(GO), "tool", "pprof", "-top", "-nodecount=40", *map(str, chunks)], capture_output=True,
                                 text=True, timeout=600, check=False, env=env).stdout
            (directory / f"{file_name(target.name)}.top.txt").write_text(top)
            samples = parse_traces(traces)
            work = tally(samples, go_work_category)
            notes = ["other, by package: " + ", ".join(f"{p} {s:.2f}s" for p, s in top_packages(samples, go_work_category, OTHER))]
            profiles[target.name] = ProcessProfile({"work": work, "path": tally(samples, go_path_category)},
                                                   profiled_s=sum(s.value for s in samples), notes=notes)
        for name in self.python:
            raw = directory / f"{file_name(name)}.raw"
            if not raw.exists():
                self.problems.append(f"{phase}: no py-spy output for {name} (see {raw.with_suffix('.py-spy.log')})")
                continue
            samples = busy(parse_collapsed(raw.read_text()))
            profiles[name] = ProcessProfile({"work": tally(samples, python_work_category),
                                             "path": tally(samples, python_caller_category)})
        return profiles


def profile_report(phases: Mapping[str, Mapping[str, ProcessProfile]], cpu: Mapping[str, Mapping[str, float]],
                   pods: Mapping[str, int], *, per: str) -> list[str]:
    """The tables the benches print: Go processes, then Python ones, by work and by path."""
    go = {n: {p: prof for p, prof in ps.items() if prof.profiled_s is not None} for n, ps in phases.items()}
    py = {n: {p: prof for p, prof in ps.items() if prof.profiled_s is None} for n, ps in phases.items()}
    lines: list[str] = []
    for title, subset, view in (
        ("Go processes, by work (leaf-first: what the CPU did)", go, "work"),
        ("Go processes, by path (stack markers: on whose behalf)", go, "path"),
        ("Python processes, by the leaf frame's package (py-spy, idle threads excluded)", py, "work"),
        ("Python processes, by our module nearest the leaf", py, "path"),
    ):
        if not any(subset.values()):
            continue
        lines += ["", f"CPU ms per {per}, {title}:",
                  *("  " + line for line in category_table(subset, cpu, pods, view))]
    notes = [f"  {n} {p}: {note}" for n, ps in go.items() for p, prof in ps.items() for note in prof.notes]
    if notes:
        lines += ["", "Go profiles, the 'other' category's largest packages:", *notes]
    return lines


def flag_values(argv: Iterable[str]) -> dict[str, str]:
    """``--name=value`` and ``--name value`` flags of a command line; a bare ``--flag``
    is "true"."""
    values: dict[str, str] = {}
    args = list(argv)
    for index, arg in enumerate(args):
        if not arg.startswith("--"):
            continue
        name, eq, value = arg[2:].partition("=")
        if eq:
            values[name] = value
        elif index + 1 < len(args) and not args[index + 1].startswith("--"):
            values[name] = args[index + 1]
        else:
            values[name] = "true"
    return values


def pprof_url(component: str, flags: Mapping[str, str]) -> tuple[str | None, str]:
    """Where a control-plane component serves its CPU profile, from its flags, or None
    and why not: kube-controller-manager and kube-scheduler on their secure port unless
    --profiling=false; etcd on its client URL with --enable-pprof only."""
    if component in ("kube-controller-manager", "kube-scheduler"):
        if flags.get("profiling", "true") == "false":
            return None, "--profiling=false"
        port = flags.get("secure-port")
        if not port or port == "0":
            return None, "no --secure-port"
        host = flags.get("bind-address", "127.0.0.1")
        host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
        return f"https://{host}:{port}/debug/pprof/profile", ""
    if component == "etcd":
        if flags.get("enable-pprof", "false") != "true":
            return None, "etcd runs without --enable-pprof"
        url = flags.get("listen-client-urls", flags.get("advertise-client-urls", "")).split(",")[0]
        if not url:
            return None, "no client URL"
        return url.rstrip("/") + "/debug/pprof/profile", ""
    return None, "not a Go component with pprof"


def https_target(name: str, url: str, cert: Path, key: Path) -> GoTarget:
    """A component's pprof over HTTPS with the admin client certificate (its serving
    certificate is self-signed: not verified, loopback only)."""
    import ssl
    import urllib.request

    def fetch(seconds: int) -> bytes:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        if url.startswith("https:"):
            context.load_cert_chain(str(cert), str(key))
        with urllib.request.urlopen(f"{url}?seconds={seconds}", timeout=seconds + 60,
                                    context=context if url.startswith("https:") else None) as response:
            return response.read()

    return GoTarget(name, fetch)


def control_plane_targets(cluster, pids: Mapping[str, int], say: Callable[[str], None]) -> list[GoTarget]:
    """The control-plane components of ``cluster`` (but the apiserver) whose pprof is
    reachable, each checked with a 1 s profile; says which are not and why."""
    pki = cluster.kwok_workdir / "clusters" / cluster.name / "pki"
    targets = []
    for component, pid in sorted(pids.items()):
        if component in ("kube-apiserver", "kwok-controller"):
            continue
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
        except OSError:
            continue
        url, why = pprof_url(component, flag_values(argv[1:]))
        if url is None:
            say(f"  profile: {cluster.name}/{component} not profiled: {why}")
            continue
        target = https_target(f"{cluster.name}/{component}", url, pki / "admin.crt", pki / "admin.key")
        try:
            target.fetch(1)
        except OSError as error:
            say(f"  profile: {cluster.name}/{component} not profiled: {url}: {error}")
            continue
        targets.append(target)
    return targets


def for_environment(env, clusters: list, out: Path, *, say: Callable[[str], None] = print,
                    control_plane: Mapping[str, Mapping[str, int]] | None = None) -> Profiler:
    """A Profiler of every cluster's kube-apiserver (named as apirequests.Meter names its
    CPU, "<cluster>/kube-apiserver"), of the other control-plane components whose pprof is
    reachable (``control_plane``: cluster name -> component -> PID), and of each vkubelet
    and enforcer the harness started ("ours/<name>")."""
    go = [apiserver_target(f"{c.name}/kube-apiserver", c.bins.kubectl, c.kubeconfig, c.env()) for c in clusters]
    for cluster in clusters:
        go += control_plane_targets(cluster, (control_plane or {}).get(cluster.name, {}), say)
    python = {f"ours/{r.name}": r.pid for r in env.processes.load()
              if r.running() and r.name.startswith(("vkubelet-", "enforcer-"))}
    return Profiler(out, go, python, say=say)
