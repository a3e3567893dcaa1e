"""Pod IP remapping between two clusters whose pod CIDRs may overlap (pure).

Two clusters built alike hand out the same pod addresses (10.0.0.x in both): once pods of
one are shown in the other, a local pod and an offloaded pod can carry the same IP and an
EndpointSlice can no longer tell them apart. As Liqo's IPAM does, each side of a peering
is given a second, non-overlapping CIDR under which the *other* side reaches it, and
addresses are translated by keeping their offset in the network:

    remote pod CIDR 10.0.0.0/16  seen locally as  10.100.0.0/16   10.0.3.7 -> 10.100.3.7
    local pod CIDR  10.0.0.0/16  seen remotely as 10.200.0.0/16   10.0.1.9 -> 10.200.1.9

The virtual kubelet writes offloaded pods' ``status.podIP``/``podIPs`` in the first
mapping's remapped CIDR, and the local endpoints of reflected EndpointSlices in the
second's. Making packets follow (NAT at the cluster edge, tunnels) is a network fabric's
job, configured with the same four CIDRs (docs/virtual-kubelet.md, "Pod IP remapping").

Both CIDRs of a mapping are given (a real CIDR and its remapped one, same family, same
prefix length), one mapping per address family; nothing given = no remapping (addresses
shown as they are). An address outside every real CIDR (a pod IP the provider chose out
of range, an endpoint of a pod running in a third cluster) is left as it is by
:meth:`Remapping.translate` and named by :meth:`Remapping.outside`, so that callers decide:
the pod loop does not show such a pod IP (provider_bounds.shown_pod_ips), reflection logs
such an endpoint.
"""

from __future__ import annotations

import argparse
import functools
import ipaddress
from dataclasses import dataclass
from typing import Iterable

from kube_offload.runtime.flags import add_flag

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

REMOTE_POD_CIDR_FLAG = "--remote-pod-cidr"
REMOTE_POD_CIDR_REMAPPED_FLAG = "--remote-pod-cidr-remapped"
LOCAL_POD_CIDR_FLAG = "--local-pod-cidr"
LOCAL_POD_CIDR_REMAPPED_FLAG = "--local-pod-cidr-remapped"


class RemappingError(ValueError):
    """A remapping setting that cannot work; the message names the flag and the fix."""


