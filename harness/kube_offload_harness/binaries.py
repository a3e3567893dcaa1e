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
    bin/registry-v3.1.2-<digest>/registry                the real nodes' OCI registry (a small main)
    bin/coredns-v1.15.0-<digest>/coredns                 cluster DNS and its image (a small main)
    bin/wireguard-go-<version>/wireguard-go              the gateway's userspace WireGuard
    build/<same names>/   wrapper modules (go_wrapper.py; shared/: in the control plane's
                          module graph), prepare and build logs
    build.lock            one build at a time

How (go_build.py): the programs that use the Kubernetes libraries are built in the control
plane's module graph when they compile there (they then reuse what it compiled), CoreDNS
and the registry from small mains with only the plugins used, and each step's modules are
downloaded in the background while an earlier step compiles.

Only what is missing is built; a finished binary is moved into ``bin/`` atomically, so an
interrupted build never leaves a half-written binary that looks cached.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

from kube_offload_harness import go_wrapper, kwok_patch, versions
from kube_offload_harness.go_build import (
    BuildError, Context, GoProgram, ProgramBuild, Say, Step, check_go, downloaded_module, go_env, install, run_plan,
    run_step,
)

KUBE_BINARIES = ("kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubectl")
NODE_KUBE_BINARIES = ("kubelet", "kube-proxy")
CONTAINERD_BINARIES = ("containerd", "containerd-shim-runc-v2", "ctr")
# The CNI plugins a node's pod network uses (real_node_config.cni_conflist) and the
# loopback plugin containerd runs in every pod sandbox.
CNI_PLUGINS = {"bridge": "main", "loopback": "main", "host-local": "ipam", "portmap": "meta"}
# containerd without the snapshotters that cannot work here (btrfs needs cgo and a btrfs
# disk; no devmapper pool; no zfs): less to compile.
CONTAINERD_BUILD_TAGS = "no_btrfs no_devmapper no_zfs"


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
        # Small mains of ours (go_wrapper): their plugin set is part of the key.
        registry=root / "bin" / go_wrapper.cache_key("registry", versions.REGISTRY, go_wrapper.registry_main().digest())
        / "registry",
        coredns=root / "bin" / go_wrapper.cache_key("coredns", versions.COREDNS, go_wrapper.coredns_main().digest())
        / "coredns",
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
    return go_wrapper.go_mod("kubernetes", {"k8s.io/kubernetes": kubernetes_version},
                             pins={module: staging for module in modules})


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


# --- what to build ---------------------------------------------------------------------------
def _stamped(ldflags: str) -> Callable[[str], str]:
    return lambda _go_mod: ldflags


def _patch_kwok(source: Path) -> None:
    try:
        kwok_patch.apply(source)
    except kwok_patch.PatchError as exc:
        raise BuildError(str(exc)) from exc


