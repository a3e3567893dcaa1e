"""Pure certificate logic: a CA, serving certificates signed by it, and the decisions about
them (does this certificate need renewing, is it still the one we would issue). No file or
network I/O here; ``store`` and ``webhook_ca`` do that.

Keys are ECDSA P-256 with SHA-256 signatures. Why not RSA-2048: a P-256 key is generated
in about a millisecond instead of tens to hundreds (tests and hook Jobs issue many), the
keys and handshakes are smaller, and its security level (~128 bit) is above RSA-2048's
(~112 bit). Every party that must accept these certificates supports it: kube-apiserver and
kube-scheduler (Go crypto/tls), OpenSSL behind Python's ``ssl`` (gunicorn), and kubectl.

One module (a little over 400 lines): issuing and judging certificates read the same
few x509 helpers, and nothing here is used apart from the rest.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import re
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_CA_COMMON_NAME = "kube-offload-ca"
DEFAULT_CA_DAYS = 3650
DEFAULT_SERVING_DAYS = 365

# Certificates start a little in the past so that a peer whose clock runs slightly behind
# ours does not reject a certificate issued a second ago as "not yet valid".
CLOCK_SKEW_ALLOWANCE = dt.timedelta(minutes=5)

# A DNS name as Kubernetes services have them (RFC 1123 labels), optionally a leading
# wildcard label. Rejecting anything else early beats an opaque TLS failure later.
_DNS_NAME = re.compile(
    r"^(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$"
)


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, both PEM-encoded (the on-disk / Secret form)."""

    cert_pem: bytes
    key_pem: bytes

    @property
    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)

    @property
    def private_key(self) -> ec.EllipticCurvePrivateKey:
        key = serialization.load_pem_private_key(self.key_pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError("private key is not an ECDSA key")
        return key


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _aware(moment: dt.datetime) -> dt.datetime:
    """Naive datetimes are taken as UTC, the way x509 validity is expressed."""
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.timezone.utc)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    # PKCS#8 is what both OpenSSL and Go's tls.X509KeyPair read without extra options.
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def generate_ca(
    common_name: str = DEFAULT_CA_COMMON_NAME,
    days: int = DEFAULT_CA_DAYS,
    *,
    now: dt.datetime | None = None,
) -> KeyPair:
    """A self-signed CA that can sign serving certificates (and nothing below them)."""
    if days <= 0:
        raise ValueError(f"CA validity must be at least one day, got {days}")
    if not common_name:
        raise ValueError("CA common name must not be empty")
    now = _aware(now or _utcnow())
    key = _new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW_ALLOWANCE)
        .not_valid_after(now + dt.timedelta(days=days))
        # path_length=0: this CA signs leaf certificates only, never another CA.
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ski, critical=False)
        # Strict verifiers (OpenSSL's X509_STRICT, Python >= 3.13 defaults) want an AKI
        # even on the root; for a self-signed CA it equals its own SKI.
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert_pem=_cert_pem(cert), key_pem=_key_pem(key))


def validate_dns_name(name: str) -> str:
    """The name lower-cased, or ValueError saying what is wrong with it."""
    lowered = name.strip().lower()
    if len(lowered) > 253 or not _DNS_NAME.match(lowered):
        raise ValueError(
            f"{name!r} is not a DNS name (letters, digits, '-' and '.' only, "
            "e.g. kube-offload-webhook.kube-offload.svc)"
        )
    return lowered


def parse_ip_address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is not an IP address (e.g. 127.0.0.1 or ::1)") from None


def service_dns_names(service: str, namespace: str, cluster_domain: str = "cluster.local") -> list[str]:
    """The names a client inside the cluster may use for a Service; kube-apiserver calls a
    webhook registered by service reference as ``<svc>.<ns>.svc``."""
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.{cluster_domain}",
    ]


