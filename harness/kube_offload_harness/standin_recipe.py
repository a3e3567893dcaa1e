"""What each stand-in image holds: the one place (docs/real-nodes.md, "Stand-in images",
has it as a table; standin_images.py builds it).

The everyday public images users name (busybox, alpine, python, nginx, debian, ubuntu) are
served by the environment's registry as stand-ins made from Debian bookworm packages. An
image is a stack of layers (:data:`STANDINS`); a layer is the files of some packages and
their dependencies (:data:`LAYERS`), less those of the layers it always sits on, plus what
their maintainer scripts would have made (packages are extracted, not installed) and the
few files that make an image behave like its original (:func:`extra_entries`). A layer is
the same bytes in every image that stacks it, so the registry and containerd keep it once.

All pure: the build's I/O (mmdebstrap, dpkg-deb, the cache) is in standin_images.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

from kube_offload_harness.debian_packages import File, merged_usr_path
from kube_offload_harness.oci_image import DEFAULT_PATH, Entry, ImageConfig

LIBRARY = "docker.io/library/"  # where a one-word name lives (containerd's normalization)

# A dependency on one of these is left out (debian_packages.closure), with the reason.
SKIP: Mapping[str, str] = {
    "dpkg": "named by dash, python3-minimal and others for their maintainer scripts, which never run here",
    "debconf": "asks questions while a package is installed; nothing is installed here",
    "debconf-2.0": "the same (virtual)",
    "iproute2": "named by Debian's nginx for its maintainer scripts",
    "openssl": "ca-certificates' maintainer script's tool; the pip layer writes the bundle itself",
}

# Paths no container uses (documentation, translations, a booted system's service files)
# and glibc's character-set modules (8 MB; Python's codecs are its own, iconv keeps
# glibc's built-in UTF-8/UCS sets). Each package's copyright file stays.
DROPPED = (
    "usr/share/man/", "usr/share/info/", "usr/share/locale/", "usr/share/lintian/", "usr/share/bug/",
    "usr/share/apport/", "usr/share/vim/", "usr/lib/x86_64-linux-gnu/gconv/", "usr/lib/systemd/",
    "etc/init.d/", "etc/logrotate.d/", "etc/ufw/", "etc/update-motd.d/",
)


@dataclass(frozen=True)
class Context:
    """What :func:`extra_entries` reads off the packages: the layer's own files by path,
    and busybox's applets (``busybox --list-full``) for the busybox layer."""

    files: Mapping[str, File] = field(default_factory=dict)
    applets: tuple[str, ...] = ()


@dataclass(frozen=True)
class LayerRecipe:
    name: str
    what: str
    packages: tuple[str, ...] = ()  # with their dependencies
    on: tuple[str, ...] = ()  # the layers always beneath: their packages are not repeated
    drop: tuple[str, ...] = ()  # paths of its packages it leaves out (prefixes)


@dataclass(frozen=True)
class StandIn:
    names: tuple[str, ...]  # as manifests write them: "busybox:1.36" is docker.io/library/busybox:1.36
    original: str  # what it stands in for, in the docs' words
    layers: tuple[str, ...]
    config: ImageConfig

    @property
    def full_names(self) -> list[str]:
        return [name if "/" in name else LIBRARY + name for name in self.names]


LAYERS: tuple[LayerRecipe, ...] = (
    LayerRecipe("glibc", "Debian's C library, /etc/services, merged /usr, users and name service configuration",
                packages=("libc6", "netbase")),
    LayerRecipe("busybox", "Debian's busybox (dynamically linked: names resolve through glibc) and a link per applet",
                packages=("busybox",), on=("glibc",)),
    LayerRecipe("alpine", "/etc/os-release and /etc/alpine-release of Alpine 3.19, an `apk` that says it cannot install",
                on=("glibc", "busybox")),
    LayerRecipe("debian", "bash, dash as sh, coreutils and the rest of a Debian base's everyday tools, tzdata",
                packages=("base-files", "bash", "dash", "coreutils", "debianutils", "diffutils", "findutils", "grep", "gzip",
                          "hostname", "libc-bin", "mawk", "ncurses-base", "ncurses-bin", "sed", "tar", "tzdata"),
                on=("glibc",)),
    LayerRecipe("python", "Debian's Python 3.11 with its standard library, `python3` and `python`",
                packages=("python3", "python-is-python3"), on=("glibc",),
                # pip installs where it is told, as in python.org's images (PEP 668's marker
                # makes Debian's pip refuse to touch the system Python)
                drop=("usr/lib/python3.11/EXTERNALLY-MANAGED",)),
    LayerRecipe("pip", "Debian's pip 23 with setuptools and wheel, venv's ensurepip, the CA bundle pip reads",
                packages=("python3-pip", "python3.11-venv"), on=("glibc", "python")),
    LayerRecipe("nginx", "Debian's nginx 1.22 configured as the official image: /usr/share/nginx/html on :80, logs to stdout",
                packages=("nginx",), on=("glibc",), drop=("etc/nginx/sites-available/", "etc/nginx/sites-enabled/")),
)

