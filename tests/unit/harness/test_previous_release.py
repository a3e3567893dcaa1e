"""The previous release the upgrade test starts from (harness previous_release.py), and the
day-2 values of the charts as pods (chart_pods.py): pure parts, and the git part against
this checkout's own history."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from kube_offload_harness import chart_pods, previous_release as pr
from kube_offload_harness.cluster import Topology, default_topology

REPO = Path(__file__).resolve().parents[3]


def test_the_release_version_is_a_prerelease_below_the_charts_own():
    commit = "0123456789abcdef0123456789abcdef01234567"
    assert pr.release_version("0.1.0", commit) == "0.1.0-g0123456789ab"
    assert pr.release_version("0.1.0-rc.1", commit) == "0.1.0-g0123456789ab"
    with pytest.raises(ValueError, match="not a full commit hash"):
        pr.release_version("0.1.0", "HEAD~1")


def test_only_the_image_tag_of_the_top_level_image_block_changes():
    values = (
        "# comment\n"
        "image:\n"
        "  repository: ghcr.io/kube-offload/kube-offload\n"
        '  tag: "0.1.0"  # the release\n'
        "  pullPolicy: IfNotPresent\n"
        "scheduler:\n"
        "  image:\n"
        "    tag: v1.37.2\n"
    )
    changed = pr.with_image_tag(values, "0.1.0-gabc")
    assert changed.splitlines()[3] == '  tag: "0.1.0-gabc"'
    assert changed.replace('  tag: "0.1.0-gabc"\n', '  tag: "0.1.0"  # the release\n') == values
    assert yaml.safe_load(changed)["scheduler"]["image"]["tag"] == "v1.37.2"
    with pytest.raises(ValueError, match="no tag"):
        pr.with_image_tag("image:\n  repository: x\nother: 1\n", "t")


@pytest.mark.parametrize("chart", pr.CHARTS)
def test_the_charts_values_name_their_image_where_the_rewrite_finds_it(chart):
    values = (REPO / "charts" / chart / "values.yaml").read_text()
    assert yaml.safe_load(pr.with_image_tag(values, "9.9.9-gx"))["image"]["tag"] == "9.9.9-gx"


def test_the_default_previous_release_is_the_parent_of_the_newest_chart_change(monkeypatch):
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    monkeypatch.delenv(pr.REF_ENV, raising=False)
    ref = pr.default_ref(REPO)
    newest = subprocess.run(["git", "-C", str(REPO), "log", "--first-parent", "-n1", "--format=%H", "--", "charts/"],
                            capture_output=True, text=True, check=True).stdout.strip()
    assert ref == subprocess.run(["git", "-C", str(REPO), "rev-parse", f"{newest}^1"], capture_output=True, text=True,
                                 check=True).stdout.strip()
    monkeypatch.setenv(pr.REF_ENV, newest)
    assert pr.default_ref(REPO) == newest
    monkeypatch.setenv(pr.REF_ENV, "no-such-revision")
    with pytest.raises(pr.PreviousReleaseError, match=pr.REF_ENV):
        pr.default_ref(REPO)


def test_a_release_from_before_the_gateway_is_peered_without_it():
    """The commit that added the gateway has it; its parent (a release before it) has not,
    so the harness peers that release as its users did, without --gateway."""
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    added = subprocess.run(["git", "-C", str(REPO), "log", "--diff-filter=A", "--format=%H", "--", pr.GATEWAY_TEMPLATE],
                           capture_output=True, text=True, check=True).stdout.split()
    assert added, f"no commit added {pr.GATEWAY_TEMPLATE}"
    assert pr.has_gateway(added[-1], REPO) and pr.has_gateway("HEAD", REPO)
    assert not pr.has_gateway(f"{added[-1]}^1", REPO)


def test_day2_values_go_over_the_harness_placement_and_csr_makes_the_apiserver_verify_kubelets():
    overrides = {"vkubelet": {"replicas": 2, "servingCert": {"mode": "csr", "approval": "self"}}}
    values = chart_pods.local_values("local", overrides)
    assert values["vkubelet"]["replicas"] == 2 and values["webhook"]["replicas"] == 1
    assert values["vkubelet"]["servingCert"] == {"mode": "csr", "approval": "self"}
    assert values["vkubelet"]["nodeSelector"] == chart_pods.real_node_placement()["nodeSelector"]  # kept
    assert chart_pods.remote_values({"enforcer": {"replicas": 2}})["enforcer"]["replicas"] == 2
    assert chart_pods.verifies_kubelets({"local": overrides}) is True
    assert chart_pods.verifies_kubelets({}) is False
    assert chart_pods.verifies_kubelets({"local": {"vkubelet": {"servingCert": {"mode": "self-signed"}}}}) is False


def test_the_day2_fields_survive_topology_json():
    topology = default_topology(prefix="d2", remotes=1)
    topology.chart_values = {"local": {"vkubelet": {"replicas": 2}}}
    topology.previous_release = "0123456789abcdef0123456789abcdef01234567"
    topology.chart_version = "0.1.0-g0123456789ab"
    again = Topology.from_json(topology.to_json())
    assert (again.chart_values, again.previous_release, again.chart_version) == (
        topology.chart_values, topology.previous_release, topology.chart_version)
    assert chart_pods.installed_version(again) == "0.1.0-g0123456789ab"
    again.chart_version = ""
    assert chart_pods.installed_version(again) == chart_pods.chart_version()
