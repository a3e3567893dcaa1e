"""bench/profiles.py: parsing `go tool pprof -traces` and py-spy's raw output, grouping the
stacks into categories, the per-pod tables. The texts are shaped as go 1.25's pprof and
py-spy 0.4 write them; the function names are kube-apiserver 1.37's."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from support.bench_scripts import load_bench_script

pr = load_bench_script("profiles.py")

TRACES = """\
File: kube-apiserver
Type: cpu
Time: 2026-11-27 13:01:02 UTC
Duration: 5s, Total samples = 1.23s (24.60%)
-----------+-------------------------------------------------------
      10ms   runtime.memmove
             encoding/json.(*encodeState).string
             encoding/json.(*encodeState).marshal
             k8s.io/apimachinery/pkg/runtime/serializer/json.(*Serializer).doEncode
             k8s.io/apiserver/pkg/endpoints/handlers.(*WatchServer).HandleHTTP
             net/http.HandlerFunc.ServeHTTP
-----------+-------------------------------------------------------
      20ms   crypto/internal/fips140/aes/gcm.gcmAesEnc
             crypto/tls.(*halfConn).encrypt
             crypto/tls.(*Conn).writeRecordLocked
             crypto/tls.(*Conn).Write
             net/http.(*http2bufferedWriter).Write
             net/http.(*http2serverConn).writeFrameAsync
-----------+-------------------------------------------------------
 bytes:  1024
      30ms   math/big.addMulVVW
             crypto/internal/fips140/nistec.(*P256Point).ScalarMult
             crypto/ecdsa.signGeneric
             crypto/tls.(*serverHandshakeStateTLS13).sendServerCertificate
             crypto/tls.(*Conn).serverHandshake
             crypto/tls.(*Conn).handshakeContext
-----------+-------------------------------------------------------
    1.50ms   runtime.scanobject
             runtime.gcDrain
             runtime.gcBgMarkWorker.func2
             runtime.systemstack
             runtime.gcBgMarkWorker
-----------+-------------------------------------------------------
      10ms   runtime.mallocgc
             k8s.io/api/core/v1.(*PodSpec).Unmarshal
             k8s.io/api/core/v1.(*Pod).Unmarshal
             k8s.io/apimachinery/pkg/runtime/serializer/protobuf.(*Serializer).Decode
             k8s.io/apiserver/pkg/storage/etcd3.decode
             k8s.io/apiserver/pkg/storage/etcd3.(*store).GuaranteedUpdate
             k8s.io/apiserver/pkg/registry/generic/registry.(*Store).Update
             k8s.io/apiserver/pkg/endpoints/handlers.PatchResource.func1
-----------+-------------------------------------------------------
      10ms   syscall.Syscall6
             internal/poll.(*FD).Write
             net.(*conn).Write
             crypto/tls.(*Conn).write
             k8s.io/apiserver/pkg/util/webhook.(*GenericWebhook).Call
             k8s.io/apiserver/pkg/admission/plugin/webhook/mutating.(*mutatingDispatcher).callAttrMutatingHook
             k8s.io/apiserver/pkg/endpoints/handlers.createHandler.func1
-----------+-------------------------------------------------------
      10ms   gcWriteBarrier
             example.com/unknown.(*Thing).Do (inline)
             k8s.io/apiserver/pkg/endpoints/handlers.createHandler.func1
