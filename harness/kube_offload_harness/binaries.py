"""Build the real Kubernetes control-plane binaries, etcd, kwok and Helm from Go modules,
cached outside the repository and keyed by version.

Layout under the cache root (``$KUBE_OFFLOAD_CACHE`` or ``~/.cache/kube-offload``)::

    bin/kubernetes-v1.37.2/{kube-apiserver,kube-scheduler,kube-controller-manager,kubectl}
    bin/etcd-v3.7.3/etcd
    bin/kwok-v0.8.0-uidsafe1/{kwok,kwokctl}            kwok with kwok_patch applied
    bin/helm-v3.22.0/helm
    bin/metrics-server-v0.9.0/metrics-server
    bin/local-path-provisioner-v0.0.30/local-path-provisioner
    bin/kubernetes-v1.37.2/{kubelet,kube-proxy}          the real node (NodeBinaries)
    bin/containerd-v2.4.2/{containerd,containerd-shim-runc-v2,ctr}
    bin/cni-plugins-v1.10.0/{bridge,host-local,loopback,portmap}
    bin/pause-v1.37.2/pause                              Kubernetes' pause.c, gcc -static
    bin/registry-v3.1.2/registry                         the real nodes' OCI registry
    bin/coredns-v1.15.0/coredns                          cluster DNS (and its image)
    bin/wireguard-go-<version>/wireguard-go              the gateway's userspace WireGuard
    build/<same names>/   wrapper go.mod, build logs
    build.lock            one build at a time

Only what is missing is built; a finished binary is moved into ``bin/`` atomically, so an
interrupted build never leaves a half-written binary that looks cached.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

from kube_offload_harness import kwok_patch, versions

KUBE_BINARIES = ("kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubectl")
NODE_KUBE_BINARIES = ("kubelet", "kube-proxy")
CONTAINERD_BINARIES = ("containerd", "containerd-shim-runc-v2", "ctr")
# The CNI plugins a node's pod network uses (real_node_config.cni_conflist) and the
# loopback plugin containerd runs in every pod sandbox.
CNI_PLUGINS = {"bridge": "main", "loopback": "main", "host-local": "ipam", "portmap": "meta"}
# containerd without the snapshotters that cannot work here (btrfs needs cgo and a btrfs
# disk; no devmapper pool; no zfs): less to compile.
CONTAINERD_BUILD_TAGS = "no_btrfs no_devmapper no_zfs"


class BuildError(RuntimeError):
    """A build step failed; the message says which step and what to try."""


@dataclass(frozen=True)
class Binaries:
    kube_apiserver: Path
    kube_scheduler: Path
    kube_controller_manager: Path
    kubectl: Path
    etcd: Path
    kwok: Path
    kwokctl: Path
    helm: Path
    metrics_server: Path
    local_path_provisioner: Path

    def all(self) -> dict[str, Path]:
        return {
            "kube-apiserver": self.kube_apiserver,
            "kube-scheduler": self.kube_scheduler,
            "kube-controller-manager": self.kube_controller_manager,
            "kubectl": self.kubectl,
            "etcd": self.etcd,
            "kwok": self.kwok,
            "kwokctl": self.kwokctl,
            "helm": self.helm,
            "metrics-server": self.metrics_server,
            "local-path-provisioner": self.local_path_provisioner,
        }

    def missing(self) -> list[str]:
        return [name for name, path in self.all().items() if not os.access(path, os.X_OK)]


@dataclass(frozen=True)
class NodeBinaries:
    """What a real node runs (real_node.py), beside the control plane's Binaries."""

    kubelet: Path
    kube_proxy: Path
    containerd: Path
    containerd_shim_runc_v2: Path
    ctr: Path
    cni_bin_dir: Path
    pause: Path
    registry: Path
    coredns: Path
    wireguard_go: Path

    def all(self) -> dict[str, Path]:
        found = {
            "kubelet": self.kubelet,
            "kube-proxy": self.kube_proxy,
            "containerd": self.containerd,
            "containerd-shim-runc-v2": self.containerd_shim_runc_v2,
            "ctr": self.ctr,
            "pause": self.pause,
            "registry": self.registry,
            "coredns": self.coredns,
            "wireguard-go": self.wireguard_go,
        }
        found.update({f"cni-{name}": self.cni_bin_dir / name for name in CNI_PLUGINS})
        return found

    def missing(self) -> list[str]:
        return [name for name, path in self.all().items() if not os.access(path, os.X_OK)]