_PYTHON = ImageConfig(env=[DEFAULT_PATH, "LANG=C.UTF-8"], cmd=["python3"])
_NGINX = ImageConfig(cmd=["nginx", "-g", "daemon off;"], exposed_ports=["80/tcp"], stop_signal="SIGQUIT")
STANDINS: tuple[StandIn, ...] = (
    StandIn(("busybox:1.36", "busybox:latest"), "busybox", ("glibc", "busybox"), ImageConfig(cmd=["sh"])),
    StandIn(("alpine:3", "alpine:3.19", "alpine:latest"), "alpine", ("glibc", "busybox", "alpine"), ImageConfig(cmd=["/bin/sh"])),
    StandIn(("python:3.11-slim", "python:3.11", "python:3.11-slim-bookworm", "python:3.11-bookworm"), "python (Debian)",
            ("glibc", "debian", "python", "pip"), _PYTHON),
    StandIn(("python:3.11-alpine", "python:alpine", "python:3.11-alpine3.19"), "python (Alpine)",
            ("glibc", "busybox", "alpine", "python", "pip"), _PYTHON),
    StandIn(("nginx:latest", "nginx:bookworm"), "nginx (Debian)", ("glibc", "debian", "nginx"), _NGINX),
    StandIn(("nginx:alpine",), "nginx (Alpine)", ("glibc", "busybox", "alpine", "nginx"), _NGINX),
    StandIn(("debian:bookworm", "debian:bookworm-slim", "debian:12", "debian:12-slim", "ubuntu:22.04", "ubuntu:latest"),
            "debian, ubuntu", ("glibc", "debian"), ImageConfig(cmd=["bash"])),
)
# The names the harness and its tests use.
BUSYBOX_IMAGE = LIBRARY + "busybox:1.36"
PYTHON_IMAGE = LIBRARY + "python:3.11-slim"


# --- checks -------------------------------------------------------------------------------------
def check_recipe(layers: Iterable[LayerRecipe] = LAYERS, standins: Iterable[StandIn] = STANDINS) -> None:
    """Every layer an image stacks exists and sits on what it declares (``on``); no name
    is served twice."""
    by_name = {layer.name: layer for layer in layers}
    seen: set[str] = set()
    for standin in standins:
        for position, name in enumerate(standin.layers):
            if name not in by_name:
                raise ValueError(f"{standin.names[0]}: no layer {name!r} in LAYERS")
            missing = set(by_name[name].on) - set(standin.layers[:position])
            if missing:
                raise ValueError(f"{standin.names[0]}: layer {name!r} must sit on {', '.join(sorted(missing))}")
        twice = seen & set(standin.full_names)
        if twice:
            raise ValueError(f"{', '.join(sorted(twice))} named by two stand-ins")
        seen |= set(standin.full_names)


# --- the files of a layer -------------------------------------------------------------------------
def kept(path: str, kind: str, drop: tuple[str, ...] = ()) -> bool:
    """Whether a package's path goes into its layer: not a DROPPED (or the layer's own
    ``drop``) prefix; of /usr/share/doc only each package's directory and copyright."""
    if path.startswith("usr/share/doc/"):
        parts = path.split("/")
        return (kind == "dir" and len(parts) == 4) or (len(parts) == 5 and parts[4] == "copyright")
    return not any(path == prefix.rstrip("/") or path.startswith(prefix) for prefix in (*DROPPED, *drop))


