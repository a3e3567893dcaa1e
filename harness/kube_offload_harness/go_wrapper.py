"""Wrapper Go modules: the go.mod, and for CoreDNS and the registry a small main of ours,
from which the binary builder (binaries.py) compiles a released Go program.

A wrapper requires the program's module at its release. On its own, its build list is the
release's (the program's go.mod decides every version, what ``go install module@version``
builds): its **own graph**. In the **control plane's graph**, every module that the
Kubernetes control plane's build also uses is at the version that build uses, so the
packages the two have in common (client-go, apimachinery, apiserver, grpc, ...) are the
same packages to Go's build cache, which then compiles them once for all.

Same version means *selected* at that version. Go's cache key for a compiled package
names its module's selected version, and a ``replace`` directive does not change which
version is selected (``replace X => X v1`` while the graph asks for v2 compiles v1's source
under v2's name), so pinning by ``replace`` shares nothing. Hence: the control plane's own
wrapper requires every module of its build list at its version (no replace, the build list
unchanged: checked), and a program's wrapper requires the same list and builds the program
from a copy of its source whose go.mod requires the control plane's versions of the
modules they share (:func:`pin_requirements`): a tool that asks for cbor v2.9.2 where the
control plane has v2.9.1 would otherwise move every package above cbor, i.e. most of
client-go, out of the shared cache. A program that does not compile that way falls back to
its own graph (binaries.py says which was used).

Everything here is pure: text in, text out.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Mapping

from kube_offload_harness import versions

# What `go list -m -f LIST_FORMAT all` prints, one module a line: its path and the version
# the build uses (the replacement's, when a replace directive names one; empty for the
# main module and for a replacement by a directory).
LIST_FORMAT: Final = "{{.Path}} {{with .Replace}}{{.Version}}{{else}}{{.Version}}{{end}}"
MODULE_PREFIX: Final = "kube-offload.local/build/"


def cache_key(name: str, version: str, revision: str = "") -> str:
    """A program's directory under the cache's build/ and bin/: another version or
    revision (kwok's patch, a small main's plugin set) is another build."""
    return f"{name}-{version}" + (f"-{revision}" if revision else "")


def go_mod(name: str, requires: Mapping[str, str], *, pins: Mapping[str, str] | None = None,
           directories: Mapping[str, Path] | None = None) -> str:
    """The wrapper's go.mod. ``requires``: module -> version; ``pins``: module -> the source
    of that version whatever the graph asks for (only for Kubernetes' staging modules, which
    k8s.io/kubernetes requires at v0.0.0); ``directories``: module -> a local copy of its
    source. Its module path ends in ``name``, which is what ``go build`` names a small
    main's binary."""
    lines = [
        f"module {MODULE_PREFIX}{name}",
        "",
        f"go {versions.GO_MINIMUM[0]}.{versions.GO_MINIMUM[1]}.0",
        "",
    ]
    lines += [f"require {module} {version}" for module, version in sorted(requires.items())]
    lines += [""]
    lines += [f"replace {module} => {module} {version}" for module, version in sorted((pins or {}).items())]
    lines += [f"replace {module} => {path}" for module, path in sorted((directories or {}).items())]
    return "\n".join(lines).rstrip("\n") + "\n"


def build_list(listing: str) -> dict[str, str]:
    """Module -> version from ``go list -m -f LIST_FORMAT all``. The main module and
    modules replaced by a directory (no version) are left out: nothing can pin to them."""
    found: dict[str, str] = {}
    for line in listing.splitlines():
        fields = line.split()
        if len(fields) == 2:
            found[fields[0]] = fields[1]
        elif len(fields) > 2:
            raise ValueError(f"unexpected line in `go list -m` output: {line!r}")
    return found


def control_plane_requirements(control_plane: Mapping[str, str], *, program_module: str) -> dict[str, str]:
    """What a program's wrapper requires besides the program to build in the control plane's
    graph: every module of the control plane's build list at its version there, except
    k8s.io/kubernetes itself (no program imports it) and the program's own module."""
    skip = {"k8s.io/kubernetes", program_module}
    return {module: version for module, version in control_plane.items()
            if module not in skip and not module.startswith(MODULE_PREFIX)}


_REQUIREMENT = re.compile(r"^(\s*(?:require\s+)?)(\S+)(\s+)(v\S+)", re.MULTILINE)


