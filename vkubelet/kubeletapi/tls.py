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
import tempfile
from pathlib import Path

from certs import pki

# The context (reloaded when the files change), the files and the error are shared with
# the enforcer's webhook server; re-exported here for the kubelet API's callers.
from kube_offload.runtime.https_server import ServerContext, ServingFiles, TLSSetupError

__all__ = ["GENERATED_DAYS", "ServerContext", "ServingFiles", "TLSSetupError", "serving_files", "subject_names"]

log = logging.getLogger("kube_offload.vkubelet.kubelet_api")

GENERATED_DAYS = 365


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
