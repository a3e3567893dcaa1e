"""The kubelet API's serving certificate request (pure): what kube-controller-manager's
kubernetes.io/kubelet-serving signer requires of it, the answers read back, the issued
certificate checked, the rotation point."""

import base64
import datetime as dt
import ipaddress

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from vkubelet.kubeletapi import serving_csr as sc
from vkubelet.settings import Settings, serving_cert_problems

NODE = "kube-offload-remote-1"


def request():
    return sc.new_request(NODE, ["kube-offload-remote-1"], ["10.0.0.7"])


def test_the_request_is_shaped_as_the_kubelet_serving_signer_requires():
    req = request()
    csr = x509.load_pem_x509_csr(req.request_pem)
    assert csr.is_signature_valid
    # ValidateKubeletServingCSR: O exactly [system:nodes], CN system:node:..., a DNS or IP
    # SAN, no e-mail or URI SAN, the non-RSA usage set.
    assert [a.value for a in csr.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == ["system:nodes"]
    assert csr.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == f"system:node:{NODE}"
    sans = csr.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == [NODE]
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("10.0.0.7")]
    assert not sans.get_values_for_type(x509.RFC822Name) and not sans.get_values_for_type(x509.UniformResourceIdentifier)
    assert isinstance(csr.public_key(), ec.EllipticCurvePublicKey)
    body = sc.csr_object(req, expiration_seconds=600)
    assert body["apiVersion"] == "certificates.k8s.io/v1" and body["kind"] == "CertificateSigningRequest"
    assert body["spec"]["signerName"] == "kubernetes.io/kubelet-serving"
    assert set(body["spec"]["usages"]) == {"digital signature", "server auth"}
    assert body["spec"]["expirationSeconds"] == 600
    assert base64.b64decode(body["spec"]["request"]) == req.request_pem
    assert "expirationSeconds" not in sc.csr_object(req)["spec"]


def test_no_names_and_a_too_short_lifetime_are_refused():
    with pytest.raises(sc.ServingCSRError, match="DNS name or IP"):
        sc.new_request(NODE, [], [])
    with pytest.raises(sc.ServingCSRError, match="600"):
        sc.csr_object(request(), expiration_seconds=599)


def test_names_follow_the_request_and_fit_the_api():
    req = request()
    assert req.name.startswith(f"kube-offload-serving-{NODE}-")
    assert request().name != req.name  # a new key, a new request, a new name
    long = sc.csr_name("n" * 300, b"x")
    assert len(long) <= 253 and long.endswith("-" + sc.csr_name("a", b"x").rsplit("-", 1)[1])


def test_only_our_own_request_is_ours():
    req = request()
    body = sc.csr_object(req)
    assert sc.is_ours(body, req)
    assert not sc.is_ours(sc.csr_object(request()), req)  # someone else's bytes under our name
    assert not sc.is_ours({**body, "spec": {**body["spec"], "signerName": "example.com/other"}}, req)


def test_states_of_a_csr():
    assert sc.csr_state({}) == sc.CSRState()
    approved = {"status": {"conditions": [{"type": "Approved", "status": "True"}]}}
    assert sc.csr_state(approved) == sc.CSRState(approved=True)
    issued = {"status": {**approved["status"], "certificate": base64.b64encode(b"PEM").decode()}}
    assert sc.csr_state(issued).certificate_pem == b"PEM"
    denied = {"status": {"conditions": [{"type": "Denied", "status": "True", "reason": "NotOurs", "message": "no"}]}}
    assert sc.csr_state(denied).refused == "Denied: NotOurs no"
    failed = {"status": {"conditions": [{"type": "Approved", "status": "True"},
                                        {"type": "Failed", "status": "True", "reason": "SignerValidationFailure"}]}}
    assert "SignerValidationFailure" in sc.csr_state(failed).refused