-----------+-------------------------------------------------------
"""


def test_parse_traces_reads_each_sample_with_its_stack_leaf_first():
    samples = pr.parse_traces(TRACES)
    assert [s.value for s in samples] == pytest.approx([0.01, 0.02, 0.03, 0.0015, 0.01, 0.01, 0.01])
    assert samples[0].stack[0] == "runtime.memmove"
    assert samples[0].stack[-1] == "net/http.HandlerFunc.ServeHTTP"
    # the label line before the stack is not a frame; "(inline)" is dropped
    assert samples[2].stack[0] == "math/big.addMulVVW"
    assert samples[6].stack[1] == "example.com/unknown.(*Thing).Do"


def test_parse_traces_refuses_a_block_without_a_value():
    with pytest.raises(pr.ProfileFormatError, match="should start with a value"):
        pr.parse_traces("-----------+------\n   runtime.memmove\n")


@pytest.mark.parametrize(("text", "seconds"), [("10ms", 0.01), ("1.50s", 1.5), ("250us", 250e-6), ("3µs", 3e-6),
                                                ("2min", 120.0), ("7ns", 7e-9)])
def test_parse_duration(text, seconds):
    assert pr.parse_duration(text) == pytest.approx(seconds)


def test_parse_duration_refuses_other_text():
    with pytest.raises(pr.ProfileFormatError):
        pr.parse_duration("10 ms")


@pytest.mark.parametrize(("frame", "package"), [
    ("k8s.io/apiserver/pkg/storage/cacher.(*Cacher).Watch.func1", "k8s.io/apiserver/pkg/storage/cacher"),
    ("runtime.mallocgc", "runtime"),
    ("encoding/json.(*decodeState).object", "encoding/json"),
    ("gcWriteBarrier", ""),
])
def test_go_package(frame, package):
    assert pr.go_package(frame) == package


def test_go_work_categories_walk_past_generic_frames_to_the_work():
    categories = [pr.go_work_category(s.stack) for s in pr.parse_traces(TRACES)]
    assert categories == ["JSON", "TLS/crypto", "TLS handshake", "GC (background)", "protobuf", "HTTP/2 & net", "other"]


@pytest.mark.parametrize(("stack", "category"), [
    (("runtime.mallocgc", "go.etcd.io/etcd/client/v3.(*kv).Do"), "etcd client/grpc"),
    (("k8s.io/apiserver/pkg/storage/cacher.(*cacheWatcher).add",), "watch cache & dispatch"),
    (("sigs.k8s.io/structured-merge-diff/v6/typed.(*TypedValue).Merge",), "managed fields (server-side apply)"),
    (("k8s.io/kubernetes/pkg/apis/core/v1.autoConvert_v1_PodSpec_To_core_PodSpec",), "conversion, defaulting, deep copy"),
    (("k8s.io/api/core/v1.(*PodSpec).DeepCopyInto",), "conversion, defaulting, deep copy"),
    (("k8s.io/api/core/v1.(*PodSpec).MarshalToSizedBuffer",), "protobuf"),
    (("k8s.io/apiserver/pkg/audit.LogRequestObject",), "audit"),
    (("k8s.io/apiserver/pkg/authorization/union.unionAuthzHandler.Authorize",), "authn/authz"),
    (("runtime.futex", "runtime.findRunnable", "runtime.schedule"), "Go scheduler & runtime"),
])
def test_go_work_category_rules(stack, category):
    assert pr.go_work_category(stack) == category


def test_go_path_a_write_through_the_cache_delegator_is_its_request_not_the_watch_cache():
    stack = ("k8s.io/apiserver/pkg/storage/etcd3.(*store).GuaranteedUpdate",
             "k8s.io/apiserver/pkg/storage/cacher.(*CacheDelegator).GuaranteedUpdate",
             "k8s.io/apiserver/pkg/registry/generic/registry.(*Store).Update",
             "k8s.io/apiserver/pkg/endpoints/handlers.(*patcher).patchResource.func3",
             "k8s.io/apiserver/pkg/endpoints/handlers.finishRequest.func1")
    assert pr.go_path_category(stack) == "patch requests"
    assert pr.go_work_category(stack) == "etcd client/grpc"
    assert pr.go_path_category(("k8s.io/apiserver/pkg/storage/cacher.(*Cacher).dispatchEvent",)) == "watch: cache and dispatch"


def test_go_path_categories_by_stack_markers():
    categories = [pr.go_path_category(s.stack) for s in pr.parse_traces(TRACES)]
    assert categories == ["watch: serving", "connections: HTTP/2, TLS I/O", "TLS handshakes", "GC (background)",
                          "patch requests", "admission webhooks (calls out)", "create requests"]


def test_tally_and_top_packages():
    samples = pr.parse_traces(TRACES)
    totals = pr.tally(samples, pr.go_work_category)
    assert totals["TLS handshake"] == pytest.approx(0.03)
    assert sum(totals.values()) == pytest.approx(0.0915)
    assert pr.top_packages(samples, pr.go_work_category, pr.OTHER) == [("example.com/unknown", pytest.approx(0.01))]


PYSPY = """\
<module> (kube_offload/vkubelet/__main__.py:12);run (kube_offload/runtime/controller.py:88);sync (kube_offload/vkubelet/pods.py:140);request (urllib3/_request_methods.py:135);send (ssl.py:1210) 7
<module> (kube_offload/vkubelet/__main__.py:12);run (kube_offload/runtime/controller.py:88);loads (json/__init__.py:346) 3
Thread 0x7F (idle);<module> (/opt/venv/lib/python3.11/site-packages/kubernetes/client/api_client.py:300) 2
_bootstrap (threading.py:1002);run (threading.py:982) 1
"""


def test_parse_collapsed_reads_counts_and_reverses_the_stack():
    samples = pr.parse_collapsed(PYSPY)
    assert [s.value for s in samples] == [7, 3, 2, 1]
    assert samples[0].stack[0] == "send (ssl.py:1210)"
    assert samples[0].stack[-1] == "<module> (kube_offload/vkubelet/__main__.py:12)"


def test_parse_collapsed_skips_a_sample_without_frames():
    assert [s.value for s in pr.parse_collapsed("a (b.py:1) 4\n 1\n")] == [4]


def test_parse_collapsed_refuses_a_line_without_a_count():
    with pytest.raises(pr.ProfileFormatError, match="line 1"):
        pr.parse_collapsed("a (b.py:1);c (d.py:2)\n")


@pytest.mark.parametrize(("frame", "package"), [
    ("sync (kube_offload/vkubelet/pods.py:140)", "ours/kube_offload.vkubelet.pods"),
    ("x (kube_offload/runtime/__init__.py:3)", "ours/kube_offload.runtime"),
    ("send (ssl.py:1210)", "stdlib/ssl"),
    ("loads (json/__init__.py:346)", "stdlib/json"),
    ("request (urllib3/_request_methods.py:135)", "urllib3"),
    ("f (/opt/venv/lib/python3.11/site-packages/kubernetes/client/api_client.py:300)", "kubernetes"),
    ("g (/usr/lib/python3.11/selectors.py:468)", "stdlib/selectors"),
    ("h (/work/wt/kube_offload/enforcer/status.py:9)", "ours/kube_offload.enforcer.status"),
    ("Thread 0x7F (idle)", ""),
])
def test_python_package(frame, package):
    assert pr.python_package(frame) == package


def test_python_categories():
    samples = pr.parse_collapsed(PYSPY)
    assert pr.tally(samples, pr.python_work_category) == Counter(
        {"stdlib/ssl": 7, "stdlib/json": 3, "kubernetes": 2, "stdlib/threading": 1})
    assert pr.tally(samples, pr.python_caller_category) == Counter(
        {"ours/kube_offload.vkubelet.pods": 7, "ours/kube_offload.runtime.controller": 3, "(no frame of ours)": 3})


def test_per_pod_ms_scales_the_shares_by_the_proc_cpu():
    # a profile of 3 + 1 units over a window where the process used 2 s for 100 pods
    assert pr.per_pod_ms({"JSON": 3, "net": 1}, 2.0, 100) == pytest.approx({"JSON": 15.0, "net": 5.0})
    assert pr.per_pod_ms({}, 2.0, 100) == {}
    assert pr.per_pod_ms({"JSON": 1}, 2.0, 0) == {}


def test_category_table_folds_small_rows_and_shows_totals_and_coverage():
    local = {"remote/kube-apiserver": pr.ProcessProfile({"work": Counter({"JSON": 0.5, "audit": 0.001})}, profiled_s=0.9)}
    offloaded = {"remote/kube-apiserver": pr.ProcessProfile({"work": Counter({"JSON": 1.0, "TLS handshake": 1.0})},
                                                            profiled_s=1.8)}
    cpu = {"local pod": {"remote/kube-apiserver": 1.0}, "offloaded pod": {"remote/kube-apiserver": 2.0}}
    lines = pr.category_table({"local pod": local, "offloaded pod": offloaded}, cpu,
                              {"local pod": 100, "offloaded pod": 100}, "work")
    rows = {line[29:67].strip(): line[67:].split() for line in lines[1:]}
    assert rows["JSON"] == ["10.0", "10.0"]
    assert rows["TLS handshake"] == ["0.0", "10.0"]
    assert rows["(rest)"] == ["0.0", "0.0"]  # audit: 0.02 ms per pod, folded
    assert rows["all (/proc CPU)"] == ["10.0", "20.0"]
    assert rows["profile coverage"] == ["90%", "90%"]


def test_coverage():
    assert pr.coverage(None, 1.0) == "none"
    assert pr.coverage(pr.ProcessProfile({}, profiled_s=None), 1.0) == "-"
    assert pr.coverage(pr.ProcessProfile({}, profiled_s=0.5), 1.0) == "50%"


def test_profile_report_separates_go_from_python():
    go = pr.ProcessProfile({"work": Counter({"JSON": 1.0}), "path": Counter({"create requests": 1.0})}, profiled_s=1.0,
                           notes=["other, by package: "])
    py = pr.ProcessProfile({"work": Counter({"stdlib/ssl": 5}), "path": Counter({"ours/kube_offload.x": 5})})
    lines = pr.profile_report({"p": {"remote/kube-apiserver": go, "ours/vkubelet-r1": py}},
                              {"p": {"remote/kube-apiserver": 1.0, "ours/vkubelet-r1": 0.5}}, {"p": 10}, per="pod")
    text = "\n".join(lines)
    assert "Go processes, by work" in text and "Python processes, by our module" in text
    go_block = text.split("Go processes, by path")[0]
    assert "vkubelet" not in go_block and "JSON" in go_block
    assert not math.isnan(float(lines[3].split()[-1]))


def test_flag_values_reads_both_spellings():
    assert pr.flag_values(["--secure-port=10257", "--bind-address", "127.0.0.1", "--enable-pprof", "--v=2"]) == {
        "secure-port": "10257", "bind-address": "127.0.0.1", "enable-pprof": "true", "v": "2"}


@pytest.mark.parametrize(("component", "flags", "url", "why"), [
    ("kube-scheduler", {"secure-port": "10259", "bind-address": "0.0.0.0"}, "https://127.0.0.1:10259/debug/pprof/profile", ""),
    ("kube-controller-manager", {"secure-port": "10257", "profiling": "false"}, None, "--profiling=false"),
    ("kube-controller-manager", {}, None, "no --secure-port"),
    ("etcd", {"listen-client-urls": "http://127.0.0.1:2379"}, None, "etcd runs without --enable-pprof"),
    ("etcd", {"enable-pprof": "true", "listen-client-urls": "http://127.0.0.1:2379,http://[::1]:2379"},
     "http://127.0.0.1:2379/debug/pprof/profile", ""),
])
def test_pprof_url(component, flags, url, why):
    assert pr.pprof_url(component, flags) == (url, why)


def test_busy_drops_the_samples_of_waiting_threads():
    samples = pr.parse_collapsed(
        "run (threading.py:982);LeaderElector._run (kube_offload/runtime/leader_election.py:277);"
        "Event.wait (threading.py:629);Condition.wait (threading.py:331) 16\n"
        "resp_lines (kubernetes/watch/watch.py:57);SSLSocket.read (ssl.py:1167) 7\n"
        "sync (kube_offload/vkubelet/pods.py:140);dumps (json/__init__.py:231) 3\n")
    assert [s.value for s in pr.busy(samples)] == [3]
