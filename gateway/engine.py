"""Makes the kernel hold what dataplane.py says (the gateway's I/O with its node).

The WireGuard link is the kernel's where the module exists (``ip link add ... type
wireguard``) and a ``wireguard-go`` child process otherwise (userspace, through
``/dev/net/tun``); either way it is configured with ``wg`` (wireguard-tools), which speaks
netlink to the kernel's and the UAPI socket under ``/var/run/wireguard`` to wireguard-go.
Routes with ``ip``, NAT and filter rules with ``iptables`` (the node's backend: nft by
default). Every call is idempotent: :meth:`Engine.apply` is called on every reconcile and
converges; :meth:`Engine.teardown` removes everything of the link.
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from gateway import dataplane as dp

log = logging.getLogger("kube_offload.gateway")

MODES = ("auto", "kernel", "userspace")
IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")


class EngineError(RuntimeError):
    """A command failed; the message names it and what it printed."""


@dataclass(frozen=True)
class EngineSettings:
    mode: str = "auto"  # MODES
    wireguard_go: str = "wireguard-go"
    wg: str = "wg"
    ip: str = "ip"
    iptables: str = "iptables-nft"
    # Run every command inside this network namespace (a path under /run/netns); the tests
    # and the bench use it, a gateway pod runs in its node's namespace (hostNetwork).
    netns: str = ""


class Engine:
    def __init__(self, settings: EngineSettings) -> None:
        self.settings = settings
        self._userspace: subprocess.Popen[bytes] | None = None
        self._applied: tuple[str, dp.Plane] | None = None  # what the link was last given
        self.kind = ""  # "kernel" or "userspace", once the link exists

    # --- commands ------------------------------------------------------------------------
    def _argv(self, argv: list[str]) -> list[str]:
        tool = {"ip": self.settings.ip, "wg": self.settings.wg}.get(argv[0], argv[0])
        argv = [tool, *argv[1:]]
        if self.settings.netns:
            return ["nsenter", f"--net={self.settings.netns}", "--", *argv]
        return argv

    def run(self, argv: list[str], *, check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        try:
            result = subprocess.run(self._argv(argv), input=stdin, capture_output=True, text=True, check=False, timeout=30)
        except FileNotFoundError as exc:
            # the image lacks a tool the node's setup needs: say which, not a traceback
            raise EngineError(f"`{argv[0]}` not found ({exc.filename}): the gateway's image needs iproute2, iptables "
                              "and wireguard-tools (docs/networking.md)") from exc
        if check and result.returncode != 0:
            shown = " ".join(argv[:8])
            raise EngineError(f"`{shown}` failed (exit {result.returncode}): {result.stderr.strip()[-500:]}")
        return result

    # --- the link ---------------------------------------------------------------------------
    def link_exists(self, interface: str) -> bool:
        return self.run(["ip", "link", "show", "dev", interface], check=False).returncode == 0

    def _userspace_alive(self) -> bool:
        return self._userspace is not None and self._userspace.poll() is None

    def ensure_link(self, interface: str) -> bool:
        """Make the link if it is not there; True when it was made now (then it holds no
        configuration yet)."""
        if self.link_exists(interface) and (self.kind != "userspace" or self._userspace_alive()):
            return False
        if self.settings.mode in ("auto", "kernel"):
            added = self.run(["ip", "link", "add", "dev", interface, "type", "wireguard"], check=False)
            if added.returncode == 0:
                self.kind = "kernel"
                log.info("WireGuard link %s made by the kernel's module", interface)
                return True
            if self.settings.mode == "kernel":
                raise EngineError(f"the kernel has no WireGuard (`ip link add {interface} type wireguard`: "
                                  f"{added.stderr.strip()}); run with --wireguard auto or userspace")
        self._start_userspace(interface)
        return True

    def _start_userspace(self, interface: str) -> None:
        self._stop_userspace()
        if not Path("/dev/net/tun").exists():
            raise EngineError("wireguard-go needs /dev/net/tun: the gateway's pod mounts it from the node "
                              "(hostPath, docs/networking.md); the kernel has no WireGuard module either")
        argv = self._argv([self.settings.wireguard_go, "-f", interface])
        # Foreground (-f): the process is ours, and stops with us.
        self._userspace = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                           env={**os.environ, "LOG_LEVEL": "error"})
        for _ in range(100):
            if self.link_exists(interface) and Path(f"/var/run/wireguard/{interface}.sock").exists():
                break
            if self._userspace.poll() is not None:
                err = (self._userspace.stderr.read() if self._userspace.stderr else b"").decode(errors="replace")
                raise EngineError(f"wireguard-go exited ({self._userspace.returncode}): {err.strip()[-500:]}")
            time.sleep(0.05)
        else:
            raise EngineError(f"wireguard-go did not make link {interface} within 5s")
        self.kind = "userspace"
        log.info("WireGuard link %s made by wireguard-go (pid %d): the kernel has no WireGuard module",
                 interface, self._userspace.pid)

    def _stop_userspace(self) -> None:
        if self._userspace is not None and self._userspace.poll() is None:
            self._userspace.terminate()
            try:
                self._userspace.wait(5)
            except subprocess.TimeoutExpired:
                self._userspace.kill()
                self._userspace.wait()
        self._userspace = None

    # --- the whole plane ------------------------------------------------------------------------
    def apply(self, private_key: str, plane: dp.Plane) -> None:
        """Converge the node on ``plane``. WireGuard's configuration is given again only when
        it changed or the link is new: giving it again would reset an endpoint the peer
        roamed to."""
        made = self.ensure_link(plane.interface)
        if made or self._applied != (private_key, plane):
            self.run(["wg", "syncconf", plane.interface, "/dev/stdin"], stdin=dp.wireguard_config(private_key, plane))
            self._applied = (private_key, plane)
        self.run(dp.link_up_command(plane))
        self.run(dp.route_command(plane))
        for chain in dp.chains(plane):
            self._ensure_chain(chain)

    def _iptables(self, table: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run([self.settings.iptables, "-w", "-t", table, *args], check=check)

    def _ensure_chain(self, chain: dp.Chain) -> None:
        self._iptables(chain.table, "-N", chain.name, check=False)  # "already exists" is fine
        listed = self._iptables(chain.table, "-S", chain.name).stdout.splitlines()
        present = [line for line in listed if line.startswith("-A ")]
        if len(present) != len(chain.rules) or any(
                self._iptables(chain.table, "-C", chain.name, *rule, check=False).returncode != 0 for rule in chain.rules):
            self.run([f"{self.settings.iptables}-restore", "-w", "--noflush"], stdin=dp.restore_text(chain))
        jump = dp.jump(chain)
        if self._iptables(chain.table, "-C", chain.builtin, *jump, check=False).returncode != 0:
            self._iptables(chain.table, "-I", chain.builtin, "1", *jump)

    def teardown(self, interface: str) -> None:
        """Remove the link (its route goes with it) and the chains; best effort."""
        self._stop_userspace()
        self.run(["ip", "link", "delete", "dev", interface], check=False)
        for argv in dp.teardown_chain_commands(self.settings.iptables, interface):
            while self.run(argv, check=False).returncode == 0 and "-D" in argv:
                pass  # a jump added twice (two gateways raced) is removed twice
        self._applied = None
        log.info("removed link %s and its rules", interface)

    # --- what a person or a probe asks -------------------------------------------------------------
    def forwarding_problem(self) -> str | None:
        """The node must forward (every Kubernetes node does; kube-proxy and the network plugin
        need it too)."""
        if self.settings.netns:  # the tests' and the bench's node: read it there
            value = self.run(["cat", str(IP_FORWARD)], check=False).stdout.strip()
        else:  # the gateway's own network namespace (its node's); the image has no `cat`
            try:
                value = IP_FORWARD.read_text().strip()
            except OSError:
                value = ""
        if value == "0":
            return ("IPv4 forwarding is off on this node (net.ipv4.ip_forward=0): packets between the tunnel "
                    "and the pods would be dropped; turn it on (sysctl) or choose another node (gateway.nodeSelector)")
        return None

    def latest_handshake(self, interface: str) -> int | None:
        """Seconds since the epoch of the peer's latest handshake (None: no peer, or never)."""
        result = self.run(["wg", "show", interface, "latest-handshakes"], check=False)
        for line in result.stdout.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1].isdigit() and int(parts[1]) > 0:
                return int(parts[1])
        return None
