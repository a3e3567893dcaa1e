"""``helm`` for the two releases, the only changes ``peer`` and ``unpeer`` make through Helm."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Mapping

from kube_offload import peering as p
from kube_offload.peer.errors import CommandError

OCI_SCHEME = "oci://"
HELM_INSTALL = "https://helm.sh/docs/intro/install/"


def resolve_helm(value: str) -> str:
    found = shutil.which(value) if os.sep not in value else (value if os.access(value, os.X_OK) else None)
    if not found:
        raise p.PeeringError(f"--helm {value!r}: no such executable; install Helm 3 ({HELM_INSTALL}) or pass --helm PATH")
    return found


def chart_args(chart: str, version: str, plain_http: bool) -> list[str]:
    """How ``helm upgrade`` names a chart: a directory is its own version; an OCI
    repository holds many, so the version goes with it (and --plain-http for an HTTP one)."""
    if not chart.startswith(OCI_SCHEME):
        return [chart]
    return [chart, "--version", version, *(["--plain-http"] if plain_http else [])]


class Helm:
    """``helm`` against one cluster, for the releases in one namespace."""

    def __init__(self, binary: str, kubeconfig: Path, context: str | None, namespace: str, side: str,
                 plain_http: bool = False) -> None:
        self.binary = binary
        self.plain_http = plain_http
        self.namespace = namespace
        self.side = side
        self.base = [binary, "--kubeconfig", str(kubeconfig), "--namespace", namespace]
        if context:
            self.base += ["--kube-context", context]

    def _run(self, *args: str, timeout: float) -> str:
        try:
            result = subprocess.run([*self.base, *args], capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise CommandError(f"{self.side}: `helm {args[0]}` did not finish within {int(timeout)}s") from None
        if result.returncode != 0:
            raise CommandError(f"{self.side}: `helm {' '.join(args[:2])}` failed: {result.stderr.strip()[-3000:]}")
        return result.stdout

    def release(self, name: str) -> p.Release | None:
        listed = json.loads(self._run("list", "--all", "--filter", f"^{re.escape(name)}$", "-o", "json", timeout=60) or "[]")
        entry = next((r for r in listed if r.get("name") == name), None)
        if entry is None:
            return None
        values = json.loads(self._run("get", "values", name, "-o", "json", timeout=60) or "null") or {}
        return p.Release(
            name=name,
            namespace=entry.get("namespace", self.namespace),
            revision=int(entry.get("revision", 0)),
            status=str(entry.get("status", "")),
            chart=str(entry.get("chart", "")),
            values=values,
        )

    def upgrade(self, name: str, chart: str, values: Mapping[str, Any], *, wait: bool, timeout: float,
                version: str = "") -> p.Release:
        with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="kube-offload-values-") as handle:
            json.dump(values, handle)
            handle.flush()
            args = ["upgrade", "--install", name, *chart_args(chart, version, self.plain_http),
                    "--create-namespace", "--values", handle.name]
            if wait:
                args += ["--wait", "--timeout", f"{int(timeout)}s"]
            self._run(*args, timeout=timeout + 60)
        release = self.release(name)
        if release is None:
            raise CommandError(f"{self.side}: helm reported success but release {self.namespace}/{name} is not listed")
        return release


