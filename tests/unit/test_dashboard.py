"""The Grafana dashboard (charts/kube-offload-local/dashboards/kube-offload.json) asks only
for metrics the components export, and docs/observability.md lists every one of them.

The exported names are read from the process registry after importing what the
vkubelet's and the enforcer's ``run`` import (so every module that registers a metric
has done so), never from a list written here. tests/e2e/test_observability.py checks the
same names against the running processes' ``/metrics``."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest

from kube_offload.runtime import metrics as rm

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "charts" / "kube-offload-local" / "dashboards" / "kube-offload.json"
DOC = ROOT / "docs" / "observability.md"

# What the vkubelet's and the enforcer's command lines import before serving /metrics.
COMPONENT_MODULES = (
    "vkubelet.runner",
    "vkubelet.observability",
    "vkubelet.reflection.loops",
    "vkubelet.kubeletapi.loop",
    "vkubelet.storage.virtual",
    "vkubelet.home_api.loop",
    "enforcer.controller",
    "enforcer.observability",
    "enforcer.admission.webhook_server",
)

PROMQL_FUNCTIONS_AND_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "offset", "bool",
    "sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk", "quantile", "count_values", "group",
    "inf", "nan",
}


def exported_names() -> set[str]:
    for module in COMPONENT_MODULES:
        importlib.import_module(module)
    return rm.exported_names(rm.REGISTRY)


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers left once strings, label
    matchers, ``by (...)`` groupings, range selectors, variables, numbers and function
    calls are taken out."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\$\{?\w+\}?", " ", text)
    text = re.sub(r"(?<![A-Za-z0-9_:])\d[\w.]*", " ", text)  # numbers and durations (0.99, 5m)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        rest = text[match.end():].lstrip()
        if rest.startswith("("):
            continue  # a function or an aggregation
        if match.group().lower() in PROMQL_FUNCTIONS_AND_KEYWORDS:
            continue
        names.add(match.group())
    return names


def queries() -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target and every query variable."""
    dashboard = json.loads(DASHBOARD.read_text())
    found = []

    def walk(panels: list[dict]) -> None:
        for panel in panels:
            for target in panel.get("targets") or []:
                found.append((f"panel {panel['title']!r} {target['refId']}", target["expr"]))
            walk(panel.get("panels") or [])

    walk(dashboard["panels"])
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
            match = re.fullmatch(r"label_values\((\w+),\s*\w+\)", query)
            assert match, f"variable {variable['name']}: unexpected query {query!r}"
            found.append((f"variable {variable['name']}", match.group(1)))
    return found


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('sum by (cluster, verb) (rate(kube_offload_api_requests_total{job=~"$job"}[$__rate_interval]))',
         {"kube_offload_api_requests_total"}),
        ('histogram_quantile(0.99, sum by (controller, le) (rate(x_bucket{code!~"2.."}[5m])))', {"x_bucket"}),
        ("max by (cluster_id) (up) / on (job) group_left count(other_metric)", {"up", "other_metric"}),
        ('a{l="sum(b)"} + c offset 5m', {"a", "c"}),
    ],
)
def test_metric_names_reads_promql(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_the_dashboard_has_panels_with_queries() -> None:
    found = queries()
    assert len(found) >= 10
    for where, expr in found:
        assert metric_names(expr), f"{where}: no metric in {expr!r}"


def test_every_query_names_a_metric_the_components_export() -> None:
    exported = exported_names()
    assert "kube_offload_reconciles_total" in exported  # the registry was read at all
    unknown = {(where, name) for where, expr in queries() for name in metric_names(expr) if name not in exported}
    assert not unknown, f"the dashboard asks for metrics no component exports: {sorted(unknown)}"


def test_every_exported_metric_is_documented() -> None:
    text = DOC.read_text()
    families = {family.name for family in rm.REGISTRY.collect()} if exported_names() else set()
    missing = sorted(name for name in families if name not in text)
    assert not missing, f"docs/observability.md does not list: {missing}"
