"""The request-body limit of the webhook and the extender: reading within it, the 413 past it,
and the memory budget it is sized to.

Both read their request bodies through :func:`read_body`: a ``Content-Length`` over the
limit is refused before a byte is read, and a chunked body (no length: gunicorn
de-chunks it and marks its input terminated) as soon as the read passes the limit, so at
most the limit plus one read of 64 KiB is ever held. Either way ``RequestEntityTooLarge``
is raised, and :func:`too_large_message` words the 413: how big, what the limit is, and
which flag sets it. (A framework's length limit alone is not enough: Flask's
``MAX_CONTENT_LENGTH``, when the extender still ran on Flask, stopped reading a chunked
body AT the limit and handed the truncated body on, a 400 for "not JSON" instead of a
413.) Why the limits are what they are:
bench/bench_parse_memory.py and docs/performance.md.

A hard cap alone bounds memory only as ``concurrency x cap x amplification``, which forces
a small cap (a valid large Pod is then refused). :class:`ParseBudget` bounds the memory of
the bodies a worker process is parsing *together*: a request reserves its
``Content-Length x amplification`` before it reads a byte and gives it back once its
answer is built; one large body then takes the budget that many small ones would, and
waits (bounded) when it is taken. The cap can then be the apiserver's own request limit.
The webhook and the extender use it (each worker its own): the webhook's cap is the
apiserver's request limit, the extender's the largest body its budget can parse
(:func:`largest_parseable_body`), since kube-scheduler calls it one pod at a time.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Mapping

from werkzeug.exceptions import BadRequest, RequestEntityTooLarge

READ_SIZE = 64 * 1024
MIB = 1024 * 1024

# The largest request body kube-apiserver accepts (k8s.io/apiserver/pkg/server/config.go,
# ``MaxRequestBodyBytes: int64(3 * 1024 * 1024)``: twice etcd's 1.5 MiB request limit,
# because a JSON body shrinks when stored as protobuf). The AdmissionReview of an object
# that fits etcd is, in practice, within it (docs/webhook.md, "Request size").
APISERVER_MAX_REQUEST_BODY_BYTES = 3 * MIB

# Bytes of memory that reading and parsing a request takes per body byte, at worst: a body
# dense in small JSON objects (``[{}, {}, ...]``) through either app, measured by
# bench/bench_parse_memory.py (37.0 by tracemalloc, 31.5 by peak RSS; docs/performance.md).
PARSE_AMPLIFICATION = 37
# What the chart's budget keeps aside for the production caches and fragmentation.
MEMORY_RESERVE = 0.10
# glibc malloc arenas (MALLOC_ARENA_MAX) that a parse budget's RSS bound assumes. With the
# default (8 per core) each request thread gets its own arena and keeps the buffers it
# freed there, so 8 threads parsing 3 MiB bodies one after the other held ~190 MiB of RSS
# for a budget that lets ~110 MiB be parsed at once; with 2, ~110 MiB
# (bench/bench_parse_memory.py). The chart sets it in the webhook's and the extender's
# environment (both parse large bodies on whichever of their 8 threads is free).
MALLOC_ARENAS = 2


def parse_budget_help(*, baseline_bytes: int, wait_seconds: float, doc: str) -> str:
    """The ``--parse-memory-budget`` help of a component whose budget this module enforces
    (the webhook, the extender): one wording for both, naming the component's page."""
    return (
        f"memory, per worker, that the request bodies being parsed may take together, in bytes or "
        f"with Ki/Mi/Gi: each request reserves {PARSE_AMPLIFICATION}x its Content-Length, waits when "
        f"the budget is taken and gets a retryable 503 after {wait_seconds:g}s; "
        f"workers x this + ~{baseline_bytes >> 20}Mi at rest must stay under the memory limit, and "
        f"it must hold {PARSE_AMPLIFICATION}x --max-body-bytes ({doc}, 'Request size')"
    )


def peak_memory(*, baseline: int, concurrency: int, limit: int) -> int:
    """Bytes a server holds with ``concurrency`` requests of ``limit`` bytes being parsed
    at once, on top of ``baseline`` at rest."""
    return baseline + concurrency * limit * PARSE_AMPLIFICATION


