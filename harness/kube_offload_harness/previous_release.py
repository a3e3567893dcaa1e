"""The previous release of kube-offload, made from git, for the upgrade test
(``Topology.previous_release``; tests/realnode/test_day2.py, docs/real-nodes.md
"Day-2 operations on real pods").

The project publishes no releases yet (both charts have been 0.1.0 from the start), so
"the previous chart version" is made from this checkout's history, as a release of that
commit would have been published:

- which commit: ``$KUBE_OFFLOAD_PREVIOUS_RELEASE`` (any git revision), else the parent of
  the newest commit of the first-parent history that changed ``charts/``: the charts one
  change ago (:func:`default_ref`);
- its version: ``<Chart.yaml version>-g<12 hex digits of the commit>`` (a semver
  pre-release, so below the checkout's ``0.1.0``: helm upgrades *to* the checkout);
- its image: that commit's sources built by THIS checkout's scripts/build-image.sh (the
  Dockerfile and build-venv.sh are the commit's own; the script only makes the Debian bases,
  which stay shared, not remade), cached per commit under ``~/.cache/kube-offload/images/``,
  pushed to the environment's registry as ``<image.repository>:<version>``;
- its charts: that commit's ``charts/``, with ``image.tag`` set to that version in both
  values.yaml files (what the release's chart would say), packaged at that version and
  pushed beside the checkout's.

Both halves come from the same commit: the previous charts run the previous code, the
checkout's charts the checkout's, as an upgrade between two releases does.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import yaml

from kube_offload_harness.binaries import cache_root

if TYPE_CHECKING:
    from kube_offload_harness.registry import Registry

Say = Callable[[str], None]
REPO = Path(__file__).resolve().parents[2]
REF_ENV = "KUBE_OFFLOAD_PREVIOUS_RELEASE"
CHARTS = ("kube-offload-local", "kube-offload-remote")
BUILD_IMAGE = REPO / "scripts" / "build-image.sh"


class PreviousReleaseError(RuntimeError):
    """The previous release could not be made (no git history, a failed build)."""


# --- pure ---------------------------------------------------------------------------------
def release_version(chart_version: str, commit: str) -> str:
    """``0.1.0`` and a commit -> ``0.1.0-g0123456789ab``: a semver pre-release of the chart's
    version (so it sorts below it), the ``g`` keeping an all-digit hash a valid identifier."""
    if not re.fullmatch(r"[0-9a-f]{12,40}", commit):
        raise ValueError(f"not a full commit hash: {commit!r}")
    return f"{chart_version.split('-', 1)[0]}-g{commit[:12]}"


def with_image_tag(values_yaml: str, tag: str) -> str:
    """``values_yaml`` with the ``tag:`` of its top-level ``image:`` block set to ``tag``,
    every other line (comments included) untouched."""
    lines = values_yaml.splitlines(keepends=True)
    in_image = False
    for index, line in enumerate(lines):
        if re.match(r"^image:\s*(#.*)?$", line):
            in_image = True
            continue
        if in_image and re.match(r"^\S", line):
            break  # the next top-level key: the block had no tag
        match = re.match(r"^(\s+)tag:\s*\S.*?(\r?\n)?$", line)
        if in_image and match:
            lines[index] = f'{match.group(1)}tag: "{tag}"{match.group(2) or ""}'
            return "".join(lines)
    raise ValueError("no tag: in the top-level image: block of values.yaml")


# --- git ------------------------------------------------------------------------------------
def _git(*args: str, repo: Path = REPO) -> str:
    result = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False, timeout=60)
    if result.returncode != 0:
        raise PreviousReleaseError(f"`git {' '.join(args)}` in {repo} failed: {result.stderr.strip()} "
                                   f"(the upgrade test makes the previous release from git history; "
                                   f"set {REF_ENV} to a revision that exists)")
    return result.stdout.strip()


def default_ref(repo: Path = REPO) -> str:
    """The commit of the previous release (module docstring), as a full hash."""
    wanted = os.environ.get(REF_ENV)
    if wanted:
        return _git("rev-parse", "--verify", f"{wanted}^{{commit}}", repo=repo)
    newest = _git("log", "--first-parent", "-n1", "--format=%H", "--", "charts/", repo=repo)
    if not newest:
        raise PreviousReleaseError(f"no commit changed charts/ in {repo}: set {REF_ENV}")
    return _git("rev-parse", "--verify", f"{newest}^1", repo=repo)


# The remote chart's gateway template, which `peer --gateway` needs in both charts (issue 42).
GATEWAY_TEMPLATE = "charts/kube-offload-remote/templates/gateway.yaml"


def has_gateway(commit: str, repo: Path = REPO) -> bool:
    """Whether the release at ``commit`` ships kube-offload's gateway. A release from before
    it is peered as its users peered it, without ``--gateway`` (its charts have no gateway to
    configure); the upgrade then keeps its values, so the gateway stays off after it too."""
    found = subprocess.run(["git", "-C", str(repo), "cat-file", "-e", f"{commit}:{GATEWAY_TEMPLATE}"],
                           capture_output=True, check=False, timeout=60)
    return found.returncode == 0


def export_tree(commit: str, dest: Path, repo: Path = REPO) -> Path:
    """The commit's files (``git archive``) under ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", commit], capture_output=True,
                             check=False, timeout=300)
    if archive.returncode != 0:
        raise PreviousReleaseError(f"`git archive {commit}` failed: {archive.stderr.decode(errors='replace').strip()}")
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True, timeout=300)
    return dest


