"""The container image (docs/image.md), built from the Dockerfile by `make image`
(scripts/build-image.sh, buildah without a daemon) and run the way the charts run it.

The image is (re)built once per module by the build script, which is idempotent: the
tests always check an image made from the working tree. Then:

* its configuration (entrypoint, user 65532, environment for a read-only root);
* its entrypoint through ``buildah run`` (``kube-offload --help``), as the configured user;
* its contents: the product only (no harness, tests or pip), no bytecode, the size;
* ``certs generate`` and ``webhook`` with the root file system mounted READ-ONLY, /tmp a
  tmpfs (the charts' emptyDir), uid/gid 65532, in their own mount and PID namespaces on
  the host's network: ``GET /healthz`` over HTTPS from the host, verified against the CA
  the image itself generated. The webhook needs a kubeconfig; it gets one for an address
  where nothing listens, since /healthz must not depend on the apiserver (/readyz does).

Needs root (mmdebstrap, buildah, mount namespaces); with CI=true anything missing fails.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest
import requests

pytestmark = pytest.mark.image

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "scripts" / "build-image.sh"
BUILD_LOG = REPO / ".artifacts" / "image" / "build.log"
# docs/image.md states this aim and the measured figure.
MAX_ROOTFS_BYTES = 150 * 1000 * 1000
PRODUCT_COMMANDS = ("webhook", "extender", "certs", "vkubelet", "enforcer")
HARNESS_COMMANDS = ("demo", "cluster", "binaries")
LOOPBACK = "127.0.0.1"


def _version() -> str:
    match = re.search(r'^version = "([^"]+)"', (REPO / "pyproject.toml").read_text(), re.MULTILINE)
    assert match, "pyproject.toml has no version"
    return match.group(1)


def _buildah(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "BUILDAH_ISOLATION": "chroot"}
    result = subprocess.run(
        ["buildah", *args], capture_output=True, text=True, timeout=timeout, env=env
    )
    if check and result.returncode != 0:
        pytest.fail(f"buildah {' '.join(args)} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return result


@pytest.fixture(scope="module")
def image() -> str:
    if os.geteuid() != 0:
        message = "building and running the image needs root (mmdebstrap, buildah): sudo make test-image"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    name = os.environ.get("KUBE_OFFLOAD_IMAGE") or f"localhost/kube-offload:{_version()}"
    BUILD_LOG.parent.mkdir(parents=True, exist_ok=True)
    with BUILD_LOG.open("w") as log:
        result = subprocess.run(
            [str(BUILD_SCRIPT)], cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, "KUBE_OFFLOAD_IMAGE": name}, timeout=1800,
        )
    if result.returncode != 0:
        tail = "\n".join(BUILD_LOG.read_text(errors="replace").splitlines()[-60:])
        pytest.fail(f"scripts/build-image.sh failed ({result.returncode}); {BUILD_LOG}:\n{tail}")
    return name


@pytest.fixture(scope="module")
def config(image: str) -> dict:
    inspected = json.loads(_buildah("inspect", "--type", "image", image).stdout)
    return inspected["OCIv1"]["config"]


@pytest.fixture(scope="module")
def container(image: str) -> Iterator[str]:
    """A working container of the image (not started); removed afterwards."""
    name = f"kube-offload-image-test-{os.getpid()}"
    _buildah("rm", name, check=False)
    _buildah("from", "--pull=false", "--name", name, image)
    try:
        yield name
    finally:
        _buildah("rm", name, check=False)


@pytest.fixture(scope="module")
def rootfs(container: str) -> Path:
    return Path(_buildah("mount", container).stdout.strip())


def _env(config: dict) -> dict[str, str]:
    return dict(item.split("=", 1) for item in config["Env"])


def test_configuration(config: dict) -> None:
    env = _env(config)
    assert config["Entrypoint"] == ["kube-offload"]
    assert not config.get("Cmd")
    assert config["User"] == "65532:65532"
    assert config["WorkingDir"] == "/tmp"
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert env["HOME"] == "/tmp" and env["TMPDIR"] == "/tmp"
    assert env["PATH"].split(":")[0] == "/opt/kube-offload/bin"
    labels = config["Labels"]
    assert labels["org.opencontainers.image.title"] == "kube-offload"
    assert labels["org.opencontainers.image.version"] == _version()
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"


def test_entrypoint_help_through_buildah_run(container: str, config: dict) -> None:
    # buildah run does not apply the entrypoint itself: run the configured one, as the
    # configured user (no --user: the image's own USER must take effect).
    result = _buildah("run", container, "--", *config["Entrypoint"], "--help")
    commands = re.findall(r"^    (\S+)\s", result.stdout, re.MULTILINE)
    for command in PRODUCT_COMMANDS:
        assert command in commands, f"`kube-offload --help` lacks {command}:\n{result.stdout}"
    for command in HARNESS_COMMANDS:
        assert command not in commands, f"the development harness is in the image ({command})"
    ids = _buildah("run", container, "--", "python", "-c", "import os; print(os.getuid(), os.getgid())")
    assert ids.stdout.split() == ["65532", "65532"]


def test_contents_are_the_product_only(container: str, rootfs: Path) -> None:
    # Development-only code, installers, and the pruned asyncio client must all be absent.
    probe = (
        "import importlib.util as u; "
        "print(*[m for m in ('kube_offload_harness', 'tests', 'bench', 'pip', 'setuptools', 'kubernetes.aio') "
        "if u.find_spec(m)])"
    )
    found = _buildah("run", container, "--", "python", "-c", probe).stdout.split()
    assert found == [], f"the image carries {found}"
    for module in ("webhook", "extender", "vkubelet", "enforcer", "certs", "kube_offload"):
        _buildah("run", container, "--", "python", "-c", f"import {module}")
    # The compiled dependencies (extender.wire: msgspec and orjson) load in the image's Python.
    _buildah("run", container, "--", "python", "-c", "import extender.wire")
    venv = rootfs / "opt" / "kube-offload"
    bytecode = [str(p.relative_to(rootfs)) for p in venv.rglob("*.pyc")][:5]
    assert bytecode == [], f"bytecode in the image (it is built with --no-compile): {bytecode}"
    status = (rootfs / "var" / "lib" / "dpkg" / "status").read_text()
    assert re.search(r"^Package: python3\.11-minimal$", status, re.MULTILINE), "dpkg status lacks Python"
    size = sum(p.lstat().st_size for p in rootfs.rglob("*") if not p.is_dir())
    assert size < MAX_ROOTFS_BYTES, f"the image's root file system is {size / 1e6:.0f} MB (aim: < 150 MB)"


# --- running the image with a read-only root --------------------------------------------


@dataclass(frozen=True)
class Bind:
    host: Path
    target: str  # under /tmp: the root itself is read-only and has no such directory
    read_only: bool = True


# Runs as root on the host, in new mount and PID namespaces: the image's root becomes a
# read-only bind mount with a tmpfs /tmp (the charts' emptyDir), /proc and /dev; then
# chroot as the image's user. Host tools are named by absolute path because PATH is the
# image's.
RUNNER = r"""
set -eu
root=$1; user=$2; shift 2
{mount} --make-rprivate /
{mount} --bind "$root" "$root"
{mount} -o remount,bind,ro "$root"
{mount} -t tmpfs -o mode=1777,size=64m tmpfs "$root/tmp"
{mount} -t proc proc "$root/proc"
{mount} --rbind /dev "$root/dev"
while [ "$1" != -- ]; do
  {mkdir} -p "$root$2"
  {mount} --bind "$1" "$root$2"
  if [ "$3" = ro ]; then {mount} -o remount,bind,ro "$root$2"; fi
  shift 3