def layer_entries(recipe: LayerRecipe, files: Iterable[File], extras: list[Entry]) -> list[Entry]:
    """One layer's entries: its packages' files that are kept, then ``extras``, which
    replace a package's file of the same path (nginx.conf). Two packages shipping
    different content at one path is an error; a directory shipped twice is one."""
    entries: dict[str, Entry] = {}
    for item in files:
        if not kept(item.path, item.kind, recipe.drop):
            continue
        entry = Entry(item.path, item.kind, data=item.data, mode=item.mode & 0o7777, target=item.target, uid=item.uid, gid=item.gid)
        previous = entries.get(item.path)
        if previous is not None and previous != entry and not (previous.kind == entry.kind == "dir"):
            raise ValueError(f"layer {recipe.name}: two packages ship {item.path} differently")
        entries.setdefault(item.path, entry)
    for extra in extras:
        entries[extra.path.strip("/")] = extra
    return list(entries.values())


def _text(path: str, text: str, mode: int = 0o644) -> Entry:
    return Entry(path, data=text.encode(), mode=mode)


def _link(path: str, target: str) -> Entry:
    return Entry(path, "symlink", target=target, mode=0o777)


def _dirs(*paths: str, mode: int = 0o755) -> list[Entry]:
    return [Entry(path, "dir", mode=mode) for path in paths]


# uid, gid, home, shell: the official images' system users that manifests name (nginx runs
# its workers as nginx, 101), root's shell the one every stand-in has.
USERS = (("root", 0, 0, "/root", "/bin/sh"), ("daemon", 1, 1, "/usr/sbin", "/usr/sbin/nologin"),
         ("bin", 2, 2, "/bin", "/usr/sbin/nologin"), ("sys", 3, 3, "/dev", "/usr/sbin/nologin"),
         ("www-data", 33, 33, "/var/www", "/usr/sbin/nologin"), ("nginx", 101, 101, "/nonexistent", "/bin/false"),
         ("nobody", 65534, 65534, "/nonexistent", "/usr/sbin/nologin"))
GROUPS = (("root", 0), ("daemon", 1), ("bin", 2), ("sys", 3), ("adm", 4), ("tty", 5), ("disk", 6), ("mail", 8),
          ("www-data", 33), ("staff", 50), ("users", 100), ("nginx", 101), ("nogroup", 65534))
NSSWITCH = """\
# kube-offload stand-in: local files first, then the pod's nameserver (/etc/resolv.conf,
# with the search path the kubelet writes)
passwd: files
group: files
shadow: files
hosts: files dns
networks: files
protocols: files
services: files
ethers: files
rpc: files
"""


def _glibc(context: Context) -> list[Entry]:
    entries = [_link(top, f"usr/{top}") for top in ("bin", "sbin", "lib", "lib64")]
    entries += _dirs("usr", "usr/bin", "usr/sbin", "usr/lib", "usr/lib64", "usr/local", "usr/local/bin", "etc", "proc", "sys",
                     "dev", "run", "var", "var/log", "var/cache", "var/lib", "home", "mnt", "opt", "srv")
    entries += _dirs("tmp", "var/tmp", mode=0o1777) + _dirs("root", mode=0o700)
    entries.append(_text("etc/passwd", "".join(f"{n}:x:{u}:{g}:{n}:{h}:{s}\n" for n, u, g, h, s in USERS)))
    entries.append(_text("etc/group", "".join(f"{n}:x:{g}:\n" for n, g in GROUPS)))
    entries.append(_text("etc/nsswitch.conf", NSSWITCH))
    return entries


def _busybox(context: Context) -> list[Entry]:
    """A link per applet where ``busybox --list-full`` puts it (merged into /usr), as
    ``busybox --install -s`` would make them."""
    # (``linuxrc``, at the root, is busybox as an initramfs's init: not for a container)
    links = {merged_usr_path(applet) for applet in context.applets if "/" in applet.strip("/") and not applet.endswith("/busybox")}
    if "usr/bin/sh" not in links or "usr/bin/wget" not in links:
        raise ValueError(f"busybox --list-full has no sh or wget ({len(links)} applets): not the busybox this recipe expects")
    return [_text(path, WGET, mode=0o755) if path == "usr/bin/wget" else _link(path, "/usr/bin/busybox")
            for path in sorted(links)]


