"""certs: the CA and serving certificates, their files and Secrets, the caBundle patch, and
a real TLS handshake proving an issued certificate works for ``https://127.0.0.1:PORT``."""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import ipaddress
import os
import socket
import ssl
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import jsonpatch
import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from certs import cli, directory, pki, store, tls_secret, webhook_ca

NOW = dt.datetime(2030, 1, 15, 12, 0, 0, tzinfo=dt.timezone.utc)
WEBHOOK_DNS = ["kube-offload-webhook.kube-offload.svc", "kube-offload-webhook.kube-offload.svc.cluster.local"]


@pytest.fixture(scope="module")
def ca() -> pki.KeyPair:
    return pki.generate_ca("test-ca", 3650, now=NOW)


@pytest.fixture(scope="module")
def serving(ca: pki.KeyPair) -> pki.KeyPair:
    return pki.issue_serving_cert(ca, dns_names=WEBHOOK_DNS, ip_addresses=["127.0.0.1", "::1"], days=90, now=NOW)


# --- pki ---------------------------------------------------------------------------------


def test_ca_is_a_self_signed_ca_that_signs_leaves_only(ca: pki.KeyPair) -> None:
    cert = ca.certificate
    cert.verify_directly_issued_by(cert)  # self-signed: raises if the signature is wrong
    constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical and constraints.value.ca and constraints.value.path_length == 0
    usage = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.key_cert_sign and usage.crl_sign
    assert cert.not_valid_after_utc == NOW + dt.timedelta(days=3650)
    assert cert.not_valid_before_utc <= NOW
    assert isinstance(ca.private_key, ec.EllipticCurvePrivateKey)
    assert ca.private_key.curve.name == "secp256r1"


def test_serving_cert_chains_to_its_ca_and_not_to_another(ca: pki.KeyPair, serving: pki.KeyPair) -> None:
    cert = serving.certificate
    cert.verify_directly_issued_by(ca.certificate)
    other = pki.generate_ca("other-ca", 10, now=NOW)
    with pytest.raises((InvalidSignature, ValueError)):
        cert.verify_directly_issued_by(other.certificate)
    assert pki.is_issued_by(serving.cert_pem, ca.cert_pem)
    assert not pki.is_issued_by(serving.cert_pem, other.cert_pem)


def test_serving_cert_has_sans_server_auth_and_validity(serving: pki.KeyPair) -> None:
    cert = serving.certificate
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == WEBHOOK_DNS
    assert san.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("::1"),
    ]
    assert cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value == x509.ExtendedKeyUsage(
        [ExtendedKeyUsageOID.SERVER_AUTH]
    )
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert cert.extensions.get_extension_for_class(x509.KeyUsage).value.digital_signature
    assert cert.not_valid_before_utc <= NOW < cert.not_valid_after_utc
    assert cert.not_valid_after_utc == NOW + dt.timedelta(days=90)
    assert pki.subject_names(serving.cert_pem) == pki.SubjectNames(tuple(WEBHOOK_DNS), ("127.0.0.1", "::1"))
    assert pki.validity_days(serving.cert_pem) == 90


def test_serving_cert_never_outlives_its_ca() -> None:
    short_ca = pki.generate_ca("short", 10, now=NOW)
    cert = pki.issue_serving_cert(short_ca, ip_addresses=["127.0.0.1"], days=365, now=NOW).certificate
    assert cert.not_valid_after_utc == short_ca.certificate.not_valid_after_utc


