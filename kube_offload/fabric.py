"""kube-offload's own network fabric, the pure half (docs/networking.md).

One WireGuard gateway per peering and side: in the consumer cluster for each remote
cluster it uses, in the provider cluster for each consumer it admits. Each side's pods are
known to the other side under a *remapped* CIDR of the same size (the four CIDRs of
docs/virtual-kubelet.md, "Pod IP remapping"), so the two clusters may hand out the same pod
addresses. A gateway

- routes the peer's remapped CIDR into its tunnel, whose only peer accepts exactly that
  range as sources (WireGuard's allowed IPs);
- NETMAPs what arrives from the tunnel for its own remapped CIDR into its real pod CIDR,
  and the source of its pods' packets leaving into the tunnel into its remapped CIDR, at
  the same offsets, so replies come back the same way (conntrack undoes both).

What each gateway is told lives in one ConfigMap of its own cluster, written by
``kube-offload peer`` (the CIDRs, the peer's public key and endpoint) and by the gateway
(its own public key, :data:`PUBLIC_KEY`). Its private key lives in a Secret of its own
cluster that only the gateway reads and writes: it is generated there and never leaves.
This module names those objects and keys, reads and checks the ConfigMap, and says which
remapping the virtual kubelet is given, so that the vkubelet's flags and the gateways'
translation come from one place (:class:`FabricCIDRs`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import ipaddress
from dataclasses import dataclass
from typing import Any, Mapping

# --- the objects -------------------------------------------------------------------------------
# Keys of the gateway's ConfigMap. peer writes the first five, the gateway PUBLIC_KEY.
POD_CIDR = "podCIDR"  # this side's pod CIDR, as its network plugin assigns it
POD_CIDR_REMAPPED = "podCIDRRemapped"  # the same addresses as the peer reaches them
PEER_POD_CIDR_REMAPPED = "peerPodCIDRRemapped"  # the peer's pods as this side reaches them
PEER_PUBLIC_KEY = "peerPublicKey"
PEER_ENDPOINT = "peerEndpoint"  # HOST:PORT where the peer's gateway receives; empty: it dials us
PUBLIC_KEY = "publicKey"  # written by the gateway: its own public key
PEER_KEYS = (POD_CIDR, POD_CIDR_REMAPPED, PEER_POD_CIDR_REMAPPED, PEER_PUBLIC_KEY, PEER_ENDPOINT)
# Key of the private key in the gateway's Secret (base64 of 32 bytes, as `wg genkey` prints).
PRIVATE_KEY = "privateKey"
# The WireGuard port each gateway listens on when its chart entry names none: the local
# chart's gateways from LOCAL_LISTEN_PORT, the remote chart's from REMOTE_LISTEN_PORT, one
# port more per entry (gateways share their node's network namespace).
LOCAL_LISTEN_PORT = 51820
REMOTE_LISTEN_PORT = 51920
# WireGuard's own advice for a side behind NAT; the peer then always knows where we are.
KEEPALIVE_SECONDS = 25
# Labels of the fabric objects peer writes, and of the gateways' pods.
LABEL_GATEWAY_PEER = "kube-offload.io/gateway-peer"
GATEWAY_COMPONENT = "gateway"


class FabricError(ValueError):
    """A fabric setting that cannot work; the message names the flag or key and the fix."""


def gateway_name(fullname: str, peer_id: str) -> str:
    """Deployment, Service, ServiceAccount and ConfigMap of the gateway to ``peer_id`` (the
    remote cluster's id on the consumer, the consumer's on the provider)."""
    return f"{fullname}-gateway-{peer_id}"


def key_secret_name(fullname: str, peer_id: str) -> str:
    return f"{gateway_name(fullname, peer_id)}-key"


def interface_name(peer_id: str) -> str:
    """The WireGuard link of the gateway to ``peer_id``: at most 15 characters (the kernel's
    limit), the same after every restart, distinct per peer on one node."""
    return "kowg" + hashlib.sha256(peer_id.encode()).hexdigest()[:10]


# --- the four CIDRs ----------------------------------------------------------------------------
Network = ipaddress.IPv4Network


def parse_cidr(text: str, where: str) -> Network:
    try:
        network = ipaddress.ip_network(text.strip(), strict=True)
    except ValueError as exc:
        raise FabricError(f"{where} {text!r} is not a CIDR without host bits ({exc}), e.g. 10.0.0.0/16") from None
    if not isinstance(network, ipaddress.IPv4Network):
        raise FabricError(f"{where} {text!r}: the gateway carries IPv4 only for now (docs/networking.md)")
    return network


@dataclass(frozen=True)
class FabricCIDRs:
    """The four CIDRs of one peering: each side's pods as its network plugin assigns them
    and as the other side reaches them."""

    local_pod_cidr: Network
    local_pod_cidr_remapped: Network
    remote_pod_cidr: Network
    remote_pod_cidr_remapped: Network

    @classmethod
    def parse(cls, *, local: str, local_remapped: str, remote: str, remote_remapped: str,
              flags: tuple[str, str, str, str] = ("--local-pod-cidr", "--local-pod-cidr-remapped",
                                                  "--remote-pod-cidr", "--remote-pod-cidr-remapped")) -> "FabricCIDRs":
        cidrs = cls(parse_cidr(local, flags[0]), parse_cidr(local_remapped, flags[1]),
                    parse_cidr(remote, flags[2]), parse_cidr(remote_remapped, flags[3]))
        problem = cidrs.problem(flags)
        if problem:
            raise FabricError(problem)
        return cidrs

    def problem(self, flags: tuple[str, str, str, str]) -> str | None:
        """Why these cannot work, or None: a remapped CIDR must be as large as its real one
        (offsets are kept) and must not overlap the pods of the side it is used on."""
        pairs = ((self.local_pod_cidr, self.local_pod_cidr_remapped, flags[0], flags[1]),
                 (self.remote_pod_cidr, self.remote_pod_cidr_remapped, flags[2], flags[3]))
        for real, remapped, real_flag, remapped_flag in pairs:
            if real.prefixlen != remapped.prefixlen:
                return (f"{remapped_flag} {remapped} must have the prefix length of {real_flag} {real} "
                        f"(/{real.prefixlen}): addresses keep their offset")
        # Each remapped CIDR is routed into the tunnel on the other side, so it must be
        # free there: not that side's pods, not the other remapped range.
        if self.remote_pod_cidr_remapped.overlaps(self.local_pod_cidr):
            return f"{flags[3]} {self.remote_pod_cidr_remapped} overlaps {flags[0]} {self.local_pod_cidr}: pick a free range"
        if self.local_pod_cidr_remapped.overlaps(self.remote_pod_cidr):
            return f"{flags[1]} {self.local_pod_cidr_remapped} overlaps {flags[2]} {self.remote_pod_cidr}: pick a free range"
        if self.local_pod_cidr_remapped.overlaps(self.remote_pod_cidr_remapped):
            return (f"{flags[1]} {self.local_pod_cidr_remapped} overlaps {flags[3]} {self.remote_pod_cidr_remapped}: "
                    "the two sides' remapped ranges must differ")
        return None

    def local_gateway(self) -> dict[str, str]:
        """The CIDR keys of the consumer's gateway ConfigMap."""
        return {POD_CIDR: str(self.local_pod_cidr), POD_CIDR_REMAPPED: str(self.local_pod_cidr_remapped),
                PEER_POD_CIDR_REMAPPED: str(self.remote_pod_cidr_remapped)}

    def remote_gateway(self) -> dict[str, str]:
        """The CIDR keys of the provider's gateway ConfigMap (the same four, seen from there)."""
        return {POD_CIDR: str(self.remote_pod_cidr), POD_CIDR_REMAPPED: str(self.remote_pod_cidr_remapped),
                PEER_POD_CIDR_REMAPPED: str(self.local_pod_cidr_remapped)}

    def vkubelet_values(self) -> dict[str, str]:
        """The local chart's remoteClusters entry keys that give the virtual kubelet the same
        translation (its --remote-pod-cidr[-remapped], --local-pod-cidr-remapped)."""
        return {"podCIDR": str(self.remote_pod_cidr), "podCIDRRemapped": str(self.remote_pod_cidr_remapped),
                "localPodCIDRRemapped": str(self.local_pod_cidr_remapped)}