def cache_root() -> Path:
    return Path(os.environ.get("KUBE_OFFLOAD_CACHE") or Path.home() / ".cache" / "kube-offload")


def binaries(root: Path | None = None) -> Binaries:
    root = root or cache_root()
    kube = root / "bin" / f"kubernetes-{versions.KUBERNETES}"
    etcd = root / "bin" / f"etcd-{versions.ETCD}"
    kwok = root / "bin" / kwok_build_name()
    helm = root / "bin" / f"helm-{versions.HELM}"
    metrics_server = root / "bin" / f"metrics-server-{versions.METRICS_SERVER}"
    local_path = root / "bin" / f"local-path-provisioner-{versions.LOCAL_PATH_PROVISIONER}"
    return Binaries(
        kube_apiserver=kube / "kube-apiserver",
        kube_scheduler=kube / "kube-scheduler",
        kube_controller_manager=kube / "kube-controller-manager",
        kubectl=kube / "kubectl",
        etcd=etcd / "etcd",
        kwok=kwok / "kwok",
        kwokctl=kwok / "kwokctl",
        helm=helm / "helm",
        metrics_server=metrics_server / "metrics-server",
        local_path_provisioner=local_path / "local-path-provisioner",
    )


def node_binaries(root: Path | None = None) -> NodeBinaries:
    root = root or cache_root()
    kube = root / "bin" / f"kubernetes-{versions.KUBERNETES}"
    containerd = root / "bin" / f"containerd-{versions.CONTAINERD}"
    return NodeBinaries(
        kubelet=kube / "kubelet",
        kube_proxy=kube / "kube-proxy",
        containerd=containerd / "containerd",
        containerd_shim_runc_v2=containerd / "containerd-shim-runc-v2",
        ctr=containerd / "ctr",
        cni_bin_dir=root / "bin" / f"cni-plugins-{versions.CNI_PLUGINS}",
        pause=root / "bin" / f"pause-{versions.KUBERNETES}" / "pause",
        registry=root / "bin" / f"registry-{versions.REGISTRY}" / "registry",
        coredns=root / "bin" / f"coredns-{versions.COREDNS}" / "coredns",
        wireguard_go=wireguard_go_path(root),
    )


def wireguard_go_path(root: Path | None = None) -> Path:
    """Where wireguard-go is cached; scripts/build-image.sh builds into the same place."""
    return (root or cache_root()) / "bin" / f"wireguard-go-{versions.WIREGUARD_GO}" / "wireguard-go"


# --- pure helpers -------------------------------------------------------------------------
def staging_modules(kubernetes_go_mod: str) -> list[str]:
    """Every ``k8s.io/<m> => ./staging/...`` replaced module named in k8s.io/kubernetes'
    go.mod: the wrapper must pin each of them (replace directives of a dependency are
    ignored by Go, and the published go.mod requires them at v0.0.0)."""
    found = re.findall(r"^\s*(k8s\.io/[\w.-]+)\s+=>\s+\./staging/", kubernetes_go_mod, re.MULTILINE)
    return sorted(set(found))


def staging_version(kubernetes_version: str) -> str:
    """``v1.37.2`` -> ``v0.37.2``."""
    match = re.fullmatch(r"v1\.(\d+)\.(\d+)", kubernetes_version)
    if not match:
        raise ValueError(f"unsupported Kubernetes version {kubernetes_version!r}: expected v1.X.Y")
    return f"v0.{match.group(1)}.{match.group(2)}"


