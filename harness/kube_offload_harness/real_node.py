"""A real node in a loopback cluster: containerd + runc + the CNI bridge + a kubelet and
kube-proxy, in a network namespace of its own, registered with the cluster's kube-apiserver
beside kwok's simulated nodes (docs/real-nodes.md).

    machine namespace                         node namespace kon-<slot>
    kube-apiserver 127.0.0.1:<port>  <-----   netns_forward 127.0.0.1:<port>  <- kubelet
    registry 127.0.0.1:<rport>       <-----   netns_forward 127.0.0.1:<rport> <- containerd
      ^  <- netns_forward 172.31.250.4k+1:<port>  <----  pods -> 10.0.0.1:443 (kube-proxy DNAT)
    (kubelet client cert)  --- veth kon<slot>h 172.31.250.x/30 --->  kubelet :10250
    route 172.31.k.0/24 via the node end  ------------------------>  containerd (own socket)
                                                                     bridge konbr0 -> pods

What ``up`` creates it records (processes in the ProcessTable; the rest is named by the
slot); ``down`` removes exactly that: kube-proxy, the kubelet, the containers (every
process in the node's cgroup), the shims of the node's containerd, containerd, the
forwarders, every mount under the node's directories, its cgroups, the route to its pods,
its namespace and veth.
:func:`leftovers` lists whatever of it still exists (the teardown test's check).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable
from urllib.parse import urlparse

import yaml

from kube_offload_harness import netns, pod_cidr_overlap
from kube_offload_harness import real_node_config as rc
from kube_offload_harness.binaries import NodeBinaries
from kube_offload_harness.processes import ProcessTable

Say = Callable[[str], None]
CRI_NAMESPACE = "k8s.io"  # the containerd namespace the CRI plugin keeps pods' images in


class RealNodeError(RuntimeError):
    """A real node could not be brought up; the message names the step and the log."""


def process_names(plan: rc.NodePlan) -> dict[str, str]:
    """The ProcessTable names of the node's processes, in start order."""
    components = ("forward", "apiserver-forward", "registry-forward", "containerd", "kubelet", "kube-proxy")
    return {component: f"realnode-{plan.cluster}-{component}" for component in components}


def apiserver_forward_args(plan: rc.NodePlan, port: int) -> list[str]:
    """The forwarder from the apiserver's advertised address (the machine end of the node's
    link, in the machine's namespace) to its loopback port: what the `kubernetes` Service
    leads pods to (docs/real-nodes.md, "Addresses")."""
    return [sys.executable, "-m", "kube_offload_harness.netns_forward",
            "--listen", f"{plan.host_ip}:{port}", "--to", f"127.0.0.1:{port}"]


def write_files(plan: rc.NodePlan, *, nbins: NodeBinaries, admin_kubeconfig: dict, node_cert: bytes, node_key: bytes,
                proxy_cert: bytes, proxy_key: bytes, client_ca_file: Path, registry_port: int,
                serving: tuple[bytes, bytes]) -> None:
    for directory in (plan.state_dir, plan.cni_conf_dir, plan.containerd_config.parent, plan.kubelet_serving_cert.parent):
        directory.mkdir(parents=True, exist_ok=True)
    plan.kubelet_serving_cert.write_bytes(serving[0])
    plan.kubelet_serving_key.write_bytes(serving[1])
    plan.kubelet_serving_key.chmod(0o600)
    for relative, content in rc.registry_hosts_files(registry_port=registry_port).items():
        (plan.registry_hosts_dir / relative).parent.mkdir(parents=True, exist_ok=True)
        (plan.registry_hosts_dir / relative).write_text(content)
    # The node's own resolver (dnsPolicy Default, CoreDNS itself): none. Pods ask the
    # cluster DNS (the kubelet's clusterDNS), which has no upstream either.
    plan.resolv_conf.write_text("# no resolver outside the cluster: the machine's is not the harness's to use\n")
    plan.containerd_config.write_text(rc.containerd_config(plan, cni_bin_dir=nbins.cni_bin_dir))
    (plan.cni_conf_dir / "10-kube-offload.conflist").write_text(json.dumps(rc.cni_conflist(plan), indent=2))
    plan.kubelet_config.write_text(rc.dump_yaml(rc.kubelet_configuration(plan, client_ca_file=client_ca_file)))
    kubeconfig = rc.node_kubeconfig(admin_kubeconfig, client_cert_pem=node_cert, client_key_pem=node_key)
    plan.kubelet_kubeconfig.write_text(rc.dump_yaml(kubeconfig))
    plan.kubelet_kubeconfig.chmod(0o600)
    plan.kube_proxy_config.write_text(rc.dump_yaml(rc.kube_proxy_configuration(plan)))
    proxy = rc.node_kubeconfig(admin_kubeconfig, client_cert_pem=proxy_cert, client_key_pem=proxy_key)
    plan.kube_proxy_kubeconfig.write_text(rc.dump_yaml(proxy))
    plan.kube_proxy_kubeconfig.chmod(0o600)