def test_the_approval_adds_one_condition_and_keeps_the_object():
    body = {**sc.csr_object(request()), "metadata": {"name": "x", "resourceVersion": "7"}}
    approved = sc.approval(body, "ok")
    assert approved["metadata"]["resourceVersion"] == "7"
    assert approved["status"]["conditions"] == [
        {"type": "Approved", "status": "True", "reason": sc.APPROVED_REASON, "message": "ok"}]
    assert sc.approval(approved, "again")["status"]["conditions"][0]["message"] == "again"


def sign(req, *, dns=(NODE,), ips=("10.0.0.7",), key=None, days=1, server_auth=True):
    """What the signer issues: the request's public key (or ``key``'s), the names given."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca")])
    now = dt.datetime(2027, 1, 1, tzinfo=dt.timezone.utc)
    public = (key or req.key).public_key()
    sans = [x509.DNSName(d) for d in dns] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server_auth else ExtendedKeyUsageOID.CLIENT_AUTH
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(public)
            .serial_number(1).not_valid_before(now).not_valid_after(now + dt.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    from cryptography.hazmat.primitives import serialization
    return cert.public_bytes(serialization.Encoding.PEM)


def test_the_issued_certificate_is_checked_before_it_is_served():
    req = request()
    issued = sc.check_issued(sign(req), req, [NODE], ["10.0.0.7"])
    assert issued.not_after - issued.not_before == 86400
    with pytest.raises(sc.ServingCSRError, match="key"):
        sc.check_issued(sign(req, key=ec.generate_private_key(ec.SECP256R1())), req, [NODE], ["10.0.0.7"])
    with pytest.raises(sc.ServingCSRError, match="10.0.0.7"):
        sc.check_issued(sign(req, ips=()), req, [NODE], ["10.0.0.7"])
    with pytest.raises(sc.ServingCSRError, match="server auth"):
        sc.check_issued(sign(req, server_auth=False), req, [NODE], ["10.0.0.7"])
    with pytest.raises(sc.ServingCSRError, match="PEM"):
        sc.check_issued(b"garbage", req, [NODE], ["10.0.0.7"])


def test_rotation_at_70_to_84_percent_or_at_the_fraction_given():
    issued = sc.Issued(b"", not_before=1000.0, not_after=2000.0)
    assert sc.rotation_deadline(issued, now=1000.0, rand=lambda: 0.0) == 1700.0
    assert sc.rotation_deadline(issued, now=1000.0, rand=lambda: 1.0) == pytest.approx(1840.0)
    assert sc.rotation_deadline(issued, now=1000.0, fraction=0.25) == 1250.0


def test_a_fraction_already_past_is_not_a_rotation_loop():
    # kube-controller-manager backdates notBefore by 5 minutes: a 600 s certificate issued
    # at 1300 is valid 1000..1900, and 25 % of that is before it was issued.
    issued = sc.Issued(b"", not_before=1000.0, not_after=1900.0)
    assert sc.rotation_deadline(issued, now=1300.0, fraction=0.25) == 1300.0 + sc.MIN_ROTATION_WAIT


@pytest.mark.parametrize("changes, problem", [
    ({"kubelet_serving_cert_mode": "acme"}, "--kubelet-serving-cert-mode"),
    ({"kubelet_serving_cert_approval": "anyone"}, "--kubelet-serving-cert-approval"),
    ({"kubelet_serving_cert_mode": "csr", "kubelet_tls_cert": "a", "kubelet_tls_key": "b"}, "drop --kubelet-tls-cert"),
    ({"kubelet_serving_cert_expiration": 300.0}, "minimum is 600s"),
    ({"kubelet_serving_cert_rotation": 1.0}, "0 < f < 1"),
])
def test_flag_problems_say_which_flag(changes, problem):
    settings = Settings(cluster_id="r1", local_cluster_id="l1", **changes)
    [found] = serving_cert_problems(settings)
    assert problem in found


def test_good_flags_have_no_problem():
    settings = Settings(cluster_id="r1", local_cluster_id="l1", kubelet_serving_cert_mode="csr",
                        kubelet_serving_cert_approval="self", kubelet_serving_cert_expiration=600.0,
                        kubelet_serving_cert_rotation=0.2)
    assert serving_cert_problems(settings) == []
