"""Container images as OCI archives, written here without a registry or a daemon.

The harness pushes them to the environment's local registry (registry.py) under the names
a manifest uses (``registry.k8s.io/pause:3.10.2``, ``docker.io/library/busybox:1.36``), and
the real nodes' containerd pulls them from there through its mirrors, so a pod that names
a public image runs with nothing fetched from outside. Archives are deterministic (every
mtime 0, owner root unless an entry says otherwise) so the same inputs give the same digests.

The pure part builds bytes (:func:`layer_tar`, :func:`image_config_json`,
:func:`image_manifest`, :func:`oci_archive`); the thin part reads the pause binary and
CoreDNS (:func:`pause_image`, :func:`coredns_image`). The everyday images users name
(busybox, alpine, python, nginx, debian) are stand-ins made from Debian packages
(standin_images.py), written with the same functions.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from kube_offload_harness import versions

# The names manifests use; the pause one is also containerd's pinned sandbox image.
PAUSE_IMAGE = "registry.k8s.io/pause:3.10.2"  # containerd 2.4's default pinned sandbox image
COREDNS_IMAGE = f"registry.k8s.io/coredns/coredns:{versions.COREDNS}"
IMAGE_NAME_ANNOTATION = "io.containerd.image.name"  # what `ctr images import` names the image by
REF_NAME_ANNOTATION = "org.opencontainers.image.ref.name"
DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar"
GZIP_LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"
CONFIG_MEDIA_TYPE = "application/vnd.oci.image.config.v1+json"
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
INDEX_MEDIA_TYPE = "application/vnd.oci.image.index.v1+json"
OCI_LAYOUT = b'{"imageLayoutVersion":"1.0.0"}'  # the ``oci-layout`` file of an image layout


@dataclass(frozen=True)
class Entry:
    """One path in a layer: a directory, a regular file (``data``) or a symlink (``target``)."""

    path: str
    kind: str = "file"  # "file" | "dir" | "symlink"
    data: bytes = b""
    mode: int = 0o644
    target: str = ""
    uid: int = 0
    gid: int = 0


@dataclass(frozen=True)
class ImageConfig:
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    env: list[str] = field(default_factory=lambda: [DEFAULT_PATH])
    user: str = ""
    workdir: str = "/"
    exposed_ports: list[str] = field(default_factory=list)  # ["80/tcp"]
    stop_signal: str = ""  # "SIGQUIT": what containerd sends on stop instead of SIGTERM
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Layer:
    """A layer as the registry stores it (``blob``, maybe gzipped) and as the image config
    names it (``diff_id``: the digest of the uncompressed tar)."""

    blob: bytes
    diff_id: str
    media_type: str = LAYER_MEDIA_TYPE

    def descriptor(self) -> dict:
        return {"mediaType": self.media_type, "digest": sha256(self.blob), "size": len(self.blob)}


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def layer_tar(entries: Iterable[Entry]) -> bytes:
    """An uncompressed layer: parents before children, nothing time- or host-dependent."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in sorted(entries, key=lambda e: e.path.strip("/").split("/")):
            info = tarfile.TarInfo(entry.path.strip("/"))
            info.mtime = 0
            info.uid, info.gid = entry.uid, entry.gid
            info.mode = entry.mode
            if entry.kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif entry.kind == "symlink":
                info.type = tarfile.SYMTYPE
                info.linkname = entry.target
                tar.addfile(info)
            elif entry.kind == "file":
                info.size = len(entry.data)
                tar.addfile(info, io.BytesIO(entry.data))
            else:
                raise ValueError(f"unknown entry kind {entry.kind!r} for {entry.path}")
    return buffer.getvalue()


def plain_layer(tar: bytes) -> Layer:
    return Layer(tar, sha256(tar))


def gzip_layer(tar: bytes, *, level: int = 6) -> Layer:
    """Gzipped as buildah and docker push them: no name and mtime 0 in the gzip header, so
    the same tar always gives the same blob."""
    return Layer(gzip.compress(tar, compresslevel=level, mtime=0), sha256(tar), GZIP_LAYER_MEDIA_TYPE)


