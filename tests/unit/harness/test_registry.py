"""The environment's OCI registry and the push client, without a registry: archives are
parsed and rewritten as bytes, references mapped to repositories, configurations
rendered (the realnode tier pushes to a real registry and pulls through containerd)."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from pathlib import Path

import pytest

from kube_offload_harness import oci_image, registry
from kube_offload_harness.oci_distribution import (
    ImageError, mirror_repository, read_oci_archive, read_oci_layout, split_reference, upload_url,
)

REPO = Path(__file__).resolve().parents[3]


def _hello_archive(**kwargs) -> bytes:
    layer = oci_image.layer_tar([oci_image.Entry("hello", data=b"hi", mode=0o755)])
    return oci_image.oci_archive("docker.io/library/hello:1.0", [layer], oci_image.ImageConfig(cmd=["/hello"], **kwargs))


def _layout(files: dict[str, bytes]) -> bytes:
    return oci_image.layer_tar([oci_image.Entry(path, data=data) for path, data in files.items()])


def _blob_path(data: bytes) -> str:
    return "blobs/sha256/" + oci_image.sha256(data).split(":")[1]


def _gzipped_layout() -> tuple[bytes, bytes]:
    """A layout as buildah writes it: gzipped layers, an index without a platform."""
    layer = gzip.compress(oci_image.layer_tar([oci_image.Entry("x", data=b"x")]), mtime=0)
    config = json.dumps({"rootfs": {"type": "layers", "diff_ids": ["sha256:0"]}, "history": [{"created_by": "x"}]}).encode()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": oci_image.MANIFEST_MEDIA_TYPE,
        "config": {"mediaType": oci_image.CONFIG_MEDIA_TYPE, "digest": oci_image.sha256(config), "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": oci_image.sha256(layer), "size": len(layer)}],
    }).encode()
    index = json.dumps({"schemaVersion": 2, "manifests": [
        {"mediaType": oci_image.MANIFEST_MEDIA_TYPE, "digest": oci_image.sha256(manifest), "size": len(manifest)}]}).encode()
    files = {"oci-layout": b"{}", "index.json": index, _blob_path(config): config, _blob_path(manifest): manifest,
             _blob_path(layer): layer}
    return _layout(files), manifest


# --- reading archives ---------------------------------------------------------------------
def test_an_oci_image_archive_is_read_with_its_manifest_bytes_and_blobs():
    image = read_oci_archive(_hello_archive())
    body = json.loads(image.manifest)
    assert image.media_type == oci_image.MANIFEST_MEDIA_TYPE
    assert set(image.blobs) == {body["config"]["digest"], body["layers"][0]["digest"]}
    assert [d["digest"] for d in image.descriptors()] == [body["config"]["digest"], body["layers"][0]["digest"]]


def test_gzipped_layers_and_an_index_without_platform_are_read_as_they_are():
    archive, manifest = _gzipped_layout()
    image = read_oci_archive(archive)
    assert image.manifest == manifest  # pushed byte for byte: the digest stays the archive's
    assert image.descriptors()[1]["mediaType"].endswith("tar+gzip")


def test_a_blob_that_does_not_match_its_digest_is_refused():
    files = {}
    with tarfile.open(fileobj=io.BytesIO(_hello_archive())) as tar:
        for member in tar:
            if member.isfile():
                files[member.name] = tar.extractfile(member).read()
    layer_path = next(p for p, d in files.items() if p.startswith("blobs/") and d.startswith(b"hello"))
    files[layer_path] = files[layer_path][:100]
    with pytest.raises(ImageError, match="does not match its digest"):
        read_oci_archive(_layout(files), what="hello")


def test_an_archive_without_index_json_is_refused_with_what_to_do():
    with pytest.raises(ImageError, match="oci-archive"):
        read_oci_archive(_layout({"manifest.json": b"[]"}))


def _write_layout(directory: Path, images: dict[str, list[bytes]]) -> None:
    """A layout directory of several images by name (layers given as plain tars)."""
    directory.joinpath("blobs", "sha256").mkdir(parents=True)
    entries = []
    for name, tars in images.items():
        layers = [oci_image.plain_layer(tar) for tar in tars]
        config = oci_image.image_config_json(oci_image.ImageConfig(), [layer.diff_id for layer in layers])
        manifest = oci_image.image_manifest(config, layers)
        for blob in (config, manifest, *tars):
            (directory / oci_image.blob_path(blob)).write_bytes(blob)
        entries.append(oci_image.index_entry(manifest, name))
    (directory / "index.json").write_bytes(oci_image.index_json(entries))


def test_a_layout_directory_gives_every_named_image_with_shared_blobs(tmp_path):
    shared = oci_image.layer_tar([oci_image.Entry("lib", data=b"shared")])
    own = oci_image.layer_tar([oci_image.Entry("bin", data=b"own")])
    _write_layout(tmp_path, {"docker.io/library/a:1": [shared], "docker.io/library/b:1": [shared, own]})
    images = dict(read_oci_layout(tmp_path))
    assert set(images) == {"docker.io/library/a:1", "docker.io/library/b:1"}
    assert images["docker.io/library/a:1"].blobs[oci_image.sha256(shared)] == shared
    assert [d["digest"] for d in images["docker.io/library/b:1"].descriptors()[1:]] == [oci_image.sha256(shared), oci_image.sha256(own)]


def test_a_layout_blob_that_does_not_match_its_digest_is_refused(tmp_path):
    layer = oci_image.layer_tar([oci_image.Entry("x", data=b"x")])
    _write_layout(tmp_path, {"docker.io/library/a:1": [layer]})
    (tmp_path / oci_image.blob_path(layer)).write_bytes(layer[:10])
    with pytest.raises(ImageError, match="does not match its digest"):
        read_oci_layout(tmp_path)
    with pytest.raises(ImageError, match="not an OCI image layout"):
        read_oci_layout(tmp_path / "elsewhere")


# --- references ---------------------------------------------------------------------------
@pytest.mark.parametrize("image, expected", [
    ("busybox:1.36", ("docker.io", "library/busybox", "1.36")),
    ("docker.io/library/busybox:1.36", ("docker.io", "library/busybox", "1.36")),
    ("bitnami/kubectl:1.37", ("docker.io", "bitnami/kubectl", "1.37")),
    ("registry.k8s.io/coredns/coredns:v1.15.0", ("registry.k8s.io", "coredns/coredns", "v1.15.0")),
    ("ghcr.io/kube-offload/kube-offload:0.1.0", ("ghcr.io", "kube-offload/kube-offload", "0.1.0")),
    ("localhost:5000/app:dev", ("localhost:5000", "app", "dev")),
])
def test_references_are_normalized_as_containerd_does(image, expected):
    assert split_reference(image) == expected


@pytest.mark.parametrize("image", ["busybox", "localhost:5000/app", "ghcr.io/x/y"])
def test_a_reference_without_tag_is_refused(image):
    with pytest.raises(ImageError, match="needs a tag"):
        split_reference(image)


def test_each_upstream_has_its_own_prefix_so_same_names_never_collide():
    assert mirror_repository("busybox:1.36") == ("docker.io/library/busybox", "1.36")
    assert mirror_repository("quay.io/library/busybox:1.36") == ("quay.io/library/busybox", "1.36")


@pytest.mark.parametrize("location, expected", [
    ("/v2/r/blobs/uploads/abc?_state=x", "http://127.0.0.1:5000/v2/r/blobs/uploads/abc?_state=x&digest=sha256:1"),
    ("http://127.0.0.1:5000/v2/r/blobs/uploads/abc", "http://127.0.0.1:5000/v2/r/blobs/uploads/abc?digest=sha256:1"),
])
def test_upload_url_completes_relative_and_absolute_locations(location, expected):
    assert upload_url(location, "http://127.0.0.1:5000", "sha256:1") == expected


# --- the registry and what fills it --------------------------------------------------------
def test_registry_config_listens_on_loopback_only_and_stores_under_the_state_dir():
    config = registry.registry_config(storage=Path("/state/registry/storage"), port=5123)
    assert config["version"] == 0.1
    assert config["http"]["addr"] == "127.0.0.1:5123"
    assert "debug" not in config["http"] and "tls" not in config["http"]
    assert config["storage"]["filesystem"] == {"rootdirectory": "/state/registry/storage"}
    assert config["log"]["accesslog"] == {"disabled": False}  # the tier reads the pulls off it


def test_registry_env_turns_tracing_export_off_and_drops_stray_registry_settings():
    env = registry.registry_env({"PATH": "/bin", "REGISTRY_HTTP_ADDR": "0.0.0.0:5000"})
    assert env["OTEL_TRACES_EXPORTER"] == "none"
    assert "REGISTRY_HTTP_ADDR" not in env and env["PATH"] == "/bin"


def test_chart_references_are_oci_under_charts():
    assert registry.chart_reference(5123, "kube-offload-local") == "oci://127.0.0.1:5123/charts/kube-offload-local"
    with pytest.raises(ValueError, match="unknown chart"):
        registry.chart_reference(5123, "other")


def test_the_project_image_takes_the_charts_default_name():
    import yaml

    for chart in registry.CHARTS:
        values = yaml.safe_load((REPO / "charts" / chart / "values.yaml").read_text())
        assert registry.project_image_name(values) == "ghcr.io/kube-offload/kube-offload:0.1.0"
    assert registry.chart_version(REPO / "charts" / "kube-offload-local") == "0.1.0"


@pytest.mark.parametrize("archive, sources, expected", [
    (None, [1.0], True),
    (10.0, [1.0, 9.0], False),
    (10.0, [1.0, 11.0], True),
])
def test_the_project_image_is_rebuilt_when_missing_or_older_than_a_source(archive, sources, expected):
    assert registry.stale(archive, sources) is expected


def test_image_sources_are_the_recipe_and_the_product_packages_only():
    import tomllib

    packages = registry.product_packages(tomllib.loads((REPO / "pyproject.toml").read_text()))
    assert "webhook" in packages and "kube_offload" in packages and "kube_offload_harness" not in packages
    sources = {p.relative_to(REPO).parts[0] for p in registry.image_sources(REPO, packages)}
    assert {"Dockerfile", "pyproject.toml", "scripts", "webhook"} <= sources
    assert not sources & {"harness", "tests", "docs", "charts"}