def fits(*, memory_limit: int, baseline: int, concurrency: int, limit: int) -> bool:
    """Whether that peak stays within the memory limit less the reserve."""
    return peak_memory(baseline=baseline, concurrency=concurrency, limit=limit) <= memory_limit * (1 - MEMORY_RESERVE)


def worker_parse_budget(*, memory_limit: int, baseline: int, workers: int) -> int:
    """The parse budget of each of ``workers`` processes that keeps ``baseline`` (the
    server at rest) plus every worker's full budget within the memory limit less the
    reserve; whole MiB, rounded down."""
    per_worker = (memory_limit * (1 - MEMORY_RESERVE) - baseline) / workers
    return max(0, int(per_worker // MIB) * MIB)


def largest_parseable_body(budget: int, *, amplification: int = PARSE_AMPLIFICATION, unit: int = MIB) -> int:
    """The largest hard cap (whole ``unit``, rounded down) whose body, reserved at
    ``amplification`` bytes per byte, fits a ``budget`` alone: the cap of a component whose
    client sends one large body at a time (the extender: kube-scheduler calls it one pod at
    a time), so that every body under the cap can be parsed."""
    return max(0, (budget // amplification) // unit * unit)


def budget_peak_memory(*, baseline: int, workers: int, budget: int) -> int:
    """Bytes a server holds at most with every worker's parse budget in use."""
    return baseline + workers * budget


def budget_too_small(*, component: str, budget: int, max_body: int, amplification: int = PARSE_AMPLIFICATION) -> str | None:
    """Why a budget cannot serve the hard cap (a body the cap admits could never be
    parsed: a 413 the cap does not explain), or None."""
    needed = max_body * amplification
    if budget >= needed:
        return None
    return (
        f"--parse-memory-budget {budget} bytes is less than the {needed} bytes that parsing a body of "
        f"--max-body-bytes {max_body} takes ({amplification} bytes per body byte): the largest accepted "
        f"request body could never be parsed; raise --parse-memory-budget (chart value "
        f"{component}.parseMemoryBudget, with the memory limit) or lower --max-body-bytes"
    )


def too_large_message(component: str, limit: int, content_length: int | None) -> str:
    """The message of a 413 for a body over ``limit`` bytes (``content_length`` when the
    client announced it, None for a chunked body stopped while reading)."""
    size = f"of {content_length} bytes" if content_length is not None else "(chunked)"
    return (
        f"request body {size} is over the kube-offload {component}'s limit of {limit} bytes; "
        f"the limit bounds the memory a request can take (--max-body-bytes, chart value "
        f"{component}.maxBodyBytes; raise it only with the memory limit)"
    )


def body_length(environ: Mapping[str, Any]) -> int | None:
    """The announced length of a WSGI request's body: its ``Content-Length``, None for a
    chunked body (no length; the server ends the stream), 0 for no body; ``BadRequest``
    for a length that is not a number of bytes."""
    raw_length = environ.get("CONTENT_LENGTH") or ""
    if raw_length.strip():
        try:
            length = int(raw_length)
        except ValueError:
            length = -1
        if length < 0:  # gunicorn refuses these before the app; other servers may not
            raise BadRequest(f"Content-Length {raw_length!r} is not a number of bytes")
        return length
    if environ.get("wsgi.input_terminated"):
        return None
    return 0  # no length and a server that does not end the stream: no body (as werkzeug)


def read_body(environ: Mapping[str, Any], limit: int) -> bytes:
    """The request body of a WSGI ``environ``, at most ``limit`` bytes; raises
    ``RequestEntityTooLarge`` past it (see the module doc)."""
    stream = environ["wsgi.input"]
    expected = body_length(environ)
    if expected is not None and expected > limit:
        raise RequestEntityTooLarge()
    if expected == 0:
        return b""
    out = bytearray()
    while expected is None or len(out) < expected:
        want = READ_SIZE if expected is None else min(READ_SIZE, expected - len(out))
        data = stream.read(want)
        if not data:
            break
        out += data
        if len(out) > limit:
            raise RequestEntityTooLarge()
    return bytes(out)


# --- the parse memory budget of one worker process ---------------------------------------
class OverParseBudget(Exception):
    """A body whose parse could never fit the whole budget (answer 413); the message says
    which flag moves it."""


class ParseBudgetBusy(Exception):
    """No room came free in the budget within the wait (answer 503, retryable)."""


def _size(content_length: int | None) -> str:
    return f"of {content_length} bytes" if content_length is not None else "(chunked)"


class ParseBudget:
    """Bytes that the request bodies one worker process is parsing may take together.

    ``reserve(content_length)`` is a context manager around reading, parsing and
    answering one request (``take`` / ``give_back`` without one): it takes ``content_length x amplification`` bytes (the hard
    cap's worth for a chunked body, whose size is unknown until read), waits at most
    ``wait_seconds`` for them when other requests hold the budget, and gives them back on
    exit. The uncontended path is one lock and integer arithmetic, so the small
    admissions that are nearly all of the traffic do not notice it.

    Raises ``RequestEntityTooLarge`` for a length over the hard cap (``max_body``; the
    caller words that 413 as before), :class:`OverParseBudget` for a reservation bigger
    than the whole budget, :class:`ParseBudgetBusy` when the wait ran out. No ordering
    among waiters: each takes the room when it fits, so small requests are not held
    behind a large one (a large one waits at most ``wait_seconds`` either way).
    """

    def __init__(
        self,
        *,
        component: str,
        capacity: int,
        max_body: int,
        wait_seconds: float,
        amplification: int = PARSE_AMPLIFICATION,
    ) -> None:
        self.component = component
        self.capacity = capacity
        self.max_body = max_body
        self.wait_seconds = wait_seconds
        self.amplification = amplification
        self._lock = threading.Lock()
        self._freed = threading.Condition(self._lock)
        self._used = 0
        self._waiters = 0

    @property
    def in_use(self) -> int:
        return self._used

    def reservation(self, content_length: int | None) -> int:
        """Bytes a body of that announced length reserves."""
        return (self.max_body if content_length is None else content_length) * self.amplification

    def reserve(self, content_length: int | None) -> "Reservation":
        """``with budget.reserve(length):`` around reading, parsing and answering."""
        return Reservation(self, content_length)

    def take(self, content_length: int | None) -> int:
        """Reserve for a body of that announced length (waiting if need be); the amount
        taken, to :meth:`give_back`. Raises as the class doc says."""
        if content_length is not None and content_length > self.max_body:
            raise RequestEntityTooLarge()
        amount = self.reservation(content_length)
        if amount > self.capacity:
            raise OverParseBudget(
                f"request body {_size(content_length)} needs about {amount} bytes of memory to parse "
                f"({self.amplification} per body byte), more than the kube-offload {self.component}'s whole "
                f"parse memory budget of {self.capacity} bytes per worker; raise --parse-memory-budget "
                f"(chart value {self.component}.parseMemoryBudget) with the memory limit, or lower --max-body-bytes"
            )
        self._take(amount, content_length)
        return amount

    def _take(self, amount: int, content_length: int | None) -> None:
        with self._lock:
            if self._used + amount <= self.capacity:
                self._used += amount
                return
            deadline = time.monotonic() + self.wait_seconds
            self._waiters += 1
            try:
                while self._used + amount > self.capacity:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise ParseBudgetBusy(
                            f"the kube-offload {self.component} is busy parsing other large requests: this "
                            f"request body {_size(content_length)} needs about {amount} bytes of the worker's parse "
                            f"memory budget ({self._used} of {self.capacity} bytes in use) and they did not come "
                            f"free within {self.wait_seconds:g}s; retry shortly (if this lasts, the budget is too "
                            f"small for the load: --parse-memory-budget, chart value {self.component}.parseMemoryBudget)"
                        )
                    self._freed.wait(remaining)
                self._used += amount
            finally:
                self._waiters -= 1

    def give_back(self, amount: int) -> None:
        with self._lock:
            self._used -= amount
            if self._waiters:
                self._freed.notify_all()


class Reservation:
    """What :meth:`ParseBudget.reserve` returns: takes on entry, gives back on exit (a
    class rather than a generator: it is on every request's path). Give back only once
    everything parsed from the body is freed, or the next request parses beside it."""

    __slots__ = ("_budget", "_length", "amount")

    def __init__(self, budget: ParseBudget, content_length: int | None) -> None:
        self._budget = budget
        self._length = content_length
        self.amount = 0

    def __enter__(self) -> int:
        self.amount = self._budget.take(self._length)
        return self.amount

    def __exit__(self, *exc: object) -> None:
        self._budget.give_back(self.amount)
