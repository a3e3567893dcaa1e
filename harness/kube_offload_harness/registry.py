"""The environment's OCI registry: what the real nodes pull every image from, and where
the charts are pushed (docs/real-nodes.md, "Images").

One CNCF Distribution registry (binaries.py builds it) per environment, a process of its
ProcessTable on ``127.0.0.1:<free port>`` of the machine's namespace, its storage under
the state dir; ``down`` stops it and removes the storage. Each real node reaches it on its
own namespace's loopback through a forwarder (real_node.py), and containerd mirrors
docker.io, registry.k8s.io, ghcr.io and quay.io to it (real_node_config.registry_hosts_toml):
an upstream's repositories live under its name (``docker.io/library/busybox``).

Filled at ``up`` (:func:`fill`) with every image the tiers and the charts name, each built
on this machine: the sandbox and CoreDNS images, the project image, and the stand-ins for
the everyday public images users' manifests name (standin_images.py); and with the two
charts (``helm push`` to ``oci://127.0.0.1:<port>/charts``; :func:`chart_reference` is
what to install from).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import yaml

from kube_offload_harness import oci_image, standin_images
from kube_offload_harness.binaries import NodeBinaries
from kube_offload_harness.oci_distribution import RegistryClient, mirror_repository, read_oci_archive
from kube_offload_harness.processes import ProcessTable

Say = Callable[[str], None]
PROCESS_NAME = "registry"
REPO = Path(__file__).resolve().parents[2]
CHARTS = ("kube-offload-local", "kube-offload-remote")
CHART_REPOSITORY = "charts"  # oci://127.0.0.1:<port>/charts/<chart>
BUILD_IMAGE = REPO / "scripts" / "build-image.sh"
# What decides the project image's content (scripts/build-image.sh builds the Dockerfile
# over the product's packages; harness/, tests/ and docs/ are not in it).
IMAGE_RECIPE = ("Dockerfile", "pyproject.toml", ".dockerignore", "scripts/build-image.sh", "scripts/image")


class RegistryError(RuntimeError):
    """The registry did not start, or an image or chart could not be put in it."""


# --- pure ---------------------------------------------------------------------------------
def registry_config(*, storage: Path, port: int) -> dict:
    """Distribution's configuration (version 0.1, the only one): loopback only, plain HTTP,
    storage on the filesystem, an access log line per request (what the tests read to see
    a pull came through), no debug server, no redirects (the filesystem driver serves
    blobs itself)."""
    return {
        "version": 0.1,
        "log": {"level": "info", "formatter": "text", "accesslog": {"disabled": False}},
        "storage": {
            "filesystem": {"rootdirectory": str(storage)},
            "delete": {"enabled": True},
            "redirect": {"disable": True},
            "maintenance": {"uploadpurging": {"enabled": False}},
        },
        "http": {"addr": f"127.0.0.1:{port}", "headers": {"X-Content-Type-Options": ["nosniff"]}},
    }


def registry_env(environ: dict[str, str]) -> dict[str, str]:
    """The registry's environment: its OpenTelemetry exporter off (by default it would send
    traces to an OTLP collector on localhost:4318, which nobody here runs) and no proxy."""
    env = {key: value for key, value in environ.items() if not key.startswith("REGISTRY_")}
    env.update(OTEL_TRACES_EXPORTER="none", NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
    return env


def chart_reference(port: int, chart: str) -> str:
    """What ``helm install <release> <ref> --version <v> --plain-http`` takes."""
    if chart not in CHARTS:
        raise ValueError(f"unknown chart {chart!r}: one of {', '.join(CHARTS)}")
    return f"oci://127.0.0.1:{port}/{CHART_REPOSITORY}/{chart}"


def chart_version(chart_dir: Path) -> str:
    return str(yaml.safe_load((chart_dir / "Chart.yaml").read_text())["version"])


def project_image_name(values: dict) -> str:
    """The image the charts name by default (``image.repository:image.tag``): the registry
    serves the project image under exactly that name."""
    image = values["image"]
    return f"{image['repository']}:{image['tag']}"


def stale(archive_mtime: float | None, source_mtimes: list[float]) -> bool:
    """Rebuild when the archive is missing or older than any file it is built from."""
    return archive_mtime is None or any(mtime > archive_mtime for mtime in source_mtimes)


def image_sources(repo: Path, packages: list[str]) -> list[Path]:
    """The files the project image is built from: the recipe (IMAGE_RECIPE) and every
    file of the product's top-level packages (pyproject's ``packages.find.include``)."""
    found: list[Path] = []
    for name in [*IMAGE_RECIPE, *packages]:
        path = repo / name
        if path.is_dir():
            found += [p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
        elif path.exists():
            found.append(path)
    return found


def product_packages(pyproject: dict) -> list[str]:
    """``["kube_offload", "kube_offload.*", "webhook", ...]`` -> the top-level package dirs."""
    include = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    return sorted({name.split(".", 1)[0] for name in include})


# --- the process ----------------------------------------------------------------------------
@dataclass
class Registry:
    """The registry of one environment: its files under ``state_dir/registry``."""

    state_dir: Path
    port: int

    @property
    def directory(self) -> Path:
        return self.state_dir / "registry"

    @property
    def config_path(self) -> Path:
        return self.directory / "config.yml"

    @property
    def storage(self) -> Path:
        return self.directory / "storage"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self) -> RegistryClient:
        return RegistryClient(self.url)

    def start(self, *, binary: Path, processes: ProcessTable, log: Path, timeout: float = 30) -> None:
        self.storage.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(yaml.safe_dump(registry_config(storage=self.storage, port=self.port), sort_keys=False))
        record = processes.start(PROCESS_NAME, [str(binary), "serve", str(self.config_path)], log=log,
                                 env=registry_env(dict(os.environ)))
        client = self.client()
        started = time.monotonic()
        while time.monotonic() < started + timeout:
            if client.ping():
                return
            # Only after a grace period: right after the start the record can read as not
            # running yet (seen here under pytest), though the registry comes up.
            if time.monotonic() > started + 2 and not record.running():
                raise RegistryError(f"the registry exited during start-up; see {log}:\n{log.read_text(errors='replace')[-1500:]}")
            time.sleep(0.2)
        raise RegistryError(f"the registry not answering on {self.url}/v2/ after {timeout}s; see {log}")

    def stop(self, processes: ProcessTable) -> list[str]:
        done = []
        if processes.stop(PROCESS_NAME):
            done.append("registry")
        if self.directory.exists():
            shutil.rmtree(self.directory)
            done.append("its storage")
        return done

    def leftovers(self) -> list[str]:
        from kube_offload_harness import netns

        found = [f"process {pid} (registry)" for pid in netns.pids_with_arg(str(self.config_path))]
        if self.directory.exists():
            found.append(f"directory {self.directory}")
        return found

    # --- filling it ----------------------------------------------------------------------
    def push_archive(self, image: str, archive: bytes) -> int:
        repository, tag = mirror_repository(image)
        return self.client().push(read_oci_archive(archive, what=image), repository, tag)

    def push_standins(self, layout: Path, say: Say) -> None:
        """Every stand-in under each of its names; a layer two images share is uploaded
        once and mounted into the other's repository."""
        client = self.client()
        pushed: dict[str, str] = {}  # digest -> a repository that has it
        sent: dict[str, int] = {}  # per manifest: the names of one image on one line
        names: dict[str, list[str]] = {}
        for name, image in standin_images.load(layout):
            repository, tag = mirror_repository(name)
            sent[image.digest] = sent.get(image.digest, 0) + client.push(image, repository, tag, pushed=pushed)
            names.setdefault(image.digest, []).append(name.removeprefix("docker.io/library/"))
        for digest, tags in names.items():
            say(f"- registry: {', '.join(tags)} (stand-in, {sent[digest] / 1e6:.1f} MB uploaded)")

    def push_charts(self, *, helm: Path, work: Path, say: Say, charts_dir: Path = REPO / "charts",
                    version: str | None = None) -> dict[str, str]:
        """``helm package`` each chart of ``charts_dir`` (at ``version``: default, its
        Chart.yaml's) and ``helm push`` it here; {chart: oci:// reference}."""
        work.mkdir(parents=True, exist_ok=True)
        references = {}
        for chart in CHARTS:
            chart_dir = charts_dir / chart
            packaged = version or chart_version(chart_dir)
            pinned = ["--version", version, "--app-version", version] if version else []
            _run([str(helm), "package", str(chart_dir), "--destination", str(work), *pinned], what=f"helm package {chart}")
            package = work / f"{chart}-{packaged}.tgz"
            _run([str(helm), "push", str(package), f"oci://127.0.0.1:{self.port}/{CHART_REPOSITORY}", "--plain-http"],
                 what=f"helm push {package.name}", env=_helm_env(work))
            references[chart] = chart_reference(self.port, chart)
        say(f"- registry: charts {', '.join(references.values())} (version {version or chart_version(charts_dir / CHARTS[0])})")
        return references


