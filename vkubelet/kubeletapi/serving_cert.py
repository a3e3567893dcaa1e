"""The kubelet API's serving certificate from the local CSR API, obtained and rotated in a
thread (``--kubelet-serving-cert-mode=csr``; the decisions are in ``serving_csr``).

The key and certificate live in a directory the vkubelet makes for itself (mode 0700, the
key 0600) and removes when it stops; the server's :class:`ServerContext` re-reads them when
they change, so a rotation needs no restart and open streams keep their connection. The
key never leaves the process otherwise: the CSR API sees only the public request. Each
start generates a new key and requests a new certificate (nothing is kept across
restarts: no key on a disk outlives the process).

Until the first certificate is issued the server answers with a throw-away self-signed
one: an apiserver that verifies kubelets (``--kubelet-certificate-authority``) refuses
it, so ``kubectl logs``/``exec`` on this node fail until the CSR is approved and signed,
exactly as on a kubelet waiting for its serving certificate.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from kubernetes import client

from certs import pki
from kube_offload.runtime import kinds
from kube_offload.runtime.https_server import ServingFiles
from kube_offload.runtime.kube import NO_RETRY, ApiError, Kube
from vkubelet.kubeletapi import serving_csr as sc

log = logging.getLogger("kube_offload.vkubelet.kubelet_api")

REQUEST_TIMEOUT: tuple[float, float] = (5.0, 15.0)
# How often an unsigned request is looked at again, and how long one is waited for
# before a new one is made (an external approver may be slow; a lost one never answers).
POLL_INTERVAL = 2.0
ISSUE_TIMEOUT = 900.0
# After a failure (API unreachable, denied), the next try, doubling up to the maximum.
RETRY_FIRST = 5.0
RETRY_MAX = 300.0


def _write_private(path: Path, data: bytes, mode: int) -> None:
    """Replace ``path`` atomically with ``data`` (a reader never sees half a file)."""
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise


class ServingCertificate:
    """Obtains the certificate, then keeps it renewed. :attr:`files` is what the server
    serves from (a bootstrap self-signed pair until the first issue)."""

    def __init__(
        self,
        kube: Kube,
        *,
        node_name: str,
        dns_names: Sequence[str],
        ip_addresses: Sequence[str],
        approval: str,
        expiration_seconds: int = 0,
        rotation_fraction: float = 0.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if approval not in sc.APPROVALS:
            raise sc.ServingCSRError(f"--kubelet-serving-cert-approval: {approval!r} is not one of {', '.join(sc.APPROVALS)}")
        self._kube = kube
        self.node_name = node_name
        self.dns_names = list(dns_names)
        self.ip_addresses = list(ip_addresses)
        self.approval = approval
        self.expiration_seconds = expiration_seconds
        self.rotation_fraction = rotation_fraction
        self._clock = clock
        self.directory = Path(tempfile.mkdtemp(prefix="kube-offload-kubelet-serving-"))  # mode 0700
        self.files = ServingFiles(self.directory / "tls.crt", self.directory / "tls.key")
        bootstrap_ca = pki.generate_ca(f"kube-offload virtual kubelet {node_name} (bootstrap)", 1)
        pair = pki.issue_serving_cert(bootstrap_ca, dns_names=self.dns_names, ip_addresses=self.ip_addresses, days=1)
        self._install(pair.cert_pem, pair.key_pem)
        self.current: sc.Issued | None = None
        self.deadline = 0.0
        self.rotations = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _install(self, cert_pem: bytes, key_pem: bytes) -> None:
        # Key first: a reload between the two sees a mismatched pair, which the server
        # refuses and retries at the next connection (https_server.ServerContext.get).
        _write_private(self.files.key, key_pem, 0o600)
        _write_private(self.files.cert, cert_pem, 0o644)

    # --- one request ---------------------------------------------------------------------
    def obtain(self) -> sc.Issued:
        """Request, (approve,) wait, check and install one certificate."""
        request = sc.new_request(self.node_name, self.dns_names, self.ip_addresses)
        body = sc.csr_object(request, expiration_seconds=self.expiration_seconds)
        try:
            obj = self._kube.create(kinds.CERTIFICATE_SIGNING_REQUESTS, body)
        except ApiError as exc:
            if exc.status == 409:  # our own retry after a lost answer: same name, same bytes
                obj = self._kube.get(kinds.CERTIFICATE_SIGNING_REQUESTS, request.name)
            elif exc.status == 403:
                raise sc.ServingCSRError(
                    f"creating CertificateSigningRequest {request.name} was refused ({exc.message}); the vkubelet's "
                    "identity needs create on certificatesigningrequests.certificates.k8s.io (the kube-offload-local "
                    "chart grants it with vkubelet.servingCert.mode=csr)"
                ) from None
            else:
                raise
        log.info("kubelet API: requested serving certificate %s (signer %s, approval %s)", request.name, sc.SIGNER_NAME, self.approval)
        deadline = self._clock() + ISSUE_TIMEOUT
        while True:
            if not sc.is_ours(obj, request):
                raise sc.ServingCSRError(f"CertificateSigningRequest {request.name} does not hold our request; not using it")
            state = sc.csr_state(obj)
            if state.refused:
                raise sc.ServingCSRError(f"CertificateSigningRequest {request.name}: {state.refused}")
            if state.certificate_pem:
                issued = sc.check_issued(state.certificate_pem, request, self.dns_names, self.ip_addresses)
                self._install(issued.cert_pem, request.key_pem)
                return issued
            if not state.approved and self.approval == sc.APPROVAL_SELF:
                obj = self._approve(obj, request)
                continue
            if self._clock() > deadline:
                raise sc.ServingCSRError(
                    f"CertificateSigningRequest {request.name} was not "
                    f"{'signed' if state.approved else 'approved'} within {ISSUE_TIMEOUT:.0f}s"
                    + ("" if state.approved else " (--kubelet-serving-cert-approval=external: approve it, e.g. "
                       f"`kubectl certificate approve {request.name}`)")
                    + (" (is kube-controller-manager's kubernetes.io/kubelet-serving signer on: "
                       "--cluster-signing-cert-file/--cluster-signing-key-file?)" if state.approved else "")
                )
            if self._stop.wait(POLL_INTERVAL):
                raise sc.ServingCSRError("stopping")
            obj = self._kube.get(kinds.CERTIFICATE_SIGNING_REQUESTS, request.name)

    def _approve(self, obj: dict[str, Any], request: sc.ServingRequest) -> dict[str, Any]:
        message = f"approved by the virtual kubelet of node {self.node_name} for its own kubelet API (--kubelet-serving-cert-approval=self)"
        try:
            return self._kube.replace(kinds.CERTIFICATE_SIGNING_REQUESTS, sc.approval(obj, message), subresource="approval")
        except ApiError as exc:
            if exc.status == 409:  # changed meanwhile (signed, or approved by someone else)
                return self._kube.get(kinds.CERTIFICATE_SIGNING_REQUESTS, request.name)
            if exc.status == 403:
                raise sc.ServingCSRError(
                    f"approving CertificateSigningRequest {request.name} was refused ({exc.message}); with "
                    "--kubelet-serving-cert-approval=self the vkubelet's identity needs update on "
                    "certificatesigningrequests/approval and approve on signers "
                    f"{sc.SIGNER_NAME} (the kube-offload-local chart's vkubelet.servingCert.approval=self)"
                ) from None
            raise

    # --- the thread ----------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="kubelet-serving-cert", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=REQUEST_TIMEOUT[1] + 5)
        shutil.rmtree(self.directory, ignore_errors=True)

    def _run(self) -> None:
        backoff = RETRY_FIRST
        while not self._stop.is_set():
            wait = self.deadline - self._clock() if self.current is not None else 0.0
            if wait > 0:
                if self._stop.wait(min(wait, 60.0)):
                    return
                continue
            try:
                issued = self.obtain()
            except (sc.ServingCSRError, ApiError, OSError) as exc:
                if self._stop.is_set():
                    return
                log.warning("kubelet API: serving certificate not obtained: %s; next try in %.0fs", exc, backoff)
                self._stop.wait(backoff)
                backoff = min(RETRY_MAX, backoff * 2)
                continue
            except Exception:  # never let the thread die: the next try may work
                log.exception("kubelet API: serving certificate request failed")
                self._stop.wait(backoff)
                backoff = min(RETRY_MAX, backoff * 2)
                continue
            backoff = RETRY_FIRST
            self.rotations += 1 if self.current is not None else 0
            self.current = issued
            self.deadline = sc.rotation_deadline(issued, now=self._clock(), fraction=self.rotation_fraction)
            log.info(
                "kubelet API: serving certificate issued by the CSR API, valid until %s; next rotation at %s",
                sc.format_time(issued.not_after), sc.format_time(self.deadline),
            )


def csr_kube(api_client: client.ApiClient) -> Kube:
    """Short tries: the loop above is the retry."""
    return Kube(api_client, timeout=REQUEST_TIMEOUT, retry=NO_RETRY)
