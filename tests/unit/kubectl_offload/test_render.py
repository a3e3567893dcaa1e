"""How ``kubectl offload`` prints: terminal vs pipe decisions, tables, quantities, and the
plain output scripts rely on."""

from __future__ import annotations

import io
import json
from datetime import datetime, timezone

import pytest
import yaml

from kubectl_offload import render
from kubectl_offload.status import RemoteFacts, StatusFacts, report

NOW = datetime(2026, 11, 1, 12, 0, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    ("isatty", "env", "expected"),
    [
        (True, {"TERM": "xterm-256color"}, True),
        (False, {"TERM": "xterm-256color"}, False),  # a pipe or a file: never colour
        (True, {"TERM": "xterm", "NO_COLOR": ""}, False),  # no-color.org: present means off, whatever its value
        (True, {"TERM": "dumb"}, False),
    ],
)
def test_use_colour(isatty, env, expected):
    assert render.use_colour(isatty, env) is expected


@pytest.mark.parametrize(
    ("isatty", "env", "output", "expected"),
    [
        (True, {"TERM": "xterm"}, None, True),
        (False, {"TERM": "xterm"}, None, False),
        (True, {"TERM": "xterm"}, "json", False),  # data output: nothing but the document
        (True, {"TERM": "dumb"}, None, False),
    ],
)
def test_show_progress(isatty, env, output, expected):
    assert render.show_progress(isatty, env, output) is expected


def test_progress_writes_only_when_enabled_and_erases_itself():
    silent, shown = io.StringIO(), io.StringIO()
    for stream, enabled in ((silent, False), (shown, True)):
        progress = render.Progress(stream, enabled)
        progress("reading nodes")
        progress.done()
    assert silent.getvalue() == ""
    assert shown.getvalue() == "\r\x1b[Kreading nodes...\r\x1b[K"


def test_table_aligns_on_visible_width_even_with_colour():
    style = render.Style(colour=True)
    lines = render.table(["A", "B"], [[style.ok("yes"), "x"], ["no", "yy"]])
    assert [render.visible_width(line) for line in lines] == [6, 6, 7]
    assert render._ANSI.sub("", lines[1]) == "yes  x"


@pytest.mark.parametrize(
    ("resource", "quantity", "text"),
    [
        ("cpu", "7200m", "7.2"), ("cpu", "250m", "250m"), ("cpu", "8", "8"), ("cpu", "7250m", "7.25"),
        ("memory", "30198988Ki", "28.8Gi"), ("memory", "64Mi", "64Mi"), ("memory", "16Gi", "16Gi"),
        ("pods", "198", "198"), ("nvidia.com/gpu", "2", "2"), ("cpu", "bogus", "bogus"),
    ],
)
def test_human_quantity(resource, quantity, text):
    assert render.human_quantity(resource, quantity) == text


def test_quota_cell():
    assert render.quota_cell({}) == "none"
    assert render.quota_cell({"cpu": {"used": "300m", "limit": ""}}) == "none"
    assert render.quota_cell({"cpu": {"used": "300m", "limit": "4"}, "pods": {"used": "3", "limit": "20"}}) == "cpu 300m/4 pods 3/20"
    both = {"cpu": {"used": "300m", "limit": "4"}, "limits.cpu": {"used": "300m", "limit": "4"}}
    assert render.quota_cell(both, "hard") == "hard: cpu 300m/4 limits.cpu 300m/4"
    assert render.quota_cell({}, "hard") == "none"


def _document():
    facts = StatusFacts(NOW, "local", [RemoteFacts(cluster_id="remote-1", remote_state="unread", remote_error="no kubeconfig")])
    return report(facts).to_dict()


def test_plain_status_has_no_escape_codes_and_says_why_it_is_unhealthy():
    text = render.render_status(_document(), render.Style(colour=False))
    assert "\x1b" not in text
    lines = text.splitlines()
    assert lines[0] == "Local cluster: local"
    assert lines[1].split() == ["REMOTE", "VIRTUAL", "NODE", "READY", "HEARTBEAT", "LAST", "PING", "REMOTE", "API", "CPU",
                                "ADV/FREE", "MEMORY", "ADV/FREE", "QUOTA", "USED/LIMIT", "PODS", "TWINS", "REFLECTED",
                                "REFL", "ERRORS", "HEALTH"]
    assert lines[2].split()[:3] == ["remote-1", "kube-offload-remote-1", "missing"]
    assert "remote-1: unhealthy: virtual node kube-offload-remote-1 does not exist" in text
    assert "remote-1: warning: provider remote-1 not read: no kubeconfig" in text
    assert lines[-1] == "1 remote(s): 1 unhealthy"
    # Same facts, same bytes: nothing in the plain output depends on the terminal.
    assert render.render_status(_document(), render.Style(colour=False)) == text