def node_identity(kwok_pki: Path, node_name: str, days: int = 30) -> tuple[bytes, bytes]:
    """A client certificate system:node:<name> (group system:nodes) signed by the cluster's
    own CA, as a kubelet's TLS bootstrap would end with."""
    return client_identity(kwok_pki, f"system:node:{node_name}", ["system:nodes"], days)


def client_identity(kwok_pki: Path, user: str, groups: list[str], days: int = 30) -> tuple[bytes, bytes]:
    """A client certificate for ``user`` in ``groups`` signed by the cluster's own CA."""
    return _issue(kwok_pki, common_name=user, organizations=groups, serving_ip=None, days=days)


def serving_identity(kwok_pki: Path, node_name: str, node_ip: str, days: int = 30) -> tuple[bytes, bytes]:
    """The kubelet's serving certificate, signed by the cluster's own CA for the node's
    address (as a kubelet's serving-certificate CSR approved by the cluster ends): what
    metrics-server verifies when it scrapes ``https://<node ip>:10250``."""
    return _issue(kwok_pki, common_name=f"system:node:{node_name}", organizations=["system:nodes"],
                  serving_ip=node_ip, days=days)


def _issue(kwok_pki: Path, *, common_name: str, organizations: list[str], serving_ip: str | None,
           days: int) -> tuple[bytes, bytes]:
    """A certificate signed by the cluster's own CA (kwokctl's pki/ca.crt and ca.key): a
    client one, or a serving one for ``serving_ip``. kwokctl's CA key is RSA (certs.pki
    signs with ECDSA CAs only), hence cryptography here."""
    import datetime as dt
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    import warnings

    with warnings.catch_warnings():  # kwokctl's CA has serial number 0, which cryptography warns about
        warnings.simplefilter("ignore")
        ca_cert = x509.load_pem_x509_certificate((kwok_pki / "ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key((kwok_pki / "ca.key").read_bytes(), password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.timezone.utc)
    usage = ExtendedKeyUsageOID.SERVER_AUTH if serving_ip else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(
            [x509.NameAttribute(NameOID.ORGANIZATION_NAME, group) for group in organizations]
            + [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
        ))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False, content_commitment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=False, crl_sign=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if serving_ip:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(serving_ip))]), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def apiserver_port(admin_kubeconfig: dict) -> int:
    context = next(c for c in admin_kubeconfig["contexts"] if c["name"] == admin_kubeconfig["current-context"])
    cluster = next(c for c in admin_kubeconfig["clusters"] if c["name"] == context["context"]["cluster"])
    url = urlparse(cluster["cluster"]["server"])
    if url.hostname not in ("127.0.0.1", "localhost") or url.port is None:
        raise RealNodeError(f"the cluster's apiserver is at {cluster['cluster']['server']}: expected https://127.0.0.1:<port>")
    return url.port


def preflight() -> list[str]:
    """What this machine lacks for a real node, each with what to do (empty: ready)."""
    import shutil

    problems = []
    if os.geteuid() != 0:
        problems.append("root (network namespaces, cgroups, mounts): run as root")
    if not os.access(rc.RUNC, os.X_OK):
        problems.append(f"{rc.RUNC}: install Debian's runc (scripts/bootstrap.sh does, as root)")
    for tool in ("ip", "nsenter", "iptables"):
        if shutil.which(tool) is None:
            problems.append(f"`{tool}` on PATH: install iproute2, util-linux, iptables")
    if shutil.which("wg") is None:  # the fabric's gateways configure their WireGuard link with it
        problems.append("`wg` on PATH: install Debian's wireguard-tools (scripts/bootstrap.sh does, as root)")
    for tool in ("mmdebstrap", "dpkg-deb"):  # the stand-in images (standin_images.py)
        if shutil.which(tool) is None:
            problems.append(f"`{tool}` on PATH: install Debian's mmdebstrap (scripts/bootstrap.sh does, as root)")
    return problems


