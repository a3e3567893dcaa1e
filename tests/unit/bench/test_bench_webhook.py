"""bench/bench_webhook.py, its pure part: where a py-spy profile's busy samples go."""

from __future__ import annotations

from support.bench_scripts import load_bench_script

bench = load_bench_script("bench_webhook.py")

RAW = [
    # idle: the asyncio loop waiting in epoll, a gthread pool thread waiting for work
    "<module> (bench.py:1);run (gunicorn/arbiter.py:2);_run_once (asyncio/base_events.py:1);EpollSelector.select (selectors.py:468) 50",
    "_bootstrap (threading.py:1);_worker (concurrent/futures/thread.py:81) 7",
    # TLS under the loop: TLS, not asyncio
    "_run_once (asyncio/base_events.py:1);_do_read (asyncio/sslproto.py:2);SSLObject.read (ssl.py:921) 10",
    # the admission inside a route inside Flask: the admission
    "wsgi_app (flask/app.py:1);mutate_pods (webhook/app.py:2);review_pod (webhook/review.py:3) 4",
    # Flask itself
    "_requests (kube_offload/runtime/asyncio_worker.py:1);wsgi_app (flask/app.py:1);preprocess_request (flask/app.py:2) 6",
    # the WSGI app's own dispatch and answer (no Flask since 1c94d5a)
    "_requests (kube_offload/runtime/asyncio_worker.py:1);send (kube_offload/runtime/wsgi.py:2) 5",
    # the worker's own parse
    "_requests (kube_offload/runtime/asyncio_worker.py:1);parse_head (kube_offload/runtime/http11.py:90) 3",
    # gthread's hand-off
    "run (gunicorn/workers/gthread.py:1);defer (gunicorn/workers/gthread.py:2);PollableMethodQueue.defer (x.py:3) 2",
    "mystery (elsewhere.py:1) 1",
    "",
    "not a sample line",
]


def test_summary_attributes_busy_samples_to_the_innermost_layer() -> None:
    total, busy, layers = bench.summarise_profile(RAW)
    assert total == 88
    assert busy == 31
    assert layers == {
        "TLS": 10,
        "admission work": 4,
        "Flask/Werkzeug": 6,
        "route code (webhook/app.py, runtime/wsgi.py, body read, metrics calls)": 5,
        "asyncio worker: HTTP parse, environ, answer": 3,
        "gthread: hand-off to and from the pool": 2,
        "other": 1,
    }