# --- keys and endpoints ------------------------------------------------------------------------
def key_problem(text: str, where: str) -> str | None:
    """A WireGuard key is the base64 of 32 bytes (44 characters)."""
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        return f"{where} is not base64: a WireGuard key is 44 characters of base64 (wg pubkey prints one)"
    if len(raw) != 32:
        return f"{where} decodes to {len(raw)} bytes, not 32: not a WireGuard key"
    return None


def parse_endpoint(text: str, where: str) -> tuple[str, int]:
    """``HOST:PORT`` (an IPv4 address or a DNS name, and a UDP port)."""
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise FabricError(f"{where} {text!r}: expected HOST:PORT with a UDP port 1-65535, e.g. 203.0.113.7:31820")
    if host.startswith("["):
        raise FabricError(f"{where} {text!r}: IPv6 endpoints are not supported yet (docs/networking.md)")
    return host, int(port)


# --- the gateway's configuration ---------------------------------------------------------------
@dataclass(frozen=True)
class GatewayConfig:
    """What one gateway applies, read from its ConfigMap."""

    pod_cidr: Network
    pod_cidr_remapped: Network
    peer_pod_cidr_remapped: Network
    peer_public_key: str  # empty: no peer yet (peer has not exchanged the keys)
    peer_endpoint: tuple[str, int] | None  # None: the peer dials us (we answer where it came from)

    @property
    def has_peer(self) -> bool:
        return bool(self.peer_public_key)