done
shift
exec {chroot} --userspec="$user" --groups="${{user#*:}}" "$root" "$@"
"""


def _host_tool(name: str) -> str:
    path = shutil.which(name, path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    assert path, f"{name} is missing on this machine (util-linux / coreutils)"
    return path


def _read_only_argv(rootfs: Path, config: dict, binds: list[Bind], command: list[str]) -> list[str]:
    script = RUNNER.format(mount=_host_tool("mount"), mkdir=_host_tool("mkdir"), chroot=_host_tool("chroot"))
    argv = [_host_tool("unshare"), "--mount", "--pid", "--fork", "--kill-child", _host_tool("sh"), "-c", script,
            "image-runner", str(rootfs), config["User"]]
    for bind in binds:
        argv += [str(bind.host), bind.target, "ro" if bind.read_only else "rw"]
    return [*argv, "--", *command]


def _run_read_only(rootfs: Path, config: dict, binds: list[Bind], command: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        _read_only_argv(rootfs, config, binds, command), env=_env(config),
        capture_output=True, text=True, timeout=120,
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM the image's PID 1 (gunicorn's arbiter: a graceful stop), then, if needed,
    kill unshare, whose --kill-child takes the whole PID namespace down."""
    for child in _children(process.pid):
        os.kill(child, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=20)