def issue_serving_cert(
    ca: KeyPair,
    *,
    dns_names: Sequence[str] = (),
    ip_addresses: Sequence[str] = (),
    days: int = DEFAULT_SERVING_DAYS,
    now: dt.datetime | None = None,
) -> KeyPair:
    """A TLS server certificate signed by ``ca`` for the given names.

    Every name goes into subjectAltName: Go's TLS stack (kube-apiserver calling a webhook,
    kube-scheduler calling an extender) ignores the common name and verifies SANs only. The
    validity is capped at the CA's, since a certificate cannot outlive its issuer usefully.
    """
    if days <= 0:
        raise ValueError(f"certificate validity must be at least one day, got {days}")
    dns = _unique(validate_dns_name(name) for name in dns_names)
    ips = _unique(parse_ip_address(ip) for ip in ip_addresses)
    if not dns and not ips:
        raise ValueError("a serving certificate needs at least one DNS name or IP address")
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns[0] if dns else str(ips[0]))])
    san = x509.SubjectAlternativeName(
        [x509.DNSName(name) for name in dns] + [x509.IPAddress(ip) for ip in ips]
    )
    # critical=False: the SAN would be critical only with an empty subject; ours has a CN.
    return _issue_leaf(ca, subject, ExtendedKeyUsageOID.SERVER_AUTH, days=days, now=now, extra=[(san, False)])


def issue_client_cert(
    ca: KeyPair,
    *,
    common_name: str,
    organizations: Sequence[str] = (),
    days: int = DEFAULT_SERVING_DAYS,
    now: dt.datetime | None = None,
) -> KeyPair:
    """A TLS client certificate signed by ``ca``: Kubernetes reads the user from the
    common name and the groups from the organizations (x509 client-certificate
    authentication), e.g. the kube-apiserver's ``--kubelet-client-certificate``. The
    clientAuth usage is what lets a server (OpenSSL, Go) accept it as a client's.
    """
    if days <= 0:
        raise ValueError(f"certificate validity must be at least one day, got {days}")
    if not common_name:
        raise ValueError("a client certificate needs a common name: it is the user name")
    subject = x509.Name(
        [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in _unique(organizations)]
        + [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    )
    return _issue_leaf(ca, subject, ExtendedKeyUsageOID.CLIENT_AUTH, days=days, now=now)


def _issue_leaf(
    ca: KeyPair,
    subject: x509.Name,
    usage: x509.ObjectIdentifier,
    *,
    days: int,
    now: dt.datetime | None,
    extra: Sequence[tuple[x509.ExtensionType, bool]] = (),
) -> KeyPair:
    """A non-CA certificate for ``subject`` signed by ``ca`` with one extended key usage
    (server or client auth), valid ``days`` but never past the CA."""
    now = _aware(now or _utcnow())
    ca_cert = ca.certificate
    _require_ca(ca_cert)
    not_after = min(now + dt.timedelta(days=days), ca_cert.not_valid_after_utc)
    key = _new_key()
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW_ALLOWANCE)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                # ECDSA keys sign the handshake; key_encipherment is an RSA-only usage.
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    for extension, critical in extra:
        builder = builder.add_extension(extension, critical=critical)
    cert = (
        builder.add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .sign(ca.private_key, hashes.SHA256())
    )
    return KeyPair(cert_pem=_cert_pem(cert), key_pem=_key_pem(key))


def _unique(items: Iterable[Any]) -> list[Any]:
    seen: list[Any] = []
    for item in items:
        if item not in seen:
            seen.append(item)
    return seen


def _require_ca(cert: x509.Certificate) -> None:
    try:
        constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        constraints = None
    if constraints is None or not constraints.ca:
        raise ValueError(f"certificate {cert.subject.rfc4514_string()!r} is not a CA certificate")


def load_pem(cert_pem: bytes, key_pem: bytes) -> KeyPair:
    """A KeyPair from PEM bytes, checked: both parse and the key belongs to the certificate
    (a mismatched pair is exactly what a server would fail to load)."""
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError as exc:
        raise ValueError(f"not a PEM certificate: {exc}") from None
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"not an unencrypted PEM private key: {exc}") from None
    if _public_der(key.public_key()) != _public_der(cert.public_key()):
        raise ValueError("the private key does not belong to the certificate")
    return KeyPair(cert_pem=cert_pem, key_pem=key_pem)