def parse_gateway_config(data: Mapping[str, Any] | None, where: str) -> GatewayConfig:
    """The ConfigMap's data, checked; FabricError names the key and the fix."""
    data = data or {}
    missing = [key for key in (POD_CIDR, POD_CIDR_REMAPPED, PEER_POD_CIDR_REMAPPED) if not data.get(key)]
    if missing:
        raise FabricError(f"{where} has no {', '.join(missing)}: written by `kube-offload peer --gateway` "
                          "(run it again, docs/networking.md)")
    pod = parse_cidr(str(data[POD_CIDR]), f"{where} {POD_CIDR}")
    remapped = parse_cidr(str(data[POD_CIDR_REMAPPED]), f"{where} {POD_CIDR_REMAPPED}")
    peer_remapped = parse_cidr(str(data[PEER_POD_CIDR_REMAPPED]), f"{where} {PEER_POD_CIDR_REMAPPED}")
    if pod.prefixlen != remapped.prefixlen:
        raise FabricError(f"{where} {POD_CIDR_REMAPPED} {remapped} must have the prefix length of {POD_CIDR} {pod}")
    if peer_remapped.overlaps(pod):
        raise FabricError(f"{where} {PEER_POD_CIDR_REMAPPED} {peer_remapped} overlaps {POD_CIDR} {pod}: "
                          "it is routed into the tunnel, so it must be free here")
    key = str(data.get(PEER_PUBLIC_KEY) or "").strip()
    if key:
        problem = key_problem(key, f"{where} {PEER_PUBLIC_KEY}")
        if problem:
            raise FabricError(problem)
    endpoint_text = str(data.get(PEER_ENDPOINT) or "").strip()
    endpoint = parse_endpoint(endpoint_text, f"{where} {PEER_ENDPOINT}") if endpoint_text else None
    return GatewayConfig(pod, remapped, peer_remapped, key, endpoint)