def _helm_env(work: Path) -> dict[str, str]:
    """Helm's registry configuration and cache under ``work``, not the user's ~/.config/helm."""
    env = registry_env(dict(os.environ))
    env.update(HELM_REGISTRY_CONFIG=str(work / "registry-config.json"), HELM_CACHE_HOME=str(work / "cache"),
               HELM_CONFIG_HOME=str(work / "config"), HELM_DATA_HOME=str(work / "data"))
    return env


def _run(argv: list[str], *, what: str, env: dict[str, str] | None = None, timeout: float = 600) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout, check=False)
    if result.returncode != 0:
        raise RegistryError(f"{what} failed (exit {result.returncode}): {(result.stderr or result.stdout).strip()[-1500:]}")
    return result.stdout


# --- where each image comes from ---------------------------------------------------------
def project_image_archive(say: Say, repo: Path = REPO) -> Path:
    """``.artifacts/image/kube-offload-<version>.oci.tar``, (re)made by scripts/build-image.sh
    when it is missing or older than a file it is built from (image_sources): a minute or
    two when only the sources changed (buildah reuses the base images), longer the first
    time on a machine (mmdebstrap, PyPI)."""
    import tomllib

    pyproject = tomllib.loads((repo / "pyproject.toml").read_text())
    version = pyproject["project"]["version"]
    archive = repo / ".artifacts" / "image" / f"kube-offload-{version}.oci.tar"
    sources = image_sources(repo, product_packages(pyproject))
    mtime = archive.stat().st_mtime if archive.exists() else None
    if stale(mtime, [p.stat().st_mtime for p in sources]):
        say(f"- project image: {'missing' if mtime is None else 'older than its sources'}: running scripts/build-image.sh")
        env = dict(os.environ, KUBE_OFFLOAD_IMAGE_DIR=str(archive.parent))
        env.pop("KUBE_OFFLOAD_IMAGE", None)  # the archive's path names the default image
        started = time.monotonic()
        result = subprocess.run(["nice", "-n", "10", str(BUILD_IMAGE)], cwd=repo, env=env, capture_output=True,
                                text=True, check=False, timeout=3600)
        if result.returncode != 0 or not archive.exists():
            raise RegistryError(f"scripts/build-image.sh failed (exit {result.returncode}):\n{result.stdout[-1500:]}{result.stderr[-1500:]}")
        say(f"  project image built in {int(time.monotonic() - started)}s")
    return archive


