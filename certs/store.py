"""Where certificates live: a directory of PEM files or Kubernetes Secrets.

File and Secret key names are the same (``tls.crt``, ``tls.key``, ``ca.crt``, and
``ca.key`` for the CA), so a Secret mounted as a volume looks exactly like a directory that
``kube-offload certs generate`` wrote, and the servers take one ``--tls-cert``/``--tls-key``
path either way.

The builders (``secret_manifest``, ``ca_secret_manifest``, ``pair_from_secret_data``) are
pure; ``read_secret``, ``apply_secret`` and ``create_secret`` are the thin client calls around them.
"""

from __future__ import annotations

import base64
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .pki import KeyPair, load_pem

TLS_CERT = "tls.crt"
TLS_KEY = "tls.key"
CA_CERT = "ca.crt"
CA_KEY = "ca.key"

SECRET_TYPE_TLS = "kubernetes.io/tls"
SECRET_TYPE_OPAQUE = "Opaque"

# Private keys are readable by the owner only; certificates are public by nature.
KEY_MODE = 0o600
CERT_MODE = 0o644


# --- files -------------------------------------------------------------------------------


def write_files_atomically(directory: Path, files: Mapping[str, tuple[bytes, int]]) -> None:
    """Write ``{name: (content, mode)}`` into ``directory`` so that no reader ever sees a
    partial file: each file is written and fsynced under a temporary name, and only when all
    of them are complete are they renamed into place, one ``rename(2)`` each.

    A rename is atomic per file; two files cannot be swapped in one system call, so a
    reader that opens the certificate and the key exactly between two renames could still
    pair old with new. Preparing everything first shrinks that window to back-to-back
    renames (keys first, then certificates); servers that must never see it reload on a
    signal sent after this returns (``kube-offload certs renew --reload-pid-file``).
    """
    directory.mkdir(parents=True, exist_ok=True)
    staged: list[tuple[str, Path]] = []
    try:
        for name, (content, mode) in files.items():
            # Same directory as the target, so the rename never crosses file systems.
            fd, tmp_name = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".tmp")
            staged.append((name, Path(tmp_name)))
            try:
                # mkstemp creates 0600; set the final mode now so the rename publishes a
                # file that is complete and correctly protected at the same instant.
                os.fchmod(fd, mode)
                _write_all(fd, content)
                os.fsync(fd)
            finally:
                os.close(fd)
        for name, tmp in sorted(staged, key=lambda item: _rename_order(item[0])):
            os.replace(tmp, directory / name)
        staged.clear()
        _fsync_directory(directory)
    finally:
        for _, tmp in staged:
            tmp.unlink(missing_ok=True)


def _write_all(fd: int, content: bytes) -> None:
    view = memoryview(content)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _rename_order(name: str) -> int:
    return 0 if name.endswith(".key") else 1


def _fsync_directory(directory: Path) -> None:
    """Make the renames themselves durable (a crash right after could otherwise roll the
    directory entries back to the old files)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_serving_files(directory: Path, serving: KeyPair, ca_cert_pem: bytes) -> None:
    write_files_atomically(
        directory,
        {
            TLS_KEY: (serving.key_pem, KEY_MODE),
            TLS_CERT: (serving.cert_pem, CERT_MODE),
            CA_CERT: (ca_cert_pem, CERT_MODE),
        },
    )


def write_ca_files(directory: Path, ca: KeyPair) -> None:
    write_files_atomically(
        directory,
        {CA_KEY: (ca.key_pem, KEY_MODE), CA_CERT: (ca.cert_pem, CERT_MODE)},
    )


def read_pair(directory: Path, cert_name: str, key_name: str) -> KeyPair:
    """The checked pair ``directory/cert_name`` + ``directory/key_name``; OSError when a
    file cannot be read, ValueError when the contents are not a matching pair."""
    cert_pem = (directory / cert_name).read_bytes()
    key_pem = (directory / key_name).read_bytes()
    try:
        return load_pem(cert_pem, key_pem)
    except ValueError as exc:
        raise ValueError(f"{directory / cert_name} + {directory / key_name}: {exc}") from None


def has_files(directory: Path, *names: str) -> bool:
    return all((directory / name).is_file() for name in names)


# --- Secrets: pure builders --------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def secret_manifest(
    *,
    name: str,
    namespace: str,
    serving: KeyPair,
    ca_cert_pem: bytes,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The ``kubernetes.io/tls`` Secret a server mounts: its pair plus the CA certificate
    (clients such as the scheduler's extender config read ``ca.crt`` from it). The CA's
    private key is deliberately absent: see ``ca_secret_manifest``."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": SECRET_TYPE_TLS,
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
        "data": {
            TLS_CERT: _b64(serving.cert_pem),
            TLS_KEY: _b64(serving.key_pem),
            CA_CERT: _b64(ca_cert_pem),
        },
    }


def ca_secret_manifest(
    *,
    name: str,
    namespace: str,
    ca: KeyPair,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The CA kept in its own Opaque Secret, read only by the certificate Job: whoever can
    read the CA key can mint certificates the apiserver trusts for our webhooks, so it is not
    mounted into the webhook pods with the serving pair."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": SECRET_TYPE_OPAQUE,
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
        "data": {CA_CERT: _b64(ca.cert_pem), CA_KEY: _b64(ca.key_pem)},
    }


def secret_bytes(data: Mapping[str, str] | None, key: str) -> bytes | None:
    """One decoded entry of a Secret's ``data`` (base64 as the API returns it), or None."""
    if not data or not data.get(key):
        return None
    return base64.b64decode(data[key])


