"""Settings and flags of the virtual storage class loops (docs/storage.md)."""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass

from kube_offload import constants as c
from kube_offload.runtime.flags import add_flag

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@dataclass(frozen=True)
class StorageSettings:
    # The virtual StorageClass whose claims this virtual kubelet provisions when the
    # scheduler selects its node; empty: no virtual storage.
    virtual_class: str = c.DEFAULT_VIRTUAL_STORAGE_CLASS
    # The real local StorageClass claims of the virtual class get when their pod goes to
    # a physical node; empty: this process does not run the physical delegate (exactly
    # one virtual kubelet of a cluster should, the chart gives it to the first).
    local_class: str = ""
    # Where the physical delegate creates the claims of the real class.
    namespace: str = "kube-offload"

    @property
    def enabled(self) -> bool:
        return bool(self.virtual_class)

    @property
    def physical_delegate(self) -> bool:
        return self.enabled and bool(self.local_class)

    def problem(self) -> str | None:
        for flag, value in (("--virtual-storage-class", self.virtual_class), ("--virtual-storage-local-class", self.local_class)):
            if value and (len(value) > 253 or not _DNS_SUBDOMAIN.match(value)):
                return f"{flag}={value!r} must be a StorageClass name (lowercase letters, digits, '-' and '.')"
        if self.local_class and self.local_class == self.virtual_class:
            return "--virtual-storage-local-class must name a real StorageClass, not the virtual one (--virtual-storage-class)"
        if self.physical_delegate and (len(self.namespace) > 63 or not _DNS_LABEL.match(self.namespace)):
            return f"--virtual-storage-namespace={self.namespace!r} must be a namespace name"
        return None


def add_storage_flags(parser: argparse.ArgumentParser, component: str) -> None:
    add_flag(parser, component, "--virtual-storage-class", default=c.DEFAULT_VIRTUAL_STORAGE_CLASS,
             help="the virtual StorageClass: claims of it whose pod is scheduled to this virtual node get a remote "
                  "claim and a local stand-in volume (docs/storage.md); empty: off")
    add_flag(parser, component, "--virtual-storage-local-class", default="",
             help="real local StorageClass for claims of the virtual class whose pod goes to a physical node "
                  "(the physical delegate: give it to one virtual kubelet per cluster); empty: not run here")
    add_flag(parser, component, "--virtual-storage-namespace", default="kube-offload",
             help="namespace of the claims of the real local class the physical delegate creates")


def storage_settings_from_args(args: argparse.Namespace) -> StorageSettings:
    return StorageSettings(
        virtual_class=args.virtual_storage_class or "",
        local_class=args.virtual_storage_local_class or "",
        namespace=args.virtual_storage_namespace or "",
    )
