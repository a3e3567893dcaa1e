"""The binary builder's wrapper modules, small mains and step runner (no Go toolchain)."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest

from kube_offload_harness import binaries, cluster_dns, go_build, go_wrapper, registry, versions


# --- wrapper modules ------------------------------------------------------------------------
def test_a_wrapper_requires_the_release_and_pins_and_points_at_a_local_copy():
    text = go_wrapper.go_mod("kwok", {"sigs.k8s.io/kwok": "v0.8.0"},
                             pins={"k8s.io/client-go": "v0.37.2", "golang.org/x/text": "v0.40.0"},
                             directories={"sigs.k8s.io/kwok": Path("/cache/build/kwok/src")})
    assert text.splitlines()[0] == "module kube-offload.local/build/kwok"
    assert f"go {versions.GO_MINIMUM[0]}.{versions.GO_MINIMUM[1]}.0" in text
    assert "require sigs.k8s.io/kwok v0.8.0" in text
    assert "replace golang.org/x/text => golang.org/x/text v0.40.0" in text
    assert "replace k8s.io/client-go => k8s.io/client-go v0.37.2" in text
    assert "replace sigs.k8s.io/kwok => /cache/build/kwok/src" in text


def test_a_wrapper_without_pins_is_the_release_own_graph():
    text = go_wrapper.go_mod("etcd", {"go.etcd.io/etcd/server/v3": "v3.7.3"})
    assert "replace" not in text
    assert text.endswith("require go.etcd.io/etcd/server/v3 v3.7.3\n")


def test_the_build_list_keeps_versions_and_skips_the_main_module_and_directories():
    listing = ("kube-offload.local/build/kubernetes \n"
               "k8s.io/api v0.37.2\n"
               "golang.org/x/text v0.40.0\n"
               "sigs.k8s.io/kwok \n")
    assert go_wrapper.build_list(listing) == {"k8s.io/api": "v0.37.2", "golang.org/x/text": "v0.40.0"}
    with pytest.raises(ValueError, match="unexpected line"):
        go_wrapper.build_list("a b c\n")


def test_the_shared_graph_requires_everything_but_kubernetes_and_the_program_itself():
    control_plane = {"k8s.io/kubernetes": "v1.37.2", "k8s.io/client-go": "v0.37.2", "github.com/coredns/caddy": "v1.1.1",
                     "kube-offload.local/build/kubernetes": "v0.0.0"}
    requires = go_wrapper.control_plane_requirements(control_plane, program_module="github.com/coredns/caddy")
    assert requires == {"k8s.io/client-go": "v0.37.2"}


PROGRAM_GO_MOD = """module sigs.k8s.io/metrics-server

go 1.26.4

require (
\tgithub.com/fxamacker/cbor/v2 v2.9.2 // indirect
\tk8s.io/client-go v0.36.2
\tsigs.k8s.io/logtools v0.9.0
)

require k8s.io/api v0.36.2

replace k8s.io/api => ../api

tool sigs.k8s.io/logtools/logcheck
"""


def test_a_programs_requirements_are_set_to_the_control_planes_versions_up_or_down():
    pinned = go_wrapper.pin_requirements(PROGRAM_GO_MOD, {
        "github.com/fxamacker/cbor/v2": "v2.9.1", "k8s.io/client-go": "v0.37.2", "k8s.io/api": "v0.37.2",
        "sigs.k8s.io/metrics-server": "v9.9.9",
    })
    assert "\tgithub.com/fxamacker/cbor/v2 v2.9.1 // indirect\n" in pinned  # down, comment kept
    assert "\tk8s.io/client-go v0.37.2\n" in pinned  # up
    assert "\tsigs.k8s.io/logtools v0.9.0\n" in pinned  # not the control plane's: as it was
    assert "require k8s.io/api v0.37.2\n" in pinned
    # Only requirements change: the module line, replace and tool directives stay.
    assert pinned.startswith("module sigs.k8s.io/metrics-server\n")
    assert "replace k8s.io/api => ../api\n" in pinned and "tool sigs.k8s.io/logtools/logcheck\n" in pinned


def test_modules_a_program_needs_newer_than_the_control_plane_are_named():
    control_plane = {"k8s.io/client-go": "v0.37.2", "golang.org/x/text": "v0.40.0", "kube-offload.local/build/kubernetes": ""}
    selected = {"k8s.io/client-go": "v0.37.2", "golang.org/x/text": "v0.41.0", "helm.sh/helm/v3": "v3.22.0"}
    assert go_wrapper.off_the_graph(selected, control_plane) == ["golang.org/x/text"]
    assert go_wrapper.off_the_graph(control_plane, control_plane) == []


def test_a_cache_key_carries_version_and_revision():
    assert go_wrapper.cache_key("helm", "v3.22.0") == "helm-v3.22.0"
    assert go_wrapper.cache_key("kwok", "v0.8.0", "uidsafe1") == "kwok-v0.8.0-uidsafe1"


# --- small mains ----------------------------------------------------------------------------
def _directives(corefile: str) -> set[str]:
    """The plugin names of a Corefile's server blocks (first word of each line one brace deep)."""
    found, depth = set(), 0
    for line in corefile.splitlines():
        words = line.split()
        if words and depth == 1 and words[0] != "}":
            found.add(words[0])
        depth += line.count("{") - line.count("}")
    return found


