"""The kubelet API's serving certificate requested through the local cluster's CSR API,
as a kubelet with ``serverTLSBootstrap`` does it (pure: keys, requests, decisions; the
I/O is in ``serving_cert``).

What kube-controller-manager's ``kubernetes.io/kubelet-serving`` signer signs (its
``csrsigning`` controller, ``isKubeletServing`` -> ``ValidateKubeletServingCSR`` in
``pkg/apis/certificates``): subject organization exactly ``[system:nodes]``, common name
starting ``system:node:``, at least one DNS or IP SAN and no e-mail or URI SAN, usages
exactly ``{digital signature, key encipherment, server auth}`` or, for a non-RSA key,
``{digital signature, server auth}``. It does **not** look at who asked (``spec.username``):
a ServiceAccount's request is signed like a node's once approved. The approval is the
whole gate, and kube-controller-manager's approver (``csrapproving``) approves only
kubelet *client* certificates, never serving ones: someone must approve ours (see
``APPROVAL_*`` and docs/security.md).

Our request: a fresh ECDSA P-256 key (generated in the process, never written anywhere
but the vkubelet's private directory), ``O=system:nodes, CN=system:node:<node name>``,
the SANs the apiserver connects to (``--node-address`` and the node's name), usages
``digital signature`` + ``server auth`` (no ``key encipherment``: an RSA-only usage),
``expirationSeconds`` when asked (the signer honours it, at least 600 s, at most its
``--cluster-signing-duration``).

Rotation, as client-go's certificate manager (``nextRotationDeadline``): at 70 % of the
certificate's lifetime plus a random part of up to a fifth of that (70-84 %), so that a
fleet of nodes issued at once does not renew at once; ``--kubelet-serving-cert-rotation``
fixes the fraction instead (tests use a small one to see a rotation in minutes).
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import ipaddress
import random
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kube_offload.runtime import kinds

SIGNER_NAME = "kubernetes.io/kubelet-serving"
NODE_GROUP = "system:nodes"
NODE_USER_PREFIX = "system:node:"
# The non-RSA usage set the signer accepts (ValidateKubeletServingCSR).
USAGES = ("digital signature", "server auth")
# The API refuses a shorter expirationSeconds (certificates/v1 validation).
MIN_EXPIRATION_SECONDS = 600
# client-go certificate manager: 70 % of the lifetime, jittered by up to a fifth of it.
ROTATION_BASE = 0.7
ROTATION_JITTER = 0.2
MIN_ROTATION_WAIT = 30.0

MODE_SELF_SIGNED = "self-signed"
MODE_CSR = "csr"
MODES = (MODE_SELF_SIGNED, MODE_CSR)
# Who approves our CSR: the vkubelet itself (RBAC: approve on the kubelet-serving signer),
# or someone else (an admin, a dedicated approver): the vkubelet then only waits.
APPROVAL_SELF = "self"
APPROVAL_EXTERNAL = "external"
APPROVALS = (APPROVAL_SELF, APPROVAL_EXTERNAL)
APPROVED_REASON = "KubeOffloadSelfApproved"
# What our CSRs are named after; the rest is the node name and a digest of the request.
NAME_PREFIX = "kube-offload-serving-"


class ServingCSRError(Exception):
    """A request that cannot be completed as is (denied, failed, malformed answer): the
    message says which and what to do."""


@dataclass(frozen=True)
class ServingRequest:
    """One request: the key stays in the process, the rest goes to the API."""

    key: ec.EllipticCurvePrivateKey
    request_pem: bytes
    name: str

    @property
    def key_pem(self) -> bytes:
        return self.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )


def new_request(node_name: str, dns_names: Sequence[str], ip_addresses: Sequence[str]) -> ServingRequest:
    """A fresh key and the PKCS#10 request a kubelet of node ``node_name`` would send."""
    if not dns_names and not ip_addresses:
        raise ServingCSRError("a kubelet serving certificate needs at least one DNS name or IP address")
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    names += [x509.IPAddress(ipaddress.ip_address(a)) for a in ip_addresses]
    request = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, NODE_GROUP),
            x509.NameAttribute(NameOID.COMMON_NAME, NODE_USER_PREFIX + node_name),
        ]))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(key, hashes.SHA256())
    )
    request_pem = request.public_bytes(serialization.Encoding.PEM)
    return ServingRequest(key=key, request_pem=request_pem, name=csr_name(node_name, request_pem))


def csr_name(node_name: str, request_pem: bytes) -> str:
    """Named after the request's digest: a name that can only hold this request, so the
    object found under it (on a retry, before approving it) is ours if its bytes match."""
    digest = hashlib.sha256(request_pem).hexdigest()[:16]
    prefix = f"{NAME_PREFIX}{node_name}"[: 253 - len(digest) - 1].rstrip("-.")
    return f"{prefix}-{digest}"