@pytest.mark.parametrize(
    ("dns", "ips", "message"),
    [
        ([], [], "at least one DNS name or IP"),
        (["not a name"], [], "not a DNS name"),
        (["under_score.svc"], [], "not a DNS name"),
        ([], ["300.1.1.1"], "not an IP address"),
        ([], ["localhost"], "not an IP address"),
    ],
)
def test_issue_rejects_bad_names(ca: pki.KeyPair, dns: list[str], ips: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        pki.issue_serving_cert(ca, dns_names=dns, ip_addresses=ips, now=NOW)


def test_issue_refuses_a_non_ca_issuer(serving: pki.KeyPair) -> None:
    with pytest.raises(ValueError, match="not a CA"):
        pki.issue_serving_cert(serving, dns_names=["x.svc"], now=NOW)


def test_client_cert_carries_the_user_and_groups_and_client_auth_only(ca: pki.KeyPair) -> None:
    pair = pki.issue_client_cert(ca, common_name="kube-apiserver-kubelet-client", organizations=["ops", "ops", "audit"], now=NOW)
    cert = pair.certificate
    assert cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value == "kube-apiserver-kubelet-client"
    assert [a.value for a in cert.subject.get_attributes_for_oid(x509.NameOID.ORGANIZATION_NAME)] == ["ops", "audit"]
    assert list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    assert pki.is_issued_by(pair.cert_pem, ca.cert_pem)
    assert pki.load_pem(pair.cert_pem, pair.key_pem) == pair


def test_client_cert_needs_a_common_name_and_a_ca_issuer(ca: pki.KeyPair, serving: pki.KeyPair) -> None:
    with pytest.raises(ValueError, match="common name"):
        pki.issue_client_cert(ca, common_name="", now=NOW)
    with pytest.raises(ValueError, match="not a CA"):
        pki.issue_client_cert(serving, common_name="someone", now=NOW)


def test_load_pem_rejects_a_key_of_another_certificate(ca: pki.KeyPair, serving: pki.KeyPair) -> None:
    assert pki.load_pem(serving.cert_pem, serving.key_pem) == serving
    with pytest.raises(ValueError, match="does not belong"):
        pki.load_pem(serving.cert_pem, ca.key_pem)
    with pytest.raises(ValueError, match="not a PEM certificate"):
        pki.load_pem(serving.key_pem, serving.key_pem)


@pytest.mark.parametrize(
    ("remaining", "expected"),
    [
        (dt.timedelta(days=30, seconds=1), False),  # just outside the window
        (dt.timedelta(days=30), True),  # exactly at the boundary: renew
        (dt.timedelta(days=30, seconds=-1), True),
        (dt.timedelta(0), True),
        (dt.timedelta(days=-1), True),  # already expired
    ],
)
def test_needs_renewal_at_the_boundaries(serving: pki.KeyPair, remaining: dt.timedelta, expected: bool) -> None:
    expires = serving.certificate.not_valid_after_utc
    assert pki.needs_renewal(serving.cert_pem, within=dt.timedelta(days=30), now=expires - remaining) is expected


def test_needs_renewal_takes_naive_datetimes_as_utc(serving: pki.KeyPair) -> None:
    expires = serving.certificate.not_valid_after_utc.replace(tzinfo=None)
    assert not pki.needs_renewal(serving.cert_pem, within=dt.timedelta(hours=1), now=expires - dt.timedelta(hours=2))
    assert pki.needs_renewal(serving.cert_pem, within=dt.timedelta(hours=1), now=expires - dt.timedelta(minutes=59))


def test_renewal_reason(ca: pki.KeyPair, serving: pki.KeyPair) -> None:
    within = dt.timedelta(days=30)
    assert pki.renewal_reason(serving, ca_cert_pem=ca.cert_pem, within=within, now=NOW, dns_names=WEBHOOK_DNS[:1],
                              ip_addresses=["127.0.0.1"]) is None
    other = pki.generate_ca("other", 10, now=NOW)
    assert "not issued by the current CA" in pki.renewal_reason(serving, ca_cert_pem=other.cert_pem, within=within, now=NOW)
    assert "lacks the names extra.svc, 10.0.0.1" in pki.renewal_reason(
        serving, ca_cert_pem=ca.cert_pem, within=within, now=NOW, dns_names=["extra.svc"], ip_addresses=["10.0.0.1"]
    )
    late = NOW + dt.timedelta(days=61)
    assert "within 720h of now" in pki.renewal_reason(serving, ca_cert_pem=ca.cert_pem, within=within, now=late)
    mismatched = pki.KeyPair(serving.cert_pem, ca.key_pem)
    assert "does not belong" in pki.renewal_reason(mismatched, ca_cert_pem=ca.cert_pem, within=within, now=NOW)


def test_ca_bundle_is_base64_of_the_ca_pem_and_refuses_non_cas(ca: pki.KeyPair, serving: pki.KeyPair) -> None:
    bundle = pki.ca_bundle_b64(ca.cert_pem)
    assert base64.b64decode(bundle) == ca.cert_pem
    with pytest.raises(ValueError, match="not a CA"):
        pki.ca_bundle_b64(serving.cert_pem)
    with pytest.raises(ValueError, match="not a PEM certificate"):
        pki.ca_bundle_b64(ca.key_pem)


def test_service_dns_names() -> None:
    assert pki.service_dns_names("hook", "ns") == ["hook", "hook.ns", "hook.ns.svc", "hook.ns.svc.cluster.local"]


# --- files -------------------------------------------------------------------------------


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_write_serving_files_modes_and_no_leftovers(tmp_path: Path, ca: pki.KeyPair, serving: pki.KeyPair) -> None:
    store.write_serving_files(tmp_path, serving, ca.cert_pem)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ca.crt", "tls.crt", "tls.key"]
    assert _mode(tmp_path / "tls.key") == 0o600
    assert _mode(tmp_path / "tls.crt") == 0o644
    assert store.read_pair(tmp_path, "tls.crt", "tls.key") == serving


def test_failed_write_leaves_old_files_whole_and_no_temp_files(
    tmp_path: Path, ca: pki.KeyPair, serving: pki.KeyPair, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.write_serving_files(tmp_path, serving, ca.cert_pem)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    renewed = pki.issue_serving_cert(ca, dns_names=["x.svc"], now=NOW)
    calls = {"n": 0}
    real_write_all = store._write_all

    def write_then_fail_on_second_file(fd: int, content: bytes) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            os.write(fd, content[: len(content) // 2])  # a torn write, then the disk "fills up"
            raise OSError(28, "No space left on device")
        real_write_all(fd, content)

    monkeypatch.setattr(store, "_write_all", write_then_fail_on_second_file)
    with pytest.raises(OSError):
        store.write_serving_files(tmp_path, renewed, ca.cert_pem)
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    # Nothing renamed (the first, completely written file included) and no temp file left.
    assert after == before


def test_readers_never_see_a_partial_file(tmp_path: Path, ca: pki.KeyPair) -> None:
    versions = [pki.issue_serving_cert(ca, dns_names=[f"v{i}.svc"], now=NOW) for i in range(2)]
    valid = {v.cert_pem for v in versions}
    store.write_serving_files(tmp_path, versions[0], ca.cert_pem)
    stop = threading.Event()
    seen: list[bytes] = []

    def read_loop() -> None:
        while not stop.is_set():
            seen.append((tmp_path / "tls.crt").read_bytes())

    reader = threading.Thread(target=read_loop)
    reader.start()
    try:
        for i in range(200):
            store.write_serving_files(tmp_path, versions[i % 2], ca.cert_pem)
    finally:
        stop.set()
        reader.join()
    assert seen and set(seen) <= valid


def test_generate_directory_reuses_the_ca_unless_asked(tmp_path: Path) -> None:
    first = directory.generate_directory(tmp_path, ip_addresses=["127.0.0.1"])
    assert not first.ca_reused
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]
    assert _mode(tmp_path / "ca.key") == 0o600
    second = directory.generate_directory(tmp_path, dns_names=["b.svc"])
    assert second.ca_reused and second.ca_cert_pem == first.ca_cert_pem
    assert pki.is_issued_by(second.serving.cert_pem, first.ca_cert_pem)
    third = directory.generate_directory(tmp_path, dns_names=["b.svc"], new_ca=True)
    assert third.ca_cert_pem != first.ca_cert_pem
    assert (tmp_path / "ca.crt").read_bytes() == third.ca_cert_pem
    assert base64.b64decode(third.ca_bundle) == third.ca_cert_pem


def test_generate_directory_with_a_separate_ca_dir(tmp_path: Path) -> None:
    ca_dir, out = tmp_path / "ca", tmp_path / "out"
    directory.generate_directory(ca_dir, dns_names=["ca-holder.svc"])
    result = directory.generate_directory(out, ip_addresses=["127.0.0.1"], ca_dir=ca_dir)
    assert sorted(p.name for p in out.iterdir()) == ["ca.crt", "tls.crt", "tls.key"]  # the CA key stays put
    assert (out / "ca.crt").read_bytes() == (ca_dir / "ca.crt").read_bytes() == result.ca_cert_pem
    with pytest.raises(directory.CertificateFilesError) as err:
        directory.generate_directory(out, ip_addresses=["127.0.0.1"], ca_dir=tmp_path / "missing")
    assert err.value.which == "ca"


def test_bad_names_leave_the_directory_untouched(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        directory.generate_directory(tmp_path / "d", dns_names=["bad name"])
    assert not (tmp_path / "d").exists()


def test_renew_directory_only_when_due_keeping_ca_and_names(tmp_path: Path) -> None:
    issued_at = NOW
    directory.generate_directory(
        tmp_path, dns_names=["hook.ns.svc"], ip_addresses=["127.0.0.1"], days=60, now=issued_at
    )
    ca_before = (tmp_path / "ca.crt").read_bytes()
    cert_before = (tmp_path / "tls.crt").read_bytes()

    early = directory.renew_directory(tmp_path, within=dt.timedelta(days=30), now=issued_at + dt.timedelta(days=29))
    assert not early.renewed and early.reason is None
    assert (tmp_path / "tls.crt").read_bytes() == cert_before

    due_at = issued_at + dt.timedelta(days=30)
    due = directory.renew_directory(tmp_path, within=dt.timedelta(days=30), now=due_at)
    assert due.renewed and "expires" in due.reason
    new_cert = x509.load_pem_x509_certificate((tmp_path / "tls.crt").read_bytes())
    assert (tmp_path / "ca.crt").read_bytes() == ca_before
    new_cert.verify_directly_issued_by(x509.load_pem_x509_certificate(ca_before))
    assert pki.subject_names((tmp_path / "tls.crt").read_bytes()) == pki.SubjectNames(("hook.ns.svc",), ("127.0.0.1",))
    assert new_cert.not_valid_after_utc == due_at + dt.timedelta(days=60)  # same lifetime as before
    assert store.read_pair(tmp_path, "tls.crt", "tls.key").cert_pem != cert_before
    assert due.not_after == new_cert.not_valid_after_utc


def test_renew_directory_reissues_for_a_replaced_ca(tmp_path: Path) -> None:
    directory.generate_directory(tmp_path, dns_names=["a.svc"], now=NOW)
    directory.generate_directory(tmp_path / "other", dns_names=["b.svc"], now=NOW)
    outcome = directory.renew_directory(tmp_path, ca_dir=tmp_path / "other", within=dt.timedelta(hours=1), now=NOW)
    assert outcome.renewed and "not issued by the current CA" in outcome.reason
    assert pki.is_issued_by((tmp_path / "tls.crt").read_bytes(), (tmp_path / "other" / "ca.crt").read_bytes())


# --- a real TLS handshake on loopback ----------------------------------------------------


def _serve_once(server_ctx: ssl.SSLContext, listener: socket.socket, errors: list[BaseException]) -> None:
    try:
        conn, _ = listener.accept()
        with server_ctx.wrap_socket(conn, server_side=True) as tls:
            tls.sendall(tls.recv(64).upper())
    except (ssl.SSLError, OSError) as exc:  # the client rejecting us shows up here too
        errors.append(exc)


def _handshake(cert_dir: Path, trust_pem: bytes, server_hostname: str = "127.0.0.1") -> bytes:
    """Serve ``cert_dir``'s pair on 127.0.0.1 and connect with a client that trusts only
    ``trust_pem`` and checks the host name; returns what the server echoed."""
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert_dir / "tls.crt", cert_dir / "tls.key")
    # cadata given: the system's trust store is not loaded, so only our CA is trusted.
    client_ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cadata=trust_pem.decode())
    client_ctx.verify_flags |= ssl.VERIFY_X509_STRICT
    assert client_ctx.check_hostname and client_ctx.verify_mode == ssl.CERT_REQUIRED
    errors: list[BaseException] = []
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        server = threading.Thread(target=_serve_once, args=(server_ctx, listener, errors))
        server.start()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
                with client_ctx.wrap_socket(raw, server_hostname=server_hostname) as tls:
                    tls.sendall(b"admission")
                    return tls.recv(64)
        finally:
            server.join(timeout=10)


def test_tls_handshake_on_127_0_0_1_trusting_only_the_ca(tmp_path: Path) -> None:
    result = directory.generate_directory(tmp_path, dns_names=["localhost"], ip_addresses=["127.0.0.1"])
    assert _handshake(tmp_path, result.ca_cert_pem) == b"ADMISSION"


def test_tls_handshake_fails_without_the_ip_san(tmp_path: Path) -> None:
    result = directory.generate_directory(tmp_path, dns_names=["only-a-name.svc"])
    with pytest.raises(ssl.SSLCertVerificationError, match="IP address mismatch"):
        _handshake(tmp_path, result.ca_cert_pem)


def test_tls_handshake_fails_when_trusting_another_ca(tmp_path: Path) -> None:
    directory.generate_directory(tmp_path / "a", ip_addresses=["127.0.0.1"])
    other = directory.generate_directory(tmp_path / "b", ip_addresses=["127.0.0.1"])
    with pytest.raises(ssl.SSLCertVerificationError, match="unable to get local issuer"):
        _handshake(tmp_path / "a", other.ca_cert_pem)


def test_tls_handshake_still_works_after_renewal(tmp_path: Path) -> None:
    result = directory.generate_directory(tmp_path, ip_addresses=["127.0.0.1"], days=10)
    outcome = directory.renew_directory(tmp_path, within=dt.timedelta(days=30))
    assert outcome.renewed
    # The caBundle registered before the renewal still verifies the new certificate.
    assert _handshake(tmp_path, result.ca_cert_pem) == b"ADMISSION"


# --- Secrets -----------------------------------------------------------------------------


def test_secret_manifest_is_a_tls_secret_without_the_ca_key(ca: pki.KeyPair, serving: pki.KeyPair) -> None:
    manifest = store.secret_manifest(name="tls", namespace="ns", serving=serving, ca_cert_pem=ca.cert_pem)
    assert manifest["type"] == "kubernetes.io/tls"
    assert manifest["metadata"]["name"] == "tls" and manifest["metadata"]["namespace"] == "ns"
    assert set(manifest["data"]) == {"tls.crt", "tls.key", "ca.crt"}
    assert store.pair_from_secret_data(manifest["data"], "tls.crt", "tls.key") == serving
    assert store.secret_bytes(manifest["data"], "ca.crt") == ca.cert_pem
    ca_manifest = store.ca_secret_manifest(name="ca", namespace="ns", ca=ca)
    assert ca_manifest["type"] == "Opaque"
    assert store.pair_from_secret_data(ca_manifest["data"], "ca.crt", "ca.key") == ca


def test_secret_update_patches_only_on_change_and_refuses_other_types(ca: pki.KeyPair, serving: pki.KeyPair) -> None:
    desired = store.secret_manifest(name="tls", namespace="ns", serving=serving, ca_cert_pem=ca.cert_pem)
    existing = {
        "type": "kubernetes.io/tls",
        "metadata": {"name": "tls", "namespace": "ns", "resourceVersion": "7"},
        "data": dict(desired["data"], extra="eA=="),
    }
    assert store.secret_update(existing, desired) == store.SecretChange(None, "unchanged")
    stale = dict(existing, data={"tls.crt": "b2xk"})
    change = store.secret_update(stale, desired)
    assert change.reason == "updated"
    assert change.patch == {"metadata": {"resourceVersion": "7"}, "data": desired["data"]}
    with pytest.raises(ValueError, match="type Opaque"):
        store.secret_update(dict(existing, type="Opaque"), desired)


def _as_read(manifest: dict) -> dict:
    return dict(manifest, metadata=dict(manifest["metadata"], resourceVersion="1"))


def test_plan_tls_secret_first_run_then_keep_then_renew(ca: pki.KeyPair) -> None:
    within = dt.timedelta(days=30)
    first = tls_secret.plan_tls_secret(None, None, dns_names=WEBHOOK_DNS, days=90, within=within, now=NOW)
    assert first.ca_is_new and first.reason == "no serving certificate yet"
    assert pki.is_issued_by(first.serving.cert_pem, first.ca.cert_pem)

    ca_secret = _as_read(store.ca_secret_manifest(name="ca", namespace="ns", ca=first.ca))
    tls = _as_read(store.secret_manifest(name="tls", namespace="ns", serving=first.serving, ca_cert_pem=first.ca.cert_pem))
    kept = tls_secret.plan_tls_secret(ca_secret, tls, dns_names=WEBHOOK_DNS, within=within, now=NOW + dt.timedelta(days=59))
    assert not kept.ca_is_new and kept.reason is None and kept.serving == first.serving

    later = NOW + dt.timedelta(days=60)
    renewed = tls_secret.plan_tls_secret(ca_secret, tls, dns_names=WEBHOOK_DNS, within=within, now=later)
    assert renewed.reason and "expires" in renewed.reason
    assert renewed.ca == first.ca and renewed.serving != first.serving
    assert pki.is_issued_by(renewed.serving.cert_pem, first.ca.cert_pem)

    more_names = tls_secret.plan_tls_secret(ca_secret, tls, dns_names=WEBHOOK_DNS + ["new.svc"], within=within, now=NOW)
    assert "lacks the names new.svc" in more_names.reason


def test_plan_tls_secret_never_replaces_an_unusable_ca() -> None:
    broken = {"metadata": {"name": "ca", "namespace": "ns"}, "data": {"ca.crt": "bm90IGEgY2VydA=="}}
    with pytest.raises(tls_secret.UnusableCaSecret, match="delete it"):
        tls_secret.plan_tls_secret(broken, None, dns_names=["a.svc"], within=dt.timedelta(days=1), now=NOW)


# --- caBundle patch ----------------------------------------------------------------------


def _webhook_config(*bundles: str | None) -> dict:
    webhooks = []
    for i, bundle in enumerate(bundles):
        client_config: dict = {"service": {"name": "hook", "namespace": "ns", "path": f"/p{i}"}}
        if bundle is not None:
            client_config["caBundle"] = bundle
        webhooks.append({"name": f"w{i}.kube-offload.io", "clientConfig": client_config})
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "kube-offload"}, "webhooks": webhooks}