# kubeadm's default Corefile (what a manifest bringing its own coredns ConfigMap uses).
KUBEADM_COREFILE_DIRECTIVES = {"errors", "health", "ready", "kubernetes", "prometheus", "forward", "cache", "loop",
                               "reload", "loadbalance"}


def test_coredns_has_every_plugin_of_the_harness_corefile_and_of_kubeadms():
    used = _directives(cluster_dns.corefile())
    assert used == {"errors", "health", "ready", "kubernetes", "cache", "loadbalance"}
    source = go_wrapper.coredns_main().source()
    for directive in used | KUBEADM_COREFILE_DIRECTIVES:
        package = go_wrapper.COREDNS_PLUGIN_PACKAGES[directive]
        assert f'_ "github.com/coredns/coredns/plugin/{package}"' in source


def test_coredns_leaves_out_the_cloud_and_tracing_plugins():
    source = go_wrapper.coredns_main().source()
    for plugin in ("route53", "azure", "clouddns", "etcd", "dnstap", "trace", "geoip"):
        assert f"/plugin/{plugin}\"" not in source
    assert "coremain.Run()" in source and source.startswith("// Generated") and "\npackage main\n" in source


def test_the_registry_has_the_storage_driver_the_harness_configures_and_no_cloud_driver(tmp_path: Path):
    configured = set(registry.registry_config(storage=tmp_path, port=5000)["storage"]) - {"delete", "redirect", "maintenance"}
    source = go_wrapper.registry_main().source()
    for driver in configured:
        assert f'/registry/storage/driver/{driver}"' in source
    for cloud in ("azure", "gcs", "s3-aws", "middleware/cloudfront"):
        assert f"/storage/driver/{cloud}\"" not in source


def test_a_small_main_imports_each_plugin_once_and_its_digest_follows_the_plugins():
    main = go_wrapper.coredns_main()
    imports = re.findall(r'_ "([^"]+)"', main.source())
    assert imports == sorted(set(imports))
    fewer = go_wrapper.SmallMain(main.program, main.version, main.why, main.entry_import, main.entry_call, main.plugins[1:])
    assert fewer.digest() != main.digest() and len(main.digest()) == 8


def test_small_mains_are_part_of_the_cache_key(tmp_path: Path):
    nbins = binaries.node_binaries(tmp_path)
    assert nbins.coredns.parent.name == f"coredns-{versions.COREDNS}-{go_wrapper.coredns_main().digest()}"
    assert nbins.registry.parent.name == f"registry-{versions.REGISTRY}-{go_wrapper.registry_main().digest()}"


# --- what is built, and how -----------------------------------------------------------------
def test_every_cached_binary_has_exactly_one_builder(tmp_path: Path):
    bins, nbins = binaries.binaries(tmp_path), binaries.node_binaries(tmp_path)
    built_by_programs = [path for program in binaries.programs(bins, nbins) for path in program.outputs.values()]
    assert len(built_by_programs) == len(set(built_by_programs))
    others = {name for name in (*binaries.KUBE_BINARIES, *binaries.NODE_KUBE_BINARIES, "pause")}
    expected = {path for name, path in {**bins.all(), **nbins.all()}.items() if name not in others}
    assert set(built_by_programs) == expected


