#!/bin/sh
# The gateway's userspace WireGuard (docs/networking.md, docs/image.md): wireguard-go from
# its Go module, golang.zx2c4.com/wireguard at version $1, into $2/wireguard-go. Run by the
# Dockerfile's wireguard-go stage: on golang:<version> it builds; `make image` gives that
# stage a base that already holds the binary (built by scripts/build-image.sh with the
# host's Go and cached), and then there is nothing to do.
set -eu
version=$1 out=$2
if [ -x "$out/wireguard-go" ] && [ "$(cat "$out/wireguard-go.version" 2>/dev/null)" = "$version" ]; then
  echo "wireguard-go $version: prebuilt"
  exit 0
fi
mkdir -p "$out"
# The module's main package is its root, so `go install` names the binary `wireguard`.
CGO_ENABLED=0 GOBIN=/tmp/wireguard-go-bin go install -trimpath -ldflags "-s -w" "golang.zx2c4.com/wireguard@$version"
mv /tmp/wireguard-go-bin/wireguard "$out/wireguard-go"
echo "$version" >"$out/wireguard-go.version"
