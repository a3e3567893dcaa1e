"""Images into an OCI registry without skopeo or a daemon: read an OCI image layout (the
tar ``buildah push oci-archive:`` and :mod:`oci_image` write), push it over the OCI
distribution API (blob HEAD, blob upload, manifest PUT) with urllib.

Pure: :func:`read_oci_archive`, :func:`mirror_repository`, :func:`upload_url`. Thin:
:func:`read_oci_layout` (a layout directory of many images: the stand-ins),
:class:`RegistryClient` (HTTP, never through a proxy: the registry is on the machine's
loopback).

The manifest and every blob are pushed byte for byte, so an image keeps the digests its
archive gave it; layers may be gzipped (``...layer.v1.tar+gzip``, buildah's) or plain
tars (``...layer.v1.tar``, oci_image.py's): the registry stores both alike and containerd
unpacks both.
"""

from __future__ import annotations

import io
import json
import tarfile
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urljoin

from kube_offload_harness.oci_image import IMAGE_NAME_ANNOTATION, INDEX_MEDIA_TYPE, sha256

DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
# containerd's default registry and the repository prefix a one-word name gets there
DEFAULT_REGISTRY = "docker.io"
OFFICIAL_PREFIX = "library/"


class ImageError(ValueError):
    """An archive or image reference this module cannot use; the message names it."""


@dataclass(frozen=True)
class OciImage:
    """One single-platform image: its manifest as bytes (pushed as is) and the blobs it
    names (config and layers) by digest."""

    manifest: bytes
    media_type: str
    blobs: dict[str, bytes] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        return sha256(self.manifest)

    def descriptors(self) -> list[dict]:
        body = json.loads(self.manifest)
        return [body["config"], *body["layers"]]


def _platform_ok(descriptor: dict) -> bool:
    platform = descriptor.get("platform")
    return platform is None or (platform.get("os"), platform.get("architecture")) == ("linux", "amd64")


def read_oci_layout(directory: Path) -> list[tuple[str, OciImage]]:
    """Every image an OCI image layout directory names (``index.json`` entries annotated
    with ``io.containerd.image.name``), each blob read once and checked against its digest."""
    what = str(directory)
    if not (directory / "index.json").exists():
        raise ImageError(f"{what}: no index.json; not an OCI image layout")
    blobs: dict[str, bytes] = {}

    def blob(digest: str) -> bytes:
        if digest not in blobs:
            algorithm, _, hexdigest = digest.partition(":")
            path = directory / "blobs" / algorithm / hexdigest
            if not path.exists():
                raise ImageError(f"{what}: blob {digest} named but missing")
            blobs[digest] = path.read_bytes()
            if sha256(blobs[digest]) != digest:
                raise ImageError(f"{what}: blob {digest} does not match its digest")
        return blobs[digest]

    images = []
    for entry in json.loads((directory / "index.json").read_text())["manifests"]:
        name = (entry.get("annotations") or {}).get(IMAGE_NAME_ANNOTATION)
        if not name:
            raise ImageError(f"{what}: index.json entry {entry['digest']} has no {IMAGE_NAME_ANNOTATION} annotation")
        manifest = blob(entry["digest"])
        body = json.loads(manifest)
        images.append((name, OciImage(manifest=manifest, media_type=body.get("mediaType") or entry["mediaType"],
                                      blobs={d["digest"]: blob(d["digest"]) for d in [body["config"], *body["layers"]]})))
    return images


def read_oci_archive(data: bytes, *, what: str = "archive") -> OciImage:
    """The linux/amd64 image of an OCI image layout in a tar. Every blob is checked
    against its digest (a truncated archive fails here, not in containerd)."""
    files: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for member in tar:
            if member.isfile():
                extracted = tar.extractfile(member)
                files[member.name.lstrip("./")] = extracted.read() if extracted else b""
    if "index.json" not in files:
        raise ImageError(f"{what}: no index.json; not an OCI image layout (buildah push ... oci-archive:<file>)")

    def blob(digest: str) -> bytes:
        algorithm, _, hexdigest = digest.partition(":")
        content = files.get(f"blobs/{algorithm}/{hexdigest}")
        if content is None:
            raise ImageError(f"{what}: blob {digest} named but missing")
        if sha256(content) != digest:
            raise ImageError(f"{what}: blob {digest} does not match its digest (truncated archive?)")
        return content

    index = json.loads(files["index.json"])
    candidates = [d for d in index.get("manifests", []) if _platform_ok(d)]
    # A nested index (a multi-platform image): one level down to the linux/amd64 manifest.
    while len(candidates) == 1 and candidates[0]["mediaType"] in (INDEX_MEDIA_TYPE, DOCKER_MANIFEST_LIST):
        nested = json.loads(blob(candidates[0]["digest"]))
        candidates = [d for d in nested.get("manifests", []) if _platform_ok(d)]
    if len(candidates) != 1:
        raise ImageError(f"{what}: {len(candidates)} linux/amd64 manifests in index.json; expected exactly one")
    manifest = blob(candidates[0]["digest"])
    body = json.loads(manifest)
    media_type = body.get("mediaType") or candidates[0]["mediaType"]
    blobs = {d["digest"]: blob(d["digest"]) for d in [body["config"], *body["layers"]]}
    return OciImage(manifest=manifest, media_type=media_type, blobs=blobs)


