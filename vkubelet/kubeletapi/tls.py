"""The kubelet endpoint's serving certificate: the given files, or one generated at
start-up.

The kube-apiserver verifies a kubelet's certificate only when it runs with
``--kubelet-certificate-authority``; most clusters (and kwokctl's) do not, and then any
certificate works, so a vkubelet started without ``--kubelet-tls-cert`` makes its own
(ECDSA P-256, from a throw-away CA whose key is never kept, for the node address and
name). Where the apiserver does verify, issue one from the CA it trusts (``kube-offload
certs``) and pass it with ``--kubelet-tls-cert`` / ``--kubelet-tls-key``: the files are
re-read when they change, so a rotated certificate is used without a restart.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import shutil
import ssl
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from certs import pki

log = logging.getLogger("kube_offload.vkubelet.kubelet_api")

GENERATED_DAYS = 365


class TLSSetupError(RuntimeError):
    """The serving certificate cannot be used; the message names the flag."""


@dataclass(frozen=True)
class ServingFiles:
    cert: Path
    key: Path
    # Set when we generated the pair: its private directory, removed once loaded.
    generated_dir: Path | None = None

    def cleanup(self) -> None:
        if self.generated_dir is not None:
            shutil.rmtree(self.generated_dir, ignore_errors=True)


def subject_names(node_address: str, node_name: str) -> tuple[list[str], list[str]]:
    """(DNS names, IP addresses) the certificate is for: where the apiserver connects."""
    dns: list[str] = []
    ips: list[str] = []
    for name in (node_address, node_name):
        if not name:
            continue
        try:
            ips.append(str(ipaddress.ip_address(name)))
        except ValueError:
            dns.append(name.lower())
    if not ips:
        ips.append("127.0.0.1")
    return dns, ips


def serving_files(cert_file: str, key_file: str, *, node_address: str, node_name: str) -> ServingFiles:
    """The files to serve with; generates a pair in a private temporary directory when
    neither flag is given. Checks that a given pair loads and matches."""
    if cert_file or key_file:
        if not (cert_file and key_file):
            raise TLSSetupError("--kubelet-tls-cert and --kubelet-tls-key must be given together")
        try:
            pki.load_pem(Path(cert_file).read_bytes(), Path(key_file).read_bytes())
        except (OSError, ValueError) as exc:
            raise TLSSetupError(f"--kubelet-tls-cert/--kubelet-tls-key: {exc}") from None
        return ServingFiles(Path(cert_file), Path(key_file))
    dns, ips = subject_names(node_address, node_name)
    ca = pki.generate_ca(f"kube-offload virtual kubelet {node_name}", GENERATED_DAYS)
    pair = pki.issue_serving_cert(ca, dns_names=dns, ip_addresses=ips, days=GENERATED_DAYS)
    directory = Path(tempfile.mkdtemp(prefix="kube-offload-kubelet-"))  # mode 0700
    cert, key = directory / "tls.crt", directory / "tls.key"
    cert.write_bytes(pair.cert_pem)
    fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(pair.key_pem)
    log.info("kubelet API: no --kubelet-tls-cert given; serving a generated certificate for %s", ", ".join(dns + ips))
    return ServingFiles(cert, key, generated_dir=directory)


class ServerContext:
    """The server's SSLContext, rebuilt when the certificate, key or client CA files
    change on disk (checked at each new connection: one stat per file). A generated pair
    never changes: it is loaded once and its files are removed at once, so no key is
    left on disk, whatever way the process ends."""

    def __init__(self, files: ServingFiles, client_ca: str = "") -> None:
        self._files = files
        self._client_ca = client_ca
        self._lock = threading.Lock()
        self._stamp: tuple = ()
        self._context = self._build()
        # (The client CA, if any, is then not re-read either: rotate by restarting.)
        self._static = files.generated_dir is not None
        if files.generated_dir is not None:
            files.cleanup()

    def _paths(self) -> list[str]:
        return [str(self._files.cert), str(self._files.key)] + ([self._client_ca] if self._client_ca else [])

    def _current_stamp(self) -> tuple:
        stamp = []
        for path in self._paths():
            try:
                info = os.stat(path)
                stamp.append((info.st_mtime_ns, info.st_size, info.st_ino))
            except OSError:
                stamp.append(None)
        return tuple(stamp)

    def _build(self) -> ssl.SSLContext:
        stamp = self._current_stamp()
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        # HTTP/1.1 only: the WebSocket upgrade and chunked log streams are HTTP/1.1
        # things; Go's client falls back to it when the server does not offer h2.
        context.set_alpn_protocols(["http/1.1"])
        try:
            context.load_cert_chain(str(self._files.cert), str(self._files.key))
        except (OSError, ssl.SSLError) as exc:
            raise TLSSetupError(f"cannot load the kubelet serving certificate {self._files.cert}: {exc}") from None
        if self._client_ca:
            try:
                context.load_verify_locations(cafile=self._client_ca)
            except (OSError, ssl.SSLError) as exc:
                raise TLSSetupError(f"--kubelet-client-ca {self._client_ca}: {exc}") from None
            context.verify_mode = ssl.CERT_REQUIRED
        self._stamp = stamp
        return context

    def get(self) -> ssl.SSLContext:
        if self._static:
            return self._context
        stamp = self._current_stamp()
        if stamp != self._stamp:
            with self._lock:
                if stamp != self._stamp:
                    try:
                        self._context = self._build()
                        log.info("kubelet API: serving certificate reloaded from %s", self._files.cert)
                    except TLSSetupError as exc:
                        # Half-written files during a rotation: keep serving the old pair.
                        log.warning("kubelet API: %s; keeping the previous certificate", exc)
                        self._stamp = stamp
        return self._context