def test_ca_bundle_patch_sets_every_webhook(ca: pki.KeyPair) -> None:
    bundle = pki.ca_bundle_b64(ca.cert_pem)
    config = _webhook_config(None, "b2xk", bundle)
    patch = webhook_ca.ca_bundle_patch(config, bundle)
    assert len(patch) == 4  # test + add for the two webhooks that need it
    patched = jsonpatch.apply_patch(config, patch)
    assert [w["clientConfig"]["caBundle"] for w in patched["webhooks"]] == [bundle] * 3
    assert [w["clientConfig"]["service"]["path"] for w in patched["webhooks"]] == ["/p0", "/p1", "/p2"]
    assert webhook_ca.ca_bundle_patch(patched, bundle) == []
    assert webhook_ca.ca_bundle_patch({"webhooks": []}, bundle) == []
    assert webhook_ca.ca_bundle_patch({"metadata": {}}, bundle) == []


def test_ca_bundle_patch_refuses_to_apply_to_a_reordered_list(ca: pki.KeyPair) -> None:
    bundle = pki.ca_bundle_b64(ca.cert_pem)
    config = _webhook_config(None, None)
    patch = webhook_ca.ca_bundle_patch(config, bundle)
    reordered = dict(config, webhooks=list(reversed(config["webhooks"])))
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(reordered, patch)