def programs(bins: Binaries, nbins: NodeBinaries) -> list[GoProgram]:
    """Every Go program besides Kubernetes itself, in build order: first those that share
    the control plane's module graph (built after it, they mostly find its packages in the
    build cache), then those built as released. ``outputs`` name each binary as ``go build``
    does (after the last element of the package path, a major-version suffix skipped)."""
    coredns, registry = go_wrapper.coredns_main(), go_wrapper.registry_main()
    return [
        # sigs.k8s.io/metrics-server: for `kubectl top` in the loopback clusters (docs/metrics.md).
        GoProgram("metrics-server", "sigs.k8s.io/metrics-server", versions.METRICS_SERVER,
                  ("sigs.k8s.io/metrics-server/cmd/metrics-server",), {"metrics-server": bins.metrics_server},
                  stamp=_stamped(metrics_server_ldflags(versions.METRICS_SERVER)), shared=True),
        GoProgram("local-path-provisioner", "github.com/rancher/local-path-provisioner",
                  versions.LOCAL_PATH_PROVISIONER, ("github.com/rancher/local-path-provisioner",),
                  {"local-path-provisioner": bins.local_path_provisioner}, shared=True),
        # Built from a patched copy of the module's source (kwok_patch: deletes by UID, as a
        # kubelet does); kwok's version comes from its consts package, not the build info.
        GoProgram("kwok", "sigs.k8s.io/kwok", versions.KWOK, ("sigs.k8s.io/kwok/cmd/kwok", "sigs.k8s.io/kwok/cmd/kwokctl"),
                  {"kwok": bins.kwok, "kwokctl": bins.kwokctl}, shared=True, patch=_patch_kwok,
                  revision=kwok_patch.REVISION),
        # Stamped from its own go.mod's client-go, as Helm's Makefile does.
        GoProgram("helm", "helm.sh/helm/v3", versions.HELM, ("helm.sh/helm/v3/cmd/helm",), {"helm": bins.helm},
                  stamp=lambda go_mod: helm_ldflags(versions.HELM, go_mod), shared=True),
        GoProgram("coredns", "github.com/coredns/coredns", versions.COREDNS, (), {"coredns": nbins.coredns},
                  stamp=_stamped(coredns_ldflags(versions.COREDNS)), shared=True, main=coredns,
                  revision=coredns.digest()),
        # The server module is itself the main package (`go build` names it after "server").
        GoProgram("etcd", "go.etcd.io/etcd/server/v3", versions.ETCD, ("go.etcd.io/etcd/server/v3",), {"server": bins.etcd}),
        # Static (CGO_ENABLED=0), as containerd's Makefile builds the shim.
        GoProgram("containerd", "github.com/containerd/containerd/v2", versions.CONTAINERD,
                  tuple(f"github.com/containerd/containerd/v2/cmd/{name}" for name in CONTAINERD_BINARIES),
                  {name: nbins.all()[name] for name in CONTAINERD_BINARIES},
                  stamp=_stamped(containerd_ldflags(versions.CONTAINERD)), tags=CONTAINERD_BUILD_TAGS),
        GoProgram("registry", "github.com/distribution/distribution/v3", versions.REGISTRY, (), {"registry": nbins.registry},
                  stamp=_stamped(registry_ldflags(versions.REGISTRY)), main=registry, revision=registry.digest()),
        GoProgram("cni-plugins", "github.com/containernetworking/plugins", versions.CNI_PLUGINS,
                  tuple(f"github.com/containernetworking/plugins/plugins/{kind}/{name}" for name, kind in CNI_PLUGINS.items()),
                  {name: nbins.cni_bin_dir / name for name in CNI_PLUGINS},
                  stamp=_stamped(cni_plugins_ldflags(versions.CNI_PLUGINS))),
        # The gateway's userspace WireGuard (docs/networking.md). The module's main package is
        # its root, so `go build` names the binary `wireguard`; it is installed under the name
        # its README and `wg-quick` use. No replace directives: built as released.
        GoProgram("wireguard-go", "golang.zx2c4.com/wireguard", versions.WIREGUARD_GO, ("golang.zx2c4.com/wireguard",),
                  {"wireguard": nbins.wireguard_go}),
    ]


def kwok_build_name() -> str:
    """kwok's cache key: its version and the revision of the harness's patch to it."""
    return go_wrapper.cache_key("kwok", versions.KWOK, kwok_patch.REVISION)


# --- I/O -------------------------------------------------------------------------------------
def _kubernetes_work(root: Path) -> Path:
    return root / "build" / f"kubernetes-{versions.KUBERNETES}"


def _list_modules(ctx: Context, work: Path) -> dict[str, str]:
    listing = subprocess.run([ctx.go, "list", "-m", "-f", go_wrapper.LIST_FORMAT, "all"], cwd=work, env=go_env(),
                             capture_output=True, text=True, check=False)
    if listing.returncode != 0:
        raise BuildError(f"step 'list the modules of kubernetes {versions.KUBERNETES}' failed: "
                         f"{listing.stderr.strip()[-800:]}\nWhat to try: check that the Go module proxy is reachable (GOPROXY).")
    return go_wrapper.build_list(listing.stdout)


