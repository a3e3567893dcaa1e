"""The gateway's tools from Debian in the final image (docs/image.md): iproute2 (ip),
iptables (iptables-nft, iptables-legacy) and wireguard-tools (wg). `make image`'s runtime
base already has them (scripts/build-image.sh makes it from Debian packages, with no shell
and no apt); on python:3.11-slim-bookworm (`docker build`) they are installed here, without
recommended packages. Run with Python in exec form: the `make image` base has no shell.
Removes itself."""

import os
import shutil
import subprocess
import sys

TOOLS = {"ip": "iproute2", "iptables-nft": "iptables", "wg": "wireguard-tools"}

missing = sorted({package for tool, package in TOOLS.items() if not shutil.which(tool)})
if missing:
    if not shutil.which("apt-get"):
        sys.exit(f"gateway-tools: {', '.join(missing)} missing and no apt-get to install them: put them in the base image")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing], check=True, env=env)
    shutil.rmtree("/var/lib/apt/lists", ignore_errors=True)
    os.makedirs("/var/lib/apt/lists/partial", exist_ok=True)
still = [tool for tool in TOOLS if not shutil.which(tool)]
if still:
    sys.exit(f"gateway-tools: still missing {', '.join(still)}")
os.remove(__file__)