def pair_from_secret_data(
    data: Mapping[str, str] | None, cert_key: str, key_key: str
) -> KeyPair | None:
    """The pair stored in a Secret, or None when it is absent or unusable (then the caller
    issues a new one instead of failing)."""
    cert_pem = secret_bytes(data, cert_key)
    key_pem = secret_bytes(data, key_key)
    if cert_pem is None or key_pem is None:
        return None
    try:
        return load_pem(cert_pem, key_pem)
    except ValueError:
        return None


@dataclass(frozen=True)
class SecretChange:
    """What ``secret_update`` decided: the patch to send, or None when already equal."""

    patch: dict[str, Any] | None
    reason: str


def secret_update(existing: Mapping[str, Any], desired: Mapping[str, Any]) -> SecretChange:
    """Compare an existing Secret (camelCase dict as the API returns it) with the desired
    manifest. The patch touches only our keys and labels, keeps everything else on the
    object, and carries the resourceVersion so a concurrent writer makes it fail with a
    conflict rather than being silently overwritten."""
    existing_type = existing.get("type") or SECRET_TYPE_OPAQUE
    meta = existing.get("metadata") or {}
    where = f"{meta.get('namespace')}/{meta.get('name')}"
    if existing_type != desired["type"]:
        # A Secret's type is immutable; replacing it would mean deleting someone's object.
        raise ValueError(
            f"Secret {where} exists with type {existing_type}, not {desired['type']}; "
            "delete it or choose another name"
        )
    current = existing.get("data") or {}
    want_labels = desired["metadata"].get("labels") or {}
    have_labels = meta.get("labels") or {}
    data_same = all(current.get(k) == v for k, v in desired["data"].items())
    labels_same = all(have_labels.get(k) == v for k, v in want_labels.items())
    if data_same and labels_same:
        return SecretChange(None, "unchanged")
    patch: dict[str, Any] = {
        "metadata": {"resourceVersion": meta.get("resourceVersion")},
        "data": dict(desired["data"]),
    }
    if want_labels:
        patch["metadata"]["labels"] = dict(want_labels)
    return SecretChange(patch, "updated")


# --- Secrets: client calls ---------------------------------------------------------------
# kubernetes is imported inside the functions so that the file-only commands
# (generate, renew) start without loading the client.


def read_secret(api_client: Any, *, namespace: str, name: str) -> dict[str, Any] | None:
    """The Secret as the API's camelCase dict, or None when it does not exist."""
    from kube_offload.runtime.kinds import SECRETS
    from kube_offload.runtime.kube import Kube

    return Kube(api_client).get_or_none(SECRETS, name, namespace=namespace)


def apply_secret(api_client: Any, manifest: Mapping[str, Any]) -> str:
    """Create the Secret or bring the existing one to ``manifest``; returns what happened
    (``created``, ``updated`` or ``unchanged``). Raises kube_offload.runtime.kube.ApiError."""
    from kube_offload.runtime.kinds import SECRETS
    from kube_offload.runtime.kube import STRATEGIC_MERGE_PATCH, ApiError, Kube

    kube = Kube(api_client)
    meta = manifest["metadata"]
    attempts = 3
    # Retries cover losing a race: a create beaten by another creator becomes an update,
    # an update beaten by another writer (stale resourceVersion) is recomputed.
    for attempt in range(1, attempts + 1):
        existing = read_secret(api_client, namespace=meta["namespace"], name=meta["name"])
        try:
            if existing is None:
                kube.create(SECRETS, dict(manifest), namespace=meta["namespace"])
                return "created"
            change = secret_update(existing, manifest)
            if change.patch is None:
                return change.reason
            # Strategic merge, as the official client sent a dict patch before.
            kube.patch(SECRETS, meta["name"], change.patch, namespace=meta["namespace"],
                       content_type=STRATEGIC_MERGE_PATCH)
            return change.reason
        except ApiError as exc:
            if exc.conflict and attempt < attempts:
                continue
            raise
    raise AssertionError("the loop returns or raises")


def create_secret(api_client: Any, manifest: Mapping[str, Any]) -> None:
    """Create the Secret; kube_offload.runtime.kube.ApiError (``conflict``) when it already exists.
    Used for the CA, which must never be overwritten by a racing writer."""
    from kube_offload.runtime.kinds import SECRETS
    from kube_offload.runtime.kube import Kube

    Kube(api_client).create(SECRETS, dict(manifest), namespace=manifest["metadata"]["namespace"])
