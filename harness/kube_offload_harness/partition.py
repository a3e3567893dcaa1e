"""A network partition between one virtual kubelet and its remote API server, on demand.

Stopping or freezing the remote control plane (``kwokctl stop cluster``, SIGSTOP) makes
it unreachable for everyone, its own controllers included, and its restart brings
simulator quirks of its own. A partition is narrower and closer to what happens in real
life: the provider keeps running its pods; only the link from this consumer is cut.

:class:`Link` is a TCP forwarder on 127.0.0.1 (TLS passes through untouched: the
apiserver's certificate is valid for 127.0.0.1 on any port). :meth:`Link.cut` closes
every open connection and answers new ones by closing them at once, as a peer that went
away does; :meth:`Link.heal` forwards again. :func:`vkubelet_behind_link` runs the
environment's vkubelet for one remote cluster through such a link (its remote kubeconfig
pointed at the link, its other arguments as they were) and, however the block ends,
heals the link and puts the ordinary vkubelet back.
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator
from urllib.parse import urlsplit

import yaml

if TYPE_CHECKING:
    from kube_offload_harness.cluster import ClusterSpec, Environment

LOOPBACK = "127.0.0.1"


class Link:
    """One listening port forwarding to ``target``; cut and healed at will."""

    def __init__(self, target_host: str, target_port: int) -> None:
        if target_host not in (LOOPBACK, "localhost"):
            raise ValueError(f"the link forwards to loopback only, not {target_host}")
        self._target = (LOOPBACK, target_port)
        self._server = socket.create_server((LOOPBACK, 0))
        self.port: int = self._server.getsockname()[1]
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._cut = False
        self._closed = False
        self._thread = threading.Thread(target=self._accept_loop, name=f"link-{self.port}", daemon=True)
        self._thread.start()

    @property
    def is_cut(self) -> bool:
        return self._cut

    def cut(self) -> None:
        """Drop every connection now; refuse (accept and close) new ones until healed."""
        with self._lock:
            self._cut = True
            sockets = list(self._open)
            self._open.clear()
        for sock in sockets:
            _close(sock)

    def heal(self) -> None:
        with self._lock:
            self._cut = False

    def close(self) -> None:
        self._closed = True
        self.cut()
        _close(self._server)
        self._thread.join(5)

    # --- internals -----------------------------------------------------------------------
    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return  # closed
            if self._cut:
                _close(client)
                continue
            try:
                upstream = socket.create_connection(self._target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _close(client)
                continue
            with self._lock:
                if self._cut:
                    _close(client)
                    _close(upstream)
                    continue
                self._open.update((client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._open.discard(source)
                self._open.discard(sink)
            _close(source)
            _close(sink)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


def kubeconfig_through(source: Path, target: Path, port: int) -> Path:
    """A copy of the kubeconfig ``source`` whose clusters point at 127.0.0.1:``port``."""
    config = yaml.safe_load(source.read_text())
    for entry in config.get("clusters") or []:
        cluster = entry.get("cluster") or {}
        server = urlsplit(cluster["server"])
        cluster["server"] = f"{server.scheme}://{LOOPBACK}:{port}{server.path}"
    target.write_text(yaml.safe_dump(config))
    target.chmod(0o600)
    return target


def remote_server_port(kubeconfig: Path) -> tuple[str, int]:
    config = yaml.safe_load(kubeconfig.read_text())
    server = urlsplit(config["clusters"][0]["cluster"]["server"])
    return server.hostname or LOOPBACK, server.port or 443


def _flag_value(argv: list[str], flag: str) -> str | None:
    """The last value of ``flag`` in ``argv`` (``--flag value`` or ``--flag=value``)."""
    value = None
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value


@contextlib.contextmanager
def vkubelet_behind_link(env: "Environment", spec: "ClusterSpec", extra_args: Iterable[str] = ()) -> Iterator[Link]:
    """Run the vkubelet of remote cluster ``spec`` through a :class:`Link` (plus
    ``extra_args``, e.g. a shorter ``--ping-timeout``) for the duration of the block.

    The running vkubelet (however the harness started it: ``Environment.start_vkubelet``
    or a chart's Deployment run as a process) is stopped and started again with its own
    arguments plus a ``--remote-kubeconfig`` through the link (the last one wins); at the
    end, whatever happens, the link is healed and the vkubelet restarted as it was."""
    topology = env.topology()
    if topology is None:
        raise RuntimeError(f"no environment in {env.state_dir}")
    local = env.cluster(topology.local)
    name = f"vkubelet-{spec.cluster_id}"
    record = env.processes.get(name)
    if record is None:
        raise RuntimeError(f"no {name} process in {env.state_dir}")
    original = list(record.argv)
    kubeconfig = _flag_value(original, "--remote-kubeconfig")
    if not kubeconfig:
        raise RuntimeError(f"{name} runs without --remote-kubeconfig; cannot put a link in front of it")
    link = Link(*remote_server_port(Path(kubeconfig)))
    through = kubeconfig_through(Path(kubeconfig), env.state_dir / f"{name}-via-link-kubeconfig.yaml", link.port)

    def restart(argv: list[str]) -> None:
        env.processes.stop(name)
        log = env.log_path(name)
        offset = log.stat().st_size if log.exists() else 0
        env.processes.start(name, argv, log=log, env=env._process_env())
        # The node may still look Ready from the old process's heartbeat: wait until the
        # new process itself has listed the remote (its /readyz), or a cut made right away
        # would come before its first contact and there would be no pods to mark.
        wait_ready(log, offset)
        env.wait_virtual_node_ready(local, spec)

    try:
        restart([*original, "--remote-kubeconfig", str(through), *extra_args])
        yield link
    finally:
        link.heal()
        try:
            restart(original)
        finally:
            link.close()


HEALTH_LINE = re.compile(r"health and metrics on (http://[0-9.]+:[0-9]+) ")


def health_url(log_text: str) -> str | None:
    """The health port a component logged at start-up (it may bind port 0)."""
    found = HEALTH_LINE.findall(log_text)
    return found[-1] if found else None


def wait_ready(log: Path, offset: int = 0, timeout: float = 90.0) -> None:
    """Wait until the process logging to ``log`` (from byte ``offset``) answers 200 on
    its /readyz: caches listed and, for a vkubelet, the remote cluster reached."""
    deadline = time.monotonic() + timeout
    last = "no health port logged yet"
    while time.monotonic() < deadline:
        try:
            with log.open("rb") as handle:
                handle.seek(offset)
                url = health_url(handle.read().decode(errors="replace"))
        except OSError:
            url = None
        if url:
            try:
                with urllib.request.urlopen(f"{url}/readyz?verbose", timeout=5) as response:
                    if response.status == 200:
                        return
            except urllib.error.HTTPError as exc:
                last = exc.read().decode(errors="replace").strip()
            except OSError as exc:
                last = str(exc)
        time.sleep(0.5)
    raise TimeoutError(f"{log.name}: not ready after {timeout:.0f}s: {last}")


# --- the same partition for a vkubelet that runs as a pod (charts as pods) -----------------
# A vkubelet pod on the local real node reaches the remote API server through the node's
# namespace (its pod network, then the node link; docs/real-nodes.md, "Addresses"). The
# harness cuts that path there, in a namespace it created: packets of the local node's pods
# to the remote API server are answered with a TCP reset, and its answers are dropped, as
# a link that went away. Rules carry a comment naming the remote, so heal removes exactly
# them (and deleting the namespace, on `down`, removes them in any case).
PARTITION_COMMENT = "kube-offload-partition"


def pod_partition_rules(remote_ip: str, port: int, remote_cluster_id: str) -> list[list[str]]:
    """The FORWARD rules (without -I/-D) that cut the local node's pods off from the remote
    API server at ``remote_ip:port``, both directions (pure)."""
    comment = ["-m", "comment", "--comment", f"{PARTITION_COMMENT} {remote_cluster_id}"]
    return [
        ["-d", f"{remote_ip}/32", "-p", "tcp", "--dport", str(port), *comment, "-j", "REJECT", "--reject-with", "tcp-reset"],
        ["-s", f"{remote_ip}/32", "-p", "tcp", "--sport", str(port), *comment, "-j", "DROP"],
    ]


class PodPartition:
    """Cut and heal the path from the local real node's pods to one remote API server."""

    def __init__(self, netns: str, remote_ip: str, port: int, remote_cluster_id: str) -> None:
        self.netns = netns
        self.rules = pod_partition_rules(remote_ip, port, remote_cluster_id)
        self.is_cut = False

    def cut(self) -> None:
        from kube_offload_harness.netns import in_netns

        for rule in self.rules:
            in_netns(self.netns, ["iptables", "-w", "-I", "FORWARD", *rule])
        self.is_cut = True

    def heal(self) -> None:
        from kube_offload_harness.netns import in_netns

        for rule in self.rules:
            in_netns(self.netns, ["iptables", "-w", "-D", "FORWARD", *rule], check=False)
        self.is_cut = False


@contextlib.contextmanager
def vkubelet_pod_partition(env: "Environment", spec: "ClusterSpec") -> Iterator[PodPartition]:
    """A :class:`PodPartition` between the local real node's pods (the vkubelet's among
    them) and remote ``spec``'s API server, healed however the block ends."""
    from kube_offload_harness import real_node

    topology = env.topology()
    if topology is None or not topology.chart_pods:
        raise RuntimeError(f"no environment with the charts as pods in {env.state_dir}")
    port = real_node.apiserver_port(yaml.safe_load(env.cluster(spec).kubeconfig.read_text()))
    partition = PodPartition(env.real_node(topology.local).plan.netns, env.real_node(spec).plan.host_ip, port,
                             spec.cluster_id)
    try:
        yield partition
    finally:
        partition.heal()
