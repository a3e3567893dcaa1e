"""The answers to ``GET /healthz``, ``/readyz`` and ``/metrics``, written once for every
server of the project: the vkubelet's and the enforcer's health port
(kube_offload/runtime/health.py, served by the process manager), the webhook's and the
extender's WSGI apps (kube_offload/runtime/wsgi.py), and the ShadowPod webhook. Their transports differ on purpose (gunicorn workers for the two apps,
TLS for the webhooks; each module says why); what
they answer does not.

The checks are named and answered as the Kubernetes components do: ``ok`` when all pass;
otherwise (or with ``?verbose``) one ``[+]name ok`` / ``[-]name failed: why`` line per
check, and a status 503 when one fails.

No metrics are imported here: the webhook's gunicorn workers switch prometheus-client to
multiprocess values after import, and a process-wide metric created on the way would
show up in their ``/metrics``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence
from urllib.parse import parse_qs

HEALTHZ = "/healthz"
READYZ = "/readyz"
METRICS = "/metrics"


@dataclass(frozen=True)
class Check:
    """A named check: ``run`` returns None when it passes, else why it fails."""

    name: str
    run: Callable[[], str | None]


@dataclass(frozen=True)
class Verdict:
    ok: bool
    text: str


def evaluate(checks: Sequence[Check], *, endpoint: str, verbose: bool = False) -> Verdict:
    """Run ``checks``; the answer's body as the Kubernetes components write it. A check
    that raises fails (with the exception), it does not take the endpoint down."""
    lines: list[str] = []
    ok = True
    for check in checks:
        try:
            problem = check.run()
        except Exception as exc:  # a broken check is a failing one
            problem = f"the check raised {type(exc).__name__}: {exc}"
        if problem:
            ok = False
            lines.append(f"[-]{check.name} failed: {problem}")
        else:
            lines.append(f"[+]{check.name} ok")
    if ok and not verbose:
        return Verdict(True, "ok")
    lines.append(f"{endpoint.strip('/')} check {'passed' if ok else 'failed'}")
    return Verdict(ok, "\n".join(lines))


TEXT = "text/plain; charset=utf-8"
NOT_FOUND = f"no such endpoint; GET {HEALTHZ}, {READYZ} or {METRICS}"


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    content_type: str


def probe_answer(
    path: str,
    query: str,
    *,
    live: Sequence[Check],
    ready: Sequence[Check],
    exposition: Callable[[], tuple[bytes, str]],
) -> Answer | None:
    """The answer to ``GET path?query`` when ``path`` is ``/healthz``, ``/readyz`` or
    ``/metrics``, else None. The one way every server of the project answers them - the
    health port here, the webhook's and the extender's WSGI apps, the ShadowPod webhook -
    whatever carries the bytes (their transports differ for reasons given in each)."""
    if path == METRICS:
        body, content_type = exposition()
        return Answer(200, body, content_type)
    if path not in (HEALTHZ, READYZ):
        return None
    verbose = "verbose" in parse_qs(query, keep_blank_values=True)
    verdict = evaluate(live if path == HEALTHZ else ready, endpoint=path, verbose=verbose)
    return Answer(200 if verdict.ok else 503, (verdict.text + "\n").encode(), TEXT)