# Debian bookworm's busybox is built without wget's timeout (FEATURE_WGET_TIMEOUT): `-T SEC`
# crashes it (exit 139) and `--timeout=SEC` is refused, while the original busybox:1.36 has
# both, and manifests use them everywhere (`wget -q -T 1 -O- http://svc`). `wget` is this
# script, which takes the timeout off the command line and runs busybox's wget under
# busybox's `timeout`, failing as the original does ("download timed out", exit 1). The
# original's is a read timeout; this one bounds the whole transfer, the same for the
# short requests it is used for. Only `busybox wget -T` itself still crashes.
WGET = """\
#!/usr/bin/busybox sh
# kube-offload's stand-in for busybox's wget -T/--timeout (docs/real-nodes.md, "Stand-in images")
secs="" want=""
for arg do
  shift
  if [ -n "$want" ]; then secs=$arg want=""; continue; fi
  case $arg in
    --timeout=*) secs=${arg#--timeout=} ;;
    --timeout|-T) want=1 ;;
    -T*) secs=${arg#-T} ;;
    -*T*)
      flags=${arg%%T*}
      case ${flags#-} in
        *[!cqS]*) set -- "$@" "$arg" ;;
        *) set -- "$@" "$flags"; secs=${arg#*T}; [ -n "$secs" ] || want=1 ;;
      esac ;;
    *) set -- "$@" "$arg" ;;
  esac
done
if [ -n "$want" ]; then echo "wget: option requires an argument: T" >&2; exit 1; fi
[ -n "$secs" ] || exec /usr/bin/busybox wget "$@"
case $secs in ""|*[!0-9]*) echo "wget: invalid number '$secs'" >&2; exit 1 ;; esac
# sh reports a child killed by SIGTERM as "Terminated" on its own stderr, which the original
# never prints: that stderr is /dev/null while it waits, wget's is the caller's (fd 3)
exec 3>&2 2>/dev/null
/usr/bin/busybox timeout "$secs" /usr/bin/busybox sh -c 'exec /usr/bin/busybox wget "$@" 2>&3 3>&-' wget "$@"
status=$?
exec 2>&3 3>&-
if [ "$status" = 143 ]; then echo "wget: download timed out" >&2; exit 1; fi
exit "$status"
"""


ALPINE_VERSION = "3.19.0"
APK = """\
#!/bin/sh
# kube-offload's stand-in for Alpine's apk (docs/real-nodes.md, "Stand-in images").
echo "apk: kube-offload's stand-in for alpine (Debian's busybox on glibc) has no apk database, and the" \\
     "cluster's pods reach no package repository: nothing can be installed ($*)" >&2
exit 1
"""


def _alpine(context: Context) -> list[Entry]:
    major_minor = ALPINE_VERSION.rsplit(".", 1)[0]
    os_release = (
        'NAME="Alpine Linux"\nID=alpine\n'
        f"VERSION_ID={ALPINE_VERSION}\n"
        f'PRETTY_NAME="Alpine Linux v{major_minor} (kube-offload stand-in: Debian\'s busybox on glibc)"\n'
        'VARIANT="kube-offload stand-in"\nVARIANT_ID=kube-offload-standin\n'
        'HOME_URL="https://alpinelinux.org/"\n'
    )
    return [_text("etc/os-release", os_release), _text("etc/alpine-release", ALPINE_VERSION + "\n"),
            _text("usr/sbin/apk", APK, mode=0o755)]


APT = """\
#!/bin/sh
# kube-offload's stand-in for apt (docs/real-nodes.md, "Stand-in images").
echo "E: kube-offload's stand-in for debian/ubuntu has no apt and no dpkg database, and the cluster's" \\
     "pods reach no Debian mirror: nothing can be installed ($(basename "$0") $*)" >&2
exit 100
"""