def load_certificate(cert_pem: bytes) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(cert_pem)
    except ValueError as exc:
        raise ValueError(f"not a PEM certificate: {exc}") from None


def _public_der(public_key: PublicKeyTypes) -> bytes:
    return public_key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def needs_renewal(cert_pem: bytes, *, within: dt.timedelta, now: dt.datetime) -> bool:
    """True when the certificate expires within ``within`` of ``now`` (or already has).
    The boundary counts as due: at exactly ``within`` before expiry we renew."""
    cert = load_certificate(cert_pem)
    return cert.not_valid_after_utc - _aware(now) <= within


@dataclass(frozen=True)
class SubjectNames:
    dns_names: tuple[str, ...]
    ip_addresses: tuple[str, ...]


def subject_names(cert_pem: bytes) -> SubjectNames:
    """The SANs of a certificate, so a renewal can reissue for exactly the same names."""
    cert = load_certificate(cert_pem)
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return SubjectNames((), ())
    return SubjectNames(
        dns_names=tuple(san.get_values_for_type(x509.DNSName)),
        ip_addresses=tuple(str(ip) for ip in san.get_values_for_type(x509.IPAddress)),
    )


def validity_days(cert_pem: bytes) -> int:
    """The lifetime the certificate was issued with, in whole days (renewals keep it)."""
    cert = load_certificate(cert_pem)
    lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc - CLOCK_SKEW_ALLOWANCE
    return max(1, round(lifetime / dt.timedelta(days=1)))


def is_issued_by(cert_pem: bytes, ca_cert_pem: bytes) -> bool:
    """Whether ``ca_cert_pem`` signed ``cert_pem`` (issuer name and signature both match)."""
    cert = load_certificate(cert_pem)
    ca_cert = load_certificate(ca_cert_pem)
    try:
        cert.verify_directly_issued_by(ca_cert)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def renewal_reason(
    pair: KeyPair,
    *,
    ca_cert_pem: bytes,
    within: dt.timedelta,
    now: dt.datetime,
    dns_names: Sequence[str] = (),
    ip_addresses: Sequence[str] = (),
) -> str | None:
    """Why this serving certificate must be (re)issued, or None when it can stay.

    Beyond expiry, a certificate is replaced when it no longer chains to the CA that
    clients trust (the caBundle), or when it lacks a name clients are asked to use."""
    try:
        load_pem(pair.cert_pem, pair.key_pem)
    except ValueError as exc:
        return str(exc)
    if not is_issued_by(pair.cert_pem, ca_cert_pem):
        return "the certificate was not issued by the current CA"
    have = subject_names(pair.cert_pem)
    missing = [n for n in (validate_dns_name(d) for d in dns_names) if n not in have.dns_names]
    missing += [
        str(ip)
        for ip in (parse_ip_address(i) for i in ip_addresses)
        if str(ip) not in have.ip_addresses
    ]
    if missing:
        return f"the certificate lacks the names {', '.join(missing)}"
    if needs_renewal(pair.cert_pem, within=within, now=now):
        expires = load_certificate(pair.cert_pem).not_valid_after_utc
        return f"the certificate expires at {expires.isoformat()}, within {format_duration(within)} of now"
    return None


def format_duration(delta: dt.timedelta) -> str:
    """``720h``, ``1h30m``, ``45s``: the Go-style form the --within flags accept."""
    seconds = int(delta.total_seconds())
    if seconds <= 0:
        return "0s"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return "".join(f"{n}{u}" for n, u in ((hours, "h"), (minutes, "m"), (secs, "s")) if n)


def ca_bundle_b64(ca_cert_pem: bytes) -> str:
    """The ``caBundle`` value of a webhook's clientConfig: the CA's PEM, base64-encoded.

    The CA is parsed first so that passing, say, a key file fails here with a clear message
    instead of making the apiserver distrust every call later."""
    cert = load_certificate(ca_cert_pem)
    _require_ca(cert)
    return base64.b64encode(ca_cert_pem).decode("ascii")