def project_image_name_from_chart(repo: Path = REPO) -> str:
    return project_image_name(yaml.safe_load((repo / "charts" / CHARTS[0] / "values.yaml").read_text()))


def fill(registry: Registry, *, nbins: NodeBinaries, helm: Path, say: Say) -> dict[str, str]:
    """Every image the real nodes run, and the charts; returns the charts' references."""
    started = time.monotonic()
    # Both may be cold on a fresh machine (build-image.sh: minutes; the stand-ins: about half
    # a minute, most of it mmdebstrap's download): side by side.
    with ThreadPoolExecutor(max_workers=1) as pool:
        standins = pool.submit(standin_images.build, say)
        project = project_image_archive(say)
        layout = standins.result()
    images = [
        (oci_image.PAUSE_IMAGE, oci_image.pause_image(nbins.pause)),
        (oci_image.COREDNS_IMAGE, oci_image.coredns_image(nbins.coredns)),
        (project_image_name_from_chart(), project.read_bytes()),
    ]
    for name, archive in images:
        sent = registry.push_archive(name, archive)
        say(f"- registry: {name} ({sent / 1e6:.1f} MB uploaded)")
    registry.push_standins(layout, say)
    references = registry.push_charts(helm=helm, work=registry.directory / "charts", say=say)
    say(f"- registry filled in {int(time.monotonic() - started)}s")
    return references