def test_ca_bundle_patch_adds_a_missing_client_config() -> None:
    patched = jsonpatch.apply_patch({"webhooks": [{"name": "w"}]}, webhook_ca.ca_bundle_patch({"webhooks": [{"name": "w"}]}, "QQ=="))
    assert patched["webhooks"][0]["clientConfig"] == {"caBundle": "QQ=="}


def test_not_found_message_names_the_flag() -> None:
    message = str(webhook_ca.WebhookConfigurationNotFound("validating", "kube-offload"))
    assert message.startswith("--validating kube-offload: no ValidatingWebhookConfiguration")


# --- CLI ---------------------------------------------------------------------------------


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="kube-offload")
    cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    code = args.func(args)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize(
    ("text", "expected"),
    [("720h", dt.timedelta(hours=720)), ("30d", dt.timedelta(days=30)), ("1h30m", dt.timedelta(minutes=90)),
     ("45s", dt.timedelta(seconds=45)), ("0s", dt.timedelta(0))],
)
def test_parse_duration(text: str, expected: dt.timedelta) -> None:
    assert cli.parse_timedelta(text) == expected
    assert cli.parse_timedelta(pki.format_duration(expected)) == expected


@pytest.mark.parametrize("text", ["", "720", "h", "1x", "-1h", "1h 2", "1.5", "30d-1h"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        cli.parse_timedelta(text)


def test_parse_duration_takes_go_fractions() -> None:
    # One parser for every duration (durationpy underneath): Go writes 1.5h, so do we.
    assert cli.parse_timedelta("1.5h") == dt.timedelta(minutes=90)
    assert cli.parse_timedelta("1d12h") == dt.timedelta(hours=36)


def test_cli_generate_then_renew(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "certs"
    code, stdout, _ = run_cli(["certs", "generate", "--out-dir", str(out), "--dns", "a.svc,b.svc", "--ip", "127.0.0.1"], capsys)
    assert code == 0 and "CA: generated" in stdout and "DNS:a.svc, DNS:b.svc, IP:127.0.0.1" in stdout
    assert pki.subject_names((out / "tls.crt").read_bytes()) == pki.SubjectNames(("a.svc", "b.svc"), ("127.0.0.1",))
    code, stdout, _ = run_cli(["certs", "renew", "--dir", str(out)], capsys)
    assert code == 0 and stdout.startswith("not renewed")
    code, stdout, _ = run_cli(["certs", "renew", "--dir", str(out), "--within", "400d", "--days", "500"], capsys)
    assert code == 0 and stdout.startswith(f"renewed {out / 'tls.crt'}")
    assert pki.validity_days((out / "tls.crt").read_bytes()) == 500


def test_cli_reads_defaults_from_the_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBE_OFFLOAD_CERTS_DAYS", "7")
    monkeypatch.setenv("KUBE_OFFLOAD_CERTS_IP", "127.0.0.1,::1")
    monkeypatch.setenv("KUBE_OFFLOAD_CERTS_OUT_DIR", str(tmp_path / "env"))
    code, _, _ = run_cli(["certs", "generate"], capsys)
    assert code == 0
    assert pki.validity_days((tmp_path / "env" / "tls.crt").read_bytes()) == 7
    assert pki.subject_names((tmp_path / "env" / "tls.crt").read_bytes()).ip_addresses == ("127.0.0.1", "::1")


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["certs", "generate", "--out-dir", "{tmp}/x"], "--dns"),
        (["certs", "generate", "--out-dir", "{tmp}/x", "--ip", "1.2.3"], "--ip 1.2.3"),
        (["certs", "generate", "--out-dir", "{tmp}/x", "--dns", "a.svc", "--ca-dir", "{tmp}/none"], "--ca-dir"),
        (["certs", "generate", "--out-dir", "{tmp}/x", "--dns", "a.svc", "--days", "0"], "--days 0"),
        (["certs", "renew", "--dir", "{tmp}/none"], "--dir"),
        (["certs", "patch-ca-bundle", "--mutating", "m", "--ca-file", "{tmp}/none.crt"], "--ca-file"),
        (["certs", "patch-ca-bundle", "--ca-file", "{tmp}/none.crt"], "--mutating"),
        (["certs", "patch-ca-bundle", "--mutating", "m"], "--ca-file"),
        (["certs", "secret", "--dns", "a.svc", "--kubeconfig", "{tmp}/no-kubeconfig"], "--kubeconfig"),
        (["certs", "secret", "--from-dir", "{tmp}", "--kubeconfig", "{tmp}/no-kubeconfig"], "--kubeconfig"),
        (["certs", "secret", "--service", "Bad_Name"], "--service"),
        (["certs", "renew", "--dir", "{tmp}", "--reload-pid-file", "{tmp}/pid"], "--dir"),
    ],
)
def test_cli_errors_are_one_line_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], flag: str
) -> None:
    code, stdout, stderr = run_cli([a.replace("{tmp}", str(tmp_path)) for a in argv], capsys)
    assert code == 2
    assert stdout == ""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr
    assert lines[0].startswith(f"kube-offload {argv[0]} {argv[1]}: error: ")
    assert flag in lines[0]