def csr_object(request: ServingRequest, *, expiration_seconds: int = 0) -> dict[str, Any]:
    """The CertificateSigningRequest to create."""
    spec: dict[str, Any] = {
        "request": base64.b64encode(request.request_pem).decode("ascii"),
        "signerName": SIGNER_NAME,
        "usages": list(USAGES),
    }
    if expiration_seconds:
        if expiration_seconds < MIN_EXPIRATION_SECONDS:
            raise ServingCSRError(
                f"--kubelet-serving-cert-expiration: {expiration_seconds}s is below the CSR API's minimum of "
                f"{MIN_EXPIRATION_SECONDS}s"
            )
        spec["expirationSeconds"] = int(expiration_seconds)
    return {
        "apiVersion": kinds.CERTIFICATE_SIGNING_REQUESTS.api_version,
        "kind": kinds.CERTIFICATE_SIGNING_REQUESTS.kind,
        "metadata": {"name": request.name, "labels": {"kube-offload.io/component": "vkubelet"}},
        "spec": spec,
    }


def is_ours(obj: Mapping[str, Any], request: ServingRequest) -> bool:
    """The object holds exactly our request for our signer (checked before we approve
    anything: the vkubelet approves only what it asked for)."""
    spec = obj.get("spec") or {}
    try:
        sent = base64.b64decode(spec.get("request") or "")
    except ValueError:
        return False
    return sent == request.request_pem and spec.get("signerName") == SIGNER_NAME


def approval(obj: Mapping[str, Any], message: str) -> dict[str, Any]:
    """``obj`` with the Approved condition added: the body of a PUT on its ``approval``
    subresource (conditional on the resourceVersion it carries)."""
    status = dict(obj.get("status") or {})
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != "Approved"]
    conditions.append({"type": "Approved", "status": "True", "reason": APPROVED_REASON, "message": message})
    status["conditions"] = conditions
    return {**obj, "status": status}


@dataclass(frozen=True)
class CSRState:
    approved: bool = False
    certificate_pem: bytes = b""
    # A terminal refusal (Denied or Failed condition): its text, else "".
    refused: str = ""


def csr_state(obj: Mapping[str, Any]) -> CSRState:
    status = obj.get("status") or {}
    approved = False
    for condition in status.get("conditions") or []:
        if condition.get("status", "True") != "True":
            continue
        kind = condition.get("type")
        if kind in ("Denied", "Failed"):
            text = f"{kind}: {condition.get('reason') or ''} {condition.get('message') or ''}".strip()
            return CSRState(refused=text)
        if kind == "Approved":
            approved = True
    try:
        certificate = base64.b64decode(status.get("certificate") or "")
    except ValueError:
        raise ServingCSRError("status.certificate is not base64") from None
    return CSRState(approved=approved, certificate_pem=certificate)


@dataclass(frozen=True)
class Issued:
    cert_pem: bytes  # the leaf first, then any chain the signer added
    not_before: float  # seconds since the epoch
    not_after: float


def check_issued(certificate_pem: bytes, request: ServingRequest, dns_names: Sequence[str], ip_addresses: Sequence[str]) -> Issued:
    """The issued certificate, checked: for our key, for every name we asked, for server
    auth. A signer that returns something else is refused, not served."""
    try:
        chain = x509.load_pem_x509_certificates(certificate_pem)
    except ValueError as exc:
        raise ServingCSRError(f"status.certificate is not PEM certificates: {exc}") from None
    leaf = chain[0]
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    if leaf.public_key().public_bytes(serialization.Encoding.DER, public) != request.key.public_key().public_bytes(
        serialization.Encoding.DER, public
    ):
        raise ServingCSRError("the issued certificate is not for the key of our request")
    try:
        sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        raise ServingCSRError("the issued certificate has no subjectAltName") from None
    have_dns = set(sans.get_values_for_type(x509.DNSName))
    have_ips = {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)}
    missing = [n for n in dns_names if n not in have_dns] + [a for a in ip_addresses if str(ipaddress.ip_address(a)) not in have_ips]
    if missing:
        raise ServingCSRError(f"the issued certificate does not name {', '.join(missing)}")
    try:
        usages = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        if ExtendedKeyUsageOID.SERVER_AUTH not in usages:
            raise ServingCSRError("the issued certificate is not for server auth")
    except x509.ExtensionNotFound:
        pass  # no EKU: any usage
    return Issued(
        cert_pem=certificate_pem,
        not_before=leaf.not_valid_before_utc.timestamp(),
        not_after=leaf.not_valid_after_utc.timestamp(),
    )


def rotation_deadline(
    issued: Issued, *, now: float, fraction: float = 0.0, rand: Callable[[], float] = random.random
) -> float:
    """When to request the next certificate (seconds since the epoch): at ``fraction``
    of the lifetime if given (0 < fraction < 1), else at 70 % plus up to a fifth of that;
    never sooner than MIN_ROTATION_WAIT after ``now``. (kube-controller-manager backdates
    ``notBefore`` by 5 minutes: a short certificate's small fraction may lie in the past,
    and renewing at once, again and again, would flood the CSR API.)"""
    lifetime = max(0.0, issued.not_after - issued.not_before)
    if fraction:
        share = fraction
    else:
        share = ROTATION_BASE * (1 + ROTATION_JITTER * rand())
    return max(issued.not_before + lifetime * share, now + MIN_ROTATION_WAIT)


def format_time(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
