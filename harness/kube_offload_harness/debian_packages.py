"""Debian packages, the raw material of the stand-in images (standin_images.py): fetched
with mmdebstrap from Debian's archive, as scripts/build-image.sh fetches the project
image's bases, and read straight from the ``.deb`` files.

One mmdebstrap run downloads every package any stand-in needs (apt resolves their
dependencies once); each layer then takes the files of its own packages. Packages are
extracted, never installed: no maintainer script runs, so whatever a layer needs that a
script would have made, the layer makes itself.

Pure: :func:`parse_relations`, :func:`closure`, :func:`merged_usr_path`, :func:`symlink_target`. Thin:
:func:`download` (mmdebstrap, as root), :func:`read_control` and :func:`read_files`
(dpkg-deb).
"""

from __future__ import annotations

import io
import os
import posixpath
import re
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping

SUITE = "bookworm"
MIRROR = os.environ.get("DEBIAN_MIRROR", "http://deb.debian.org/debian")  # the variables build-image.sh reads
SECURITY_MIRROR = os.environ.get("DEBIAN_SECURITY_MIRROR", "http://deb.debian.org/debian-security")
# Debian 12 keeps files under /bin, /sbin, /lib and /lib64 in its packages while its
# systems (and its official images) have those as links into /usr: merged /usr.
MERGED_DIRS = ("bin", "sbin", "lib", "lib64")


class DebianPackageError(RuntimeError):
    """A package could not be fetched or read, or a dependency is missing; the message
    says which and what to do."""


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    depends: tuple[tuple[str, ...], ...]  # Depends and Pre-Depends: each an OR of names
    provides: tuple[str, ...]
    deb: Path


@dataclass(frozen=True)
class File:
    """One path of a package's data, ``path`` already merged into /usr."""

    path: str
    kind: str  # "file" | "dir" | "symlink"
    mode: int
    uid: int
    gid: int
    data: bytes = b""
    target: str = ""


# --- pure -----------------------------------------------------------------------------------------
def parse_relations(field: str) -> tuple[tuple[str, ...], ...]:
    """``"libc6 (>= 2.34), debconf (>= 0.5) | debconf-2.0, python3:any"`` ->
    ``(("libc6",), ("debconf", "debconf-2.0"), ("python3",))``: versions and architecture
    qualifiers dropped (apt already chose versions that fit together)."""
    groups = []
    for group in field.split(","):
        names = tuple(re.split(r"[\s(:\[]", alternative.strip(), maxsplit=1)[0] for alternative in group.split("|"))
        if any(names):
            groups.append(tuple(name for name in names if name))
    return tuple(groups)


def closure(roots: tuple[str, ...], packages: Mapping[str, Package], skip: Mapping[str, str]) -> set[str]:
    """``roots`` and every package they need (Depends, Pre-Depends), through virtual
    packages (Provides). A dependency group naming a package of ``skip`` (name -> why it
    is not needed when nothing is installed) is left out whole."""
    providers: dict[str, str] = {}
    for name in sorted(packages):
        for virtual in packages[name].provides:
            providers.setdefault(virtual, name)

    def resolve(name: str, wanted_by: str) -> str:
        if name in packages:
            return name
        if name in providers:
            return providers[name]
        raise DebianPackageError(f"{wanted_by} needs {name}, which was not downloaded: add it to the stand-ins' packages "
                                 f"(standin_images.py) or to their skip list with the reason it is not needed")

    found: set[str] = set()
    pending = [(root, "the recipe") for root in roots]
    while pending:
        name, wanted_by = pending.pop()
        name = resolve(name, wanted_by)
        if name in found:
            continue
        found.add(name)
        for group in packages[name].depends:
            if any(alternative in skip for alternative in group):
                continue
            available = [alternative for alternative in group if alternative in packages or alternative in providers]
            pending.append((available[0] if available else group[0], name))
    return found


