"""The health port of a component the harness runs (docs/observability.md): where it is and
what its ``/metrics`` says, for the e2e modules that check a figure moved."""

from __future__ import annotations

import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from kube_offload_harness.cluster import Environment

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def health_url(env: Environment, process: str) -> str:
    """``http://127.0.0.1:<port>`` of ``process``'s ``--health-bind`` (the last one given)."""
    record = env.processes.get(process)
    assert record is not None and record.running(), f"the harness runs no {process}"
    argv = list(record.argv)
    binds = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--health-bind"]
    binds += [a.split("=", 1)[1] for a in argv if a.startswith("--health-bind=")]
    assert binds, f"{process} runs without --health-bind: {argv}"
    host, port = binds[-1].rsplit(":", 1)
    assert host == "127.0.0.1" and int(port) > 0, f"{process} health port is not a fixed loopback port: {binds[-1]}"
    return f"http://127.0.0.1:{port}"


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def scrape(base: str) -> tuple[Samples, dict[str, str]]:
    """(every sample by name and labels, every family's type by name)."""
    status, text = get(f"{base}/metrics")
    assert status == 200, text
    samples: Samples = {}
    types: dict[str, str] = {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples, types


def value(samples: Samples, name: str, **labels: str) -> float:
    """Sum of ``name``'s samples whose labels include ``labels`` (0 when none)."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= set(ls))