def kubernetes_wrapper_go_mod(kubernetes_version: str, modules: list[str]) -> str:
    staging = staging_version(kubernetes_version)
    lines = [
        "module kube-offload.local/build/kubernetes",
        "",
        f"go {versions.GO_MINIMUM[0]}.{versions.GO_MINIMUM[1]}.0",
        "",
        f"require k8s.io/kubernetes {kubernetes_version}",
        "",
    ]
    lines += [f"replace {module} => {module} {staging}" for module in modules]
    return "\n".join(lines) + "\n"


def version_ldflags(kubernetes_version: str) -> str:
    """Stamp ``--version``: kwokctl reads it to pick flags, and an unstamped build reports
    v0.0.0-master, which kwokctl treats as an unknown (newest) release."""
    match = re.fullmatch(r"v(\d+)\.(\d+)\.\d+", kubernetes_version)
    if not match:
        raise ValueError(f"unsupported Kubernetes version {kubernetes_version!r}")
    major, minor = match.groups()
    flags = []
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {package}.gitVersion={kubernetes_version}",
            f"-X {package}.gitMajor={major}",
            f"-X {package}.gitMinor={minor}",
            f"-X {package}.gitTreeState=clean",
            f"-X {package}.buildDate=1970-01-01T00:00:00Z",
        ]
    return "-s -w " + " ".join(flags)


def module_version(go_mod: str, module: str) -> str | None:
    """The version ``go_mod`` requires of ``module`` (``require`` line or block)."""
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", go_mod, re.MULTILINE)
    return match.group(1) if match else None


def helm_ldflags(helm_version: str, helm_go_mod: str) -> str:
    """What Helm's own Makefile stamps. ``version`` makes ``helm version`` true; without the
    Kubernetes version (read, as the Makefile does, off the client-go Helm requires) ``helm
    template`` and ``helm lint`` would assume a Kubernetes 1.20 cluster for
    ``.Capabilities.KubeVersion`` and for the deprecated-API check."""
    client_go = module_version(helm_go_mod, "k8s.io/client-go")
    match = re.fullmatch(r"v0\.(\d+)\.\d+", client_go or "")
    if not match:
        raise ValueError(f"Helm {helm_version}'s go.mod requires k8s.io/client-go {client_go!r}: expected v0.X.Y")
    minor = match.group(1)
    flags = [
        f"-X helm.sh/helm/v3/internal/version.version={helm_version}",
        "-X helm.sh/helm/v3/internal/version.gitTreeState=clean",
    ]
    for package in ("helm.sh/helm/v3/pkg/lint/rules", "helm.sh/helm/v3/pkg/chartutil"):
        flags += [f"-X {package}.k8sVersionMajor=1", f"-X {package}.k8sVersionMinor={minor}"]
    return "-s -w " + " ".join(flags)


def metrics_server_ldflags(version: str) -> str:
    """What metrics-server's Makefile stamps: its release as client-go's version, which
    ``metrics-server --version`` prints (and the User-Agent it sends)."""
    if not re.fullmatch(r"v\d+\.\d+\.\d+", version):
        raise ValueError(f"unsupported metrics-server version {version!r}: expected vX.Y.Z")
    package = "k8s.io/client-go/pkg/version"
    return f"-s -w -X {package}.gitVersion={version} -X {package}.gitTreeState=clean -X {package}.buildDate=1970-01-01T00:00:00Z"


def containerd_ldflags(version: str) -> str:
    """What containerd's Makefile stamps: ``containerd --version`` and the version the CRI
    reports to the kubelet (``kubectl get node -o wide`` shows it)."""
    if not re.fullmatch(r"v\d+\.\d+\.\d+", version):
        raise ValueError(f"unsupported containerd version {version!r}: expected vX.Y.Z")
    package = "github.com/containerd/containerd/v2"
    return f"-s -w -X {package}/version.Version={version} -X {package}/version.Package={package}"


def cni_plugins_ldflags(version: str) -> str:
    """The plugins print it for ``<plugin> --version`` (CNI's build script stamps the same)."""
    return f"-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion={version}"


