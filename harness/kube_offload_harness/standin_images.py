"""Builds the stand-in images (standin_recipe.py says what they hold) and keeps them in the
cache (docs/real-nodes.md, "Stand-in images").

Cold: one mmdebstrap download of every package any stand-in needs (about 35 MB of .deb);
each layer's files read from its packages' .deb files, written once as a deterministic
gzipped tar; every image's config and manifest; all of it one OCI image layout directory,
``~/.cache/kube-offload/images/standins-<key>/`` (``index.json`` names every image, each
blob is there once, ``standins.json`` lists each layer's packages with their versions).
``<key>`` is the digest of the four modules that decide the content (the recipe, this
one, debian_packages.py, oci_image.py), so a change to any of them rebuilds and a warm run
only reads the directory; the three most recently used builds stay (checkouts of other
versions on the machine keep theirs). ``KUBE_OFFLOAD_IMAGE_REFRESH=1`` (as for build-image.sh's bases)
rebuilds anyway, to take Debian's updates. Needs root (mmdebstrap's root mode, a chroot to
ask busybox for its applets), as the real nodes do.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterator

from kube_offload_harness import debian_packages, oci_image, standin_recipe
from kube_offload_harness.debian_packages import Package
from kube_offload_harness.oci_distribution import OciImage, read_oci_layout
from kube_offload_harness.standin_recipe import LAYERS, SKIP, STANDINS, Context, LayerRecipe

Say = Callable[[str], None]
REFRESH = "KUBE_OFFLOAD_IMAGE_REFRESH"
SUMMARY = "standins.json"
KEEP = 3  # builds of other recipes kept (the most recently used)
# Level 1: 77 MB of layers in 2 s to 30 MB; level 6 took 6 s for 27 MB (measured here, loaded).
GZIP_LEVEL = 1


class StandinImageError(RuntimeError):
    """The stand-ins could not be built; the message says why and what to do."""


# --- pure -------------------------------------------------------------------------------------
def recipe_key(sources: list[bytes]) -> str:
    digest = hashlib.sha256()
    for source in sources:
        digest.update(hashlib.sha256(source).digest())
    return digest.hexdigest()[:16]


def layer_packages(packages: dict[str, Package]) -> dict[str, list[str]]:
    """Each layer's packages: its own and their dependencies, less those of the layers it
    sits on."""
    by_name = {layer.name: layer for layer in LAYERS}

    def closure(layer: LayerRecipe) -> set[str]:
        return debian_packages.closure(layer.packages, packages, SKIP) if layer.packages else set()

    result = {}
    for layer in LAYERS:
        below = set().union(*(closure(by_name[name]) for name in layer.on))
        result[layer.name] = sorted(closure(layer) - below)
    return result


def layout_files(layers: dict[str, oci_image.Layer], key: str) -> dict[str, bytes]:
    """The OCI image layout of every stand-in: ``oci-layout``, ``index.json`` (one entry
    per name) and ``blobs/sha256/*``, each layer once."""
    files: dict[str, bytes] = {"oci-layout": oci_image.OCI_LAYOUT}
    entries = []
    for standin in STANDINS:
        stack = [layers[name] for name in standin.layers]
        labelled = replace(standin.config, labels={**standin.config.labels, **standin_recipe.image_labels(standin, key)})
        config_blob = oci_image.image_config_json(labelled, [layer.diff_id for layer in stack])
        manifest = oci_image.image_manifest(config_blob, stack)
        for blob in (config_blob, manifest, *(layer.blob for layer in stack)):
            files[oci_image.blob_path(blob)] = blob
        entries += [oci_image.index_entry(manifest, name) for name in standin.full_names]
    files["index.json"] = oci_image.index_json(entries)
    return files


# --- thin I/O ---------------------------------------------------------------------------------
def images_root() -> Path:
    from kube_offload_harness.binaries import cache_root

    return cache_root() / "images"


def current_key() -> str:
    modules = (standin_recipe, debian_packages, oci_image)
    return recipe_key([Path(module.__file__ or "").read_bytes() for module in modules] + [Path(__file__).read_bytes()])


def build(say: Say, *, root: Path | None = None) -> Path:
    """The directory of the stand-ins' OCI image layout, built if the cache lacks it."""
    root = root or images_root()
    key = current_key()
    directory = root / f"standins-{key}"
    refresh = os.environ.get(REFRESH) == "1"
    if (directory / "index.json").exists() and not refresh:
        os.utime(directory)  # in use: the last to be pruned
        return directory
    root.mkdir(parents=True, exist_ok=True)
    with _lock(root / "standins.lock", say):
        if (directory / "index.json").exists() and not refresh:
            return directory  # another environment built it while this one waited
        started = time.monotonic()
        work = Path(tempfile.mkdtemp(prefix=".standins-", dir=root))
        try:
            layout = _build(work, key, say)
            summary = json.loads((layout / SUMMARY).read_text())
            summary["built_seconds"] = round(time.monotonic() - started, 1)
            (layout / SUMMARY).write_text(json.dumps(summary, indent=1, sort_keys=True))
            if directory.exists():
                shutil.rmtree(directory)
            os.rename(layout, directory)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        # Checkouts of other versions (worktrees, branches) keep theirs: only the oldest go.
        for stale in sorted(root.glob("standins-*"), key=lambda path: path.stat().st_mtime)[:-KEEP]:
            shutil.rmtree(stale, ignore_errors=True)
        say(f"- stand-in images: built in {time.monotonic() - started:.0f}s, {_size(directory) / 1e6:.0f} MB in {directory}")
    return directory


def load(directory: Path) -> list[tuple[str, OciImage]]:
    """Every stand-in by full name (one entry per tag; tags of one image share its blobs)."""
    return read_oci_layout(directory)


def _build(work: Path, key: str, say: Say) -> Path:
    standin_recipe.check_recipe()
    roots = sorted({package for layer in LAYERS for package in layer.packages})
    say(f"- stand-in images (recipe {key}): fetching {len(roots)} Debian {debian_packages.SUITE} packages and their "
        "dependencies with mmdebstrap")
    started = time.monotonic()
    rootfs = work / "rootfs"
    packages = debian_packages.download(roots, rootfs=rootfs)
    downloaded = sum(package.deb.stat().st_size for package in packages.values())
    say(f"  {len(packages)} packages, {downloaded / 1e6:.0f} MB, in {time.monotonic() - started:.0f}s")
    applets = _busybox_applets(rootfs)
    per_layer = layer_packages(packages)
    names = [layer.name for layer in LAYERS]
    with ThreadPoolExecutor(max_workers=2) as pool:  # dpkg-deb and zlib run outside the GIL
        layers = dict(zip(names, pool.map(lambda name: _layer(name, per_layer[name], packages, applets), names), strict=True))
    for layer in LAYERS:
        tar_size, blob = layers[layer.name][1], layers[layer.name][0].blob
        say(f"  layer {layer.name}: {len(per_layer[layer.name])} packages, {tar_size / 1e6:.1f} MB "
            f"({len(blob) / 1e6:.1f} MB gzipped)")
    layout = work / "layout"
    for path, data in layout_files({name: built[0] for name, built in layers.items()}, key).items():
        target = layout / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    summary = {
        "key": key, "suite": debian_packages.SUITE,
        "layers": {name: {"packages": {p: packages[p].version for p in per_layer[name]}, "tar_bytes": built[1],
                          "digest": oci_image.sha256(built[0].blob), "blob_bytes": len(built[0].blob)}
                   for name, built in layers.items()},
        "images": {standin.names[0]: {"names": list(standin.names), "layers": list(standin.layers),
                                      "bytes": sum(len(layers[name][0].blob) for name in standin.layers)}
                   for standin in STANDINS},
    }
    (layout / SUMMARY).write_text(json.dumps(summary, indent=1, sort_keys=True))
    return layout


def _layer(name: str, names: list[str], packages: dict[str, Package], applets: tuple[str, ...]) -> tuple[oci_image.Layer, int]:
    recipe = next(layer for layer in LAYERS if layer.name == name)
    files = [item for package in names for item in debian_packages.read_files(packages[package])]
    context = Context(files={item.path: item for item in files}, applets=applets if name == "busybox" else ())
    tar = oci_image.layer_tar(standin_recipe.layer_entries(recipe, files, standin_recipe.extra_entries(name, context)))
    return oci_image.gzip_layer(tar, level=GZIP_LEVEL), len(tar)


def _busybox_applets(rootfs: Path) -> tuple[str, ...]:
    """Where Debian's busybox puts each applet (``busybox --list-full``), asked of the
    busybox just unpacked (in a chroot: it needs its own glibc)."""
    result = subprocess.run(["chroot", str(rootfs), "/bin/busybox", "--list-full"], capture_output=True, text=True,
                            timeout=60, check=False)
    if result.returncode != 0:
        raise StandinImageError(f"busybox --list-full failed in {rootfs} (exit {result.returncode}): {result.stderr.strip()}")
    return tuple(result.stdout.split())


@contextmanager
def _lock(path: Path, say: Say) -> Iterator[None]:
    """One build per machine at a time: environments coming up together wait for the
    first one's build instead of running mmdebstrap each."""
    with open(path, "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say("- stand-in images: another build is running; waiting for it")
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _size(directory: Path) -> int:
    return sum(path.stat().st_size for path in directory.rglob("*") if path.is_file())