def _debian(context: Context) -> list[Entry]:
    """What the maintainer scripts of base-files, debianutils, mawk and tzdata would have
    written (files copied from templates, the alternatives' links), and apt's stand-in."""
    def template(path: str) -> bytes:
        found = context.files.get(path)
        if found is None:
            raise ValueError(f"no {path} in the debian layer's packages: not the Debian this recipe expects")
        return found.data

    return [
        Entry("etc/profile", data=template("usr/share/base-files/profile")),
        Entry("root/.bashrc", data=template("usr/share/base-files/dot.bashrc")),
        Entry("root/.profile", data=template("usr/share/base-files/dot.profile")),
        Entry("etc/shells", data=template("usr/share/debianutils/shells")),
        _link("usr/bin/awk", "/usr/bin/mawk"), _link("usr/bin/which", "/usr/bin/which.debianutils"),
        _link("etc/localtime", "/usr/share/zoneinfo/Etc/UTC"),
        _text("etc/timezone", "Etc/UTC\n"),
        _text("usr/bin/apt-get", APT, mode=0o755),
        _text("usr/bin/apt", APT, mode=0o755),
    ]


def _python(context: Context) -> list[Entry]:
    # python.org's images have their Python in /usr/local/bin (scripts name it there)
    return [_link(f"usr/local/bin/{name}", "/usr/bin/python3") for name in ("python", "python3", "python3.11")]


def _pip(context: Context) -> list[Entry]:
    """pip's links where python.org's images have them, and the CA bundle
    update-ca-certificates would have written from ca-certificates' files (Debian's pip
    reads it: without it ``pip install`` fails on the missing file, not on the network)."""
    certificates = sorted(path for path in context.files if path.startswith("usr/share/ca-certificates/") and path.endswith(".crt"))
    if not certificates:
        raise ValueError("no usr/share/ca-certificates/**/*.crt in the pip layer: not the ca-certificates this recipe expects")
    bundle = b"".join(context.files[path].data.rstrip(b"\n") + b"\n" for path in certificates)
    return [*(_link(f"usr/local/bin/{name}", "/usr/bin/pip3") for name in ("pip", "pip3", "pip3.11")),
            Entry("etc/ssl/certs/ca-certificates.crt", data=bundle)]


NGINX_CONF = """\
# kube-offload's stand-in for the nginx image: Debian's nginx with the official image's
# layout (docs/real-nodes.md, "Stand-in images"). Sites go in /etc/nginx/conf.d/.
user nginx;
worker_processes auto;
error_log /var/log/nginx/error.log notice;
pid /run/nginx.pid;

events {
    worker_connections 1024;
}

http {
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    log_format main '$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent '
                    '"$http_referer" "$http_user_agent" "$http_x_forwarded_for"';
    access_log /var/log/nginx/access.log main;
    sendfile on;
    keepalive_timeout 65;
    include /etc/nginx/conf.d/*.conf;
}
"""
NGINX_DEFAULT_SITE = """\
server {
    listen 80;
    server_name localhost;

    location / {
        root /usr/share/nginx/html;
        index index.html index.htm;
    }
}
"""


def _nginx(context: Context) -> list[Entry]:
    if "usr/share/nginx/html/index.html" not in context.files:
        raise ValueError("nginx-common has no usr/share/nginx/html/index.html: not the nginx this recipe expects")
    return [
        _text("etc/nginx/nginx.conf", NGINX_CONF), _text("etc/nginx/conf.d/default.conf", NGINX_DEFAULT_SITE),
        *_dirs("var/log/nginx", "var/lib/nginx", "var/cache/nginx"),
        # what `kubectl logs` shows, as in the official image
        _link("var/log/nginx/access.log", "/dev/stdout"), _link("var/log/nginx/error.log", "/dev/stderr"),
    ]


EXTRAS: Mapping[str, Callable[[Context], list[Entry]]] = {
    "glibc": _glibc, "busybox": _busybox, "alpine": _alpine, "debian": _debian, "python": _python, "pip": _pip,
    "nginx": _nginx,
}


def extra_entries(layer: str, context: Context) -> list[Entry]:
    return EXTRAS[layer](context)


def image_labels(standin: StandIn, key: str) -> dict[str, str]:
    return {
        "org.opencontainers.image.description":
            f"kube-offload's stand-in for {standin.original}, made from Debian bookworm packages "
            f"(layers: {', '.join(standin.layers)}); docs/real-nodes.md, \"Stand-in images\"",
        "io.kube-offload.standin-recipe": key,
    }
