"""Pure parts of the binary builder: the wrapper go.mod and the version stamp."""

import pytest

from kube_offload_harness import binaries

GO_MOD = """module k8s.io/kubernetes

go 1.26.0

replace (
	k8s.io/api => ./staging/src/k8s.io/api
	k8s.io/apimachinery => ./staging/src/k8s.io/apimachinery
	k8s.io/streaming => ./staging/src/k8s.io/streaming
)

require github.com/other/thing v1.0.0
"""


def test_staging_modules_are_read_off_the_release_go_mod():
    assert binaries.staging_modules(GO_MOD) == ["k8s.io/api", "k8s.io/apimachinery", "k8s.io/streaming"]


def test_wrapper_pins_every_staging_module_at_the_matching_v0_version():
    text = binaries.kubernetes_wrapper_go_mod("v1.37.2", ["k8s.io/api", "k8s.io/streaming"])
    assert "require k8s.io/kubernetes v1.37.2" in text
    assert "replace k8s.io/api => k8s.io/api v0.37.2" in text
    assert "replace k8s.io/streaming => k8s.io/streaming v0.37.2" in text


def test_version_stamp_sets_git_version_major_minor_for_both_packages():
    flags = binaries.version_ldflags("v1.37.2")
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        assert f"-X {package}.gitVersion=v1.37.2" in flags
        assert f"-X {package}.gitMajor=1" in flags
        assert f"-X {package}.gitMinor=37" in flags


@pytest.mark.parametrize("bad", ["1.37.2", "v1.37", "latest"])
def test_unsupported_versions_are_refused(bad):
    with pytest.raises(ValueError):
        binaries.staging_version(bad)


def test_missing_binaries_are_listed(tmp_path):
    bins = binaries.binaries(tmp_path)
    assert set(bins.missing()) == set(bins.all())
    target = bins.kwokctl
    target.parent.mkdir(parents=True)
    target.write_text("#!/bin/sh\n")
    target.chmod(0o755)
    assert "kwokctl" not in bins.missing()


HELM_GO_MOD = """module helm.sh/helm/v3

go 1.26.0

require (
	github.com/BurntSushi/toml v1.6.0
	k8s.io/api v0.37.0
	k8s.io/client-go v0.37.0
)
"""


def test_module_version_reads_require_lines_and_blocks():
    assert binaries.module_version(HELM_GO_MOD, "k8s.io/client-go") == "v0.37.0"
    assert binaries.module_version("require k8s.io/client-go v0.36.1\n", "k8s.io/client-go") == "v0.36.1"
    assert binaries.module_version(HELM_GO_MOD, "k8s.io/kubectl") is None


def test_helm_stamp_sets_its_version_and_the_kubernetes_version_of_its_client_go():
    flags = binaries.helm_ldflags("v3.22.0", HELM_GO_MOD)
    assert "-X helm.sh/helm/v3/internal/version.version=v3.22.0" in flags
    for package in ("helm.sh/helm/v3/pkg/lint/rules", "helm.sh/helm/v3/pkg/chartutil"):
        assert f"-X {package}.k8sVersionMajor=1" in flags
        assert f"-X {package}.k8sVersionMinor=37" in flags


def test_helm_stamp_refuses_a_go_mod_without_client_go():
    with pytest.raises(ValueError, match="k8s.io/client-go"):
        binaries.helm_ldflags("v3.22.0", "module helm.sh/helm/v3\n")


def test_helm_is_cached_by_version(tmp_path):
    from kube_offload_harness import versions

    bins = binaries.binaries(tmp_path)
    assert bins.helm == tmp_path / "bin" / f"helm-{versions.HELM}" / "helm"
    assert "helm" in bins.missing()


def test_metrics_server_is_cached_by_version_and_stamped_as_its_makefile_does(tmp_path):
    from kube_offload_harness import versions

    bins = binaries.binaries(tmp_path)
    assert bins.metrics_server == tmp_path / "bin" / f"metrics-server-{versions.METRICS_SERVER}" / "metrics-server"
    assert "metrics-server" in bins.missing()
    flags = binaries.metrics_server_ldflags("v0.9.0")
    assert "-X k8s.io/client-go/pkg/version.gitVersion=v0.9.0" in flags
    with pytest.raises(ValueError, match="metrics-server version"):
        binaries.metrics_server_ldflags("0.9")
