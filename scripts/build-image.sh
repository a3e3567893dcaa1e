#!/usr/bin/env bash
# `make image`: build the repository's Dockerfile into localhost/kube-offload:<version> on a
# machine without a Docker daemon and without any container registry, and export it as
# archives. Idempotent: run it again and it rebuilds only what changed.
#
# How (docs/image.md):
#   1. installs buildah and mmdebstrap from Debian if they are missing (needs root);
#   2. makes the Dockerfile's two base images from Debian bookworm packages instead of
#      pulling python:3.11-slim-bookworm: a runtime base (Debian's Python 3.11 and the
#      shared libraries it needs, no shell, nothing else) and a builder base (the same plus
#      venv/pip, a shell, coreutils, findutils); each is remade only when this script
#      changes (or on KUBE_OFFLOAD_IMAGE_REFRESH=1);
#   3. runs `buildah bud` on the Dockerfile itself with those two bases as build arguments,
#      so the image is the Dockerfile's, step for step;
#   4. writes it as an OCI archive and a docker-archive, and prints the image's size.
#
# Environment: KUBE_OFFLOAD_IMAGE (default localhost/kube-offload:<version>),
# KUBE_OFFLOAD_IMAGE_DIR (archive directory, default .artifacts/image),
# KUBE_OFFLOAD_IMAGE_REFRESH=1 (remake the bases, e.g. for Debian security updates),
# DEBIAN_MIRROR / DEBIAN_SECURITY_MIRROR, STORAGE_DRIVER (buildah's, e.g. vfs where
# overlay is not available).
set -euo pipefail
cd "$(dirname "$0")/.."

started=$SECONDS
step() { printf '\n==> [%3ds] %s\n' "$((SECONDS - started))" "$*"; }
die() { printf 'build-image: %s\n' "$*" >&2; exit 1; }

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml | head -n1)
[ -n "$version" ] || die "no version = \"...\" line in pyproject.toml"
image=${KUBE_OFFLOAD_IMAGE:-localhost/kube-offload:$version}
archive_dir=${KUBE_OFFLOAD_IMAGE_DIR:-.artifacts/image}
suite=bookworm
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
security_mirror=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
# The bases are remade when this script (which says what they contain) changes.
recipe=$(sha256sum "$0" | cut -c1-16)
runtime_base=localhost/kube-offload-base:runtime-$suite
builder_base=localhost/kube-offload-base:builder-$suite
# No OCI runtime (runc/crun) is needed, and none may be installed: run steps in a chroot.
export BUILDAH_ISOLATION=chroot

# Debian's Python 3.11 (the runtime base): python3.11-minimal + libpython3.11-stdlib is
# what `python3.11` needs (ssl, sqlite3, ctypes, lzma, ...); base-files gives
# /etc/os-release so scanners know the distribution. No shell: a shell would need dash,
# which depends on dpkg, which brings tar, zstd, selinux... (~12 MB) that nothing runs;
# `dpkg-` keeps apt from adding dpkg to an empty system anyway.
# The gateway's tools (docs/networking.md): iproute2, iptables (nft and legacy), wireguard-tools.
runtime_packages=python3.11-minimal,libpython3.11-stdlib,base-files,iproute2,iptables,wireguard-tools,dpkg-
builder_packages=python3.11-minimal,libpython3.11-stdlib,python3.11-venv,base-files,dash,coreutils,findutils

# --- 1. tools ---------------------------------------------------------------------------
step "tools: buildah, mmdebstrap"
if ! command -v buildah >/dev/null || ! command -v mmdebstrap >/dev/null; then
  [ "$(id -u)" = 0 ] || die "buildah and mmdebstrap are missing; run as root to install them (apt-get), or install them yourself"
  command -v apt-get >/dev/null || die "buildah and mmdebstrap are missing and this is not a Debian-like system (no apt-get); install them yourself"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    buildah mmdebstrap ca-certificates >/dev/null
fi
[ "$(id -u)" = 0 ] || die "must run as root (mmdebstrap's root mode and buildah's chroot isolation)"
# One build at a time on this machine: builds share buildah's storage and the tags.
mkdir -p /run/lock
exec 9>/run/lock/kube-offload-image.lock
flock 9
echo "buildah $(buildah --version | awk '{print $3}'), mmdebstrap $(mmdebstrap --version | awk '{print $2}'), storage driver ${STORAGE_DRIVER:-$(buildah info --format '{{.store.GraphDriverName}}')}"

# The builder fetches the wheel's build backend and dependencies from PyPI, trusting the
# CA bundle this machine trusts (Debian's pip reads /etc/ssl/certs/ca-certificates.crt;
# a TLS-intercepting proxy's CA is only in the host's bundle). Mounted, never baked in.
ca_bundle=${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}
[ -f "$ca_bundle" ] || die "no CA bundle at $ca_bundle for the builder to reach PyPI; install ca-certificates or set PIP_CERT"