def _control_plane_list(ctx: Context) -> dict[str, str]:
    """Write the control plane's wrapper module; the versions its build uses, which the
    programs built in its graph require ({} if that graph cannot be shared).

    First the wrapper that replaces each staging module (k8s.io/kubernetes requires them at
    v0.0.0) gives the build list; then the wrapper is rewritten to require every module of
    that list at its version instead, which selects the same versions (checked; otherwise
    the first wrapper stays) under the names a program's graph can select too
    (go_wrapper: Go's build cache keys a package by its module's selected version)."""
    work = _kubernetes_work(ctx.root)
    ctx.say(f"- kubernetes {versions.KUBERNETES}: reading the staging modules from k8s.io/kubernetes' go.mod")
    go_mod_path = Path(downloaded_module(ctx.go, "k8s.io/kubernetes", versions.KUBERNETES, work)["GoMod"])
    replacing = kubernetes_wrapper_go_mod(versions.KUBERNETES, staging_modules(go_mod_path.read_text()))
    (work / "go.mod").write_text(replacing)
    build_list = _list_modules(ctx, work)
    requiring = go_wrapper.go_mod("kubernetes", {
        "k8s.io/kubernetes": versions.KUBERNETES,
        **go_wrapper.control_plane_requirements(build_list, program_module="k8s.io/kubernetes"),
    })
    (work / "go.mod").write_text(requiring)
    try:
        changed = go_wrapper.off_the_graph(_list_modules(ctx, work), build_list)
    except BuildError as exc:
        changed = [str(exc).splitlines()[0]]
    if changed:
        ctx.say(f"- kubernetes {versions.KUBERNETES}: requiring its build list changes it ({', '.join(changed)}): "
                "built with the staging modules replaced, as before, and no program shares its graph")
        (work / "go.mod").write_text(replacing)
        return {}
    return build_list


def _kubernetes_step(ctx: Context, targets: dict[str, Path]) -> Step:
    """The ``k8s.io/kubernetes/cmd/<name>`` binaries named in ``targets`` (control plane and
    node together when both are missing: one `go build` shares its work between them)."""
    work = _kubernetes_work(ctx.root)
    names = list(targets)
    title = f"kubernetes {versions.KUBERNETES} ({', '.join(names)})"

    def compile() -> str:
        out = work / "out"
        out.mkdir(exist_ok=True)
        ctx.say(f"- kubernetes {versions.KUBERNETES}: building {', '.join(names)} "
                "(the first build takes tens of minutes on 2 cores)")
        run_step(
            f"build {title}",
            [ctx.go, "build", "-v", "-trimpath", "-ldflags", version_ldflags(versions.KUBERNETES), "-o", str(out) + "/",
             *[f"k8s.io/kubernetes/cmd/{name}" for name in names]],
            cwd=work, log_path=work / f"build-{'-'.join(names)}.log", say=ctx.say,
        )
        for name, target in targets.items():
            install(out / name, target)
        return ""

    def prepare() -> None:
        ctx.control_plane_build_list()

    return Step(title, prepare, compile)


def _pause_step(ctx: Context, target: Path) -> Step:
    """The sandbox (pause) container's binary from the same source as registry.k8s.io/pause:
    build/pause/linux/pause.c of the k8s.io/kubernetes module, static as upstream builds it."""
    work = ctx.root / "build" / f"pause-{versions.KUBERNETES}"
    source: list[Path] = []

    def prepare() -> None:
        module_dir = Path(downloaded_module(ctx.go, "k8s.io/kubernetes", versions.KUBERNETES, work)["Dir"])
        source.append(module_dir / "build" / "pause" / "linux" / "pause.c")

    def compile() -> str:
        if not source[0].exists():
            raise BuildError(f"pause.c not found at {source[0]}: k8s.io/kubernetes {versions.KUBERNETES} moved it?")
        cc = shutil.which("gcc") or shutil.which("cc")
        if not cc:
            raise BuildError("no C compiler for the pause binary: install gcc (and libc6-dev) and retry")
        ctx.say(f"- pause ({versions.KUBERNETES}): compiling {source[0].name}")
        run_step("build pause",
                 [cc, "-Os", "-Wall", "-Werror", "-static", f"-DVERSION={versions.KUBERNETES}", "-o", str(work / "pause"),
                  str(source[0])],
                 cwd=work, log_path=work / "build.log", say=ctx.say)
        install(work / "pause", target)
        return ""

    return Step(f"pause {versions.KUBERNETES}", prepare, compile)


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