def registry_ldflags(version: str) -> str:
    """What Distribution's Makefile stamps: ``registry --version`` prints it (unstamped it
    says ``v3.1.2+unknown``, read off the module's own default)."""
    if not re.fullmatch(r"v\d+\.\d+\.\d+", version):
        raise ValueError(f"unsupported registry version {version!r}: expected vX.Y.Z")
    return f"-s -w -X github.com/distribution/distribution/v3/version.version={version}"


def coredns_ldflags(version: str) -> str:
    """Nothing to stamp: CoreDNS prints its release from a constant in its source
    (``coredns -version``: CoreDNS-1.15.0); only the symbol tables are dropped."""
    if not re.fullmatch(r"v\d+\.\d+\.\d+", version):
        raise ValueError(f"unsupported CoreDNS version {version!r}: expected vX.Y.Z")
    return "-s -w"


def parse_go_version(output: str) -> tuple[int, int] | None:
    match = re.search(r"go(\d+)\.(\d+)", output)
    return (int(match.group(1)), int(match.group(2))) if match else None


# --- I/O -------------------------------------------------------------------------------------
def go_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(CGO_ENABLED="0", GOTOOLCHAIN="local", GOFLAGS="-mod=mod")
    return env


def check_go() -> str:
    go = shutil.which("go")
    if not go:
        raise BuildError(
            "the Go toolchain is not on PATH: install Go >= "
            f"{versions.GO_MINIMUM[0]}.{versions.GO_MINIMUM[1]} (https://go.dev/dl) and retry"
        )
    output = subprocess.run([go, "version"], capture_output=True, text=True, check=False).stdout
    found = parse_go_version(output)
    if found is None or found < versions.GO_MINIMUM:
        raise BuildError(
            f"{output.strip() or 'go version failed'}: Kubernetes {versions.KUBERNETES} needs Go >= "
            f"{versions.GO_MINIMUM[0]}.{versions.GO_MINIMUM[1]} with GOTOOLCHAIN=local; install a newer Go"
        )
    return go


def _run_step(step: str, cmd: list[str], *, cwd: Path, log_path: Path, say: Callable[[str], None]) -> None:
    """Run one long Go command, logging everything to ``log_path`` and printing a heartbeat
    with the number of packages compiled so far (go build -v prints one per line)."""
    started = time.monotonic()
    with open(log_path, "w") as log:
        process = subprocess.Popen(cmd, cwd=cwd, env=go_env(), stdout=log, stderr=subprocess.STDOUT)
        done = threading.Event()

        def heartbeat() -> None:
            while not done.wait(30):
                try:
                    packages = sum(1 for _ in open(log_path))
                except OSError:
                    packages = 0
                say(f"  ... {step}: {int(time.monotonic() - started)}s elapsed, {packages} packages compiled so far")

        thread = threading.Thread(target=heartbeat, daemon=True)
        thread.start()
        try:
            code = process.wait()
        except BaseException:
            process.terminate()
            raise
        finally:
            done.set()
    if code != 0:
        tail = "".join(open(log_path).readlines()[-15:])
        raise BuildError(
            f"step '{step}' failed (exit {code}); full log: {log_path}\n{tail}\n"
            "What to try: check that the Go module proxy is reachable (GOPROXY), retry with "
            "GOSUMDB=off if the checksum database is unreachable, and make sure there are a few GB "
            "of free disk for the module and build caches."
        )
    say(f"  {step}: done in {int(time.monotonic() - started)}s")


