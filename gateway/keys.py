"""WireGuard keys: Curve25519 pairs, base64 as ``wg genkey`` / ``wg pubkey`` print them.

The private key is made by the gateway in its own cluster (controller.py keeps it in a
Secret there); only the public key is published, for ``kube-offload peer`` to hand to the
other side.
"""

from __future__ import annotations

import base64

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

_RAW = serialization.Encoding.Raw


def generate_private_key() -> str:
    raw = X25519PrivateKey.generate().private_bytes(_RAW, serialization.PrivateFormat.Raw, serialization.NoEncryption())
    return base64.b64encode(raw).decode()


def public_key(private_key: str) -> str:
    """The public key of ``private_key`` (what ``wg pubkey`` prints; X25519 clamps the
    scalar as WireGuard does, so any 32 bytes give the same result as wg's)."""
    raw = base64.b64decode(private_key, validate=True)
    if len(raw) != 32:
        raise ValueError(f"a WireGuard private key is 32 bytes, this one {len(raw)}")
    public = X25519PrivateKey.from_private_bytes(raw).public_key().public_bytes(_RAW, serialization.PublicFormat.Raw)
    return base64.b64encode(public).decode()
