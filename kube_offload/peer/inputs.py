"""The flags' values and the local files they name (charts, kubeconfigs, values files, the
provider policy), read and checked before any cluster is, so a mistake costs no round trip."""

from __future__ import annotations

from typing import Any

import argparse
import base64
import os
from pathlib import Path

import yaml

import kube_offload
from kube_offload import constants as c
from kube_offload import peering as p
from kube_offload.peer.helm import OCI_SCHEME


def resolve_charts_dir(value: str) -> Path:
    if value:
        candidates = [Path(value)]
    else:
        # A checkout keeps charts/ next to the package; the wheel does not ship the charts.
        candidates = [Path(kube_offload.__file__).resolve().parents[1] / "charts", Path.cwd() / "charts"]
    for candidate in candidates:
        if (candidate / p.LOCAL_CHART / "Chart.yaml").exists() and (candidate / p.REMOTE_CHART / "Chart.yaml").exists():
            return candidate.resolve()
    where = value or " or ".join(str(c_) for c_ in candidates)
    raise p.PeeringError(
        f"--charts-dir: no {p.LOCAL_CHART} and {p.REMOTE_CHART} charts in {where}; pass --charts-dir DIR "
        "(the charts/ directory of a kube-offload checkout)"
    )


def chart_ref(charts_dir: Path, name: str) -> p.ChartRef:
    meta = yaml.safe_load((charts_dir / name / "Chart.yaml").read_text()) or {}
    if meta.get("name") != name:
        raise p.PeeringError(f"--charts-dir: {charts_dir / name}/Chart.yaml names chart {meta.get('name')!r}, not {name}")
    return p.ChartRef(name=name, version=str(meta.get("version", "")), path=str(charts_dir / name))


def chart_refs(args: argparse.Namespace) -> tuple[p.ChartRef, p.ChartRef]:
    """The local and the remote chart: from --chart-repository (OCI) when given, else from
    --charts-dir (or this checkout's charts/)."""
    if args.chart_repository:
        repository = args.chart_repository.rstrip("/")
        if not repository.startswith(OCI_SCHEME):
            raise p.PeeringError(f"--chart-repository {args.chart_repository!r}: an OCI repository, "
                                 f"{OCI_SCHEME}HOST/PATH (Helm installs charts from OCI registries by that scheme)")
        if args.charts_dir:
            raise p.PeeringError("--chart-repository and --charts-dir name two sources of the charts: pass one")
        return tuple(p.ChartRef(name=name, version=args.chart_version, path=f"{repository}/{name}")
                     for name in (p.LOCAL_CHART, p.REMOTE_CHART))  # type: ignore[return-value]
    charts = resolve_charts_dir(args.charts_dir)
    return chart_ref(charts, p.LOCAL_CHART), chart_ref(charts, p.REMOTE_CHART)


def kubeconfig_path(value: str | None, flag: str) -> Path:
    if value:
        path = Path(value)
    else:
        env = os.environ.get("KUBECONFIG", "")
        path = Path(env.split(os.pathsep)[0]) if env else Path.home() / ".kube" / "config"
    if not path.exists():
        raise p.PeeringError(f"{flag}: kubeconfig {str(path)!r} does not exist; pass {flag} FILE")
    return path


def read_values_files(paths: list[str], flag: str) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for name in paths:
        try:
            data = yaml.safe_load(Path(name).read_text())
        except OSError as exc:
            raise p.PeeringError(f"{flag} {name!r}: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            raise p.PeeringError(f"{flag} {name!r} is not YAML: {exc}") from None
        if data is None:
            continue
        if not isinstance(data, dict):
            raise p.PeeringError(f"{flag} {name!r} must hold a map of values, not {type(data).__name__}")
        merged = p.deep_merge(merged, data)
    return merged


def remote_endpoint(path: Path, context: str | None) -> tuple[str, bytes | None]:
    """Server and CA (PEM, or None when the kubeconfig does not pin one) of a kubeconfig."""
    try:
        config = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise p.PeeringError(f"cannot read the remote kubeconfig {str(path)!r}: {exc}") from None
    cluster = p.cluster_of_kubeconfig(config, context)
    if cluster.get("certificate-authority-data"):
        return cluster["server"], base64.b64decode(cluster["certificate-authority-data"])
    if cluster.get("certificate-authority"):
        ca_file = Path(cluster["certificate-authority"])
        if not ca_file.is_absolute():
            ca_file = path.parent / ca_file  # relative to the kubeconfig, as kubectl reads it
        try:
            return cluster["server"], ca_file.read_bytes()
        except OSError as exc:
            raise p.PeeringError(f"the remote kubeconfig's certificate-authority {str(ca_file)!r}: {exc.strerror}") from None
    return cluster["server"], None


def read_policy_file(path: str) -> dict[str, Any] | None:
    """--policy-file: the consumer's spec.policy (YAML or JSON), checked as the enforcer
    reads it; None when the flag is unset (keep the release's)."""
    if not path:
        return None
    where = f"--policy-file {path}"
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise p.PeeringError(f"{where}: cannot read it ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise p.PeeringError(f"{where}: not YAML or JSON ({exc})") from None
    return p.parse_policy_document(raw, where)


def policy_grants(args: argparse.Namespace) -> dict[tuple[str, str], tuple[str, ...]]:
    """The --grant-* flags given, each checked alone so an error names its flag."""
    grants = {}
    for flag, key in p.GRANT_FLAGS.items():
        value = getattr(args, flag.lstrip("-").replace("-", "_"))
        if value is None:
            continue
        grants[key] = p.parse_grant(value)
        p.policy_with_grants({}, {key: grants[key]}, flag)
    return grants


def pod_security_level(value: str) -> str | None:
    if value and value not in c.PSA_LEVELS:
        raise p.PeeringError(f"--pod-security-level {value!r}: use one of {', '.join(c.PSA_LEVELS)}")
    return value or None


