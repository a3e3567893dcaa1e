"""A certificate directory: generate a CA and a serving pair into it, renew the pair in
place. This is the library form of ``kube-offload certs generate`` / ``renew`` (the test
harness calls it directly); the CLI only parses flags and prints the outcome.

Layout (the same key names as the ``kubernetes.io/tls`` Secret)::

    DIR/ca.crt   CA certificate (what clients trust; base64 of it is the caBundle)
    DIR/ca.key   CA private key, 0600 (absent when the CA lives in another --ca-dir)
    DIR/tls.crt  serving certificate
    DIR/tls.key  serving private key, 0600
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Sequence

from . import pki, store

DEFAULT_RENEW_WITHIN = dt.timedelta(hours=720)


class CertificateFilesError(ValueError):
    """Files that should hold a CA or a serving pair are missing or unusable. ``which``
    says which, so the CLI can name the flag that points at them."""

    def __init__(self, which: Literal["ca", "serving"], directory: Path, problem: str):
        self.which = which
        self.directory = directory
        self.problem = problem
        super().__init__(f"{directory}: {problem}")


@dataclass(frozen=True)
class GeneratedDirectory:
    directory: Path
    ca_dir: Path
    ca_reused: bool
    serving: pki.KeyPair
    ca_cert_pem: bytes

    @property
    def cert_file(self) -> Path:
        return self.directory / store.TLS_CERT

    @property
    def key_file(self) -> Path:
        return self.directory / store.TLS_KEY

    @property
    def ca_file(self) -> Path:
        return self.directory / store.CA_CERT

    @property
    def ca_bundle(self) -> str:
        """base64 of the CA PEM, the value for a webhook's ``clientConfig.caBundle``."""
        return pki.ca_bundle_b64(self.ca_cert_pem)


def load_ca(ca_dir: Path) -> pki.KeyPair:
    """The CA pair in ``ca_dir``; CertificateFilesError when absent or not a CA."""
    try:
        ca = store.read_pair(ca_dir, store.CA_CERT, store.CA_KEY)
        pki.ca_bundle_b64(ca.cert_pem)  # checks it is a CA certificate
    except OSError as exc:
        raise CertificateFilesError("ca", ca_dir, f"cannot read the CA: {exc.strerror}: {exc.filename}") from None
    except ValueError as exc:
        raise CertificateFilesError("ca", ca_dir, f"no usable CA: {exc}") from None
    return ca


def load_serving(directory: Path) -> pki.KeyPair:
    try:
        return store.read_pair(directory, store.TLS_CERT, store.TLS_KEY)
    except OSError as exc:
        raise CertificateFilesError(
            "serving", directory, f"cannot read the serving certificate: {exc.strerror}: {exc.filename}"
        ) from None
    except ValueError as exc:
        raise CertificateFilesError("serving", directory, f"no usable serving pair: {exc}") from None


def generate_directory(
    out_dir: Path,
    *,
    dns_names: Sequence[str] = (),
    ip_addresses: Sequence[str] = (),
    days: int = pki.DEFAULT_SERVING_DAYS,
    ca_dir: Path | None = None,
    new_ca: bool = False,
    ca_days: int = pki.DEFAULT_CA_DAYS,
    ca_common_name: str = pki.DEFAULT_CA_COMMON_NAME,
    now: dt.datetime | None = None,
) -> GeneratedDirectory:
    """Issue a serving pair into ``out_dir``, signed by the CA in ``ca_dir`` if given, else
    by the CA already in ``out_dir``, else by a new CA written there.

    Reusing an existing CA is the default because generating a new one silently breaks
    every caBundle registered with the old one; ``new_ca=True`` asks for that on purpose.
    ValueError for bad names or days; CertificateFilesError for an unusable ``ca_dir``.
    """
    out_dir = Path(out_dir)
    ca_reused = True
    if ca_dir is not None:
        ca_dir = Path(ca_dir)
        ca = load_ca(ca_dir)
    elif not new_ca and store.has_files(out_dir, store.CA_CERT, store.CA_KEY):
        ca_dir = out_dir
        ca = load_ca(out_dir)
    else:
        ca_dir = out_dir
        ca = pki.generate_ca(ca_common_name, ca_days, now=now)
        ca_reused = False
    # Issue before writing anything, so bad names leave the directory as it was.
    serving = pki.issue_serving_cert(
        ca, dns_names=dns_names, ip_addresses=ip_addresses, days=days, now=now
    )
    if not ca_reused:
        store.write_ca_files(out_dir, ca)
    store.write_serving_files(out_dir, serving, ca.cert_pem)
    return GeneratedDirectory(out_dir, ca_dir, ca_reused, serving, ca.cert_pem)


@dataclass(frozen=True)
class RenewalOutcome:
    directory: Path
    renewed: bool
    reason: str | None  # why it was renewed; None when it was not
    not_after: dt.datetime  # expiry of the certificate now in place
    ca_not_after: dt.datetime

    def describe(self) -> str:
        cert = self.directory / store.TLS_CERT
        if self.renewed:
            return f"renewed {cert}: {self.reason}; the new certificate is valid until {self.not_after.isoformat()}"
        return f"not renewed: {cert} is valid until {self.not_after.isoformat()}"


def renew_directory(
    directory: Path,
    *,
    ca_dir: Path | None = None,
    within: dt.timedelta = DEFAULT_RENEW_WITHIN,
    days: int | None = None,
    now: dt.datetime | None = None,
) -> RenewalOutcome:
    """Reissue ``directory``'s serving pair when it expires within ``within`` (or no longer
    matches the CA), keeping its names and the CA so the registered caBundle stays valid.
    ``days=None`` keeps the lifetime the current certificate was issued with."""
    directory = Path(directory)
    ca_dir = Path(ca_dir) if ca_dir is not None else directory
    now = now or dt.datetime.now(dt.timezone.utc)
    # The serving pair first: when nothing is there yet, "generate first" is the useful hint.
    current = load_serving(directory)
    ca = load_ca(ca_dir)
    reason = pki.renewal_reason(current, ca_cert_pem=ca.cert_pem, within=within, now=now)
    ca_not_after = ca.certificate.not_valid_after_utc
    if reason is None:
        return RenewalOutcome(directory, False, None, current.certificate.not_valid_after_utc, ca_not_after)
    names = pki.subject_names(current.cert_pem)
    renewed = pki.issue_serving_cert(
        ca,
        dns_names=names.dns_names,
        ip_addresses=names.ip_addresses,
        days=days or pki.validity_days(current.cert_pem),
        now=now,
    )
    store.write_serving_files(directory, renewed, ca.cert_pem)
    return RenewalOutcome(directory, True, reason, renewed.certificate.not_valid_after_utc, ca_not_after)
