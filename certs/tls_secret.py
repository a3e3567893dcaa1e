"""The serving certificate kept in the cluster: a ``kubernetes.io/tls`` Secret the servers
mount, signed by a CA kept in a second, Opaque Secret that only the certificate Job reads.

Running ``ensure_tls_secret`` again is safe and is how renewal happens in-cluster (the
chart runs it on every install and upgrade): the CA is reused, the serving pair is kept
while it is valid, covers the requested names and chains to the CA, and reissued otherwise.
``plan_tls_secret`` makes that decision without touching the API.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from . import pki, store


class UnusableCaSecret(ValueError):
    """The CA Secret exists but holds no usable CA. It is never replaced automatically:
    a new CA would silently invalidate every caBundle that trusts the old one."""


@dataclass(frozen=True)
class SecretPlan:
    ca: pki.KeyPair
    ca_is_new: bool
    serving: pki.KeyPair
    reason: str | None  # why the serving pair is (re)issued; None when the current one stays


def plan_tls_secret(
    ca_secret: Mapping[str, Any] | None,
    tls_secret: Mapping[str, Any] | None,
    *,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str] = (),
    days: int = pki.DEFAULT_SERVING_DAYS,
    ca_days: int = pki.DEFAULT_CA_DAYS,
    ca_common_name: str = pki.DEFAULT_CA_COMMON_NAME,
    within: dt.timedelta,
    now: dt.datetime,
) -> SecretPlan:
    """Decide the CA and serving pair from the two Secrets as read (camelCase dicts, or
    None when absent). Pure apart from key generation."""
    ca: pki.KeyPair | None  # None: the Secret holds no usable CA (refused below)
    if ca_secret is None:
        ca = pki.generate_ca(ca_common_name, ca_days, now=now)
        ca_is_new = True
    else:
        ca = store.pair_from_secret_data(ca_secret.get("data"), store.CA_CERT, store.CA_KEY)
        meta = ca_secret.get("metadata") or {}
        where = f"{meta.get('namespace')}/{meta.get('name')}"
        if ca is None:
            raise UnusableCaSecret(
                f"Secret {where} does not hold a CA ({store.CA_CERT} + {store.CA_KEY}); "
                "delete it to have a new CA generated (webhook caBundles must then be patched again)"
            )
        try:
            pki.ca_bundle_b64(ca.cert_pem)
        except ValueError as exc:
            raise UnusableCaSecret(f"Secret {where}: {exc}") from None
        ca_is_new = False
    current = None
    if tls_secret is not None:
        current = store.pair_from_secret_data(tls_secret.get("data"), store.TLS_CERT, store.TLS_KEY)
    if current is None:
        reason: str | None = "no serving certificate yet"
    else:
        reason = pki.renewal_reason(
            current,
            ca_cert_pem=ca.cert_pem,
            within=within,
            now=now,
            dns_names=dns_names,
            ip_addresses=ip_addresses,
        )
    if reason is None and current is not None:
        return SecretPlan(ca, ca_is_new, current, None)
    serving = pki.issue_serving_cert(
        ca, dns_names=dns_names, ip_addresses=ip_addresses, days=days, now=now
    )
    return SecretPlan(ca, ca_is_new, serving, reason)


@dataclass(frozen=True)
class SecretOutcome:
    namespace: str
    name: str
    ca_name: str
    ca_is_new: bool
    reason: str | None
    action: str  # created / updated / unchanged
    not_after: dt.datetime

    def describe(self) -> list[str]:
        lines = []
        if self.ca_is_new:
            lines.append(f"generated a new CA into Secret {self.namespace}/{self.ca_name}")
        if self.reason:
            lines.append(f"issued a serving certificate: {self.reason}")
        else:
            lines.append("kept the serving certificate: still valid, names and CA match")
        lines.append(
            f"Secret {self.namespace}/{self.name} {self.action}; "
            f"certificate valid until {self.not_after.isoformat()}"
        )
        return lines


def ensure_tls_secret(
    api_client: Any,
    *,
    namespace: str,
    name: str,
    ca_name: str,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str] = (),
    days: int = pki.DEFAULT_SERVING_DAYS,
    ca_days: int = pki.DEFAULT_CA_DAYS,
    within: dt.timedelta,
    now: dt.datetime | None = None,
) -> SecretOutcome:
    """Make the two Secrets hold a CA and a valid serving pair signed by it.

    The CA Secret is only ever created, never overwritten: if another run created it first
    (two hook Jobs racing), we start over with theirs."""
    from kube_offload.runtime.kube import ApiError

    for _ in range(2):
        moment = now or dt.datetime.now(dt.timezone.utc)
        ca_secret = store.read_secret(api_client, namespace=namespace, name=ca_name)
        tls_secret = store.read_secret(api_client, namespace=namespace, name=name)
        plan = plan_tls_secret(
            ca_secret,
            tls_secret,
            dns_names=dns_names,
            ip_addresses=ip_addresses,
            days=days,
            ca_days=ca_days,
            within=within,
            now=moment,
        )
        if plan.ca_is_new:
            manifest = store.ca_secret_manifest(name=ca_name, namespace=namespace, ca=plan.ca)
            try:
                store.create_secret(api_client, manifest)
            except ApiError as exc:
                if exc.conflict:
                    continue
                raise
        action = store.apply_secret(
            api_client,
            store.secret_manifest(
                name=name, namespace=namespace, serving=plan.serving, ca_cert_pem=plan.ca.cert_pem
            ),
        )
        return SecretOutcome(
            namespace,
            name,
            ca_name,
            plan.ca_is_new,
            plan.reason,
            action,
            plan.serving.certificate.not_valid_after_utc,
        )
    raise UnusableCaSecret(
        f"Secret {namespace}/{ca_name} keeps changing under us; is another certificate Job running?"
    )


def upload_tls_secret(api_client: Any, *, namespace: str, name: str, directory: Path) -> str:
    """Put a directory written by ``generate`` into the TLS Secret (create or update).
    Raises directory.CertificateFilesError for unusable files."""
    from .directory import CertificateFilesError, load_serving

    serving = load_serving(directory)
    try:
        ca_cert_pem = (directory / store.CA_CERT).read_bytes()
        pki.ca_bundle_b64(ca_cert_pem)
    except OSError as exc:
        raise CertificateFilesError("serving", directory, f"cannot read {exc.filename}: {exc.strerror}") from None
    except ValueError as exc:
        raise CertificateFilesError("serving", directory, f"{store.CA_CERT}: {exc}") from None
    return store.apply_secret(
        api_client,
        store.secret_manifest(name=name, namespace=namespace, serving=serving, ca_cert_pem=ca_cert_pem),
    )