def test_root_is_read_only_as_uid_65532(rootfs: Path, config: dict) -> None:
    probe = (
        "import os\n"
        "try:\n    open('/opt/kube-offload/written', 'w')\nexcept OSError as e:\n    print('root', e.errno)\n"
        "open('/tmp/written', 'w').close()\n"
        "print('ids', os.getuid(), os.getgid(), *os.getgroups())\n"
    )
    result = _run_read_only(rootfs, config, [], ["python", "-c", probe])
    assert result.returncode == 0, result.stderr
    assert f"root {errno.EROFS}" in result.stdout, result.stdout
    assert "ids 65532 65532 65532" in result.stdout, result.stdout


def test_webhook_serves_healthz_with_a_read_only_root(rootfs: Path, config: dict, tmp_path: Path) -> None:
    # The certificates are made by the image itself (cryptography inside it works), into a
    # directory its user may write: the only writable bind, like a volume.
    certs = tmp_path / "certs"
    certs.mkdir()
    os.chown(certs, 65532, 65532)
    generated = _run_read_only(
        rootfs, config, [Bind(certs, "/tmp/certs", read_only=False)],
        [*config["Entrypoint"], "certs", "generate", "--out-dir", "/tmp/certs", "--ip", LOOPBACK],
    )
    assert generated.returncode == 0, generated.stdout + generated.stderr
    assert {"ca.crt", "tls.crt", "tls.key"} <= {p.name for p in certs.iterdir()}

    with socket.socket() as sock:  # an address where no apiserver listens
        sock.bind((LOOPBACK, 0))
        nowhere = sock.getsockname()[1]
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    (config_dir / "kubeconfig").write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: nowhere\n"
        f"clusters: [{{name: nowhere, cluster: {{server: 'https://{LOOPBACK}:{nowhere}', insecure-skip-tls-verify: true}}}}]\n"
        "users: [{name: nowhere, user: {token: none}}]\n"
        "contexts: [{name: nowhere, context: {cluster: nowhere, user: nowhere}}]\n"
    )
    os.chmod(config_dir / "kubeconfig", 0o644)

    port = _free_port()
    log_path = tmp_path / "webhook.log"
    command = [
        *config["Entrypoint"], "webhook", "--bind", f"{LOOPBACK}:{port}",
        "--tls-cert", "/tmp/certs/tls.crt", "--tls-key", "/tmp/certs/tls.key",
        "--kubeconfig", "/tmp/config/kubeconfig",
    ]
    binds = [Bind(certs, "/tmp/certs"), Bind(config_dir, "/tmp/config")]
    session = requests.Session()
    session.trust_env = False  # REQUESTS_CA_BUNDLE must not replace verify=
    with log_path.open("w") as log:
        process = subprocess.Popen(
            _read_only_argv(rootfs, config, binds, command), env=_env(config),
            stdout=log, stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 60
            health = None
            while time.monotonic() < deadline and process.poll() is None:
                try:
                    health = session.get(f"https://{LOOPBACK}:{port}/healthz", verify=str(certs / "ca.crt"), timeout=5)
                    break
                except requests.ConnectionError:
                    time.sleep(0.3)
            assert health is not None, f"the webhook never answered:\n{log_path.read_text()[-3000:]}"
            assert health.status_code == 200 and health.text == "ok\n"
            # Served by the real app, which cannot reach its apiserver: not ready.
            ready = session.get(f"https://{LOOPBACK}:{port}/readyz", verify=str(certs / "ca.crt"), timeout=5)
            assert ready.status_code == 503, ready.text
        finally:
            _stop(process)
    output = log_path.read_text()
    assert "Read-only file system" not in output, output[-3000:]
    assert "Shutting down: Master" in output, output[-3000:]