def _install(built: Path, target: Path) -> None:
    """Move the fresh binary into bin/ (a rename: atomic, and no second ~100 MB copy is
    left behind in build/)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(built, target)
    except OSError:  # build/ and bin/ on different filesystems
        temp = target.with_name(target.name + ".tmp")
        shutil.copy2(built, temp)
        os.replace(temp, target)
        built.unlink(missing_ok=True)


def _downloaded_module(go: str, module: str, version: str, work: Path) -> dict:
    """Download ``module@version`` into the module cache; `go mod download -json`'s record
    (``GoMod``: its go.mod; ``Dir``: the extracted source)."""
    download = subprocess.run(
        [go, "mod", "download", "-json", f"{module}@{version}"],
        cwd=work, env=go_env(), capture_output=True, text=True, check=False,
    )
    if download.returncode != 0:
        raise BuildError(
            f"step 'download {module}@{version}' failed: {download.stderr.strip()[-800:]}\n"
            "What to try: check that the Go module proxy is reachable (GOPROXY)."
        )
    return json.loads(download.stdout)


def _downloaded_go_mod(go: str, module: str, version: str, work: Path) -> Path:
    """The go.mod of ``module@version`` (read for the staging modules of Kubernetes, or the
    client-go version helm stamps)."""
    return Path(_downloaded_module(go, module, version, work)["GoMod"])


def _build_kubernetes(root: Path, targets: dict[str, Path], go: str, say: Callable[[str], None]) -> None:
    """Build the ``k8s.io/kubernetes/cmd/<name>`` binaries named in ``targets`` (control
    plane or node: one wrapper module and one build cache for both)."""
    work = root / "build" / f"kubernetes-{versions.KUBERNETES}"
    work.mkdir(parents=True, exist_ok=True)
    say(f"- kubernetes {versions.KUBERNETES}: reading the staging modules from k8s.io/kubernetes' go.mod")
    go_mod_path = _downloaded_go_mod(go, "k8s.io/kubernetes", versions.KUBERNETES, work)
    modules = staging_modules(go_mod_path.read_text())
    (work / "go.mod").write_text(kubernetes_wrapper_go_mod(versions.KUBERNETES, modules))
    out = work / "out"
    out.mkdir(exist_ok=True)
    names = list(targets)
    packages = [f"k8s.io/kubernetes/cmd/{name}" for name in names]
    say(f"- kubernetes {versions.KUBERNETES}: building {', '.join(names)} "
        "(the first build takes tens of minutes on 2 cores)")
    _run_step(
        f"build kubernetes {versions.KUBERNETES} ({', '.join(names)})",
        [go, "build", "-v", "-trimpath", "-ldflags", version_ldflags(versions.KUBERNETES), "-o", str(out) + "/", *packages],
        cwd=work, log_path=work / f"build-{'-'.join(names)}.log", say=say,
    )
    for name, target in targets.items():
        _install(out / name, target)


def _build_etcd(root: Path, bins: Binaries, go: str, say: Callable[[str], None]) -> None:
    # `go install go.etcd.io/etcd/server/v3@...` fails on the monorepo's replace directives;
    # a wrapper module that requires the server module (itself a main package) works.
    work = root / "build" / f"etcd-{versions.ETCD}"
    work.mkdir(parents=True, exist_ok=True)
    (work / "go.mod").write_text(
        "module kube-offload.local/build/etcd\n\n"
        f"go {versions.GO_MINIMUM[0]}.{versions.GO_MINIMUM[1]}.0\n\n"
        f"require go.etcd.io/etcd/server/v3 {versions.ETCD}\n"
    )
    say(f"- etcd {versions.ETCD}: building")
    _run_step(
        f"build etcd {versions.ETCD}",
        [go, "build", "-v", "-trimpath", "-ldflags", "-s -w", "-o", str(work / "out" / "etcd"), "go.etcd.io/etcd/server/v3"],
        cwd=work, log_path=work / "build.log", say=say,
    )
    _install(work / "out" / "etcd", bins.etcd)


def kwok_build_name() -> str:
    """kwok's cache key: its version and the revision of the harness's patch to it."""
    return f"kwok-{versions.KWOK}-{kwok_patch.REVISION}"


def _build_kwok(root: Path, bins: Binaries, go: str, say: Callable[[str], None]) -> None:
    # Built from a patched copy of the module's source (kwok_patch: deletes by UID, as a
    # kubelet does); kwok's version comes from its consts package, not the build info, so
    # building from a directory stamps nothing differently from `go install module@v`.
    work = root / "build" / kwok_build_name()
    out = work / "out"
    out.mkdir(parents=True, exist_ok=True)
    say(f"- kwok {versions.KWOK}: fetching the source and applying the harness's patch (deletes by UID)")
    module_dir = Path(_downloaded_module(go, "sigs.k8s.io/kwok", versions.KWOK, work)["Dir"])
    source = work / "src"
    _writable_tree(source)
    shutil.rmtree(source, ignore_errors=True)
    shutil.copytree(module_dir, source, copy_function=shutil.copyfile)
    _writable_tree(source)
    try:
        kwok_patch.apply(source)
    except kwok_patch.PatchError as exc:
        raise BuildError(str(exc)) from exc
    say(f"- kwok {versions.KWOK}: building kwok and kwokctl")
    _run_step(
        f"build kwok {versions.KWOK}",
        [go, "build", "-v", "-trimpath", "-ldflags", "-s -w", "-o", str(out) + "/", "./cmd/kwok", "./cmd/kwokctl"],
        cwd=source, log_path=work / "build.log", say=say,
    )
    _install(out / "kwok", bins.kwok)
    _install(out / "kwokctl", bins.kwokctl)


def _writable_tree(root: Path) -> None:
    """Make a copy of the (read-only) module cache writable, so it can be patched and,
    on the next build, removed."""
    if not root.exists():
        return
    for directory, _dirs, files in os.walk(root):
        os.chmod(directory, 0o755)
        for name in files:
            os.chmod(os.path.join(directory, name), 0o644)


def _build_helm(root: Path, bins: Binaries, go: str, say: Callable[[str], None]) -> None:
    # helm.sh/helm/v3 has no replace directives: `go install module@version` builds it as
    # released; its go.mod is read first for the Kubernetes version to stamp.
    work = root / "build" / f"helm-{versions.HELM}"
    out = work / "out"
    out.mkdir(parents=True, exist_ok=True)
    say(f"- helm {versions.HELM}: reading helm.sh/helm/v3's go.mod")
    ldflags = helm_ldflags(versions.HELM, _downloaded_go_mod(go, "helm.sh/helm/v3", versions.HELM, work).read_text())
    say(f"- helm {versions.HELM}: building")
    _run_step(
        f"build helm {versions.HELM}",
        ["env", f"GOBIN={out}", go, "install", "-v", "-trimpath", "-ldflags", ldflags,
         f"helm.sh/helm/v3/cmd/helm@{versions.HELM}"],
        cwd=work, log_path=work / "build.log", say=say,
    )
    _install(out / "helm", bins.helm)


def _go_install(root: Path, go: str, package: str, version: str, ldflags: str, dest: Path,
                say: Callable[[str], None]) -> None:
    """``go install package@version`` into the cache, for modules without replace
    directives: they build as released (go install ignores a vendor/ directory)."""
    name = package.rsplit("/", 1)[-1]
    work = root / "build" / f"{name}-{version}"
    out = work / "out"
    out.mkdir(parents=True, exist_ok=True)
    say(f"- {name} {version}: building")
    _run_step(
        f"build {name} {version}",
        ["env", f"GOBIN={out}", go, "install", "-v", "-trimpath", "-ldflags", ldflags, f"{package}@{version}"],
        cwd=work, log_path=work / "build.log", say=say,
    )
    _install(out / name, dest)


def _build_local_path_provisioner(root: Path, bins: Binaries, go: str, say: Callable[[str], None]) -> None:
    _go_install(root, go, "github.com/rancher/local-path-provisioner", versions.LOCAL_PATH_PROVISIONER, "-s -w",
                bins.local_path_provisioner, say)


def build_metrics_server(root: Path, bins: Binaries, go: str, say: Callable[[str], None]) -> None:
    # docs/metrics.md runs it in the loopback clusters; the ldflags stamp its version.
    version = versions.METRICS_SERVER
    _go_install(root, go, "sigs.k8s.io/metrics-server/cmd/metrics-server", version, metrics_server_ldflags(version),
                bins.metrics_server, say)


@dataclass
class _Lock:
    path: Path

    def __enter__(self) -> "_Lock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = open(self.path, "w")
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._fd.close()


_B = TypeVar("_B", Binaries, NodeBinaries)
# A build step: which missing names it builds, and how (root, the binaries, go, say).
_Step = tuple[Callable[[str], bool], Callable[[Path, Any, str, Callable[[str], None]], None]]


def _ensure(bins: _B, steps: list[_Step], *, whose: str, kind: str, root: Path,
            say: Callable[[str], None]) -> _B:
    """Run the steps whose names are missing, under the machine's one build lock (parallel
    callers wait, then find them built), and check that nothing is missing afterwards."""
    if not bins.missing():
        return bins
    with _Lock(root / "build.lock"):
        missing = bins.missing()
        if not missing:
            return bins
        say(f"kube-offload: building {whose}{', '.join(missing)} into {root / 'bin'} (cached for next time)")
        go = check_go()
        started = time.monotonic()
        for builds, build in steps:
            if any(builds(name) for name in missing):
                build(root, bins, go, say)
        say(f"kube-offload: {kind}binaries ready in {int(time.monotonic() - started)}s")
    still = bins.missing()
    if still:
        raise BuildError(f"after building, these {kind}binaries are still missing: {', '.join(still)}")
    return bins


def _kubernetes_step(names: tuple[str, ...]) -> _Step:
    def build(root: Path, bins: Any, go: str, say: Callable[[str], None]) -> None:
        _build_kubernetes(root, {name: bins.all()[name] for name in names}, go, say)
    return names.__contains__, build


def ensure_binaries(*, say: Callable[[str], None] | None = None, root: Path | None = None) -> Binaries:
    """Build whatever is missing (under a lock, so parallel callers wait), return paths."""
    root = root or cache_root()
    return _ensure(binaries(root), [
        _kubernetes_step(KUBE_BINARIES),
        ("etcd".__eq__, _build_etcd),
        (("kwok", "kwokctl").__contains__, _build_kwok),
        ("helm".__eq__, _build_helm),
        ("metrics-server".__eq__, build_metrics_server),
        ("local-path-provisioner".__eq__, _build_local_path_provisioner),
    ], whose="", kind="", root=root, say=say or _say_on_stderr)


def _build_containerd(root: Path, nbins: NodeBinaries, go: str, say: Callable[[str], None]) -> None:
    # No replace directives in containerd/v2's go.mod: `go install module/cmd/...@version`
    # builds it as released; static (CGO_ENABLED=0), as its Makefile builds the shim.
    version = versions.CONTAINERD
    work = root / "build" / f"containerd-{version}"
    out = work / "out"
    out.mkdir(parents=True, exist_ok=True)
    say(f"- containerd {version}: building {', '.join(CONTAINERD_BINARIES)}")
    _run_step(
        f"build containerd {version}",
        ["env", f"GOBIN={out}", go, "install", "-v", "-trimpath", "-tags", CONTAINERD_BUILD_TAGS,
         "-ldflags", containerd_ldflags(version),
         *[f"github.com/containerd/containerd/v2/cmd/{name}@{version}" for name in CONTAINERD_BINARIES]],
        cwd=work, log_path=work / "build.log", say=say,
    )
    for name in CONTAINERD_BINARIES:
        _install(out / name, nbins.all()[name])


def _build_cni_plugins(root: Path, nbins: NodeBinaries, go: str, say: Callable[[str], None]) -> None:
    version = versions.CNI_PLUGINS
    work = root / "build" / f"cni-plugins-{version}"
    out = work / "out"
    out.mkdir(parents=True, exist_ok=True)
    say(f"- CNI plugins {version}: building {', '.join(CNI_PLUGINS)}")
    _run_step(
        f"build cni-plugins {version}",
        ["env", f"GOBIN={out}", go, "install", "-v", "-trimpath", "-ldflags", cni_plugins_ldflags(version),
         *[f"github.com/containernetworking/plugins/plugins/{kind}/{name}@{version}" for name, kind in CNI_PLUGINS.items()]],
        cwd=work, log_path=work / "build.log", say=say,
    )
    for name in CNI_PLUGINS:
        _install(out / name, nbins.cni_bin_dir / name)


def _build_pause(root: Path, nbins: NodeBinaries, go: str, say: Callable[[str], None]) -> None:
    """The sandbox (pause) container's binary from the same source as registry.k8s.io/pause:
    build/pause/linux/pause.c of the k8s.io/kubernetes module, static as upstream builds it."""
    work = root / "build" / f"pause-{versions.KUBERNETES}"
    work.mkdir(parents=True, exist_ok=True)
    module_dir = Path(_downloaded_module(go, "k8s.io/kubernetes", versions.KUBERNETES, work)["Dir"])
    source = module_dir / "build" / "pause" / "linux" / "pause.c"
    if not source.exists():
        raise BuildError(f"pause.c not found at {source}: k8s.io/kubernetes {versions.KUBERNETES} moved it?")
    cc = shutil.which("gcc") or shutil.which("cc")
    if not cc:
        raise BuildError("no C compiler for the pause binary: install gcc (and libc6-dev) and retry")
    say(f"- pause ({versions.KUBERNETES}): compiling {source.name}")
    _run_step(
        "build pause",
        [cc, "-Os", "-Wall", "-Werror", "-static", f"-DVERSION={versions.KUBERNETES}", "-o", str(work / "pause"), str(source)],
        cwd=work, log_path=work / "build.log", say=say,
    )
    _install(work / "pause", nbins.pause)


def _build_registry(root: Path, nbins: NodeBinaries, go: str, say: Callable[[str], None]) -> None:
    # github.com/distribution/distribution/v3 has no replace directives: built as released.
    _go_install(root, go, "github.com/distribution/distribution/v3/cmd/registry", versions.REGISTRY,
                registry_ldflags(versions.REGISTRY), nbins.registry, say)


def _build_coredns(root: Path, nbins: NodeBinaries, go: str, say: Callable[[str], None]) -> None:
    # The module root is the main package; no replace directives.
    _go_install(root, go, "github.com/coredns/coredns", versions.COREDNS, coredns_ldflags(versions.COREDNS),
                nbins.coredns, say)


def _build_wireguard_go(root: Path, nbins: NodeBinaries, go: str, say: Callable[[str], None]) -> None:
    # The module's main package is its root, so `go install` names the binary `wireguard`;
    # it is installed under the name its README and `wg-quick` use. No replace directives.
    _go_install(root, go, "golang.zx2c4.com/wireguard", versions.WIREGUARD_GO, "-s -w", nbins.wireguard_go, say)


def ensure_node_binaries(*, say: Callable[[str], None] | None = None, root: Path | None = None) -> NodeBinaries:
    """Build what a real node needs (kubelet, kube-proxy, containerd, CNI plugins, pause,
    the registry its images come from, CoreDNS, the gateway's wireguard-go),
    under the same lock as ensure_binaries: one Go build at a time on the machine."""
    root = root or cache_root()
    return _ensure(node_binaries(root), [
        _kubernetes_step(NODE_KUBE_BINARIES),
        (CONTAINERD_BINARIES.__contains__, _build_containerd),
        (lambda name: name.startswith("cni-"), _build_cni_plugins),
        ("pause".__eq__, _build_pause),
        ("registry".__eq__, _build_registry),
        ("coredns".__eq__, _build_coredns),
        ("wireguard-go".__eq__, _build_wireguard_go),
    ], whose="the real node's ", kind="real-node ", root=root, say=say or _say_on_stderr)


def _say_on_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def describe(bins: Binaries | NodeBinaries) -> Iterator[str]:
    for name, path in bins.all().items():
        state = "ok" if os.access(path, os.X_OK) else "missing"
        yield f"{name:<24} {state:<8} {path}"