work=$(mktemp -d "${TMPDIR:-/tmp}/kube-offload-image.XXXXXX")
containers=()
cleanup() {
  local c
  for c in "${containers[@]}"; do buildah rm "$c" >/dev/null 2>&1 || true; done
  rm -rf "$work"
}
trap cleanup EXIT

image_label() {  # image label -> value ("" when the image or the label is missing)
  buildah inspect --type image --format "{{index .OCIv1.Config.Labels \"$2\"}}" "$1" 2>/dev/null || true
}

# The dpkg database of an extracted (not installed) root file system, written from the
# .deb files themselves, so that image scanners see the Debian packages and versions.
write_dpkg_status() {
  local rootfs=$1 deb
  mkdir -p "$rootfs/var/lib/dpkg"
  : >"$rootfs/var/lib/dpkg/status"
  for deb in "$rootfs"/var/cache/apt/archives/*.deb; do
    dpkg-deb --field "$deb" | sed '1a Status: install ok installed' >>"$rootfs/var/lib/dpkg/status"
    echo >>"$rootfs/var/lib/dpkg/status"
  done
}

# Packages are extracted, not installed: no maintainer script runs (none of these needs
# one to work). What their scripts would have made, and the directories a container
# runtime mounts over, are made here.
finish_rootfs() {
  local rootfs=$1
  write_dpkg_status "$rootfs"
  rm -rf "$rootfs"/var/cache/apt "$rootfs"/var/lib/apt "$rootfs"/var/log/apt "$rootfs"/etc/apt \
    "$rootfs"/var/log/dpkg.log "$rootfs"/usr/share/doc "$rootfs"/usr/share/man \
    "$rootfs"/usr/share/info "$rootfs"/usr/share/locale "$rootfs"/usr/share/lintian \
    "$rootfs"/usr/share/bug
  mkdir -p "$rootfs"/{proc,sys,dev,run,home,root,tmp,var/tmp,opt}
  chmod 1777 "$rootfs"/tmp "$rootfs"/var/tmp
  chmod 0700 "$rootfs"/root
  # base-passwd's and base-files' maintainer scripts would write these.
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n' >"$rootfs/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$rootfs/etc/group"
  if [ -f "$rootfs/usr/share/base-files/nsswitch.conf" ]; then
    cp "$rootfs/usr/share/base-files/nsswitch.conf" "$rootfs/etc/nsswitch.conf"
  fi
}

make_base() {  # image-name package-list description
  local name=$1 packages=$2 what=$3 rootfs=$work/rootfs-${1##*:} ctr previous
  if [ "${KUBE_OFFLOAD_IMAGE_REFRESH:-0}" != 1 ] && [ "$(image_label "$name" io.kube-offload.base-recipe)" = "$recipe" ]; then
    echo "$name: up to date (recipe $recipe); KUBE_OFFLOAD_IMAGE_REFRESH=1 remakes it"
    return
  fi
  mmdebstrap --quiet --mode=root --variant=extract --include="$packages" \
    --skip=download/empty --skip=cleanup/apt/cache \
    "$suite" "$rootfs" \
    "deb $mirror $suite main" "deb $mirror $suite-updates main" \
    "deb $security_mirror $suite-security main" </dev/null
  finish_rootfs "$rootfs"
  tar --numeric-owner -C "$rootfs" -cf "$rootfs.tar" .
  ctr=$(buildah from --quiet scratch)
  containers+=("$ctr")
  buildah add --quiet "$ctr" "$rootfs.tar" / >/dev/null
  buildah config \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env LANG=C.UTF-8 \
    --cmd /usr/bin/python3.11 \
    --label org.opencontainers.image.title="kube-offload base: $what" \
    --label org.opencontainers.image.description="Debian $suite packages: $packages" \
    --label io.kube-offload.base-recipe="$recipe" \
    "$ctr"
  previous=$(buildah images --quiet --no-trunc "$name" 2>/dev/null || true)
  buildah commit --quiet "$ctr" "$name" >/dev/null
  if [ -n "$previous" ]; then buildah rmi "$previous" >/dev/null 2>&1 || true; fi
  rm -rf "$rootfs" "$rootfs.tar"
  echo "$name: $(buildah images --format '{{.Size}}' "$name")"
}

# --- 2. the base images -----------------------------------------------------------------
step "runtime base $runtime_base (Debian $suite: $runtime_packages)"
make_base "$runtime_base" "$runtime_packages" "runtime (Debian's Python 3.11)"
step "builder base $builder_base (Debian $suite: $builder_packages)"
make_base "$builder_base" "$builder_packages" "builder (Debian's Python 3.11 with venv)"

# --- 2b. wireguard-go (the gateway's userspace WireGuard) --------------------------------
# Built with the host's Go (the project needs Go anyway) into the same cache the harness
# uses, then given to the Dockerfile's wireguard-go stage in a base that holds it. A
# Dockerfile without that stage (a release from before the gateway, which the day-2 upgrade
# test builds with this script) needs none.
wireguard_go_args=()
if grep -q ' AS wireguard-go$' Dockerfile; then
  wireguard_go_version=$(sed -n 's/^ARG WIREGUARD_GO_VERSION=//p' Dockerfile)
  [ -n "$wireguard_go_version" ] || die "no ARG WIREGUARD_GO_VERSION= line in the Dockerfile"
  wireguard_go_base=localhost/kube-offload-base:wireguard-go-$wireguard_go_version
  step "wireguard-go $wireguard_go_version -> $wireguard_go_base"
  wireguard_go_dir=${KUBE_OFFLOAD_CACHE:-$HOME/.cache/kube-offload}/bin/wireguard-go-$wireguard_go_version
  if [ ! -x "$wireguard_go_dir/wireguard-go" ]; then
    command -v go >/dev/null || die "Go is needed to build wireguard-go (golang.zx2c4.com/wireguard); install Go >= 1.26"
    mkdir -p "$wireguard_go_dir"
    env CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-mod=mod GOBIN="$work/wireguard-go-bin" \
      go install -trimpath -ldflags "-s -w" "golang.zx2c4.com/wireguard@$wireguard_go_version"
    mv "$work/wireguard-go-bin/wireguard" "$wireguard_go_dir/wireguard-go"
  fi
  if [ "$(image_label "$wireguard_go_base" io.kube-offload.base-recipe)" != "$recipe" ]; then
    ctr=$(buildah from --quiet --pull=false "$builder_base")
    containers+=("$ctr")
    buildah copy --quiet "$ctr" "$wireguard_go_dir/wireguard-go" /out/wireguard-go >/dev/null
    printf '%s\n' "$wireguard_go_version" >"$work/wireguard-go.version"
    buildah copy --quiet "$ctr" "$work/wireguard-go.version" /out/wireguard-go.version >/dev/null
    buildah config --label io.kube-offload.base-recipe="$recipe" "$ctr"
    buildah commit --quiet "$ctr" "$wireguard_go_base" >/dev/null
  fi
  echo "$wireguard_go_base: $(du -h "$wireguard_go_dir/wireguard-go" | cut -f1) binary"
  wireguard_go_args=(--build-arg WIREGUARD_GO_IMAGE="$wireguard_go_base")
else
  step "wireguard-go: the Dockerfile has no wireguard-go stage (a release from before the gateway): none built"
fi

# --- 3. the Dockerfile ------------------------------------------------------------------
step "buildah bud Dockerfile -> $image"
previous=$(buildah images --quiet --no-trunc "$image" 2>/dev/null || true)
revision=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
buildah bud --pull=false \
  --build-arg PYTHON_IMAGE="$runtime_base" \
  --build-arg BUILDER_IMAGE="$builder_base" \
  "${wireguard_go_args[@]}" \
  --build-arg VERSION="$version" \
  --label org.opencontainers.image.revision="$revision" \
  --volume "$ca_bundle:/etc/ssl/certs/ca-certificates.crt:ro" \
  --tag "$image" --file Dockerfile .
current=$(buildah images --quiet --no-trunc "$image")
if [ -n "$previous" ] && [ "$previous" != "$current" ]; then
  # The tag moved: drop the image it pointed to, so rebuilds do not pile up.
  buildah rmi "$previous" >/dev/null 2>&1 || true
fi
# Bases replaced while that image still used them are unused now.
buildah images --quiet --filter dangling=true --filter label=io.kube-offload.base-recipe |
  while read -r id; do buildah rmi "$id" >/dev/null 2>&1 || true; done

# --- 4. archive and figures -------------------------------------------------------------
step "archives: OCI, and Docker's format for docker load / kind load image-archive"
mkdir -p "$archive_dir"
archive=$archive_dir/kube-offload-$version.oci.tar
docker_archive=$archive_dir/kube-offload-$version.docker.tar
rm -f "$archive" "$docker_archive"
buildah push --quiet "$image" "oci-archive:$archive:$image" >/dev/null
buildah push --quiet "$image" "docker-archive:$docker_archive:$image" >/dev/null
ctr=$(buildah from --quiet --pull=false "$image")
containers+=("$ctr")
rootfs_size=$(du -s --apparent-size --block-size=1 "$(buildah mount "$ctr")" | awk '{printf "%.0f MB", $1 / 1e6}')
buildah umount "$ctr" >/dev/null

step "done in $((SECONDS - started))s"
echo "image:   $image ($(buildah images --format '{{.ID}} {{.Size}}' "$image"))"
echo "rootfs:  $rootfs_size uncompressed (sum of its files' sizes)"
echo "archive: $archive ($(du -h "$archive" | cut -f1), layers gzipped): podman load -i, skopeo copy oci-archive:..."
echo "archive: $docker_archive ($(du -h "$docker_archive" | cut -f1)): docker load -i, kind load image-archive"