def test_coloured_status_paints_health():
    text = render.render_status(_document(), render.Style(colour=True))
    assert "\x1b[31;1mUNHEALTHY\x1b[0m" in text


@pytest.mark.parametrize("output", render.OUTPUT_FORMATS)
def test_dump_round_trips(output):
    document = _document()
    text = render.dump(document, output)
    assert (json.loads(text) if output == "json" else yaml.safe_load(text)) == document


def test_status_lists_each_slice_with_asked_and_accepted():
    sliced = RemoteFacts(
        cluster_id="remote-1", remote_state="unread", remote_error="no kubeconfig",
        slices=[{"metadata": {"name": "web"}, "spec": {"pool": "general", "resources": {"cpu": "8", "memory": "8Gi"}},
                 "status": {"phase": "PartiallyAccepted", "accepted": {"cpu": "4", "memory": "8Gi"},
                            "message": "cpu: asked 8, accepted 4 (quota cpu)"}}],
    )
    text = render.render_status(report(StatusFacts(NOW, "local", [sliced])).to_dict(), render.Style(colour=False))
    lines = text.splitlines()
    start = lines.index("Slices:")
    assert lines[start + 1].split() == ["REMOTE", "SLICE", "VIRTUAL", "NODE", "READY", "POOL", "PHASE", "ASKED", "ACCEPTED", "MESSAGE"]
    row = lines[start + 2].split()
    assert row[:6] == ["remote-1", "web", "-", "missing", "general", "PartiallyAccepted"]
    assert row[6].startswith("cpu=8,memory=") and row[7].startswith("cpu=4,memory=")
    assert "cpu: asked 8, accepted 4 (quota cpu)" in lines[start + 2]


def test_the_slices_example_in_the_docs_is_what_status_prints():
    """docs/kubectl-plugin.md's Slices table (issue 41: its message was not the one the code
    writes): the provider's own decisions on two slices under a quota of 6 cpu, printed."""
    from pathlib import Path

    from kube_offload.slices import decide_slices, slice_status

    pools = [{"name": "gpu", "nodeSelector": {"pool": "gpu"}}, {"name": "general", "nodeSelector": {"pool": "general"}}]
    consumer = {"metadata": {"name": "local"}, "spec": {"pools": pools, "quota": {"cpu": "6"}}}

    def provider_node(pool: str, **allocatable: str) -> dict:
        return {"metadata": {"name": pool, "labels": {"pool": pool}}, "spec": {},
                "status": {"allocatable": allocatable, "conditions": [{"type": "Ready", "status": "True"}]}}

    objects = [
        {"metadata": {"name": "gpu", "creationTimestamp": "2026-11-27T09:00:00Z", "generation": 1},
         "spec": {"pool": "gpu", "resources": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "2"}}},
        {"metadata": {"name": "general", "creationTimestamp": "2026-11-27T09:01:00Z", "generation": 1},
         "spec": {"pool": "general", "resources": {"cpu": "8", "memory": "8Gi"}}},
    ]
    decisions = decide_slices(objects, consumer, [provider_node("gpu", cpu="8", memory="32Gi", **{"nvidia.com/gpu": "4"}),
                                                  provider_node("general", cpu="8", memory="32Gi")])
    answered = [{**o, "status": slice_status(decisions[o["metadata"]["name"]], 1, "")} for o in objects]
    nodes = {name: {"metadata": {"name": f"kube-offload-remote-1-{name}"},
                    "status": {"conditions": [{"type": "Ready", "status": "True"}]}} for name in ("gpu", "general")}
    facts = RemoteFacts(cluster_id="remote-1", remote_state="unread", remote_error="no kubeconfig", slices=answered,
                        slice_nodes=nodes)
    lines = render.render_status(report(StatusFacts(NOW, "local", [facts])).to_dict(), render.Style(colour=False)).splitlines()
    printed = lines[lines.index("Slices:"):lines.index("Slices:") + 4]
    assert len(printed) == 4 and "quota cpu leaves 4" in printed[2], printed
    docs = (Path(__file__).resolve().parents[3] / "docs" / "kubectl-plugin.md").read_text().splitlines()
    shown = docs[docs.index("Slices:"):docs.index("Slices:") + 4]
    assert shown == printed, "\n".join(["docs/kubectl-plugin.md shows:", *shown, "status prints:", *printed])
