"""Shared fixtures for component tests: real TLS material and real server processes.

Generic (the extender's HTTP tests use them too):

* ``tls_files`` (session): a throwaway CA and a serving certificate for 127.0.0.1 /
  localhost, made with ``cryptography`` (no dependency on the certs package, so these
  tests do not fail because of it). :func:`make_tls_files` makes more in any directory.
* :func:`free_port`, :func:`start_https_server`: run ``target(*args, **target_kwargs)``
  (e.g. ``webhook.server.serve``) in a forked process and return once ``GET <ready_path>``
  answers 200 over HTTPS verified against the test CA; :meth:`ServerProcess.stop` ends it
  (SIGTERM, then SIGKILL).

Webhook-specific:

* ``webhook_server`` (session): the webhook over HTTPS with a static namespace source
  holding ``WEBHOOK_NAMESPACES``, returned once every worker is ready; a
  :class:`RunningWebhook`.
* ``start_webhook``: a factory ``start_webhook(source_factory, enable_echo=False)`` for a
  webhook with another namespace source, stopped after the test.

Fork (not spawn) so that a target or factory may be a closure or a test-local class;
gunicorn's arbiter then runs in the child's main thread, where it can install its signal
handlers. Note for HTTP clients: ``requests`` lets REQUESTS_CA_BUNDLE from the environment
replace ``Session.verify``; set ``session.trust_env = False`` or pass ``verify=`` per call.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import multiprocessing
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest
import requests
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class TlsFiles:
    ca_cert: Path  # PEM of the CA; pass as requests' verify=
    cert: Path  # serving certificate (SAN IP:127.0.0.1, DNS:localhost)
    key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def make_tls_files(directory: Path) -> TlsFiles:
    """A CA and a serving certificate signed by it, valid for one day."""
    now = dt.datetime.now(dt.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("kube-offload test CA"))
        .issuer_name(_name("kube-offload test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("kube-offload test server"))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address(LOOPBACK)), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    files = TlsFiles(directory / "ca.crt", directory / "tls.crt", directory / "tls.key")
    files.ca_cert.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    files.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return files


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


def free_port() -> int:
    """A loopback port that was free a moment ago (the server binds it right after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


@dataclass
class ServerProcess:
    process: Any  # multiprocessing.Process
    base_url: str  # https://127.0.0.1:PORT
    ca_cert: Path

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM (gunicorn's graceful stop), then SIGKILL if it lingers."""
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(timeout)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)


def start_https_server(
    target: Callable[..., Any],
    *args: Any,
    port: int,
    ca_cert: Path,
    ready_path: str = "/healthz",
    timeout: float = 30.0,
    target_kwargs: dict | None = None,
) -> ServerProcess:
    """Run ``target(*args, **target_kwargs)`` in a forked process; return once
    ``ready_path`` answers 200."""
    process = multiprocessing.get_context("fork").Process(
        target=target, args=args, kwargs=target_kwargs or {}, daemon=True
    )
    process.start()
    server = ServerProcess(process, f"https://{LOOPBACK}:{port}", ca_cert)
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        if not process.is_alive():
            raise RuntimeError(f"server process exited with code {process.exitcode} before it was ready")
        try:
            response = requests.get(server.base_url + ready_path, verify=str(ca_cert), timeout=2)
            if response.status_code == 200:
                return server
        except requests.RequestException as exc:
            last_error = exc
        time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"server on port {port} not ready within {timeout}s: {last_error}")


# --- the webhook under test ------------------------------------------------------------------

# Namespaces the webhook under test knows (its static namespace source).
WEBHOOK_NAMESPACES: list[dict] = [
    {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": "remote-eu",
            "labels": {"kube-offload.io/enabled": "true", "kube-offload.io/pod-placement": "Remote"},
            "annotations": {"kube-offload.io/cluster-selector": "region in (eu-west,eu-south)"},
        },
    },
    {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": "local-only",
            "labels": {"kube-offload.io/enabled": "true", "kube-offload.io/pod-placement": "Local"},
        },
    },
    {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": "anywhere",
            "labels": {"kube-offload.io/enabled": "true"},
            "annotations": {"kube-offload.io/cluster-selector": "provider!=aws"},
        },
    },
    {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": "broken",
            "labels": {"kube-offload.io/enabled": "true", "kube-offload.io/pod-placement": "remote"},
        },
    },
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "plain"}},
]
WEBHOOK_SCHEDULER_NAME = "kube-offload-scheduler"


def run_webhook(port: int, tls: TlsFiles, source_factory: Callable[[], Any], *, enable_echo: bool = False) -> None:
    """Process target: the real server stack (gunicorn, gthread, TLS) on loopback."""
    from webhook.server import serve
    from webhook.settings import ServerSettings, WebhookSettings

    serve(
        ServerSettings(
            tls_cert=str(tls.cert),
            tls_key=str(tls.key),
            bind=f"{LOOPBACK}:{port}",
            threads=4,
            log_level="WARNING",
            graceful_timeout_seconds=2,
        ),
        WebhookSettings(scheduler_name=WEBHOOK_SCHEDULER_NAME, enable_echo=enable_echo),
        source_factory,
    )


@dataclass
class RunningWebhook:
    base_url: str
    ca_cert: Path
    scheduler_name: str
    namespaces: list[dict]
    process: ServerProcess


def _start_webhook(
    tls: TlsFiles, source_factory: Callable[[], Any], *, enable_echo: bool, ready_path: str = "/healthz"
) -> RunningWebhook:
    port = free_port()
    process = start_https_server(
        run_webhook,
        port,
        tls,
        source_factory,
        port=port,
        ca_cert=tls.ca_cert,
        ready_path=ready_path,
        target_kwargs={"enable_echo": enable_echo},
    )
    return RunningWebhook(process.base_url, tls.ca_cert, WEBHOOK_SCHEDULER_NAME, WEBHOOK_NAMESPACES, process)


@pytest.fixture(scope="session")
def webhook_server(tls_files: TlsFiles):
    """The webhook over HTTPS with a static namespace source (WEBHOOK_NAMESPACES)."""
    import functools

    from webhook.namespace_cache import StaticNamespaceSource

    # /readyz: every worker is up with its (static, always synced) source.
    running = _start_webhook(
        tls_files, functools.partial(StaticNamespaceSource, WEBHOOK_NAMESPACES), enable_echo=False, ready_path="/readyz"
    )
    yield running
    running.process.stop()


@pytest.fixture
def start_webhook(tls_files: TlsFiles):
    """``start_webhook(source_factory, enable_echo=False) -> RunningWebhook``, stopped after
    the test. The factory runs in the server's worker process (fork: closures are fine)."""
    started: list[RunningWebhook] = []

    def start(source_factory: Callable[[], Any], *, enable_echo: bool = False) -> RunningWebhook:
        running = _start_webhook(tls_files, source_factory, enable_echo=enable_echo)
        started.append(running)
        return running

    yield start
    for running in started:
        running.process.stop()