def test_cli_patch_ca_bundle_rejects_a_key_as_ca_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory.generate_directory(tmp_path, ip_addresses=["127.0.0.1"])
    code, _, stderr = run_cli(["certs", "patch-ca-bundle", "--mutating", "m", "--ca-file", str(tmp_path / "tls.key")], capsys)
    assert code == 2 and "--ca-file" in stderr and "not a PEM certificate" in stderr
    code, _, stderr = run_cli(["certs", "patch-ca-bundle", "--mutating", "m", "--ca-file", str(tmp_path / "tls.crt")], capsys)
    assert code == 2 and "not a CA certificate" in stderr


def test_cli_without_action_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, _ = run_cli(["certs"], capsys)
    assert code == 2 and "patch-ca-bundle" in stdout and "renew" in stdout


def test_cli_renew_signals_the_reload_pid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory.generate_directory(tmp_path, ip_addresses=["127.0.0.1"], days=5)
    marker = tmp_path / "hup-received"
    child = subprocess.Popen(
        [sys.executable, "-c",
         "import signal, sys, time, pathlib\n"
         f"signal.signal(signal.SIGHUP, lambda *_: pathlib.Path({str(marker)!r}).write_text('hup'))\n"
         "print('ready', flush=True)\n"
         "time.sleep(30)\n"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert child.stdout.readline().strip() == "ready"
        (tmp_path / "server.pid").write_text(f"{child.pid}\n")
        code, stdout, _ = run_cli(
            ["certs", "renew", "--dir", str(tmp_path), "--within", "30d", "--reload-pid-file", str(tmp_path / "server.pid")],
            capsys,
        )
        assert code == 0 and f"sent SIGHUP to pid {child.pid}" in stdout
        deadline = time.monotonic() + 10
        # Poll the content, not the existence: the handler creates the file before writing.
        while not (marker.exists() and marker.read_text() == "hup") and time.monotonic() < deadline:
            time.sleep(0.02)
        assert marker.read_text() == "hup"
    finally:
        child.kill()
        child.wait()


def test_cli_unreachable_api_server_is_one_line_and_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as probe:  # a loopback port nobody listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:{port}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    code, stdout, stderr = run_cli(["certs", "secret", "--dns", "a.svc", "--kubeconfig", str(kubeconfig)], capsys)
    assert code == 1 and stdout == ""
    assert len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr
    assert "cannot reach the API server" in stderr and "--kubeconfig" in stderr


def _served_certificate(port: int, ca_pem: bytes) -> x509.Certificate:
    context = ssl.create_default_context(cadata=ca_pem.decode())
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            tls.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert tls.recv(64).startswith(b"HTTP/1.1 200")
            return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True))