def merged_usr_path(path: str) -> str:
    """A package's path as it lies on a merged-/usr system: ``./bin/bash`` ->
    ``usr/bin/bash``, ``./lib64/ld-linux-x86-64.so.2`` -> ``usr/lib64/...``; others only
    lose their ``./``. The image's root has ``bin -> usr/bin`` and so on."""
    path = path.removeprefix("./").strip("/")
    top = path.split("/", 1)[0]
    return f"usr/{path}" if top in MERGED_DIRS else path


def symlink_target(path: str, target: str) -> str:
    """A link moved into /usr keeps pointing where it did: a relative target of a path
    under /bin (and the others) becomes absolute (``./bin/x -> ../usr/bin/y`` would
    otherwise mean /usr/usr/bin/y from /usr/bin)."""
    if target.startswith("/") or merged_usr_path(path) == path.removeprefix("./").strip("/"):
        return target
    return "/" + posixpath.normpath(posixpath.join(posixpath.dirname(path.removeprefix("./")), target))


def sources() -> list[str]:
    return [f"deb {MIRROR} {SUITE} main", f"deb {MIRROR} {SUITE}-updates main",
            f"deb {SECURITY_MIRROR} {SUITE}-security main"]


# --- thin I/O --------------------------------------------------------------------------------------
def download(names: list[str], *, rootfs: Path, timeout: float = 900) -> dict[str, Package]:
    """Every package of ``names`` and their dependencies, as apt resolves them, into
    ``rootfs/var/cache/apt/archives`` (mmdebstrap's extract variant: it also unpacks them
    into ``rootfs``, which the caller may use to run a program of them). Needs root."""
    argv = ["mmdebstrap", "--quiet", "--mode=root", "--variant=extract", f"--include={','.join(names)}",
            "--skip=download/empty", "--skip=cleanup/apt/cache", SUITE, str(rootfs), *sources()]
    try:
        result = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=timeout, check=False)
    except FileNotFoundError:
        raise DebianPackageError("mmdebstrap is not installed: `apt-get install mmdebstrap` (scripts/bootstrap.sh does, as root)") from None
    if result.returncode != 0:
        raise DebianPackageError(f"mmdebstrap failed (exit {result.returncode}; mirror {MIRROR}, DEBIAN_MIRROR to change it):\n"
                                 f"{(result.stderr or result.stdout)[-2000:]}")
    packages = [read_control(deb) for deb in sorted((rootfs / "var/cache/apt/archives").glob("*.deb"))]
    return {package.name: package for package in packages}


def read_control(deb: Path) -> Package:
    fields = subprocess.run(["dpkg-deb", "--field", str(deb), "Package", "Version", "Depends", "Pre-Depends", "Provides"],
                            capture_output=True, text=True, check=True).stdout
    values: dict[str, str] = {}
    key = ""
    for line in fields.splitlines():
        if line[:1].isspace() and key:  # a folded field goes on
            values[key] += " " + line.strip()
        elif ":" in line:
            key, _, value = line.partition(":")
            values[key] = value.strip()
    depends = parse_relations(", ".join(v for v in (values.get("Pre-Depends", ""), values.get("Depends", "")) if v))
    provides = tuple(group[0] for group in parse_relations(values.get("Provides", "")))
    return Package(values["Package"], values["Version"], depends, provides, deb)


def read_files(package: Package) -> Iterator[File]:
    """The package's data, paths merged into /usr; a hard link becomes a copy of the file
    it links (one in this selection: gzip's ``uncompress``)."""
    data = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(package.deb)], capture_output=True, check=True).stdout
    contents: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for member in tar:
            path = merged_usr_path(member.name)
            if not path:
                continue
            mode, uid, gid = member.mode, member.uid, member.gid
            if member.isdir():
                yield File(path, "dir", mode, uid, gid)
            elif member.issym():
                yield File(path, "symlink", mode, uid, gid, target=symlink_target(member.name, member.linkname))
            elif member.islnk():
                yield File(path, "file", mode, uid, gid, data=contents[merged_usr_path(member.linkname)])
            elif member.isfile():
                extracted = tar.extractfile(member)
                contents[path] = extracted.read() if extracted else b""
                yield File(path, "file", mode, uid, gid, data=contents[path])
            else:
                raise DebianPackageError(f"{package.deb.name}: {member.name} is neither file, directory nor link")