def test_programs_sharing_the_control_planes_graph_come_first_and_are_the_kubernetes_library_users(tmp_path: Path):
    programs = binaries.programs(binaries.binaries(tmp_path), binaries.node_binaries(tmp_path))
    shared = [program.name for program in programs if program.shared]
    assert shared == [program.name for program in programs[:len(shared)]]
    assert set(shared) == {"metrics-server", "local-path-provisioner", "kwok", "helm", "coredns"}
    # The runtime and the datastore are built as released, never against other versions.
    assert not {"containerd", "etcd"} & set(shared)


def test_a_program_is_cached_under_its_version(tmp_path: Path):
    for program in binaries.programs(binaries.binaries(tmp_path), binaries.node_binaries(tmp_path)):
        assert program.version in program.key
        for target in program.outputs.values():
            assert target.parent.name == program.key


@pytest.mark.parametrize(("log", "count"), [
    ("k8s.io/api/core/v1\ngithub.com/x/y\n", 2),
    ("go: downloading k8s.io/api v0.37.2\nk8s.io/api/core/v1\n", 1),
    ("# sigs.k8s.io/x\n./a.go:3:2: undefined: y\n", 0),
    ("", 0),
])
def test_compiled_packages_counts_import_paths_only(log, count):
    assert go_build.compiled_packages(log) == count


def test_go_version_parsing():
    assert go_build.parse_go_version("go version go1.26.8 linux/amd64") == (1, 26)
    assert go_build.parse_go_version("bash: go: command not found") is None


# --- the step runner ------------------------------------------------------------------------
def _context(tmp_path: Path, said: list[str]) -> go_build.Context:
    return go_build.Context(root=tmp_path, go="go", say=said.append, control_plane_list=lambda _ctx: {})


def test_later_steps_are_prepared_while_the_first_compiles(tmp_path: Path):
    events: list[str] = []
    second_prepared = threading.Event()

    def first_compile() -> str:
        # Only returns once the background thread has prepared the second step.
        assert second_prepared.wait(5)
        events.append("compile 1")
        return ""

    def second_prepare() -> None:
        events.append("prepare 2")
        second_prepared.set()

    steps = [
        go_build.Step("one", lambda: events.append("prepare 1"), first_compile),
        go_build.Step("two", second_prepare, lambda: events.append("compile 2") or "how"),
    ]
    results = go_build.run_plan(steps, _context(tmp_path, []))
    assert events == ["prepare 1", "prepare 2", "compile 1", "compile 2"]
    assert [(r.title, r.how) for r in results] == [("one", ""), ("two", "how")]


def test_a_failed_background_preparation_is_raised_when_its_turn_comes(tmp_path: Path):
    compiled: list[str] = []

    def broken() -> None:
        raise go_build.BuildError("no proxy")

    steps = [
        go_build.Step("one", lambda: None, lambda: compiled.append("one") or ""),
        go_build.Step("two", broken, lambda: compiled.append("two") or ""),
    ]
    with pytest.raises(go_build.BuildError, match="no proxy"):
        go_build.run_plan(steps, _context(tmp_path, []))
    assert compiled == ["one"]


def test_a_failed_compile_cancels_what_is_still_being_prepared(tmp_path: Path):
    ctx = _context(tmp_path, [])

    def fail() -> str:
        raise go_build.BuildError("compile error")

    steps = [go_build.Step("one", lambda: None, fail),
             go_build.Step("two", lambda: ctx.cancelled.wait(5) and None, lambda: "")]
    with pytest.raises(go_build.BuildError, match="compile error"):
        go_build.run_plan(steps, ctx)
    assert ctx.cancelled.is_set()


def test_the_builder_runs_on_the_standard_library_alone(tmp_path: Path):
    """bootstrap.sh starts it with the system Python before the virtualenv exists."""
    import os
    import subprocess
    import sys

    harness = Path(__file__).resolve().parents[3] / "harness"
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(harness), "KUBE_OFFLOAD_CACHE": str(tmp_path)}
    # -S: no site-packages, so an import of anything outside the standard library fails.
    run = subprocess.run([sys.executable, "-S", "-m", "kube_offload_harness.binaries_cli", "status"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 1, run.stderr  # 1: nothing is cached in an empty directory
    assert "kube-apiserver" in run.stdout and "missing" in run.stdout