def test_gunicorn_serves_the_renewed_pair_without_a_restart(tmp_path: Path) -> None:
    """What docs/certificates.md promises: gunicorn's gthread worker (the webhook's and the
    extender's) loads the files per connection, so a renewal reaches new connections with
    no signal, and the caBundle registered before still verifies them."""
    made = directory.generate_directory(tmp_path / "tls", ip_addresses=["127.0.0.1"], days=10)
    (tmp_path / "app.py").write_text(
        "def app(environ, start_response):\n"
        "    start_response('200 OK', [('Content-Length', '2')])\n"
        "    return [b'ok']\n"
    )
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "--chdir", str(tmp_path), "--worker-class", "gthread",
         "--threads", "2", "--bind", f"127.0.0.1:{port}", "--certfile", str(made.cert_file),
         "--keyfile", str(made.key_file), "app:app"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                before = _served_certificate(port, made.ca_cert_pem)
                break
            except (ConnectionRefusedError, ssl.SSLError, OSError):
                assert time.monotonic() < deadline and server.poll() is None, "gunicorn did not start"
                time.sleep(0.1)
        assert directory.renew_directory(made.directory, within=dt.timedelta(days=30)).renewed
        after = _served_certificate(port, made.ca_cert_pem)
        assert after.serial_number != before.serial_number
        assert after == x509.load_pem_x509_certificate(made.cert_file.read_bytes())
        assert server.poll() is None  # same process throughout
    finally:
        server.terminate()
        server.wait(timeout=15)