def _missing(wanted: Sequence[Binaries | NodeBinaries]) -> dict[str, Path]:
    return {name: path for bins in wanted for name, path in bins.all().items() if not os.access(path, os.X_OK)}


def _plan(ctx: Context, missing: dict[str, Path]) -> list[Step]:
    """The steps that build what is missing: Kubernetes first (the longest, and the graph
    the shared programs reuse), then each program with a missing output, then pause."""
    kube = {name: path for name, path in missing.items() if name in KUBE_BINARIES + NODE_KUBE_BINARIES}
    steps = [_kubernetes_step(ctx, kube)] if kube else []
    paths = set(missing.values())
    for program in programs(binaries(ctx.root), node_binaries(ctx.root)):
        if paths & set(program.outputs.values()):
            steps.append(ProgramBuild(program, ctx).step())
    if "pause" in missing:
        steps.append(_pause_step(ctx, missing["pause"]))
    return steps


def _ensure(wanted: Sequence[Binaries | NodeBinaries], *, kind: str, root: Path, say: Say) -> None:
    """Build what is missing of ``wanted`` under the machine's one build lock (parallel
    callers wait, then find it built), print each step's time, and check that nothing is
    missing afterwards."""
    if not _missing(wanted):
        return
    with _Lock(root / "build.lock"):
        missing = _missing(wanted)
        if not missing:
            return
        say(f"kube-offload: building {', '.join(missing)} into {root / 'bin'} (cached for next time)")
        started = time.monotonic()
        ctx = Context(root=root, go=check_go(), say=say, control_plane_list=_control_plane_list)
        results = run_plan(_plan(ctx, missing), ctx)
        say(f"kube-offload: {kind}binaries ready in {int(time.monotonic() - started)}s; compile time of each step "
            "(its modules were downloaded beforehand, in the background while an earlier step compiled):")
        for result in results:
            say(f"  {result.seconds:>5}s  {result.title}" + (f"  [{result.how}]" if result.how else ""))
    still = _missing(wanted)
    if still:
        raise BuildError(f"after building, these {kind}binaries are still missing: {', '.join(still)}")


def ensure_binaries(*, say: Say | None = None, root: Path | None = None) -> Binaries:
    """Build whatever is missing (under a lock, so parallel callers wait), return paths."""
    root = root or cache_root()
    bins = binaries(root)
    _ensure([bins], kind="", root=root, say=say or _say_on_stderr)
    return bins


def ensure_node_binaries(*, say: Say | None = None, root: Path | None = None) -> NodeBinaries:
    """Build what a real node needs (kubelet, kube-proxy, containerd, CNI plugins, pause,
    the registry its images come from, CoreDNS, the gateway's wireguard-go),
    under the same lock as ensure_binaries: one Go build at a time on the machine."""
    root = root or cache_root()
    nbins = node_binaries(root)
    _ensure([nbins], kind="real-node ", root=root, say=say or _say_on_stderr)
    return nbins


def ensure_all(*, real_node: bool, say: Say | None = None, root: Path | None = None) -> tuple[Binaries, NodeBinaries]:
    """ensure_binaries and, with ``real_node``, ensure_node_binaries as one build: kubelet
    and kube-proxy in the control plane's `go build`, every download ahead of its step."""
    root = root or cache_root()
    bins, nbins = binaries(root), node_binaries(root)
    _ensure([bins, nbins] if real_node else [bins], kind="", root=root, say=say or _say_on_stderr)
    return bins, nbins


def _say_on_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def describe(bins: Binaries | NodeBinaries) -> Iterator[str]:
    for name, path in bins.all().items():
        state = "ok" if os.access(path, os.X_OK) else "missing"
        yield f"{name:<24} {state:<8} {path}"