def image_config_json(config: ImageConfig, diff_ids: list[str]) -> bytes:
    body = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            key: value
            for key, value in {
                "Entrypoint": config.entrypoint, "Cmd": config.cmd, "Env": config.env,
                "User": config.user, "WorkingDir": config.workdir,
                "ExposedPorts": {port: {} for port in config.exposed_ports},
                "StopSignal": config.stop_signal, "Labels": config.labels,
            }.items()
            if value
        },
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def image_manifest(config_blob: bytes, layers: list[Layer]) -> bytes:
    return json.dumps({
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "config": {"mediaType": CONFIG_MEDIA_TYPE, "digest": sha256(config_blob), "size": len(config_blob)},
        "layers": [layer.descriptor() for layer in layers],
    }, sort_keys=True, separators=(",", ":")).encode()


def index_entry(manifest: bytes, name: str) -> dict:
    """``index.json``'s descriptor of one image, annotated with its full name (what
    ``ctr images import`` and registry.py name it by) and its tag."""
    if ":" not in name.rsplit("/", 1)[-1]:
        raise ValueError(f"image name {name!r} needs a tag")
    return {
        "mediaType": MANIFEST_MEDIA_TYPE, "digest": sha256(manifest), "size": len(manifest),
        "platform": {"architecture": "amd64", "os": "linux"},
        "annotations": {IMAGE_NAME_ANNOTATION: name, REF_NAME_ANNOTATION: name.rsplit(":", 1)[1]},
    }


def index_json(entries: list[dict]) -> bytes:
    return json.dumps({"schemaVersion": 2, "mediaType": INDEX_MEDIA_TYPE, "manifests": entries},
                      sort_keys=True, separators=(",", ":")).encode()


def oci_archive(name: str, layers: list[bytes], config: ImageConfig) -> bytes:
    """An OCI image layout as a tar, the form ``ctr images import`` reads; the index
    annotation names the image (``registry.k8s.io/pause:3.10.2``)."""
    plain = [plain_layer(layer) for layer in layers]
    config_blob = image_config_json(config, [layer.diff_id for layer in plain])
    manifest = image_manifest(config_blob, plain)
    files: dict[str, bytes] = {"oci-layout": OCI_LAYOUT, "index.json": index_json([index_entry(manifest, name)])}
    for blob in (config_blob, manifest, *layers):
        files[blob_path(blob)] = blob
    entries = [Entry("blobs", "dir", mode=0o755), Entry("blobs/sha256", "dir", mode=0o755)]
    entries += [Entry(path, data=data) for path, data in files.items()]
    return layer_tar(entries)


def blob_path(blob: bytes) -> str:
    """Where an OCI image layout keeps ``blob``: ``blobs/sha256/<hex>``."""
    return "blobs/sha256/" + sha256(blob).split(":", 1)[1]


def base_directories() -> list[Entry]:
    """What a container's root needs before the runtime mounts /proc, /dev, /etc/hosts..."""
    dirs = ["bin", "sbin", "usr", "usr/bin", "usr/sbin", "etc", "proc", "sys", "dev", "root", "var", "run"]
    entries = [Entry(d, "dir", mode=0o755) for d in dirs]
    entries.append(Entry("tmp", "dir", mode=0o1777))
    entries.append(Entry("etc/passwd", data=b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"))
    entries.append(Entry("etc/group", data=b"root:x:0:\nnogroup:x:65534:\n"))
    return entries


# --- thin I/O ---------------------------------------------------------------------------------
def pause_image(pause: Path) -> bytes:
    """The sandbox image: Kubernetes' own pause.c, built by binaries.py; run as 65535 as
    upstream's image does."""
    layer = layer_tar([Entry("pause", data=pause.read_bytes(), mode=0o755)])
    return oci_archive(PAUSE_IMAGE, [layer], ImageConfig(entrypoint=["/pause"], user="65535:65535"))


def coredns_image(coredns: Path) -> bytes:
    """Cluster DNS: the static CoreDNS binary built by binaries.py at /coredns, as the
    upstream image has it (entrypoint /coredns; the Corefile comes from its pod's args)."""
    layer = layer_tar([Entry("coredns", data=coredns.read_bytes(), mode=0o755)])
    return oci_archive(COREDNS_IMAGE, [layer], ImageConfig(entrypoint=["/coredns"]))