# --- the image --------------------------------------------------------------------------------
def image_archive(commit: str, say: Say, repo: Path = REPO) -> Path:
    """The previous release's image as an OCI archive, built once per commit (minutes: the
    bases are shared with the checkout's image, the venv is the commit's)."""
    target = cache_root() / "images" / f"kube-offload-{commit[:12]}.oci.tar"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kube-offload-previous-") as work:
        tree = export_tree(commit, Path(work) / "src", repo)
        # The checkout's script: its recipe hash names the shared Debian bases; an older
        # script would remake them, under the same tag, for every build on the machine.
        shutil.copy2(BUILD_IMAGE, tree / "scripts" / "build-image.sh")
        out = Path(work) / "out"
        env = dict(os.environ, KUBE_OFFLOAD_IMAGE=f"localhost/kube-offload:previous-{commit[:12]}",
                   KUBE_OFFLOAD_IMAGE_DIR=str(out))
        say(f"- previous release {commit[:12]}: building its image with scripts/build-image.sh (once per commit)")
        started = time.monotonic()
        result = subprocess.run(["nice", "-n", "10", str(tree / "scripts" / "build-image.sh")], cwd=tree, env=env,
                                capture_output=True, text=True, check=False, timeout=3600)
        built = sorted(out.glob("kube-offload-*.oci.tar"))
        if result.returncode != 0 or not built:
            raise PreviousReleaseError(f"building the image of {commit[:12]} failed (exit {result.returncode}):\n"
                                       f"{result.stdout[-1500:]}{result.stderr[-1500:]}")
        partial = target.with_name(target.name + ".tmp")
        shutil.move(str(built[0]), partial)
        os.replace(partial, target)
        # The archive is what is kept: the tag in buildah's storage would pile up, one per commit.
        subprocess.run(["buildah", "rmi", env["KUBE_OFFLOAD_IMAGE"]], capture_output=True, check=False, timeout=120)
        say(f"  built in {int(time.monotonic() - started)}s: {target}")
    return target


# --- the charts and the registry -------------------------------------------------------------
def push(registry: "Registry", *, helm: Path, commit: str, say: Say) -> str:
    """Put the previous release (image and both charts) into the environment's registry;
    returns its version, which the charts are installed at."""
    from kube_offload_harness import registry as reg

    work = registry.directory / "previous-release"
    # the commit's charts/, with what their symlinks name (the CRDs under kube_offload/manifests)
    directory = export_tree(commit, work / "tree") / "charts"
    version = release_version(reg.chart_version(directory / CHARTS[0]), commit)
    for chart in CHARTS:  # what that release's charts would say
        values = directory / chart / "values.yaml"
        values.write_text(with_image_tag(values.read_text(), version))
    repository = yaml.safe_load((directory / CHARTS[0] / "values.yaml").read_text())["image"]["repository"]
    image = f"{repository}:{version}"
    sent = registry.push_archive(image, image_archive(commit, say).read_bytes())
    say(f"- registry: {image} ({sent / 1e6:.1f} MB uploaded): the previous release's image ({commit[:12]})")
    registry.push_charts(helm=helm, work=work / "packages", say=say, charts_dir=directory, version=version)
    return version
