"""Container images as OCI archives, written here without a registry or a daemon.

The harness pushes them to the environment's local registry (registry.py) under the names
a manifest uses (``docker.io/library/busybox:1.36``, ``registry.k8s.io/pause:3.10.2``), and
the real nodes' containerd pulls them from there through its mirrors, so a pod that names
a public image runs with nothing fetched from outside. Archives are deterministic (every
mtime 0, owner root) so the same inputs give the same digests.

The pure part builds bytes (:func:`layer_tar`, :func:`oci_archive`); the thin part reads the
machine's busybox-static, the pause binary and CoreDNS (:func:`busybox_image`,
:func:`pause_image`, :func:`coredns_image`).
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from kube_offload_harness import versions

# The names manifests use; the pause one is also containerd's pinned sandbox image.
BUSYBOX_IMAGE = "docker.io/library/busybox:1.36"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10.2"  # containerd 2.4's default pinned sandbox image
COREDNS_IMAGE = f"registry.k8s.io/coredns/coredns:{versions.COREDNS}"
# Debian's Python 3.11 (the project image's runtime base, scripts/build-image.sh) under the
# name manifests use for python.org's; registry.py adds the `python3` link it lacks.
PYTHON_IMAGE = "docker.io/library/python:3.11-slim"
IMAGE_NAME_ANNOTATION = "io.containerd.image.name"  # what `ctr images import` names the image by
REF_NAME_ANNOTATION = "org.opencontainers.image.ref.name"
DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar"
CONFIG_MEDIA_TYPE = "application/vnd.oci.image.config.v1+json"
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
INDEX_MEDIA_TYPE = "application/vnd.oci.image.index.v1+json"
BUSYBOX_STATIC = Path("/bin/busybox")  # Debian's busybox-static (scripts/bootstrap.sh installs it)


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


def image_config_json(config: ImageConfig, layers: list[bytes]) -> bytes:
    body = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            key: value
            for key, value in {
                "Entrypoint": config.entrypoint, "Cmd": config.cmd, "Env": config.env,
                "User": config.user, "WorkingDir": config.workdir,
            }.items()
            if value
        },
        "rootfs": {"type": "layers", "diff_ids": [sha256(layer) for layer in layers]},
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def oci_archive(name: str, layers: list[bytes], config: ImageConfig) -> bytes:
    """An OCI image layout as a tar, the form ``ctr images import`` reads; the index
    annotation names the image (``docker.io/library/busybox:1.36``)."""
    if ":" not in name.rsplit("/", 1)[-1]:
        raise ValueError(f"image name {name!r} needs a tag")
    config_blob = image_config_json(config, layers)
    manifest = json.dumps({
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "config": {"mediaType": CONFIG_MEDIA_TYPE, "digest": sha256(config_blob), "size": len(config_blob)},
        "layers": [{"mediaType": LAYER_MEDIA_TYPE, "digest": sha256(layer), "size": len(layer)} for layer in layers],
    }, sort_keys=True, separators=(",", ":")).encode()
    index = json.dumps({
        "schemaVersion": 2,
        "mediaType": INDEX_MEDIA_TYPE,
        "manifests": [{
            "mediaType": MANIFEST_MEDIA_TYPE, "digest": sha256(manifest), "size": len(manifest),
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {IMAGE_NAME_ANNOTATION: name, REF_NAME_ANNOTATION: name.rsplit(":", 1)[1]},
        }],
    }, sort_keys=True, separators=(",", ":")).encode()
    files: dict[str, bytes] = {"oci-layout": b'{"imageLayoutVersion":"1.0.0"}', "index.json": index}
    for blob in (config_blob, manifest, *layers):
        files["blobs/sha256/" + sha256(blob).split(":", 1)[1]] = blob
    entries = [Entry("blobs", "dir", mode=0o755), Entry("blobs/sha256", "dir", mode=0o755)]
    entries += [Entry(path, data=data) for path, data in files.items()]
    return layer_tar(entries)


def base_directories() -> list[Entry]:
    """What a container's root needs before the runtime mounts /proc, /dev, /etc/hosts..."""
    dirs = ["bin", "sbin", "usr", "usr/bin", "usr/sbin", "etc", "proc", "sys", "dev", "root", "var", "run"]
    entries = [Entry(d, "dir", mode=0o755) for d in dirs]
    entries.append(Entry("tmp", "dir", mode=0o1777))
    entries.append(Entry("etc/passwd", data=b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"))
    entries.append(Entry("etc/group", data=b"root:x:0:\nnogroup:x:65534:\n"))
    return entries


def busybox_entries(busybox: bytes, applets: Iterable[str]) -> list[Entry]:
    """busybox at /bin/busybox and one symlink per applet (``busybox --list-full`` paths)."""
    entries = base_directories() + [Entry("bin/busybox", data=busybox, mode=0o755)]
    for applet in applets:
        applet = applet.strip().strip("/")
        if applet and applet != "bin/busybox":
            entries.append(Entry(applet, "symlink", target="/bin/busybox", mode=0o777))
    return entries


# --- thin I/O ---------------------------------------------------------------------------------
def busybox_image(busybox: Path = BUSYBOX_STATIC) -> bytes:
    applets = subprocess.run([str(busybox), "--list-full"], capture_output=True, text=True, check=True).stdout.split()
    layer = layer_tar(busybox_entries(busybox.read_bytes(), applets))
    return oci_archive(BUSYBOX_IMAGE, [layer], ImageConfig(cmd=["sh"]))


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