@dataclass(frozen=True)
class CidrMapping:
    """Addresses of ``real`` as they are reached under ``remapped`` (same size)."""

    real: Network
    remapped: Network

    def translate(self, ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
        """``ip`` moved into the remapped network at the same offset; None if not in ``real``."""
        if ip.version != self.real.version or ip not in self.real:
            return None
        offset = int(ip) - int(self.real.network_address)
        return str(ipaddress.ip_address(int(self.remapped.network_address) + offset))


@dataclass(frozen=True)
class Remapping:
    """One direction of a peering's remapping: at most one :class:`CidrMapping` per
    address family. Empty = addresses are shown as they are."""

    mappings: tuple[CidrMapping, ...] = ()

    @property
    def configured(self) -> bool:
        return bool(self.mappings)

    def _translated(self, address: str) -> str | None:
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return None  # not an IP (an FQDN endpoint): nothing to translate
        for mapping in self.mappings:
            translated = mapping.translate(ip)
            if translated is not None:
                return translated
        return None

    def translate(self, address: str) -> str:
        """``address`` as the other cluster reaches it; unchanged when no mapping covers
        it (or none is configured)."""
        if not self.mappings:
            return address
        translated = self._translated(address)
        return address if translated is None else translated

    def outside(self, addresses: Iterable[str]) -> list[str]:
        """The addresses a configured remapping leaves as they are (outside every real
        CIDR); always empty when nothing is configured."""
        if not self.mappings:
            return []
        return [address for address in addresses if address and self._translated(address) is None]


NO_REMAPPING = Remapping()


def parse_cidrs(text: str, flag: str) -> tuple[Network, ...]:
    """``"10.0.0.0/16,fd00::/64"`` -> networks; a malformed or host-bit CIDR, or two of one
    family, is an error naming ``flag``."""
    networks: list[Network] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        if "/" not in item:
            raise RemappingError(f"{flag}={text!r}: {item!r} is not a CIDR (address/prefix-length, e.g. 10.0.0.0/16)")
        try:
            network = ipaddress.ip_network(item)
        except ValueError:
            try:
                loose = ipaddress.ip_network(item, strict=False)
            except ValueError:
                raise RemappingError(
                    f"{flag}={text!r}: {item!r} is not a CIDR (address/prefix-length, e.g. 10.0.0.0/16)"
                ) from None
            raise RemappingError(f"{flag}={text!r}: {item!r} has host bits set; did you mean {loose}?") from None
        if any(other.version == network.version for other in networks):
            raise RemappingError(f"{flag}={text!r}: give at most one IPv{network.version} CIDR (one per address family)")
        networks.append(network)
    return tuple(networks)


def build_remapping(real_text: str, remapped_text: str, *, real_flag: str, remapped_flag: str) -> Remapping:
    """The remapping two flags describe: both empty = none; otherwise one real CIDR and
    one remapped CIDR per address family, of the same prefix length."""
    real = parse_cidrs(real_text, real_flag)
    remapped = parse_cidrs(remapped_text, remapped_flag)
    if not real and not remapped:
        return NO_REMAPPING
    if not real:
        raise RemappingError(
            f"{remapped_flag} needs {real_flag}: the CIDR the addresses are really assigned from, "
            "of the same prefix length, so that each address keeps its offset"
        )
    if not remapped:
        raise RemappingError(
            f"{real_flag} needs {remapped_flag}: the CIDR under which the other cluster reaches those "
            f"addresses (leave both unset for no remapping)"
        )
    mappings = []
    for network in real:
        partner = next((other for other in remapped if other.version == network.version), None)
        if partner is None:
            raise RemappingError(f"{real_flag}={real_text} has an IPv{network.version} CIDR but {remapped_flag}={remapped_text} has none")
        if partner.prefixlen != network.prefixlen:
            raise RemappingError(
                f"{remapped_flag}={partner} has prefix length /{partner.prefixlen} but {real_flag}={network} has "
                f"/{network.prefixlen}: a remapping keeps each address's offset, so both must be the same size "
                f"(e.g. {remapped_flag}={_resized(partner, network.prefixlen)})"
            )
        mappings.append(CidrMapping(network, partner))
    for partner in remapped:
        if not any(network.version == partner.version for network in real):
            raise RemappingError(f"{remapped_flag}={remapped_text} has an IPv{partner.version} CIDR but {real_flag}={real_text} has none")
    return Remapping(tuple(mappings))


def _resized(network: Network, prefixlen: int) -> Network:
    return ipaddress.ip_network(f"{network.network_address}/{prefixlen}", strict=False)


@dataclass(frozen=True)
class RemappingSettings:
    """The four remapping flags of one virtual kubelet, as given (empty = unset)."""

    # The remote cluster's pod CIDR(s), as its network plugin assigns them.
    remote_pod_cidr: str = ""
    # The same addresses as the local cluster reaches them (the remote's external CIDR):
    # offloaded pods' podIP/podIPs are shown in it.
    remote_pod_cidr_remapped: str = ""
    # The local cluster's pod CIDR(s).
    local_pod_cidr: str = ""
    # The local pod CIDR as the remote cluster reaches it: local endpoints of reflected
    # EndpointSlices are written in it.
    local_pod_cidr_remapped: str = ""

    @functools.cached_property
    def remote_pod_ips(self) -> Remapping:
        """Remote pod address -> as the local cluster shows it."""
        return build_remapping(
            self.remote_pod_cidr, self.remote_pod_cidr_remapped,
            real_flag=REMOTE_POD_CIDR_FLAG, remapped_flag=REMOTE_POD_CIDR_REMAPPED_FLAG,
        )

    @functools.cached_property
    def local_pod_ips(self) -> Remapping:
        """Local pod address -> as the remote cluster reaches it."""
        return build_remapping(
            self.local_pod_cidr, self.local_pod_cidr_remapped,
            real_flag=LOCAL_POD_CIDR_FLAG, remapped_flag=LOCAL_POD_CIDR_REMAPPED_FLAG,
        )

    def problem(self) -> str | None:
        """The first setting that cannot work, worded with its flag; None if all can."""
        try:
            remote, local = self.remote_pod_ips, self.local_pod_ips
        except RemappingError as exc:
            return str(exc)
        # The point of remapping is that the two address spaces a cluster sees do not
        # collide: refuse a remapped CIDR that lands on the pods it must be told from.
        for mapping in remote.mappings:
            for own in parse_cidrs(self.local_pod_cidr, LOCAL_POD_CIDR_FLAG):
                if mapping.remapped.overlaps(own):
                    return (
                        f"{REMOTE_POD_CIDR_REMAPPED_FLAG}={mapping.remapped} overlaps {LOCAL_POD_CIDR_FLAG}={own}: "
                        "offloaded pods would show addresses of local pods; choose a free range"
                    )
        for mapping in local.mappings:
            for theirs in parse_cidrs(self.remote_pod_cidr, REMOTE_POD_CIDR_FLAG):
                if mapping.remapped.overlaps(theirs):
                    return (
                        f"{LOCAL_POD_CIDR_REMAPPED_FLAG}={mapping.remapped} overlaps {REMOTE_POD_CIDR_FLAG}={theirs}: "
                        "reflected endpoints would name remote pods; choose a range free in the remote cluster"
                    )
        return None


def add_remapping_flags(parser: argparse.ArgumentParser, component: str) -> None:
    group = parser.add_argument_group("pod IP remapping (docs/virtual-kubelet.md, \"Pod IP remapping\")")
    add_flag(group, component, REMOTE_POD_CIDR_FLAG, default="",
             help="the remote cluster's pod CIDR as its network plugin assigns it (one per address family, "
                  "comma-separated); with --remote-pod-cidr-remapped (the same CIDR there: checked, not "
                  "translated). A remote pod IP outside it is not shown on the local pod")
    add_flag(group, component, REMOTE_POD_CIDR_REMAPPED_FLAG, default="",
             help="the remote pod CIDR as the local cluster reaches it (its external CIDR, same prefix length): "
                  "offloaded pods' podIP/podIPs are shown in it; unset: shown as the remote cluster assigns them")
    add_flag(group, component, LOCAL_POD_CIDR_FLAG, default="",
             help="the local cluster's pod CIDR (one per address family, comma-separated); with --local-pod-cidr-remapped")
    add_flag(group, component, LOCAL_POD_CIDR_REMAPPED_FLAG, default="",
             help="the local pod CIDR as the remote cluster reaches it (same prefix length): local endpoints of "
                  "reflected EndpointSlices are written in it; unset: written as they are")


def remapping_settings_from_args(args: argparse.Namespace) -> RemappingSettings:
    return RemappingSettings(
        remote_pod_cidr=args.remote_pod_cidr or "",
        remote_pod_cidr_remapped=args.remote_pod_cidr_remapped or "",
        local_pod_cidr=args.local_pod_cidr or "",
        local_pod_cidr_remapped=args.local_pod_cidr_remapped or "",
    )