def split_reference(image: str) -> tuple[str, str, str]:
    """``ghcr.io/org/app:1.0`` -> (``ghcr.io``, ``org/app``, ``1.0``), with containerd's
    (and Docker's) normalization: no registry means docker.io, and a one-word Docker Hub
    name is an official image under ``library/``. A tag is required (no digests: the
    registry is filled by name)."""
    name, _, tag = image.rpartition(":")
    if not name or "/" in tag or not tag:
        raise ImageError(f"image {image!r} needs a tag (name:tag)")
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        registry, path = first, rest
    else:
        registry, path = DEFAULT_REGISTRY, name
    if registry == DEFAULT_REGISTRY and "/" not in path:
        path = OFFICIAL_PREFIX + path
    return registry, path, tag


def mirror_repository(image: str) -> tuple[str, str]:
    """Where the one local registry keeps ``image``: the upstream registry's name is the
    repository's first path component (``docker.io/library/busybox``), so that
    same-named repositories of two upstreams never meet. containerd's hosts.toml for that
    upstream points at ``/v2/<upstream>`` (real_node_config.registry_hosts_toml)."""
    registry, path, tag = split_reference(image)
    return f"{registry}/{path}", tag


def upload_url(location: str, base_url: str, digest: str) -> str:
    """The URL that completes a monolithic upload: the registry's Location (relative or
    absolute, maybe with its own query) plus ``digest``."""
    url = urljoin(base_url, location)
    return f"{url}{'&' if '?' in url else '?'}digest={digest}"


class RegistryClient:
    """The OCI distribution API of one registry at ``base_url`` (``http://127.0.0.1:<port>``)."""

    def __init__(self, base_url: str, *, timeout: float = 120) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        # Never through the machine's HTTP proxy: the registry is on loopback.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def _request(self, method: str, url: str, *, data: bytes | None = None,
                 headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                return response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as error:
            return error.code, dict(error.headers), error.read()

    def ping(self) -> bool:
        try:
            return self._request("GET", f"{self.base_url}/v2/")[0] == 200
        except OSError:
            return False

    def has_blob(self, repository: str, digest: str) -> bool:
        return self._request("HEAD", f"{self.base_url}/v2/{repository}/blobs/{digest}")[0] == 200

    def upload_blob(self, repository: str, digest: str, content: bytes) -> None:
        status, headers, body = self._request("POST", f"{self.base_url}/v2/{repository}/blobs/uploads/")
        location = headers.get("Location")
        if status != 202 or not location:
            raise ImageError(f"starting an upload to {repository}: HTTP {status} {body[:300]!r}")
        status, _, body = self._request("PUT", upload_url(location, self.base_url, digest), data=content,
                                        headers={"Content-Type": "application/octet-stream"})
        if status != 201:
            raise ImageError(f"uploading {digest} to {repository}: HTTP {status} {body[:300]!r}")

    def put_manifest(self, repository: str, reference: str, manifest: bytes, media_type: str) -> str:
        status, headers, body = self._request("PUT", f"{self.base_url}/v2/{repository}/manifests/{reference}",
                                              data=manifest, headers={"Content-Type": media_type})
        if status != 201:
            raise ImageError(f"putting the manifest {repository}:{reference}: HTTP {status} {body[:300]!r}")
        return headers.get("Docker-Content-Digest", sha256(manifest))

    def mount_blob(self, repository: str, digest: str, source: str) -> bool:
        """Cross-repository mount: ``digest`` of ``source`` becomes ``repository``'s too,
        no bytes sent (a layer the stand-ins share). False if the registry would rather
        take an upload (it then opened one, which is left to expire)."""
        status, _, _ = self._request("POST", f"{self.base_url}/v2/{repository}/blobs/uploads/?mount={digest}&from={source}")
        return status == 201

    def push(self, image: OciImage, repository: str, tag: str, *, pushed: dict[str, str] | None = None) -> int:
        """Blobs first (those the registry lacks), then the manifest under ``tag``;
        returns how many bytes were uploaded. ``pushed`` (digest -> repository, kept by
        the caller across pushes) lets a blob already in another repository be mounted."""
        pushed = {} if pushed is None else pushed
        sent = 0
        for descriptor in image.descriptors():
            digest = descriptor["digest"]
            if self.has_blob(repository, digest):
                pass
            elif digest in pushed and self.mount_blob(repository, digest, pushed[digest]):
                pass
            else:
                self.upload_blob(repository, digest, image.blobs[digest])
                sent += len(image.blobs[digest])
            pushed.setdefault(digest, repository)
        self.put_manifest(repository, tag, image.manifest, image.media_type)
        return sent

    def catalog(self) -> list[str]:
        status, _, body = self._request("GET", f"{self.base_url}/v2/_catalog?n=1000")
        if status != 200:
            raise ImageError(f"listing the catalog: HTTP {status}")
        return json.loads(body).get("repositories") or []

    def tags(self, repository: str) -> list[str]:
        status, _, body = self._request("GET", f"{self.base_url}/v2/{repository}/tags/list")
        return (json.loads(body).get("tags") or []) if status == 200 else []