class RealNode:
    def __init__(self, plan: rc.NodePlan, *, nbins: NodeBinaries, processes: ProcessTable, log_dir: Path,
                 say: Say | None = None, slot_record: Path | None = None) -> None:
        """``slot_record``: where the inode of the slot's namespace is kept (an
        environment's run directory, outside its state dir: run_records.py); default
        the node's state dir."""
        self.plan = plan
        self._slot_record = slot_record or plan.state_dir / "netns-inode"
        self.nbins = nbins
        self.processes = processes
        self.log_dir = log_dir
        self.say: Say = say or (lambda line: print(line, flush=True))
        self.names = process_names(plan)

    def log_path(self, component: str) -> Path:
        return self.log_dir / f"{self.names[component]}.log"

    # --- up ---------------------------------------------------------------------------
    def up(self, *, admin_kubeconfig: Path, kwok_pki: Path, client_ca_file: Path, registry_port: int) -> None:
        """Start the node; its images come from the environment's registry on
        ``registry_port`` (registry.py), already filled."""
        plan = self.plan
        self._claim_slot()
        # The slot is ours now (we made its namespace): whatever a crashed run of the same
        # slot left in the runtime directory is stale.
        netns.unmount_under(plan.runtime_dir)
        subprocess.run(["rm", "-rf", "--one-file-system", str(plan.runtime_dir)], check=False)
        for directory in (plan.containerd_root.parent, plan.kubelet_root, plan.runc_root):
            directory.mkdir(parents=True, exist_ok=True)
        admin = yaml.safe_load(admin_kubeconfig.read_text())
        port = apiserver_port(admin)
        cert, key = node_identity(kwok_pki, plan.node_name)
        proxy_cert, proxy_key = client_identity(kwok_pki, rc.KUBE_PROXY_USER, [])
        serving_cert, serving_key = serving_identity(kwok_pki, plan.node_name, plan.node_ip)
        write_files(plan, nbins=self.nbins, admin_kubeconfig=admin, node_cert=cert, node_key=key,
                    proxy_cert=proxy_cert, proxy_key=proxy_key, client_ca_file=client_ca_file,
                    registry_port=registry_port, serving=(serving_cert, serving_key))
        for route in rc.machine_routes(plan):
            netns.add_route(route)
        for route in rc.node_routes(plan):
            netns.add_route(route, plan.netns)
        if plan.overlap is not None:
            # the apiserver advertises this node's link address: that finds its process
            pids = netns.pids_with_arg(f"--advertise-address={plan.host_ip}")
            try:
                pod_cidr_overlap.connect(plan.overlap, pids)
            except (pod_cidr_overlap.OverlapError, OSError) as exc:
                raise RealNodeError(f"{plan.node_name}: pod CIDR {plan.pod_cidr} shared with another node: {exc}") from None
            self.say(f"- {plan.node_name}: pods share {plan.pod_cidr} with another cluster's; this cluster's apiserver "
                     f"reaches them through routing table {plan.overlap.table} (docs/real-nodes.md)")
        netns.create_cgroup_root(plan.cgroup_root, netns.v1_hierarchies())
        ns_path = netns.netns_path(plan.netns)
        self.processes.start(
            self.names["forward"],
            [sys.executable, "-m", "kube_offload_harness.netns_forward", "--netns", str(ns_path),
             "--listen", f"127.0.0.1:{port}", "--to", f"127.0.0.1:{port}"],
            log=self.log_path("forward"), env=self._env(),
        )
        self.processes.start(self.names["apiserver-forward"], apiserver_forward_args(plan, port),
                             log=self.log_path("apiserver-forward"), env=self._env())
        # containerd pulls from the registry on its own namespace's loopback (hosts.toml).
        self.processes.start(
            self.names["registry-forward"],
            [sys.executable, "-m", "kube_offload_harness.netns_forward", "--netns", str(ns_path),
             "--listen", f"127.0.0.1:{registry_port}", "--to", f"127.0.0.1:{registry_port}"],
            log=self.log_path("registry-forward"), env=self._env(),
        )
        self.processes.start(
            self.names["containerd"], [str(self.nbins.containerd), "--config", str(plan.containerd_config)],
            log=self.log_path("containerd"), env=self._env(), netns=ns_path,
        )
        self._wait_containerd()
        self.processes.start(
            self.names["kubelet"], rc.kubelet_args(plan, kubelet=self.nbins.kubelet),
            log=self.log_path("kubelet"), env=self._env(), netns=ns_path,
        )
        # Services: iptables rules in the node's namespace (iptables is the machine's, apt).
        self.processes.start(
            self.names["kube-proxy"], rc.kube_proxy_args(plan, kube_proxy=self.nbins.kube_proxy),
            log=self.log_path("kube-proxy"), env=self._env(), netns=ns_path,
        )

    def _claim_slot(self) -> None:
        """Create the slot's namespace first: `ip netns add` fails when it exists, so two
        environments that chose the same free slot at once (slots are picked from `ip netns
        list`, without a lock) cannot both take it. The namespace's inode is recorded:
        ``down`` touches the slot only while that namespace is still the one we made."""
        plan = self.plan
        self.say(f"- {plan.cluster}: real node {plan.node_name} in network namespace {plan.netns} ({plan.node_ip}, pods {plan.pod_cidr})")
        # The environment reserves its slots when it picks them (reserve_slot); a node
        # started on its own makes the namespace here.
        if plan.netns in netns.list_netns() and not self.owns_slot():
            raise RealNodeError(f"network namespace {plan.netns} exists: slot {plan.slot} was taken by another "
                                "environment meanwhile; run `cluster down` and `up` again")
        plan.state_dir.mkdir(parents=True, exist_ok=True)
        try:
            netns.create_node_network(plan.netns, plan.veth_host, plan.veth_node,
                                      f"{plan.host_ip}/{plan.link.prefixlen}", f"{plan.node_ip}/{plan.link.prefixlen}")
        except netns.NetnsError as exc:
            if str(exc).startswith(f"`ip netns add {plan.netns}`"):
                raise RealNodeError(f"slot {plan.slot} was taken by another environment meanwhile ({exc}); "
                                    "run `cluster down` and `up` again") from None
            self._record_slot()  # the namespace is ours: down removes what was made of it
            raise
        self._record_slot()

    def _record_slot(self) -> None:
        self._slot_record.parent.mkdir(parents=True, exist_ok=True)
        self._slot_record.write_text(str(os.stat(netns.netns_path(self.plan.netns)).st_ino))

    def reserve_slot(self) -> bool:
        """Take the slot now, before anything else of the node exists, by making its (empty)
        namespace and recording it as ours: False if another environment holds it."""
        if not netns.reserve_netns(self.plan.netns):
            return False
        self.plan.state_dir.mkdir(parents=True, exist_ok=True)
        self._record_slot()
        return True

    def owns_slot(self) -> bool:
        """Whether this node made the slot's namespace (or made it and it is gone): never
        tear down another environment's node that holds the same slot number."""
        try:
            recorded = int(self._slot_record.read_text())
        except (OSError, ValueError):
            return False
        try:
            return os.stat(netns.netns_path(self.plan.netns)).st_ino == recorded
        except FileNotFoundError:
            return True  # ours, partly removed already: finish the job

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        # containerd finds its shim on PATH; runc and iptables (portmap) are the machine's.
        env["PATH"] = os.pathsep.join([str(self.nbins.containerd.parent), "/usr/sbin", "/usr/bin", "/sbin", "/bin"])
        env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
        return env

    def ctr(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        argv = [str(self.nbins.ctr), "--address", str(self.plan.containerd_socket), "--namespace", CRI_NAMESPACE, *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)

    def _running(self, component: str) -> bool:
        record = self.processes.get(self.names[component])
        return record is not None and record.running()

    def _wait_containerd(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self._running("containerd"):
                raise RealNodeError(f"containerd exited during start-up; see {self.log_path('containerd')}:\n{_tail(self.log_path('containerd'))}")
            if self.plan.containerd_socket.exists() and self.ctr("version", timeout=10).returncode == 0:
                return
            time.sleep(0.3)
        raise RealNodeError(f"containerd not answering on {self.plan.containerd_socket} after {timeout}s; see {self.log_path('containerd')}")

    def wait_ready(self, kubectl: Callable[..., subprocess.CompletedProcess], timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            for component in self.names:
                if not self._running(component):
                    raise RealNodeError(f"{self.names[component]} exited; see {self.log_path(component)}:\n{_tail(self.log_path(component))}")
            result = kubectl("get", "node", self.plan.node_name, "-o",
                             "jsonpath={.status.conditions[?(@.type=='Ready')].status} {.status.conditions[?(@.type=='Ready')].message}",
                             check=False)
            last = (result.stdout or result.stderr).strip()
            if result.returncode == 0 and last.startswith("True"):
                return
            time.sleep(1)
        raise RealNodeError(f"real node {self.plan.node_name} not Ready after {timeout}s ({last}); see {self.log_path('kubelet')}")

    # --- down -------------------------------------------------------------------------
    def drain(self, kubectl: Callable[..., subprocess.CompletedProcess], timeout: float = 60) -> int:
        """Delete the node's pods through the API and wait until the kubelet has stopped
        them: their sandboxes are torn down as on any node (CNI DEL, unmounts, log links).
        Cordoned first, as kubectl drain does: a Deployment's pod (CoreDNS, the charts')
        would otherwise be replaced on this node at once."""
        kubectl("cordon", self.plan.node_name, check=False)
        selector = f"spec.nodeName={self.plan.node_name}"
        listed = kubectl("get", "pods", "-A", "--field-selector", selector, "-o", "name", check=False)
        if listed.returncode != 0 or not listed.stdout.strip():
            return 0
        count = len(listed.stdout.split())
        kubectl("delete", "pods", "-A", "--field-selector", selector, "--grace-period=1", "--wait=true",
                f"--timeout={int(timeout)}s", check=False, timeout=timeout + 10)
        return count

    def down(self, kubectl: Callable[..., subprocess.CompletedProcess] | None = None) -> list[str]:
        """Remove everything ``up`` made, in dependency order; returns what it did. With
        ``kubectl`` (the cluster still up) the pods are deleted first, as a drain would."""
        plan = self.plan
        done: list[str] = []
        if not self.owns_slot():
            # up failed before it made the namespace (another environment holds the slot):
            # nothing of the slot is ours; only processes this environment started.
            for component in self.names:
                if self.processes.stop(self.names[component]):
                    done.append(component)
            return done + [f"slot {plan.slot} not ours: left alone"]
        hierarchies = netns.v1_hierarchies()
        if kubectl is not None and self._running("kubelet"):
            drained = self.drain(kubectl)
            if drained:
                done.append(f"{drained} pods deleted")
        for component in ("kube-proxy", "kubelet"):
            if self.processes.stop(self.names[component]):
                done.append(component)
        if self._running("containerd"):
            removed = self._remove_containers()
            if removed:
                done.append(f"{removed} containers removed")
        # The containers: every process in the node's cgroup tree, and nothing else.
        killed = netns.kill_cgroup(plan.cgroup_root, hierarchies)
        if killed:
            done.append(f"{len(killed)} container processes")
        # The shims the node's containerd started (each named by the node's socket).
        shims = netns.pids_with_arg(str(plan.containerd_socket))
        for pid in shims:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        if shims:
            done.append(f"{len(shims)} shims")
        for component in ("containerd", "forward", "apiserver-forward", "registry-forward"):
            if self.processes.stop(self.names[component]):
                done.append(component)
        unmounted = netns.unmount_under(plan.runtime_dir) + netns.unmount_under(plan.state_dir)
        if unmounted:
            done.append(f"{len(unmounted)} mounts")
        left = netns.remove_cgroup(plan.cgroup_root, hierarchies)
        if left:
            self.say(f"  cgroups not removable yet: {', '.join(map(str, left[:5]))}")
        # (Deleting the veth would take the route with it; a route outliving a failed
        # delete would send the pods' range to nowhere.)
        for route in rc.machine_routes(plan):
            if netns.delete_route(route):
                done.append(f"route {route[0]}")
        if plan.overlap is not None:
            done += pod_cidr_overlap.disconnect(plan.overlap)
        if plan.netns in netns.list_netns():
            done.append(f"namespace {plan.netns}")
        netns.delete_node_network(plan.netns, plan.veth_host)
        for path in machine_wide_files(plan):
            path.unlink(missing_ok=True)
        # containerd's content and snapshots (overlay layers, hundreds of MB) go with it.
        subprocess.run(["rm", "-rf", "--one-file-system", str(plan.runtime_dir)], check=False)
        self._slot_record.unlink(missing_ok=True)
        return done


    def _remove_containers(self) -> int:
        """What is left after the kubelet (a pod it had no time to stop): force-delete each
        task (SIGKILL, then delete), then the container, so each shim exits on its own
        and removes its socket."""
        listed = self.ctr("containers", "list", "--quiet", timeout=30)
        ids = listed.stdout.split() if listed.returncode == 0 else []
        for container in ids:
            self.ctr("tasks", "delete", "--force", container, timeout=30)
            self.ctr("containers", "delete", container, timeout=30)
        return len(ids)


PROC_SYS = Path("/proc/sys")


def set_kernel_tunables(saved: Path) -> dict[str, int]:
    """Set what the kubelet requires (rc.KERNEL_TUNABLES), first recording the machine's
    values in ``saved`` (once: a second node of the same environment keeps the first
    record). Returns the values that were changed, with their old values."""
    previous = {key: int((PROC_SYS / key).read_text().split()[0]) for key in rc.KERNEL_TUNABLES}
    if not saved.exists():
        saved.parent.mkdir(parents=True, exist_ok=True)
        saved.write_text(json.dumps(previous, indent=2))
    changed = {}
    for key, value in rc.KERNEL_TUNABLES.items():
        if previous[key] != value:
            (PROC_SYS / key).write_text(f"{value}\n")
            changed[key] = previous[key]
    return changed


def restore_kernel_tunables(saved: Path) -> dict[str, int]:
    """Put back the values recorded by set_kernel_tunables; returns what it restored."""
    if not saved.exists():
        return {}
    previous = json.loads(saved.read_text())
    restored = {}
    for key, value in previous.items():
        if int((PROC_SYS / key).read_text().split()[0]) != value:
            (PROC_SYS / key).write_text(f"{value}\n")
            restored[key] = value
    saved.unlink()
    return restored


def remove_empty_machine_dirs() -> list[Path]:
    """rmdir the machine-wide directories containerd and libcni made, where empty (a real
    node of another environment still running keeps its entries, so they stay)."""
    removed = []
    for directory in rc.MACHINE_WIDE_DIRS:
        try:
            directory.rmdir()
            removed.append(directory)
        except OSError:
            pass
    return removed


def machine_wide_files(plan: rc.NodePlan) -> list[Path]:
    """Files the kubelet and libcni write to fixed machine-wide paths for this node: the
    kubelet's /var/log/containers links into the node's pod logs, libcni's cached results
    of the node's network. A drained node has none; a killed one may."""
    found = []
    if rc.CONTAINER_LOG_LINKS.is_dir():
        for link in rc.CONTAINER_LOG_LINKS.iterdir():
            try:
                if link.is_symlink() and os.readlink(link).startswith(str(plan.pod_logs_dir) + "/"):
                    found.append(link)
            except OSError:
                continue
    if rc.CNI_CACHE_DIR.is_dir():
        found += [path for path in rc.CNI_CACHE_DIR.iterdir() if path.name.startswith(plan.cni_network + "-")]
    return found


def leftovers(plan: rc.NodePlan) -> list[str]:
    """What of the node still exists: each entry names it (empty after a clean ``down``)."""
    found = []
    if plan.netns in netns.list_netns():
        found.append(f"network namespace {plan.netns}")
    if netns.link_exists(plan.veth_host):
        found.append(f"link {plan.veth_host}")
    found += [f"route {route[0]}" for route in rc.machine_routes(plan) if netns.route_exists(route[0])]
    found += [f"mount {point}" for point in netns.mounts_under(plan.runtime_dir) + netns.mounts_under(plan.state_dir)]
    if plan.runtime_dir.exists():
        found.append(f"directory {plan.runtime_dir}")
    found += [f"cgroup {path}" for path in netns.cgroup_dirs(plan.cgroup_root, netns.v1_hierarchies())]
    # By what each one's command line names (not by the records, which stop() removes):
    # containerd's config, the kubelet's config, the forwarder's namespace, the shims' socket.
    for what, arg in (("containerd", str(plan.containerd_config)), ("kubelet", f"--config={plan.kubelet_config}"),
                      ("kube-proxy", f"--config={plan.kube_proxy_config}"),
                      ("forwarder", str(netns.netns_path(plan.netns))), ("shim", str(plan.containerd_socket))):
        found += [f"process {pid} ({what})" for pid in netns.pids_with_arg(arg)]
    # the apiserver's forwarder listens on the machine end of the link, at the apiserver's port
    found += [f"process {pid} (apiserver forwarder)" for pid in netns.pids_with_arg(f"{plan.host_ip}:", prefix=True)]
    found += [f"file {path}" for path in machine_wide_files(plan)]
    if plan.overlap is not None:
        found += pod_cidr_overlap.leftovers(plan.overlap)
    return found


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "".join(path.read_text(errors="replace").splitlines(keepends=True)[-lines:])
    except OSError:
        return "(no log)"
