# kube-offload's container image: one image, entrypoint `kube-offload`; each container runs
# one subcommand (webhook, extender, vkubelet, enforcer, relay, gateway, certs). See docs/image.md.
#
#   docker build --build-arg VERSION=0.1.0 -t kube-offload:0.1.0 .
#
# `make image` builds this same file with buildah, without Docker or a registry
# (scripts/build-image.sh): only the two base images differ (Debian's Python 3.11 made
# from Debian packages instead of python.org's); see docs/image.md.
# Both stages on python.org's Python; `make image` passes Debian-built bases instead.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG BUILDER_IMAGE=python:3.11-slim-bookworm
# The gateway's userspace WireGuard is built from its Go module here; `make image` passes a
# base holding the binary it built with the host's Go instead.
ARG WIREGUARD_GO_IMAGE=golang:1.26-bookworm

# --- wireguard-go: the gateway's WireGuard where the node's kernel has no module ---------
FROM ${WIREGUARD_GO_IMAGE} AS wireguard-go
# One place for the version (harness versions.py WIREGUARD_GO must equal it: a unit test).
ARG WIREGUARD_GO_VERSION=v0.0.0-20260522210424-ecfc5a8d5446
COPY scripts/image/wireguard-go.sh /wireguard-go.sh
RUN sh /wireguard-go.sh "${WIREGUARD_GO_VERSION}" /out

# --- builder: the project's wheel and a venv with it and its runtime dependencies --------
FROM ${BUILDER_IMAGE} AS builder
COPY . /src
# The recipe is shared with scripts/build-image.sh so both images hold the same venv.
RUN sh /src/scripts/image/build-venv.sh /src /opt/kube-offload
# A name for uid/gid 65532 (the charts' runAsUser/runAsGroup) so that tools which look the
# user up find one; home is /tmp, the only writable path. Written here and copied, because
# the final stage may have no shell (the `make image` base has none). Both stages share
# one base distribution, so these files are the final base's own plus this line.
RUN mkdir -p /out/etc \
 && { cat /etc/passwd; echo 'nonroot:x:65532:65532:nonroot:/tmp:/usr/sbin/nologin'; } >/out/etc/passwd \
 && { cat /etc/group; echo 'nonroot:x:65532:'; } >/out/etc/group

# --- the image: slim Python + the venv, non-root, read-only root file system -------------
FROM ${PYTHON_IMAGE}
ARG VERSION=dev
LABEL org.opencontainers.image.title="kube-offload" \
      org.opencontainers.image.description="Run the pods of one Kubernetes cluster on the resources of others, transparently." \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /out/etc/passwd /out/etc/group /etc/
COPY --from=builder /opt/kube-offload /opt/kube-offload
COPY --from=wireguard-go /out/wireguard-go /usr/local/bin/wireguard-go
# ip, iptables and wg for the gateway (Debian's); exec form: the `make image` base has no shell.
COPY scripts/image/gateway-tools.py /tmp/gateway-tools.py
RUN ["python3.11", "/tmp/gateway-tools.py"]
# Read-only root file system: Python writes no bytecode, HOME (kubeconfig lookup, gunicorn)
# and TMPDIR (gunicorn's worker heartbeat files, the kubernetes client's certificate
# files) are /tmp, which the charts mount as an emptyDir.
ENV PATH=/opt/kube-offload/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    TMPDIR=/tmp
WORKDIR /tmp
USER 65532:65532
ENTRYPOINT ["kube-offload"]