def pin_requirements(go_mod_text: str, versions: Mapping[str, str]) -> str:
    """A program's go.mod with each requirement of a module in ``versions`` set to that
    version (up or down); other lines as they were. Only ``require`` lines and the lines of
    a ``require ( ... )`` block are touched: replace/exclude directives of a dependency are
    ignored by Go anyway."""
    out, in_block = [], False
    for line in go_mod_text.splitlines(keepends=True):
        stripped = line.strip()
        if stripped.startswith("require ("):
            in_block = True
        elif in_block and stripped.startswith(")"):
            in_block = False
        elif in_block or stripped.startswith("require "):
            line = _REQUIREMENT.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(3)}{versions.get(m.group(2), m.group(4))}",
                                    line, count=1)
        out.append(line)
    return "".join(out)


def off_the_graph(selected: Mapping[str, str], control_plane: Mapping[str, str]) -> list[str]:
    """Modules of the control plane's build list that a program's graph selects at another
    version (something it needs asks for a newer one): the packages above them are compiled
    anew for the program."""
    return sorted(module for module, version in control_plane.items()
                  if module in selected and selected[module] != version and not module.startswith(MODULE_PREFIX))


@dataclass(frozen=True)
class SmallMain:
    """A ``package main`` of ours that runs a program's own entry point with only some of
    its plugins or drivers compiled in (each is a blank import that registers itself)."""

    program: str
    version: str
    why: str
    entry_import: str
    entry_call: str
    plugins: tuple[str, ...]

    def source(self) -> str:
        blank = "\n".join(f'\t_ "{package}"' for package in sorted(self.plugins))
        return (
            "// Generated by kube-offload's harness (go_wrapper.py); rebuilt, never edited.\n"
            f"// {self.program} {self.version}: {self.why}.\n"
            "package main\n\n"
            "import (\n"
            f"\t\"{self.entry_import}\"\n\n"
            f"{blank}\n"
            ")\n\n"
            "func main() {\n"
            f"\t{self.entry_call}\n"
            "}\n"
        )

    def digest(self) -> str:
        """Part of the binary's cache key: another plugin set is another binary."""
        return hashlib.sha256(self.source().encode()).hexdigest()[:8]


# CoreDNS's Corefile directives -> the package that registers each (most have the
# directive's name; ``prometheus`` is plugin/metrics).
COREDNS_PLUGIN_PACKAGES: Final = {
    "errors": "errors", "health": "health", "ready": "ready", "kubernetes": "kubernetes",
    "prometheus": "metrics", "forward": "forward", "cache": "cache", "loop": "loop",
    "reload": "reload", "loadbalance": "loadbalance", "log": "log",
}


def coredns_main() -> SmallMain:
    """The harness's Corefile (cluster_dns.corefile) uses errors, health, ready, kubernetes,
    cache and loadbalance; kubeadm's default Corefile adds prometheus, forward, loop and
    reload, so a manifest that brings its own ConfigMap works as with the real image; log
    is the one most often added by hand. The other ~50 (cloud DNS providers, etcd, dnstap,
    tracing, ...) are what made CoreDNS slow to build."""
    return SmallMain(
        program="CoreDNS", version=versions.COREDNS,
        why="only the plugins of the harness's and kubeadm's Corefiles (and log)",
        entry_import="github.com/coredns/coredns/coremain", entry_call="coremain.Run()",
        plugins=tuple(f"github.com/coredns/coredns/plugin/{package}" for package in COREDNS_PLUGIN_PACKAGES.values()),
    )


# Distribution's storage drivers the harness can configure (registry.registry_config uses
# filesystem); the cloud ones (azure, gcs, s3-aws, the cloudfront middleware) are left out.
REGISTRY_STORAGE_DRIVERS: Final = ("filesystem", "inmemory")


def registry_main() -> SmallMain:
    """Distribution's cmd/registry without the cloud storage drivers: the same command
    (``registry serve <config>``), auth methods, pull-through proxy and local middleware."""
    base = "github.com/distribution/distribution/v3/registry"
    plugins = (
        "net/http/pprof",
        f"{base}/auth/htpasswd", f"{base}/auth/silly", f"{base}/auth/token", f"{base}/proxy",
        *(f"{base}/storage/driver/{driver}" for driver in REGISTRY_STORAGE_DRIVERS),
        f"{base}/storage/driver/middleware/redirect", f"{base}/storage/driver/middleware/rewrite",
    )
    return SmallMain(
        program="registry", version=versions.REGISTRY,
        why="Distribution's registry with the filesystem and in-memory storage drivers only",
        # As upstream's main: the commands exit non-zero themselves when they fail.
        entry_import=base, entry_call="_ = registry.RootCmd.Execute()",
        plugins=plugins,
    )
