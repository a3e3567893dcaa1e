"""The Helm charts, checked with real Helm (``helm lint`` and ``helm template``, the version
pinned in kube_offload_harness.versions and built into the binary cache) for the value sets
docs/install.md documents: every rendered object's wiring (Secret names, mounts, Service
ports and selectors, RBAC), the contract names agree with kube_offload.constants, the
webhook and scheduler configurations equal what the Python builders make, and every
container's arguments parse with the real ``kube-offload`` command line. A few checks read
the template sources (blocks, includes, ``.Values`` paths) because no rendering shows them.
tests/e2e/test_helm_install.py installs both charts into real API servers.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

import kube_offload
from kube_offload.slice_requests import parse_slice
from kube_offload import constants as C
from kube_offload_harness import binaries, versions

ROOT = Path(__file__).resolve().parents[2]
CHARTS = ROOT / "charts"
LOCAL = CHARTS / "kube-offload-local"
REMOTE = CHARTS / "kube-offload-remote"
CRD_MANIFEST = ROOT / "kube_offload" / "manifests" / "shadowpod-crd.yaml"
CHART_DIRS = [LOCAL, REMOTE]

_COMMENT = re.compile(r"\{\{-?\s*/\*.*?\*/\s*-?\}\}", re.DOTALL)
_ACTION = re.compile(r"\{\{-?(.*?)-?\}\}", re.DOTALL)


def actions(text: str) -> list[str]:
    return [body.strip() for body in _ACTION.findall(_COMMENT.sub("", text))]


def templates(chart: Path) -> list[Path]:
    return sorted(p for p in (chart / "templates").iterdir() if p.suffix == ".yaml")


def all_templates() -> list[Path]:
    return [t for chart in CHART_DIRS for t in templates(chart)]


def load_values(chart: Path) -> dict[str, Any]:
    return yaml.safe_load((chart / "values.yaml").read_text())


# --- real Helm ---------------------------------------------------------------------------
#
# helm is built into the binary cache by `kube-offload binaries build` (scripts/bootstrap.sh
# runs it before the tests). Outside CI, without it, these tests skip and say how to build
# it; with CI=true they fail instead.

RELEASE = "kube-offload"
NAMESPACE = "kube-offload"
IMAGE = f"ghcr.io/kube-offload/kube-offload:{kube_offload.__version__}"
TWO_REMOTES = {
    "localClusterId": "local",
    "vkubelet": {"podCIDR": "10.0.0.0/16"},
    "remoteClusters": [
        {"id": "remote-1", "kubeconfigSecret": "remote-1-kubeconfig",
         "labels": {"topology.kubernetes.io/region": "eu-west", "example.com/provider": "acme"},
         "podCIDR": "10.0.0.0/16", "podCIDRRemapped": "10.100.0.0/16", "localPodCIDRRemapped": "10.200.0.0/16"},
        {"id": "remote-2", "kubeconfigSecret": "remote-2-kubeconfig", "kubeconfigKey": "config",
         "sharingPercentage": 50, "extraArgs": ["--log-json=true"]},
    ],
}
ONE_CONSUMER = {"consumers": [{"name": "local"}]}

# The value sets docs/install.md shows (and the variants it describes), per chart.
VALUE_SETS: dict[str, dict[str, dict[str, Any]]] = {
    LOCAL.name: {
        "defaults": {},
        "install-md": {
            "localClusterId": "local",
            "remoteClusters": [{"id": "remote-1", "kubeconfigSecret": "remote-1-kubeconfig", "sharingPercentage": 90,
                                "labels": {"topology.kubernetes.io/region": "eu-west"}}],
        },
        "kind": {
            "localClusterId": "local",
            "remoteClusters": [{"id": "remote-1", "kubeconfigSecret": "remote-1-kubeconfig"}],
            "scheduler": {"image": {"tag": versions.KUBERNETES}},
        },
        "two-remotes": TWO_REMOTES,
        "own-scheduler": {"scheduler": {"enabled": False}},
        "extender-http": {"extender": {"tls": False}},
        "extra-sans": {"certificates": {"extraDnsNames": ["extra.example.com"], "extraIpAddresses": ["10.0.0.1"]}},
        "dashboard": {"dashboards": {"enabled": True}},
        # docs/reflection.md, "Custom resources".
        "custom-resources": {**TWO_REMOTES, "vkubelet": {**TWO_REMOTES["vkubelet"], "customResources": [
            {"group": "example.com", "version": "v1", "resource": "widgets", "kind": "Widget", "out": ["spec.size"]}]}},
        # docs/networking.md: what `peer --gateway` sets.
        "gateway": {"localClusterId": "local", "vkubelet": {"podCIDR": "10.0.0.0/16"},
                    "remoteClusters": [{"id": "remote-1", "kubeconfigSecret": "remote-1-kubeconfig", "gateway": {"enabled": True},
                                        "podCIDR": "10.0.0.0/16", "podCIDRRemapped": "10.100.0.0/16",
                                        "localPodCIDRRemapped": "10.200.0.0/16"}]},
    },
    REMOTE.name: {
        "defaults": {},
        "one-consumer": ONE_CONSUMER,
        "two-consumers": {"consumers": [{"name": "local-a"}, {"name": "local-b"}]},
        "gateway": {"consumers": [{"name": "local", "gateway": {"enabled": True}}]},
        "with-policy": {"consumers": [{"name": "local", "policy": {
            "pods": {"priorityClasses": ["batch-low"], "tolerations": ["dedicated"]},
            "ingress": {"hostDomains": ["apps.example.com"], "classes": ["nginx"]},
            "storage": {"classes": ["standard"], "maxClaimSize": "100Gi"},
            "quotaMode": "both"}}]},
        "provider-values-md": {
            "nodeLabels": {"topology.kubernetes.io/region": "eu-west"},
            "consumers": [{"name": "local", "podSecurityLevel": "baseline",
                           "quota": {"cpu": "8", "memory": "16Gi", "pods": "50"}, "cordoned": False,
                           "nodeLabels": {"example.com/provider": "acme"}}],
        },
    },
}
VALUE_SET_IDS = [(chart, name) for chart in VALUE_SETS for name in VALUE_SETS[chart]]


class RenderError(Exception):
    pass


@dataclass(frozen=True)
class Helm:
    path: Path
    env: dict[str, str]

    def run(self, *args: str, values: dict[str, Any] | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(self.path), *args, "--values", "-"], input=yaml.safe_dump(values or {}),
            capture_output=True, text=True, timeout=120, env=self.env,
        )


@pytest.fixture(scope="session")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    path = binaries.binaries().helm
    if not os.access(path, os.X_OK):
        message = f"helm {versions.HELM} is not in the binary cache ({path}): build it with `kube-offload binaries build`"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    home = tmp_path_factory.mktemp("helm-home")
    # helm keeps a cache, a config and plugins under the user's home: use a private one.
    env = dict(os.environ, HELM_CACHE_HOME=str(home / "cache"), HELM_CONFIG_HOME=str(home / "config"),
               HELM_DATA_HOME=str(home / "data"))
    return Helm(path, env)


# Every consumer the remote chart admits needs a quota (it refuses one without: no default
# fits every provider); the tests about something else give each one this.
TEST_QUOTA = {"pods": "10"}


def with_quotas(values: dict[str, Any] | None) -> dict[str, Any] | None:
    """``values`` with TEST_QUOTA for every consumer that names none."""
    if not values or not isinstance(values.get("consumers"), list):
        return values
    consumers = [{**c, "quota": TEST_QUOTA} if isinstance(c, dict) and c.get("name") and "quota" not in c else c
                 for c in values["consumers"]]
    return {**values, "consumers": consumers}


def render_sources(helm: Helm, chart: Path, values: dict[str, Any] | None = None, *, quotas: bool = True
                   ) -> list[tuple[str, dict[str, Any]]]:
    """``helm template`` -> (template file, object) pairs, hooks included, CRDs not (crds/
    is not templated), as release RELEASE in namespace NAMESPACE; ``quotas``: give every
    consumer without one TEST_QUOTA."""
    values = with_quotas(values) if quotas else values
    result = helm.run("template", RELEASE, str(chart), "--namespace", NAMESPACE, values=values)
    if result.returncode != 0:
        raise RenderError(result.stderr.strip())
    pairs = []
    for chunk in re.split(r"^---\s*$", result.stdout, flags=re.MULTILINE):
        source = re.search(r"^# Source: [^/]+/(.+)$", chunk, re.MULTILINE)
        doc = yaml.safe_load(chunk)
        if doc:
            assert source, f"helm printed an object without its # Source line: {chunk[:200]}"
            pairs.append((source.group(1), doc))
    return pairs


def render(helm: Helm, chart: Path, values: dict[str, Any] | None = None, *, quotas: bool = True) -> list[dict[str, Any]]:
    return [doc for _, doc in render_sources(helm, chart, values, quotas=quotas)]


def find(docs: list[dict[str, Any]], kind: str, component: str | None = None) -> list[dict[str, Any]]:
    """Objects of ``kind`` (names are templated, so the component label tells them apart)."""
    return [
        d for d in docs
        if d["kind"] == kind
        and (component is None or (d["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == component)
    ]


def is_hook(doc: dict[str, Any]) -> bool:
    return "helm.sh/hook" in (doc["metadata"].get("annotations") or {})


def containers(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    spec = doc["spec"]
    if doc["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    yield from spec["template"]["spec"]["containers"]


def rules_of(doc: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    """(apiGroup, resource) -> verbs, merged over the rules of a (Cluster)Role."""
    granted: dict[tuple[str, str], set[str]] = {}
    for rule in doc["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault((group, resource), set()).update(rule["verbs"])
    return granted


def assert_grants(doc: dict[str, Any], group: str, resources: list[str], verbs: list[str]) -> None:
    granted = rules_of(doc)
    for resource in resources:
        missing = set(verbs) - granted.get((group, resource), set())
        assert not missing, f"{doc['metadata']['name']}: {group or 'core'}/{resource} lacks {sorted(missing)}"


# --- metadata and values -----------------------------------------------------------------


@pytest.mark.parametrize("chart", CHART_DIRS, ids=lambda p: p.name)
def test_chart_metadata(chart: Path) -> None:
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    assert meta["apiVersion"] == "v2"
    assert meta["name"] == chart.name
    assert re.fullmatch(r"\d+\.\d+\.\d+", meta["version"])
    assert meta["appVersion"] == kube_offload.__version__
    assert meta["type"] == "application"
    assert "dependencies" not in meta


@pytest.mark.parametrize("chart", CHART_DIRS, ids=lambda p: p.name)
def test_values_image_defaults(chart: Path) -> None:
    image = load_values(chart)["image"]
    assert f"{image['repository']}:{image['tag']}" == f"ghcr.io/kube-offload/kube-offload:{kube_offload.__version__}"


def test_local_values_defaults_agree_with_the_components() -> None:
    from webhook import registration

    values = load_values(LOCAL)
    assert values["remoteClusters"] == [] and values["localClusterId"] == ""
    assert values["webhook"]["failurePolicy"] == registration.DEFAULT_POD_FAILURE_POLICY
    assert values["webhook"]["namespaceFailurePolicy"] == registration.DEFAULT_NAMESPACE_FAILURE_POLICY
    assert values["webhook"]["timeoutSeconds"] == registration.DEFAULT_TIMEOUT_SECONDS
    assert values["scheduler"]["image"]["tag"] == versions.KUBERNETES
    assert values["scheduler"]["name"] and values["scheduler"]["enabled"] is True
    for key in ("days", "caDays", "renewWithin", "clusterDomain"):
        assert values["certificates"][key]
    assert values["storage"]["virtualClass"]["name"] == C.DEFAULT_VIRTUAL_STORAGE_CLASS


def test_remote_cluster_fields_used_are_the_documented_ones() -> None:
    """The commented example under remoteClusters in values.yaml is the only documentation
    of an entry's fields: every field the template reads must be in it."""
    text = (LOCAL / "values.yaml").read_text()
    example = text.split("remoteClusters: []", 1)[1]
    documented = set(re.findall(r"^#\s+(?:- )?([A-Za-z]+):", example, re.MULTILINE))
    used = set(re.findall(r"\$cluster\.([A-Za-z]+)", (LOCAL / "templates" / "vkubelet.yaml").read_text()))
    assert used and used <= documented, f"undocumented: {used - documented}"


# --- the ShadowPod CRD -------------------------------------------------------------------


def test_remote_chart_crd_is_a_relative_symlink_to_the_manifest() -> None:
    link = REMOTE / "crds" / "shadowpods.yaml"
    assert link.is_symlink()
    target = os.readlink(link)
    assert not os.path.isabs(target)
    assert target == "../../../kube_offload/manifests/shadowpod-crd.yaml"
    assert link.resolve() == CRD_MANIFEST.resolve()


@pytest.fixture(scope="module")
def crd() -> dict[str, Any]:
    return yaml.safe_load(CRD_MANIFEST.read_text())


def test_crd_has_the_contract_names(crd: dict[str, Any]) -> None:
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1" and crd["kind"] == "CustomResourceDefinition"
    spec = crd["spec"]
    assert crd["metadata"]["name"] == f"{C.SHADOWPOD_PLURAL}.{C.SHADOWPOD_GROUP}"
    assert spec["group"] == C.SHADOWPOD_GROUP
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == C.SHADOWPOD_KIND
    assert spec["names"]["plural"] == C.SHADOWPOD_PLURAL
    assert spec["names"]["singular"] == C.SHADOWPOD_KIND.lower()
    assert spec["names"]["listKind"] == f"{C.SHADOWPOD_KIND}List"
    assert spec["names"]["shortNames"] == [C.SHADOWPOD_SHORT_NAME]
    [version] = spec["versions"]
    assert version["name"] == C.SHADOWPOD_VERSION
    assert version["served"] is True and version["storage"] is True
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c for c in version["additionalPrinterColumns"]}
    assert list(columns) == ["Phase", "Pod", "Age"]
    assert columns["Phase"]["jsonPath"] == ".status.phase"
    assert columns["Pod"]["jsonPath"] == ".status.podName"
    assert columns["Age"] == {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def test_crd_schema(crd: dict[str, Any]) -> None:
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert schema["type"] == "object" and schema["required"] == ["spec"]
    spec = schema["properties"]["spec"]
    assert spec["required"] == ["pod"]
    pod = spec["properties"]["pod"]
    assert pod["required"] == ["spec"]
    meta = pod["properties"]["metadata"]["properties"]
    for field in ("labels", "annotations"):
        assert meta[field] == {"type": "object", "additionalProperties": {"type": "string"}}
    pod_spec = pod["properties"]["spec"]
    assert pod_spec["type"] == "object" and pod_spec["x-kubernetes-preserve-unknown-fields"] is True
    status = schema["properties"]["status"]["properties"]
    assert {k: v["type"] for k, v in status.items()} == {
        "phase": "string",
        "podName": "string",
        "podUID": "string",
        "recreations": "integer",
        "message": "string",
        "observedGeneration": "integer",
        "conditions": "array",
        "runCompleted": "boolean",
        "slicePool": "string",
    }
    assert status["conditions"]["items"]["type"] == "object"


def test_crd_schema_is_structural(crd: dict[str, Any]) -> None:
    """The apiserver rejects a CRD whose schema has a node without a type (unless it
    preserves unknown fields); walk every node."""

    def walk(node: dict[str, Any], path: str) -> None:
        assert "type" in node or node.get("x-kubernetes-preserve-unknown-fields"), path
        for name, child in (node.get("properties") or {}).items():
            walk(child, f"{path}.{name}")
        if isinstance(node.get("items"), dict):
            walk(node["items"], f"{path}[]")
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], f"{path}{{}}")

    walk(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"], "$")


def test_enforcer_and_harness_load_the_same_manifest() -> None:
    from kube_offload_harness import cluster

    assert cluster.SHADOWPOD_CRD.resolve() == CRD_MANIFEST.resolve()


# --- templates: syntax and hygiene -------------------------------------------------------


@pytest.mark.parametrize(("chart", "value_set"), VALUE_SET_IDS, ids=lambda v: v)
def test_helm_lint_strict(helm: Helm, chart: str, value_set: str) -> None:
    result = helm.run("lint", "--strict", str(CHARTS / chart), "--namespace", NAMESPACE, values=VALUE_SETS[chart][value_set])
    assert result.returncode == 0, f"helm lint --strict {chart} ({value_set}):\n{result.stdout}\n{result.stderr}"
    assert "0 chart(s) failed" in result.stdout


@pytest.mark.parametrize(("chart", "value_set"), VALUE_SET_IDS, ids=lambda v: v)
def test_rendered_objects_are_kubernetes_objects(helm: Helm, chart: str, value_set: str) -> None:
    namespaced = {"ServiceAccount", "Service", "Deployment", "Job", "CronJob", "ConfigMap", "Role", "RoleBinding", "Secret"}
    docs = render(helm, CHARTS / chart, VALUE_SETS[chart][value_set])
    assert docs, "no objects"
    for doc in docs:
        assert doc.get("apiVersion") and doc.get("kind"), doc
        assert doc["metadata"].get("name"), doc
        if doc["kind"] in namespaced:
            assert doc["metadata"].get("namespace"), f"{doc['kind']} {doc['metadata']['name']} has no namespace"


@pytest.mark.parametrize("chart", CHART_DIRS, ids=lambda p: p.name)
def test_every_template_renders_objects_for_some_documented_values(helm: Helm, chart: Path) -> None:
    rendered = {source for values in VALUE_SETS[chart.name].values() for source, _ in render_sources(helm, chart, values)}
    expected = {f"templates/{t.name}" for t in templates(chart)}
    assert expected <= rendered, f"never rendered: {sorted(expected - rendered)}"


@pytest.mark.parametrize(
    "template",
    [p for chart in CHART_DIRS for p in (chart / "templates").iterdir()],
    ids=lambda p: f"{p.parents[1].name}/{p.name}",
)
def test_template_blocks_balance(template: Path) -> None:
    depth = 0
    for body in actions(template.read_text()):
        word = body.split()[0] if body.split() else ""
        if word in ("if", "range", "with", "define", "block"):
            depth += 1
        elif word == "end":
            depth -= 1
            assert depth >= 0, f"unmatched end in {template.name}"
    assert depth == 0, f"{depth} unclosed block(s) in {template.name}"


@pytest.mark.parametrize("chart", CHART_DIRS, ids=lambda p: p.name)
def test_every_include_is_defined(chart: Path) -> None:
    sources = [p.read_text() for p in (chart / "templates").iterdir()]
    defined = {m for text in sources for m in re.findall(r'define "([^"]+)"', text)}
    included = {m for text in sources for m in re.findall(r'(?:include|template) "([^"]+)"', text)}
    assert included, "no includes found: the check would prove nothing"
    assert included <= defined, f"undefined: {included - defined}"


@pytest.mark.parametrize("chart", CHART_DIRS, ids=lambda p: p.name)
def test_every_values_path_exists(chart: Path) -> None:
    values = load_values(chart)
    paths = {
        m
        for p in (chart / "templates").iterdir()
        for m in re.findall(r"\.Values((?:\.[A-Za-z0-9_]+)+)", p.read_text())
    }
    assert paths
    for path in sorted(paths):
        node: Any = values
        for part in path.strip(".").split("."):
            assert isinstance(node, dict) and part in node, f".Values{path} is not in {chart.name}/values.yaml"
            node = node[part]


def test_contract_names_come_from_constants() -> None:
    contract = {v for k, v in vars(C).items() if k.isupper() and isinstance(v, str)}
    used = {
        name
        for path in all_templates() + [LOCAL / "values.yaml", REMOTE / "values.yaml"]
        for name in re.findall(r"kube-offload\.io/[A-Za-z0-9._-]+", path.read_text())
    }
    assert used, "no contract names found: the check would prove nothing"
    assert used <= contract, f"not in kube_offload/constants.py: {used - contract}"


def test_secrets_are_mounted_whole_so_renewals_reach_the_pods() -> None:
    # A subPath mount is a copy the kubelet never updates: a renewed pair would not arrive.
    for template in all_templates():
        assert "subPath" not in template.read_text(), template.name


# --- local chart: behaviour --------------------------------------------------------------


@pytest.fixture(scope="module")
def local_docs(helm: Helm) -> list[dict[str, Any]]:
    return render(helm, LOCAL, TWO_REMOTES)


@pytest.fixture(scope="module")
def remote_docs(helm: Helm) -> list[dict[str, Any]]:
    return render(helm, REMOTE, ONE_CONSUMER)


def _without(webhook: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in webhook.items() if k not in keys}


def test_webhook_configurations_match_webhook_registration(local_docs: list[dict[str, Any]]) -> None:
    from webhook import registration

    target = registration.WebhookTarget(ca_bundle="", service=registration.ServiceRef("ns", "svc", 443))
    expected = {
        "MutatingWebhookConfiguration": registration.mutating_configuration(target),
        "ValidatingWebhookConfiguration": registration.validating_configuration(target),
    }
    for kind, built in expected.items():
        [doc] = find(local_docs, kind)
        assert len(doc["webhooks"]) == len(built["webhooks"]), kind
        for chart_hook, python_hook in zip(doc["webhooks"], built["webhooks"], strict=True):
            # failurePolicy and timeoutSeconds come from values (checked against the same
            # defaults above); the caBundle is patched in by the hook Job.
            ignored = ("clientConfig", "failurePolicy", "timeoutSeconds")
            assert _without(chart_hook, *ignored) == _without(python_hook, *ignored), kind
            assert chart_hook["clientConfig"]["service"]["path"] == python_hook["clientConfig"]["service"]["path"]
            assert chart_hook["clientConfig"]["service"]["port"] == 443
            assert "caBundle" not in chart_hook["clientConfig"]
    [mutating] = find(local_docs, "MutatingWebhookConfiguration")
    hook, opt_in = mutating["webhooks"]
    assert hook["namespaceSelector"] == {"matchLabels": {C.LABEL_ENABLED: C.ENABLED_VALUE}}
    assert hook["sideEffects"] == "None" and hook["admissionReviewVersions"] == ["v1"]
    assert hook["reinvocationPolicy"] == "IfNeeded"
    # The opt-in entry: disjoint from the first, never kube-system, only pods naming the class.
    assert opt_in["namespaceSelector"]["matchExpressions"] == [
        {"key": C.LABEL_ENABLED, "operator": "NotIn", "values": [C.ENABLED_VALUE]},
        {"key": C.LABEL_NAMESPACE_NAME, "operator": "NotIn", "values": ["kube-system"]},
    ]
    [condition] = opt_in["matchConditions"]
    assert f"object.spec.runtimeClassName == '{C.RUNTIME_CLASS_OPT_IN}'" in condition["expression"]
    assert opt_in["clientConfig"]["service"]["path"] == hook["clientConfig"]["service"]["path"]


def test_opt_in_runtime_class_matches_the_builder(helm: Helm, local_docs: list[dict[str, Any]]) -> None:
    from kube_offload.opt_in import runtime_class

    [doc] = find(local_docs, "RuntimeClass")
    built = runtime_class()
    assert {k: v for k, v in doc.items() if k != "metadata"} == {k: v for k, v in built.items() if k != "metadata"}
    assert doc["metadata"]["name"] == built["metadata"]["name"] == C.RUNTIME_CLASS_OPT_IN
    # Off on request: then the apiserver refuses pods that name the class.
    assert not find(render(helm, LOCAL, {**TWO_REMOTES, "optIn": {"runtimeClass": False}}), "RuntimeClass")
    [validating] = find(local_docs, "ValidatingWebhookConfiguration")
    assert validating["webhooks"][0]["rules"][0]["operations"] == ["CREATE", "UPDATE"]
    assert validating["webhooks"][0]["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system"]


def test_scheduler_config_matches_extender_registration(local_docs: list[dict[str, Any]]) -> None:
    from extender import registration

    [config_map] = find(local_docs, "ConfigMap", "scheduler")
    config = yaml.safe_load(config_map["data"]["config.yaml"])
    built = registration.scheduler_configuration(
        registration.ExtenderRegistration(url="https://extender:8080", ca_file="/ca.crt")
    )
    assert config["apiVersion"] == built["apiVersion"] and config["kind"] == built["kind"]
    [chart_extender] = config["extenders"]
    [python_extender] = built["extenders"]
    assert set(chart_extender) == set(python_extender)
    assert chart_extender["filterVerb"] == python_extender["filterVerb"]
    assert chart_extender["prioritizeVerb"] == python_extender["prioritizeVerb"]
    assert set(chart_extender["tlsConfig"]) == {"insecure", "caFile"}
    [profile] = config["profiles"]
    assert set(profile) == {"schedulerName"}


def _component_parser(component: str) -> argparse.ArgumentParser:
    """The real argparse parser of ``kube-offload <component>`` (subcommand path)."""
    module = importlib.import_module(f"{component.split()[0]}.cli")
    root = argparse.ArgumentParser()
    module.register(root.add_subparsers())
    parser = root
    for word in component.split():
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[word]
    return parser


def _option_strings(parser: argparse.ArgumentParser) -> set[str]:
    return {o for a in parser._actions for o in a.option_strings}


def _our_containers(docs: list[dict[str, Any]]) -> Iterator[tuple[str, list[str]]]:
    for doc in docs:
        if doc["kind"] not in ("Deployment", "Job", "CronJob"):
            continue
        for container in containers(doc):
            if "args" in container and container.get("args"):
                yield f"{doc['kind']}/{doc['metadata']['name']}", container["args"]


def _certs_secret_args(docs: list[dict[str, Any]]) -> list[str]:
    """The ``certs secret`` arguments of the pre-install hook Job (the renewal CronJob runs
    the same helper, kube-offload.certsSecretArgs in _helpers.tpl)."""
    [job] = [d for d in find(docs, "Job") if d["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"]
    [container] = containers(job)
    return container["args"]


def test_container_flags_are_accepted_by_the_component_clis(
    local_docs: list[dict[str, Any]], remote_docs: list[dict[str, Any]]
) -> None:
    seen: dict[str, set[str]] = {}
    commands = list(_our_containers(local_docs + remote_docs)) + [("certs secret helper", _certs_secret_args(local_docs))]
    for where, args in commands:
        words = [a for a in args if not str(a).startswith("-")]
        component = " ".join(words[:2]) if words[0] == "certs" else words[0]
        flags = {str(a).split("=", 1)[0] for a in args if str(a).startswith("--")}
        accepted = _option_strings(_component_parser(component))
        assert flags <= accepted, f"{where}: kube-offload {component} does not accept {sorted(flags - accepted)}"
        seen.setdefault(component, set()).update(flags)
    assert set(seen) == {"webhook", "extender", "vkubelet", "certs secret", "certs patch-ca-bundle", "enforcer", "relay"}


def test_certs_secret_helper_args_parse(helm: Helm) -> None:
    """Beyond the names: with every optional SAN set, the helper's arguments are a command
    line ``kube-offload certs secret`` accepts."""
    args = _certs_secret_args(render(helm, LOCAL, VALUE_SETS[LOCAL.name]["extra-sans"]))
    root = argparse.ArgumentParser()
    importlib.import_module("certs.cli").register(root.add_subparsers(dest="command"))
    parsed = root.parse_args(args)
    assert parsed.certs_command == "secret" and parsed.namespace == "kube-offload"
    assert "--dns=extra.example.com" in args and "--ip=10.0.0.1" in args


def test_pods_run_the_single_image_with_one_subcommand_each(local_docs: list[dict[str, Any]]) -> None:
    helpers = (LOCAL / "templates" / "_helpers.tpl").read_text()
    assert 'printf "%s:%s" .Values.image.repository' in helpers
    components = {args[0] for _, args in _our_containers(local_docs)}
    assert {"webhook", "extender", "vkubelet", "certs"} <= components


def test_webhook_sets_scheduler_name_only_with_the_extender_scheduler() -> None:
    text = (LOCAL / "templates" / "webhook.yaml").read_text()
    guard = text.split("- --scheduler-name=", 1)[0].rsplit("{{-", 1)[1]
    assert ".Values.scheduler.enabled" in guard and ".Values.extender.enabled" in guard


def test_vkubelet_deployment_per_remote_cluster(local_docs: list[dict[str, Any]]) -> None:
    source = (LOCAL / "templates" / "vkubelet.yaml").read_text()
    assert "{{- range $index, $cluster := .Values.remoteClusters }}" in source
    deployments = find(local_docs, "Deployment", "vkubelet")
    assert len(deployments) == len(TWO_REMOTES["remoteClusters"])
    for deployment in deployments:
        # Two replicas, one leading (docs/high-availability.md); replaced all at once, since
        # only a leader is Ready (one at a time would wait for ever: tests/realnode/test_day2.py).
        assert deployment["spec"]["replicas"] == 2
        assert deployment["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": "100%"}}
        [container] = deployment["spec"]["template"]["spec"]["containers"]
        assert {"--leader-elect=true", f"--leader-elect-namespace={NAMESPACE}", "--leader-elect-lease-duration=15s",
                "--leader-elect-renew-deadline=10s", "--leader-elect-retry-period=2s"} <= set(container["args"])
        flags = {a.split("=", 1)[0] for a in container["args"][1:]}
        assert {"--cluster-id", "--local-cluster-id", "--remote-kubeconfig", "--sharing-percentage",
                "--node-address"} <= flags
        assert "--node-address=$(POD_IP)" in container["args"]
        # The kubelet API's bounds, from values.yaml (their defaults are the flags').
        assert {"--kubelet-max-connections=256", "--kubelet-max-streams=128", "--kubelet-stream-idle-timeout=4h",
                "--kubelet-remote-connect-timeout=10s"} <= set(container["args"])
    # --node-label only where the entry has labels (remote-1).
    assert any(a.startswith("--node-label=") for d in deployments for a in next(containers(d))["args"])


def test_each_slice_is_a_vkubelet_deployment_of_its_own(helm: Helm) -> None:
    """docs/slices.md: one Deployment per slice beside the peering's own, named and
    selected apart (no selector of one matches the other's pods), with --slice in the
    vkubelet's grammar; the physical storage delegate stays with the peering's own."""
    values = {
        "localClusterId": "local",
        "storage": {"localClass": "standard"},
        "remoteClusters": [{"id": "remote-1", "kubeconfigSecret": "remote-1-kubeconfig", "slices": [
            {"name": "gpu", "pool": "a100", "resources": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": 1}},
            {"name": "web", "pool": "general", "resources": {"cpu": "500m"}},
        ]}],
    }
    deployments = {d["metadata"]["name"]: d for d in find(render(helm, LOCAL, values), "Deployment", "vkubelet")}
    assert set(deployments) == {f"{RELEASE}-vkubelet-remote-1", f"{RELEASE}-vkubelet-remote-1-gpu", f"{RELEASE}-vkubelet-remote-1-web"}
    args = {name: next(containers(d))["args"] for name, d in deployments.items()}
    assert "--slice=gpu=a100:cpu=2,memory=4Gi,nvidia.com/gpu=1" in args[f"{RELEASE}-vkubelet-remote-1-gpu"]
    assert "--slice=web=general:cpu=500m" in args[f"{RELEASE}-vkubelet-remote-1-web"]
    assert not any(a.startswith("--slice") for a in args[f"{RELEASE}-vkubelet-remote-1"])
    # The --slice values parse as the vkubelet parses them.
    for name in ("gpu", "web"):
        value = next(a for a in args[f"{RELEASE}-vkubelet-remote-1-{name}"] if a.startswith("--slice="))
        assert parse_slice(value.split("=", 1)[1]).name == name
    assert any(a.startswith("--virtual-storage-local-class") for a in args[f"{RELEASE}-vkubelet-remote-1"])
    assert not any(a.startswith("--virtual-storage-local-class") for a in args[f"{RELEASE}-vkubelet-remote-1-gpu"])
    for name, deployment in deployments.items():
        selector = deployment["spec"]["selector"]["matchLabels"]
        for other, pods in deployments.items():
            labels = pods["spec"]["template"]["metadata"]["labels"]
            matches = all(labels.get(k) == v for k, v in selector.items())
            assert matches == (name == other), f"the selector of {name} matches the pods of {other}: {selector}"


def test_a_slice_without_pool_or_resources_is_refused_by_name(helm: Helm) -> None:
    values = {"localClusterId": "local", "remoteClusters": [
        {"id": "remote-1", "kubeconfigSecret": "k", "slices": [{"name": "gpu", "pool": "gpu"}]}]}
    result = helm.run("template", RELEASE, str(LOCAL), "--namespace", NAMESPACE, values=values)
    assert result.returncode != 0
    assert "remoteClusters entry remote-1: slice gpu needs pool and resources" in result.stderr


def test_unreachable_deletion_margin_is_a_value(helm: Helm) -> None:
    # vkubelet.unreachableDeletionMargin reaches every vkubelet's flag, parsed as the
    # vkubelet parses it (a non-default value, so the flag's own default cannot pass).
    vkubelet = dict(TWO_REMOTES.get("vkubelet", {}), unreachableDeletionMargin="2m")
    docs = render(helm, LOCAL, dict(TWO_REMOTES, vkubelet=vkubelet))
    deployments = find(docs, "Deployment", "vkubelet")
    assert deployments
    for deployment in deployments:
        args = parse_component_args(next(containers(deployment))["args"])
        assert args.unreachable_deletion_margin == 120.0


def test_virtual_storage_class(helm: Helm, local_docs: list[dict[str, Any]]) -> None:
    # Default: the class is installed, every vkubelet serves it, none runs the physical
    # delegate and no Role for real claims exists.
    [storage_class] = find(local_docs, "StorageClass")
    assert storage_class["metadata"]["name"] == C.DEFAULT_VIRTUAL_STORAGE_CLASS
    assert storage_class["provisioner"] == C.STORAGE_PROVISIONER
    assert storage_class["volumeBindingMode"] == "WaitForFirstConsumer"
    assert storage_class["reclaimPolicy"] == "Delete" and storage_class["allowVolumeExpansion"] is True
    assert not [r for r in find(local_docs, "Role", "vkubelet") if r["metadata"]["name"].endswith("-storage")]
    for deployment in find(local_docs, "Deployment", "vkubelet"):
        args = next(containers(deployment))["args"]
        assert f"--virtual-storage-class={C.DEFAULT_VIRTUAL_STORAGE_CLASS}" in args
        assert not any(a.startswith("--virtual-storage-local-class") for a in args)
    # With a real local class: the first remote's vkubelet alone is the physical delegate,
    # allowed to create and delete claims in the release namespace only.
    docs = render(helm, LOCAL, dict(TWO_REMOTES, storage={"localClass": "local-path"}))
    delegates = [d for d in find(docs, "Deployment", "vkubelet")
                 if "--virtual-storage-local-class=local-path" in next(containers(d))["args"]]
    assert [d["metadata"]["name"] for d in delegates] == [f"{RELEASE}-vkubelet-remote-1"]
    assert f"--virtual-storage-namespace={NAMESPACE}" in next(containers(delegates[0]))["args"]
    [role] = [r for r in find(docs, "Role", "vkubelet") if r["metadata"]["name"].endswith("-storage")]
    assert role["metadata"]["namespace"] == NAMESPACE
    assert rules_of(role) == {("", "persistentvolumeclaims"): {"create", "delete"}}
    [binding] = [b for b in find(docs, "RoleBinding", "vkubelet") if b["metadata"]["name"].endswith("-storage")]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    # Off: no class.
    off = render(helm, LOCAL, dict(TWO_REMOTES, storage={"virtualClass": {"create": False}}))
    assert not find(off, "StorageClass")


def test_local_rbac(local_docs: list[dict[str, Any]]) -> None:
    [webhook] = find(local_docs, "ClusterRole", "webhook")
    assert rules_of(webhook) == {("", "namespaces"): {"get", "list", "watch"}}
    [extender] = find(local_docs, "ClusterRole", "extender")
    assert rules_of(extender) == {("", r): {"get", "list", "watch"} for r in ("nodes", "namespaces", "pods")}
    [vkubelet] = find(local_docs, "ClusterRole", "vkubelet")
    # Exactly what the vkubelet's loops call (the e2e suite runs it under this role): no
    # node delete or update, no reads of reflected kinds beyond list/watch.
    assert rules_of(vkubelet) == {
        ("", "nodes"): {"get", "list", "watch", "create", "patch"},
        ("", "nodes/status"): {"patch"},
        ("", "pods"): {"get", "list", "watch", "delete"},
        ("", "pods/status"): {"patch"},
        ("", "pods/eviction"): {"create"},  # handback (docs/virtual-kubelet.md#handback)
        # Copies of remote Events are created, and patched when found (no read first).
        ("", "events"): {"create", "patch"},
        **{("", r): {"list", "watch"} for r in ("configmaps", "secrets", "services")},
        ("discovery.k8s.io", "endpointslices"): {"list", "watch"},
        ("networking.k8s.io", "ingresses"): {"list", "watch"},
        ("", "serviceaccounts/token"): {"create"},
        ("", "namespaces"): {"list", "watch"},
        ("authentication.k8s.io", "tokenreviews"): {"create"},
        ("authorization.k8s.io", "subjectaccessreviews"): {"create"},
        # The virtual storage class (docs/storage.md).
        ("", "persistentvolumes"): {"get", "list", "watch", "create", "patch", "delete"},
        ("storage.k8s.io", "storageclasses"): {"list", "watch"},
        ("", "persistentvolumeclaims"): {"list", "watch", "get"},
        ("", "persistentvolumeclaims/status"): {"patch"},
    }
    all_roles = find(local_docs, "Role", "vkubelet")
    credentials = [r for r in all_roles if r["metadata"]["name"].endswith("-credentials")]
    roles = {r["metadata"]["namespace"]: r for r in all_roles if r not in credentials}
    assert set(roles) == {"kube-node-lease", NAMESPACE}
    # The virtual node's heartbeat Lease (patched, as a kubelet does)...
    assert rules_of(roles["kube-node-lease"]) == {("coordination.k8s.io", "leases"): {"get", "create", "patch"}}
    # ...and, apart from it, the leader-election Lease in the release namespace only:
    # full updates with the resourceVersion read (docs/high-availability.md).
    assert rules_of(roles[NAMESPACE]) == {("coordination.k8s.io", "leases"): {"get", "create", "update"}}
    # The remote kubeconfig Secrets, by name and no other Secret: the renewed token is
    # written back there and followed by every replica (docs/security.md).
    [credential_role] = credentials
    assert credential_role["metadata"]["namespace"] == NAMESPACE
    assert credential_role["rules"] == [{"apiGroups": [""], "resources": ["secrets"],
                                         "resourceNames": ["remote-1-kubeconfig", "remote-2-kubeconfig"],
                                         "verbs": ["get", "update", "patch"]}]
    bindings = [b for b in find(local_docs, "RoleBinding", "vkubelet") if b["metadata"]["namespace"] == NAMESPACE]
    assert sorted(b["roleRef"]["name"] for b in bindings) == sorted([roles[NAMESPACE]["metadata"]["name"], credential_role["metadata"]["name"]])


CSR_RULES = {("certificates.k8s.io", "certificatesigningrequests"): {"create", "get"}}
SELF_APPROVAL_RULES = {
    ("certificates.k8s.io", "certificatesigningrequests/approval"): {"update"},
    ("certificates.k8s.io", "signers"): {"approve"},
}


@pytest.mark.parametrize("approval", ["external", "self"])
def test_vkubelet_serving_cert_from_the_csr_api_adds_only_what_it_needs(helm: Helm, local_docs: list[dict[str, Any]], approval: str) -> None:
    """servingCert.mode=csr: create/get its CSRs; approval=self adds approve on the
    kubelet-serving signer only (by name) and the approval subresource; the default
    (self-signed) grants nothing of certificates.k8s.io (test_local_rbac)."""
    [default_role] = find(local_docs, "ClusterRole", "vkubelet")
    values = {**TWO_REMOTES, "vkubelet": {**TWO_REMOTES["vkubelet"], "servingCert": {
        "mode": "csr", "approval": approval, "expiration": "10m", "rotation": "0.2"}}}
    docs = render(helm, LOCAL, values)
    [role] = find(docs, "ClusterRole", "vkubelet")
    added = {k: v for k, v in rules_of(role).items() if k not in rules_of(default_role)}
    assert added == (CSR_RULES if approval == "external" else {**CSR_RULES, **SELF_APPROVAL_RULES})
    signer_rules = [r for r in role["rules"] if "signers" in r["resources"]]
    assert all(r["resourceNames"] == ["kubernetes.io/kubelet-serving"] for r in signer_rules)
    for deployment in find(docs, "Deployment", "vkubelet"):
        [container] = deployment["spec"]["template"]["spec"]["containers"]
        args = parse_component_args(container["args"])
        assert (args.kubelet_serving_cert_mode, args.kubelet_serving_cert_approval) == ("csr", approval)
        assert (args.kubelet_serving_cert_expiration, args.kubelet_serving_cert_rotation) == (600.0, 0.2)


def test_certificate_hooks(local_docs: list[dict[str, Any]]) -> None:
    jobs = {d["metadata"]["annotations"]["helm.sh/hook"]: d for d in find(local_docs, "Job")}
    assert set(jobs) == {"pre-install,pre-upgrade", "post-install,post-upgrade"}
    [patch_container] = containers(jobs["post-install,post-upgrade"])
    assert patch_container["args"][:2] == ["certs", "patch-ca-bundle"]
    hook_rbac = [d for d in local_docs if is_hook(d) and d["kind"] != "Job"]
    assert {d["kind"] for d in hook_rbac} == {"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}
    for doc in hook_rbac:
        # Created before the Jobs of both phases, deleted once each phase succeeded.
        assert doc["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade,post-install,post-upgrade"
        assert int(doc["metadata"]["annotations"]["helm.sh/hook-weight"]) < 0
    [cluster_role] = [d for d in hook_rbac if d["kind"] == "ClusterRole"]
    assert_grants(cluster_role, "admissionregistration.k8s.io",
                  ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"], ["get", "patch"])
    # The renewal CronJob runs without the hook RBAC: its own, get/patch only.
    [cron] = find(local_docs, "CronJob")
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    [renewal_role] = [d for d in find(local_docs, "Role", "certificates") if not is_hook(d)]
    assert rules_of(renewal_role) == {("", "secrets"): {"get", "patch"}}


# --- remote chart ------------------------------------------------------------------------


def test_remote_rbac(remote_docs: list[dict[str, Any]]) -> None:
    [enforcer] = find(remote_docs, "ClusterRole", "enforcer")
    # Exactly what the enforcer's code calls (docs/enforcer.md, "RBAC"; the e2e suite runs
    # it under this role): no ShadowPod update/patch, no pod update, no node or RoleBinding
    # get, no status update, no events.k8s.io. ShadowPod delete: a drained consumer's, after
    # its grace (Consumer spec.drain).
    assert rules_of(enforcer) == {
        (C.SHADOWPOD_GROUP, C.SHADOWPOD_PLURAL): {"get", "list", "watch", "delete"},
        (C.SHADOWPOD_GROUP, f"{C.SHADOWPOD_PLURAL}/status"): {"patch"},
        (C.SHADOWPOD_GROUP, f"{C.SHADOWPOD_PLURAL}/finalizers"): {"update"},
        ("", "pods"): {"get", "list", "watch", "create", "patch", "delete"},
        # kubectl debug: the template's ephemeral containers (enforcer/shadowpods/debugging.py).
        ("", "pods/ephemeralcontainers"): {"patch"},
        ("", "pods/resize"): {"patch"},  # in-place resize (enforcer/shadowpods/resize.py)
        ("", "nodes"): {"list", "watch"},
        ("", "namespaces"): {"get", "list", "watch", "create", "patch", "delete"},
        ("rbac.authorization.k8s.io", "rolebindings"): {"list", "watch", "create", "update", "delete"},
        ("rbac.authorization.k8s.io", "clusterroles"): {"bind"},
        # The custom resource grant's Role in each twin (enforcer/consumers/twin_grants.py).
        ("rbac.authorization.k8s.io", "roles"): {"list", "watch", "create", "update", "delete"},
        ("", "resourcequotas"): {"list", "watch", "create", "update", "delete"},
        (C.SHADOWPOD_GROUP, C.CONSUMER_PLURAL): {"get", "list", "watch"},
        (C.SHADOWPOD_GROUP, f"{C.CONSUMER_PLURAL}/status"): {"patch"},
        (C.SHADOWPOD_GROUP, C.TWIN_NAMESPACE_PLURAL): {"list", "watch", "patch"},
        (C.SHADOWPOD_GROUP, f"{C.TWIN_NAMESPACE_PLURAL}/status"): {"patch"},
        # Resource slices (docs/slices.md): read, and the decision in status; never spec.
        (C.SHADOWPOD_GROUP, C.SLICE_PLURAL): {"get", "list", "watch"},
        (C.SHADOWPOD_GROUP, f"{C.SLICE_PLURAL}/status"): {"patch"},
        ("", "serviceaccounts"): {"get", "list", "watch"},
        ("networking.k8s.io", "servicecidrs"): {"list", "watch"},
        ("", "limitranges"): {"list", "watch"},  # the webhook's verdict cache key
        ("", "events"): {"create", "patch"},
        # Service continuity (docs/reflection.md): the consumers' heartbeat Leases (by name
        # only) and their reflected EndpointSlices, held not ready / restored / deleted.
        ("coordination.k8s.io", "leases"): {"list", "watch"},
        ("discovery.k8s.io", "endpointslices"): {"list", "watch", "patch", "delete"},
    }
    [heartbeats] = [r for r in enforcer["rules"] if r["resources"] == ["leases"]]
    assert heartbeats["resourceNames"] == [C.CONSUMER_HEARTBEAT_LEASE]
    # The API server's addresses: EndpointSlices of namespace default only.
    [api_server_role] = [r for r in find(remote_docs, "Role", "enforcer") if r["metadata"]["namespace"] == "default"]
    assert rules_of(api_server_role) == {("discovery.k8s.io", "endpointslices"): {"list", "watch"}}
    # bind only on the consumer twin role, never on every ClusterRole
    [bind] = [r for r in enforcer["rules"] if r["resources"] == ["clusterroles"]]
    assert bind["resourceNames"] == [C.DEFAULT_CONSUMER_TWIN_ROLE]
    # The consumer's RBAC is owned by the trust-boundary work (docs/security.md): only the
    # kinds and names of its objects are pinned here.
    consumer_roles = {d["metadata"]["name"] for d in find(remote_docs, "ClusterRole", "consumer")}
    assert C.DEFAULT_CONSUMER_TWIN_ROLE in consumer_roles
    # kubectl top on offloaded pods (docs/metrics.md): exactly a list of PodMetrics, only
    # in the twin namespaces this role is bound into.
    [twin_role] = [d for d in remote_docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == C.DEFAULT_CONSUMER_TWIN_ROLE]
    metrics_rules = {key: verbs for key, verbs in rules_of(twin_role).items() if key[0] == "metrics.k8s.io"}
    assert metrics_rules == {("metrics.k8s.io", "pods"): {"list"}}
    # Event reflection (docs/reflection.md#events): core Events listed and watched in the
    # twin namespaces, nothing else of events (no get, no events.k8s.io, no write).
    event_rules = {key: verbs for key, verbs in rules_of(twin_role).items() if key[1] == "events"}
    assert event_rules == {("", "events"): {"list", "watch"}}
    # The twin ResourceQuota bounds the consumer (docs/security.md "Quota: what counts"):
    # none of the consumer's roles may touch it, nor name every resource or verb.
    for role in find(remote_docs, "ClusterRole", "consumer"):
        for rule in role.get("rules") or []:
            assert "resourcequotas" not in rule.get("resources", []), role["metadata"]["name"]
            assert "*" not in rule.get("resources", []) and "*" not in rule.get("verbs", []), role["metadata"]["name"]


def test_consumer_identity_template(remote_docs: list[dict[str, Any]]) -> None:
    # The identity is a ServiceAccount with bound tokens only: no token Secret.
    assert find(remote_docs, "Secret") == []
    [account] = find(remote_docs, "ServiceAccount", "consumer")
    [binding] = find(remote_docs, "ClusterRoleBinding", "consumer")
    assert binding["roleRef"]["kind"] == "ClusterRole"
    assert binding["subjects"][0]["kind"] == "ServiceAccount"
    source = (REMOTE / "templates" / "consumer.yaml").read_text()
    assert "{{- range .Values.consumers }}" in source
    assert account["metadata"]["name"] == binding["subjects"][0]["name"] == C.CONSUMER_SERVICE_ACCOUNT
    # In its tenant namespace it may renew its own token, and no other ServiceAccount's.
    tenant = account["metadata"]["namespace"]
    [role] = [r for r in find(remote_docs, "Role", "consumer") if r["metadata"]["namespace"] == tenant]
    token_rules = [r for r in role["rules"] if "serviceaccounts/token" in r["resources"]]
    assert token_rules == [{"apiGroups": [""], "resources": ["serviceaccounts/token"],
                            "resourceNames": [C.CONSUMER_SERVICE_ACCOUNT], "verbs": ["create"]}]


def test_enforcer_deployment(remote_docs: list[dict[str, Any]]) -> None:
    [deployment] = find(remote_docs, "Deployment", "enforcer")
    # Two replicas, one leading (docs/high-availability.md); replaced all at once.
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": "100%"}}
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container["args"][0] == "enforcer"
    assert {"--leader-elect=true", f"--leader-elect-namespace={NAMESPACE}", "--leader-elect-lease-duration=15s",
            "--leader-elect-renew-deadline=10s", "--leader-elect-retry-period=2s"} <= set(container["args"])
    # The webhooks in the enforcer's process until a process of their own is shown faster
    # (docs/enforcer.md, "The webhooks' own process").
    assert "--webhook-process=shared" in container["args"]
    # The election Lease only, in the release namespace only.
    [role] = [r for r in find(remote_docs, "Role", "enforcer") if r["metadata"]["namespace"] == NAMESPACE]
    assert rules_of(role) == {("coordination.k8s.io", "leases"): {"get", "create", "update"}}
    [binding] = [b for b in find(remote_docs, "RoleBinding", "enforcer") if b["metadata"]["namespace"] == NAMESPACE]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]


def test_multihop_values(helm: Helm, remote_docs: list[dict[str, Any]]) -> None:
    """docs/multihop.md: the enforcer learns its own cluster id only when given (no loop check
    otherwise), and a consumer is offloaded further only when its entry says so."""
    [container] = find(remote_docs, "Deployment", "enforcer")[0]["spec"]["template"]["spec"]["containers"]
    assert not any(arg.startswith("--cluster-id") for arg in container["args"])
    [consumer] = [d for d in remote_docs if d["kind"] == C.CONSUMER_KIND]
    assert "furtherOffloading" not in consumer["spec"]
    further = {"enabled": True, "podPlacement": "Remote"}
    values = {**ONE_CONSUMER, "clusterId": "provider-1",
              "consumers": [{**ONE_CONSUMER["consumers"][0], "furtherOffloading": further}]}
    docs = render(helm, REMOTE, values)
    [container] = find(docs, "Deployment", "enforcer")[0]["spec"]["template"]["spec"]["containers"]
    assert "--cluster-id=provider-1" in container["args"]
    [consumer] = [d for d in docs if d["kind"] == C.CONSUMER_KIND]
    assert consumer["spec"]["furtherOffloading"] == further


def test_home_api_relay_per_consumer(helm: Helm, remote_docs: list[dict[str, Any]]) -> None:
    """docs/home-api.md: the relay Deployment and Service in the consumer's tenant namespace,
    no API access of its own, the contract's names and ports, and exactly what the consumer's
    uplinks need in its Role; off globally or per consumer (Role rules included)."""
    from relay.cli import UPLINK_HOST

    tenant = C.tenant_namespace("local")
    [deployment] = find(remote_docs, "Deployment", C.HOME_API_RELAY_COMPONENT)
    [service] = find(remote_docs, "Service", C.HOME_API_RELAY_COMPONENT)
    [account] = find(remote_docs, "ServiceAccount", C.HOME_API_RELAY_COMPONENT)
    assert deployment["metadata"]["namespace"] == service["metadata"]["namespace"] == tenant
    assert service["metadata"]["name"] == C.HOME_API_SERVICE
    pod = deployment["spec"]["template"]["spec"]
    # The selector the vkubelet lists relay pods with matches the pods, and the Service too.
    wanted = dict(item.split("=") for item in C.HOME_API_RELAY_SELECTOR.split(","))
    assert wanted.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    [port] = service["spec"]["ports"]
    assert port["port"] == C.HOME_API_SERVICE_PORT and port["targetPort"] == "serve"
    [container] = pod["containers"]
    assert {p["name"]: p["containerPort"] for p in container["ports"]}["serve"] == C.HOME_API_RELAY_SERVE_PORT
    args = parse_component_args(container["args"])
    assert args.serve_bind == f"0.0.0.0:{C.HOME_API_RELAY_SERVE_PORT}" and args.uplink_port == C.HOME_API_RELAY_UPLINK_PORT
    assert UPLINK_HOST == "127.0.0.1"  # never a flag: uplinks need a port-forward
    # No API access: no token mounted, a ServiceAccount of its own that no role names.
    assert pod["automountServiceAccountToken"] is False and account["automountServiceAccountToken"] is False
    assert pod["serviceAccountName"] == account["metadata"]["name"]
    bound = [s["name"] for d in remote_docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding") for s in d["subjects"]]
    assert account["metadata"]["name"] not in bound
    # The chart's security contexts (the tenant namespace enforces Pod Security "restricted").
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    # The consumer's Role: its twin namespace requests, plus the relay's Service (by name),
    # its pods (to find them) and port-forward (the uplinks), its own token; nothing else.
    [role] = [r for r in remote_docs if r["kind"] == "Role" and r["metadata"]["namespace"] == tenant]
    assert rules_of(role) == {
        (C.SHADOWPOD_GROUP, C.TWIN_NAMESPACE_PLURAL): {"get", "list", "watch", "create", "update", "patch", "delete"},
        # Its slices: spec only (no status, no patch of what the enforcer wrote).
        (C.SHADOWPOD_GROUP, C.SLICE_PLURAL): {"get", "list", "watch", "create", "update", "delete"},
        ("", "services"): {"get"},
        ("", "pods"): {"get", "list"},
        ("", "pods/portforward"): {"get", "create"},
        ("", "serviceaccounts/token"): {"create"},  # its own bound token (docs/security.md)
        # Its heartbeat Lease (vkubelet/node/heartbeat.py): created, then patched by name only.
        ("coordination.k8s.io", "leases"): {"create", "patch"},
    }
    [services_rule] = [r for r in role["rules"] if r["resources"] == ["services"]]
    assert services_rule["resourceNames"] == [C.HOME_API_SERVICE]
    lease_rules = [r for r in role["rules"] if r["resources"] == ["leases"]]
    assert lease_rules == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [C.CONSUMER_HEARTBEAT_LEASE],
         "verbs": ["patch"]},
    ]
    for values in ({"consumers": [{"name": "local", "homeAPIRelay": False}]},
                   {"consumers": [{"name": "local"}], "homeAPIRelay": {"enabled": False}}):
        docs = render(helm, REMOTE, values)
        assert not find(docs, "Deployment", C.HOME_API_RELAY_COMPONENT) and not find(docs, "Service", C.HOME_API_RELAY_COMPONENT)
        [role] = [r for r in docs if r["kind"] == "Role" and r["metadata"]["namespace"] == tenant]
        assert set(rules_of(role)) == {
            (C.SHADOWPOD_GROUP, C.TWIN_NAMESPACE_PLURAL), (C.SHADOWPOD_GROUP, C.SLICE_PLURAL), ("", "serviceaccounts/token"),
            ("coordination.k8s.io", "leases")}
    # Per consumer: a second consumer keeps its relay when the first turns its own off.
    docs = render(helm, REMOTE, {"consumers": [{"name": "local", "homeAPIRelay": False}, {"name": "other"}]})
    assert [d["metadata"]["namespace"] for d in find(docs, "Deployment", C.HOME_API_RELAY_COMPONENT)] == [
        C.tenant_namespace("other")]


def test_enforcer_webhook_configuration_matches_its_registration(remote_docs: list[dict[str, Any]]) -> None:
    from enforcer.admission import registration
    from kube_offload.webhook_target import ServiceRef, WebhookTarget

    built = registration.validating_configuration(WebhookTarget(ca_bundle="", service=ServiceRef("ns", "svc", 443)))
    [doc] = find(remote_docs, "ValidatingWebhookConfiguration", "enforcer")
    assert len(doc["webhooks"]) == len(built["webhooks"])
    ignored = ("clientConfig", "failurePolicy", "timeoutSeconds")
    for chart_hook, python_hook in zip(doc["webhooks"], built["webhooks"], strict=True):
        assert _without(chart_hook, *ignored) == _without(python_hook, *ignored), chart_hook["name"]
        assert chart_hook["clientConfig"]["service"]["path"] == python_hook["clientConfig"]["service"]["path"]


def test_consumer_admission_policies_and_their_bindings(helm: Helm) -> None:
    from kube_offload.provider_policy import METADATA_ADDRESSES

    docs = render(helm, REMOTE, {"consumers": [{"name": "alpha"}, {"name": "beta", "policy": {"services": {"types": ["NodePort"]}}}]})
    policies = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"
                and d["metadata"]["name"] != "kube-offload-tenant-leases"}  # no parameter: its own test below
    kinds = {"services", "endpointslices", "ingresses", "persistentvolumeclaims", "secrets"}
    assert set(policies) == {f"kube-offload-consumer-{k}" for k in kinds}
    for policy in policies.values():
        spec = policy["spec"]
        assert spec["failurePolicy"] == "Fail"
        assert spec["paramKind"] == {"apiVersion": f"{C.DOMAIN}/{C.SHADOWPOD_VERSION}", "kind": C.CONSUMER_KIND}
        # Only the consumer's writes: the PV binder and the EndpointSlice controller write there too.
        [condition] = spec["matchConditions"]
        assert "request.userInfo.username" in condition["expression"] and C.CONSUMER_SERVICE_ACCOUNT in condition["expression"]
        assert {tuple(r["operations"]) for r in spec["matchConstraints"]["resourceRules"]} == {("CREATE", "UPDATE")}
        # Every refusal names the policy key (or says no key widens it).
        for validation in spec["validations"]:
            assert "spec.policy" in validation["messageExpression"] or "no policy key" in validation["messageExpression"]
    endpoint_variables = {v["name"]: v["expression"] for v in policies["kube-offload-consumer-endpointslices"]["spec"]["variables"]}
    for address in METADATA_ADDRESSES:
        assert f"'{address}'" in endpoint_variables["metadata"]
    bindings = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding" and d["metadata"]["name"] != "kube-offload-tenant-leases"]
    assert {b["metadata"]["name"] for b in bindings} == {f"kube-offload-consumer-{k}-{n}" for k in kinds for n in ("alpha", "beta")}
    for binding in bindings:
        consumer = binding["spec"]["paramRef"]["name"]
        assert binding["spec"]["policyName"] in policies
        assert binding["spec"]["paramRef"]["parameterNotFoundAction"] == "Deny"
        assert binding["spec"]["validationActions"] == ["Deny"]
        assert binding["spec"]["matchResources"]["namespaceSelector"] == {
            "matchLabels": {C.LABEL_ORIGIN_CLUSTER_ID: consumer, C.LABEL_MANAGED_BY: C.MANAGED_BY_ENFORCER}}
    consumers = {d["metadata"]["name"]: d for d in docs if d["kind"] == C.CONSUMER_KIND}
    assert "policy" not in consumers["alpha"]["spec"]  # absent: the safe defaults
    assert consumers["beta"]["spec"]["policy"] == {"services": {"types": ["NodePort"]}}


def test_the_pvc_policy_reads_an_empty_largest_claim_as_the_default(helm: Helm) -> None:
    from kube_offload.provider_policy import DEFAULT_MAX_CLAIM_SIZE

    docs = render(helm, REMOTE, ONE_CONSUMER)
    policy = one(docs, "ValidatingAdmissionPolicy", "kube-offload-consumer-persistentvolumeclaims")
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert f"'{DEFAULT_MAX_CLAIM_SIZE}'" in variables["maxSize"]


def test_a_tenant_namespace_admits_one_lease_name(helm: Helm) -> None:
    docs = render(helm, REMOTE, {"consumers": [{"name": "alpha"}]})
    # Leases: only the heartbeat's name, for the tenant namespace's own ServiceAccounts (so at
    # most one: names are unique). TwinNamespace requests and slices are counted by the
    # enforcer's tenant-objects webhook (a ResourceQuota on a custom kind refuses every create
    # for minutes after an install: enforcer/admission/tenant_objects.py).
    policy = one(docs, "ValidatingAdmissionPolicy", "kube-offload-tenant-leases")
    assert [v["expression"] for v in policy["spec"]["validations"]] == [f"object.metadata.name == '{C.CONSUMER_HEARTBEAT_LEASE}'"]
    assert policy["spec"]["matchConstraints"]["resourceRules"][0]["resources"] == ["leases"]
    binding = one(docs, "ValidatingAdmissionPolicyBinding", "kube-offload-tenant-leases")
    assert binding["spec"]["matchResources"]["namespaceSelector"] == {
        "matchExpressions": [{"key": C.LABEL_TENANT, "operator": "Exists"}]}
    assert not find(docs, "ResourceQuota")


def test_only_the_consumers_own_pods_reach_its_relay(helm: Helm) -> None:
    docs = render(helm, REMOTE, {"consumers": [{"name": "alpha"}, {"name": "beta", "homeAPIRelay": False}]})
    [policy] = find(docs, "NetworkPolicy", C.HOME_API_RELAY_COMPONENT)  # none where no relay runs
    assert policy["metadata"]["namespace"] == C.tenant_namespace("alpha")
    [relay] = find(docs, "Deployment", C.HOME_API_RELAY_COMPONENT)
    assert policy["spec"]["podSelector"]["matchLabels"] == relay["spec"]["selector"]["matchLabels"]
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    serve, health = policy["spec"]["ingress"]
    assert serve["from"] == [{
        "namespaceSelector": {"matchLabels": {C.LABEL_ORIGIN_CLUSTER_ID: "alpha", C.LABEL_MANAGED_BY: C.MANAGED_BY_ENFORCER}},
        "podSelector": {"matchLabels": {C.LABEL_MANAGED_BY: C.MANAGED_BY_ENFORCER}},
    }]
    assert serve["ports"] == [{"port": C.HOME_API_RELAY_SERVE_PORT, "protocol": "TCP"}]
    assert "from" not in health and health["ports"] == [{"port": 8080, "protocol": "TCP"}]
    args = relay["spec"]["template"]["spec"]["containers"][0]["args"]
    assert {"--max-connections=1024", "--max-connections-per-source=64", "--max-uplinks=256"} <= set(args)


# --- rendered objects: wiring across templates ---------------------------------------


def one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    [doc] = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def parse_component_args(args: list[str]) -> argparse.Namespace:
    """Parse a container's args with the real ``kube-offload`` parser of its component."""
    module = importlib.import_module(f"{args[0]}.cli")
    root = argparse.ArgumentParser(exit_on_error=False)
    module.register(root.add_subparsers(dest="command"))
    return root.parse_args(args)


def our_containers(docs: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [
        (doc, c)
        for doc in docs
        if doc["kind"] in ("Deployment", "Job", "CronJob")
        for c in containers(doc)
        if c["image"] == IMAGE
    ]


@pytest.fixture(scope="module")
def rendered_local(local_docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return local_docs


def test_rendered_local_objects(helm: Helm, rendered_local: list[dict[str, Any]]) -> None:
    names = [(d["kind"], d["metadata"]["name"]) for d in rendered_local]
    assert len(names) == len(set(names)), "duplicate objects"
    assert ("Deployment", "kube-offload-webhook") in names
    assert ("Deployment", "kube-offload-extender") in names
    assert ("Deployment", "kube-offload-scheduler") in names
    assert [n for k, n in names if k == "Deployment" and "vkubelet" in n] == [
        "kube-offload-vkubelet-remote-1", "kube-offload-vkubelet-remote-2"]
    for doc in rendered_local:
        assert doc["metadata"]["labels"]["app.kubernetes.io/part-of"] == "kube-offload", doc["metadata"]["name"]
    without_remotes = render(helm, LOCAL)
    assert not [d for d in without_remotes if "vkubelet" in d["metadata"]["name"]]


def test_rendered_args_parse_with_the_component_clis(
    helm: Helm, rendered_local: list[dict[str, Any]]
) -> None:
    remote = render(helm, REMOTE, ONE_CONSUMER)
    pairs = our_containers(rendered_local) + our_containers(remote)
    assert {c["args"][0] for _, c in pairs} == {"webhook", "extender", "vkubelet", "certs", "enforcer", "relay"}
    for doc, container in pairs:
        env = {e["name"] for e in container.get("env", [])}
        for arg in container["args"]:
            # $(VAR) is expanded by the kubelet from the container's env: it must be there.
            for var in re.findall(r"\$\((\w+)\)", arg):
                assert var in env, f"{doc['metadata']['name']}: $({var}) is not in env"
        try:
            parse_component_args(container["args"])
        except (argparse.ArgumentError, SystemExit) as exc:
            pytest.fail(f"{doc['kind']}/{doc['metadata']['name']}: kube-offload {' '.join(container['args'])}: {exc}")


def test_rendered_vkubelets(rendered_local: list[dict[str, Any]]) -> None:
    first = one(rendered_local, "Deployment", "kube-offload-vkubelet-remote-1")
    second = one(rendered_local, "Deployment", "kube-offload-vkubelet-remote-2")
    args = parse_component_args(first["spec"]["template"]["spec"]["containers"][0]["args"])
    assert (args.cluster_id, args.local_cluster_id, args.sharing_percentage) == ("remote-1", "local", C.DEFAULT_SHARING_PERCENTAGE)
    assert sorted(args.node_label) == ["example.com/provider=acme", "topology.kubernetes.io/region=eu-west"]
    assert args.node_address == "$(POD_IP)"
    assert args.offload_daemonset_pods is False, "DaemonSet pods stay home unless vkubelet.offloadDaemonSetPods"
    assert args.handback_after == 180.0, "vkubelet.handbackAfter: 3m"
    pod = first["spec"]["template"]["spec"]
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if args.remote_kubeconfig.startswith(m["mountPath"] + "/"))
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume["secret"]["secretName"] == "remote-1-kubeconfig"
    assert volume["secret"]["items"] == [{"key": "kubeconfig", "path": Path(args.remote_kubeconfig).name}]
    second_pod = second["spec"]["template"]["spec"]
    second_args = parse_component_args(second_pod["containers"][0]["args"])
    assert second_args.sharing_percentage == 50 and second_args.log_json is True
    assert second_pod["volumes"][0]["secret"]["items"][0]["key"] == "config"
    # Pod IP remapping only where the entry asks for it (remote-1).
    assert (args.remote_pod_cidr, args.remote_pod_cidr_remapped, args.local_pod_cidr, args.local_pod_cidr_remapped) == (
        "10.0.0.0/16", "10.100.0.0/16", "10.0.0.0/16", "10.200.0.0/16")
    assert not (second_args.remote_pod_cidr or second_args.local_pod_cidr or second_args.local_pod_cidr_remapped)
    # The two Deployments select only their own pods.
    assert first["spec"]["selector"] != second["spec"]["selector"]
    for deployment in (first, second):
        selector = deployment["spec"]["selector"]["matchLabels"]
        assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"remoteClusters": [{"id": "r", "kubeconfigSecret": "s"}]}, "localClusterId is required"),
        ({"localClusterId": "l", "remoteClusters": [{"id": "r"}]}, "needs kubeconfigSecret"),
        ({"localClusterId": "l", "remoteClusters": [{"id": "r", "kubeconfigSecret": "s", "localPodCIDRRemapped": "10.200.0.0/16"}]},
         r"vkubelet.podCIDR \(this cluster's pod CIDR\) is required"),
    ],
)
def test_rendering_refuses_incomplete_remote_clusters(helm: Helm, values: dict[str, Any], message: str) -> None:
    with pytest.raises(RenderError, match=message):
        render(helm, LOCAL, values)


def test_rendered_webhook_configurations_equal_the_python_builders(rendered_local: list[dict[str, Any]]) -> None:
    from webhook import registration

    target = registration.WebhookTarget(ca_bundle="", service=registration.ServiceRef(NAMESPACE, "kube-offload-webhook", 443))
    for kind, built in (
        ("MutatingWebhookConfiguration", registration.mutating_configuration(target)),
        ("ValidatingWebhookConfiguration", registration.validating_configuration(target)),
    ):
        doc = one(rendered_local, kind, registration.CONFIGURATION_NAME)
        for webhook in built["webhooks"]:
            del webhook["clientConfig"]["caBundle"]  # patched in after the install
        assert doc["webhooks"] == built["webhooks"], kind


def test_rendered_scheduler_configuration_equals_the_python_builder(
    helm: Helm, rendered_local: list[dict[str, Any]]
) -> None:
    from extender import registration

    for values, url, ca_file in (
        ({}, f"https://kube-offload-extender.{NAMESPACE}.svc:8080", "/etc/kube-offload/scheduler-tls/ca.crt"),
        ({"extender": {"tls": False}}, f"http://kube-offload-extender.{NAMESPACE}.svc:8080", ""),
    ):
        docs = render(helm, LOCAL, values) if values else rendered_local
        config = yaml.safe_load(one(docs, "ConfigMap", "kube-offload-scheduler-config")["data"]["config.yaml"])
        built = registration.scheduler_configuration(
            registration.ExtenderRegistration(url=url, ca_file=ca_file, scheduler_name="kube-offload-scheduler")
        )
        assert config["profiles"] == built["profiles"]
        assert config["extenders"] == built["extenders"]
        assert config["leaderElection"] == {
            "leaderElect": False, "resourceNamespace": NAMESPACE, "resourceName": "kube-offload-scheduler"}


def _mount_of(pod: dict[str, Any], container: dict[str, Any], path: str) -> dict[str, Any]:
    """The volume that serves ``path`` in ``container``."""
    mount = next(m for m in container["volumeMounts"] if path.startswith(m["mountPath"].rstrip("/") + "/"))
    return next(v for v in pod["volumes"] if v["name"] == mount["name"])


def test_rendered_certificate_wiring_is_consistent(rendered_local: list[dict[str, Any]]) -> None:
    """Names written in five places agree: the Secret the Job writes is the one the pods
    mount, its SANs cover the Services clients call, and the post-install Job patches the
    webhook configurations that exist, with RBAC for exactly those names."""
    secret_job = one(rendered_local, "Job", "kube-offload-certs")
    certs = parse_component_args(secret_job["spec"]["template"]["spec"]["containers"][0]["args"])
    assert certs.certs_command == "secret" and certs.namespace == NAMESPACE
    services = set(cli_listed(certs, "--service"))
    assert services == {"kube-offload-webhook", "kube-offload-extender"}
    for name in services:
        one(rendered_local, "Service", name)

    for deployment in ("kube-offload-webhook", "kube-offload-extender"):
        pod = one(rendered_local, "Deployment", deployment)["spec"]["template"]["spec"]
        container = pod["containers"][0]
        args = parse_component_args(container["args"])
        for path in (args.tls_cert, args.tls_key):
            assert _mount_of(pod, container, path)["secret"]["secretName"] == certs.name
        port_names = {p["name"] for p in container["ports"]}
        service = one(rendered_local, "Service", deployment)
        assert service["spec"]["ports"][0]["targetPort"] in port_names
        assert service["spec"]["selector"].items() <= pod_labels(rendered_local, deployment).items()

    scheduler_pod = one(rendered_local, "Deployment", "kube-offload-scheduler")["spec"]["template"]["spec"]
    config = yaml.safe_load(one(rendered_local, "ConfigMap", "kube-offload-scheduler-config")["data"]["config.yaml"])
    ca_file = config["extenders"][0]["tlsConfig"]["caFile"]
    assert _mount_of(scheduler_pod, scheduler_pod["containers"][0], ca_file)["secret"]["secretName"] == certs.name
    assert config["extenders"][0]["urlPrefix"].split("//")[1].split(":")[0] in [
        f"{s}.{NAMESPACE}.svc" for s in services]

    patch_job = one(rendered_local, "Job", "kube-offload-ca-bundle")
    patch_pod = patch_job["spec"]["template"]["spec"]
    patch = parse_component_args(patch_pod["containers"][0]["args"])
    assert _mount_of(patch_pod, patch_pod["containers"][0], patch.ca_file)["secret"]["secretName"] == certs.name
    for name in cli_listed(patch, "--mutating"):
        one(rendered_local, "MutatingWebhookConfiguration", name)
    for name in cli_listed(patch, "--validating"):
        one(rendered_local, "ValidatingWebhookConfiguration", name)
    hook_role = one(rendered_local, "ClusterRole", "kube-offload-certs-hook")
    assert set(hook_role["rules"][0]["resourceNames"]) == set(cli_listed(patch, "--mutating") + cli_listed(patch, "--validating"))
    secret_role = one(rendered_local, "Role", "kube-offload-certs-hook")
    assert set(secret_role["rules"][1]["resourceNames"]) == {certs.name, certs.ca_name}
    for job in ("kube-offload-certs", "kube-offload-ca-bundle"):
        assert one(rendered_local, "Job", job)["spec"]["template"]["spec"]["serviceAccountName"] == "kube-offload-certs-hook"

    webhook_args = parse_component_args(
        one(rendered_local, "Deployment", "kube-offload-webhook")["spec"]["template"]["spec"]["containers"][0]["args"])
    assert webhook_args.scheduler_name == one(rendered_local, "ServiceAccount", "kube-offload-scheduler")["metadata"]["name"]


def cli_listed(args: argparse.Namespace, flag: str) -> list[str]:
    from kube_offload.runtime.flags import appended

    return appended(args, flag)


def pod_labels(docs: list[dict[str, Any]], deployment: str) -> dict[str, str]:
    return one(docs, "Deployment", deployment)["spec"]["template"]["metadata"]["labels"]


def test_rendered_without_the_second_scheduler(helm: Helm) -> None:
    docs = render(helm, LOCAL, {"scheduler": {"enabled": False}})
    assert not [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "kube-offload-scheduler"]
    one(docs, "ConfigMap", "kube-offload-scheduler-config")  # still there, to copy from
    args = parse_component_args(one(docs, "Deployment", "kube-offload-webhook")["spec"]["template"]["spec"]["containers"][0]["args"])
    assert args.scheduler_name is None


def test_rendered_scheduler_restarts_when_its_configuration_changes(
    helm: Helm, rendered_local: list[dict[str, Any]]
) -> None:
    def checksum(docs: list[dict[str, Any]]) -> str:
        return one(docs, "Deployment", "kube-offload-scheduler")["spec"]["template"]["metadata"]["annotations"]["checksum/config"]

    assert checksum(rendered_local) == checksum(render(helm, LOCAL, TWO_REMOTES))
    assert checksum(rendered_local) != checksum(render(helm, LOCAL, dict(TWO_REMOTES, extender={"weight": 3})))


def test_rendered_remote_chart(helm: Helm) -> None:
    docs = render(helm, REMOTE, {"consumers": [{"name": "local-a"}, {"name": "local-b"}]})
    assert not [d for d in docs if d["kind"] == "CustomResourceDefinition"]  # crds/ is not templated

    def in_namespace(kind: str, name: str, namespace: str) -> dict[str, Any]:
        [doc] = [d for d in docs if (d["kind"], d["metadata"]["name"], d["metadata"].get("namespace")) == (kind, name, namespace)]
        return doc

    # Kinds and names only (the consumer's grants belong to docs/security.md's tests).
    for consumer in ("local-a", "local-b"):
        tenant = C.tenant_namespace(consumer)
        one(docs, "Namespace", tenant)
        one(docs, C.CONSUMER_KIND, consumer)
        in_namespace("ServiceAccount", C.CONSUMER_SERVICE_ACCOUNT, tenant)
        # No long-lived token anywhere: the consumer holds bound tokens only (docs/security.md).
        assert not [d for d in docs if d["kind"] == "Secret" and d["metadata"].get("namespace") == tenant]
    enforcer = one(docs, "Deployment", "kube-offload-enforcer")
    assert enforcer["spec"]["template"]["spec"]["serviceAccountName"] == "kube-offload-enforcer"
    assert one(docs, "ClusterRoleBinding", "kube-offload-enforcer")["roleRef"]["name"] == "kube-offload-enforcer"
    with pytest.raises(RenderError, match="needs a name"):
        render(helm, REMOTE, {"consumers": [{}]})
    with pytest.raises(RenderError, match=r"consumers\[local\]\.createTokenSecret: the chart makes no long-lived token Secret"):
        render(helm, REMOTE, {"consumers": [{"name": "local", "createTokenSecret": True}]})
    render(helm, REMOTE, {"consumers": [{"name": "local", "createTokenSecret": False}]})  # the harness's old value
    # Two consumers whose DefaultName twins could take each other's names: one provider admits one.
    with pytest.raises(RenderError, match=r'consumers\[eu-prod\] and consumers\[prod\]: the id "eu-prod" ends in "-prod"'):
        render(helm, REMOTE, {"consumers": [{"name": "prod"}, {"name": "eu-prod"}]})
    render(helm, REMOTE, {"consumers": [{"name": "prod"}, {"name": "euprod"}]})
    # No consumer without a quota: no default fits every provider.
    with pytest.raises(RenderError, match=r"consumers\[local\]\.quota is required"):
        render(helm, REMOTE, {"consumers": [{"name": "local"}]}, quotas=False)


def _chart_policy_keys() -> dict[str, list[str]]:
    """The $policyKeys table of the remote chart's consumer template, read from its source."""
    source = (REMOTE / "templates" / "consumer.yaml").read_text()
    table = re.search(r"\$policyKeys := dict(.*?)\}\}", source, re.DOTALL)
    assert table, "consumer.yaml has no $policyKeys table"
    return {section: re.findall(r'"([^"]+)"', fields)
            for section, fields in re.findall(r'"(\w+)" \(list ([^)]*)\)', table.group(1))}


def test_the_charts_policy_keys_are_the_provider_policy_modules() -> None:
    from kube_offload import provider_policy

    assert _chart_policy_keys() == {section: list(fields) for section, (_attr, fields) in provider_policy.SCHEMA.items()}
    assert f'eq $section "{provider_policy.QUOTA_MODE_KEY}"' in (REMOTE / "templates" / "consumer.yaml").read_text()
    assert f'eq $section "{provider_policy.CUSTOM_RESOURCES_KEY}"' in (REMOTE / "templates" / "consumer.yaml").read_text()


def test_rendered_consumer_policy(helm: Helm) -> None:
    from kube_offload import provider_policy

    # Without a policy the Consumer has none: the CRD's defaults (the safe ones) apply.
    assert "policy" not in one(render(helm, REMOTE, ONE_CONSUMER), C.CONSUMER_KIND, "local")["spec"]
    # A policy is the Consumer's spec.policy as given, and parses as the enforcer reads it.
    policy = VALUE_SETS[REMOTE.name]["with-policy"]["consumers"][0]["policy"]
    consumer = one(render(helm, REMOTE, VALUE_SETS[REMOTE.name]["with-policy"]), C.CONSUMER_KIND, "local")
    assert consumer["spec"]["policy"] == policy
    parsed = provider_policy.parse_policy(consumer["spec"]["policy"])
    assert parsed.pods.priority_classes == ("batch-low",) and parsed.quota_mode == "both"
    # Every key of a fully written policy passes the chart's key check.
    full = provider_policy.policy_to_spec(provider_policy.DEFAULT_POLICY)
    assert one(render(helm, REMOTE, {"consumers": [{"name": "local", "policy": full}]}), C.CONSUMER_KIND, "local")["spec"]["policy"] == full


def test_rendered_consumer_pools(helm: Helm) -> None:
    from kube_offload.pools import parse_pools

    # No pools: no spec.pools (the consumer can ask no slice).
    assert "pools" not in one(render(helm, REMOTE, ONE_CONSUMER), C.CONSUMER_KIND, "local")["spec"]
    pools = [{"name": "gpu", "nodeSelector": {"pool": "gpu"}, "runtimeClassName": "nvidia",
              "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
              "nodeLabels": {"accelerator": "a100"}},
             {"name": "general", "nodeSelector": {"pool": "general"}}]
    consumer = one(render(helm, REMOTE, {"consumers": [{"name": "local", "pools": pools}]}), C.CONSUMER_KIND, "local")
    assert consumer["spec"]["pools"] == pools
    assert list(parse_pools(consumer["spec"])) == ["gpu", "general"]


@pytest.mark.parametrize(
    "policy, message",
    [
        ({"pods": {"priorityClass": ["high"]}}, r"consumers\[local\]\.policy\.pods\.priorityClass: unknown key; known: priorityClasses"),
        ({"pod": {"priorityClasses": ["high"]}}, r"consumers\[local\]\.policy\.pod: unknown key"),
        ({"pods": ["high"]}, r"consumers\[local\]\.policy\.pods: must be a map"),
    ],
)
def test_rendering_refuses_a_misspelt_policy_key(helm: Helm, policy: dict[str, Any], message: str) -> None:
    # The API server would prune it silently, leaving the default where a grant was meant.
    with pytest.raises(RenderError, match=message):
        render(helm, REMOTE, {"consumers": [{"name": "local", "policy": policy}]})


def test_rendered_webhook_runs_several_workers_sharing_a_writable_directory(
    helm: Helm, rendered_local: list[dict[str, Any]]
) -> None:
    """Several workers by default (the CLI's default too), and the directory where they
    share metrics and readiness is a writable emptyDir under the read-only root."""
    from kube_offload.runtime.workers import ENV_DIRECTORY
    from webhook.settings import DEFAULT_WORKERS

    pod = one(rendered_local, "Deployment", "kube-offload-webhook")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert parse_component_args(container["args"]).workers == DEFAULT_WORKERS >= 2
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    [directory] = [e["value"] for e in container["env"] if e["name"] == ENV_DIRECTORY]
    assert "emptyDir" in _mount_of(pod, container, directory + "/ready-1")
    docs = render(helm, LOCAL, {"webhook": {"workers": 4}})
    container = one(docs, "Deployment", "kube-offload-webhook")["spec"]["template"]["spec"]["containers"][0]
    assert parse_component_args(container["args"]).workers == 4


def test_rendered_webhook_passes_the_body_cap_and_the_parse_budget(
    helm: Helm, rendered_local: list[dict[str, Any]]
) -> None:
    """The hard cap and the per-worker parse memory budget reach the CLI (defaults equal
    the CLI's; tests/unit/kube_offload/runtime/test_body_limit.py holds them to the memory limit)."""
    from kube_offload.runtime.body_limit import MALLOC_ARENAS
    from webhook.settings import DEFAULT_MAX_BODY_BYTES, DEFAULT_PARSE_MEMORY_BUDGET

    container = one(rendered_local, "Deployment", "kube-offload-webhook")["spec"]["template"]["spec"]["containers"][0]
    args = parse_component_args(container["args"])
    assert (args.max_body_bytes, args.parse_memory_budget) == (DEFAULT_MAX_BODY_BYTES, DEFAULT_PARSE_MEMORY_BUDGET)
    # The budget bounds RSS only with few malloc arenas (kube_offload/runtime/body_limit.py).
    assert {"name": "MALLOC_ARENA_MAX", "value": str(MALLOC_ARENAS)} in container["env"]
    docs = render(helm, LOCAL, {"webhook": {"maxBodyBytes": "1Mi", "parseMemoryBudget": "64Mi"}})
    container = one(docs, "Deployment", "kube-offload-webhook")["spec"]["template"]["spec"]["containers"][0]
    args = parse_component_args(container["args"])
    assert (args.max_body_bytes, args.parse_memory_budget) == (1024 * 1024, 64 * 1024 * 1024)



def test_rendered_extender_passes_the_body_cap_and_the_parse_budget(
    helm: Helm, rendered_local: list[dict[str, Any]]
) -> None:
    """As the webhook: the extender's hard cap and parse memory budget reach the CLI
    (defaults equal the CLI's; tests/unit/kube_offload/runtime/test_body_limit.py holds them to the memory
    limit), with few malloc arenas."""
    from extender.settings import DEFAULT_MAX_BODY_BYTES, DEFAULT_PARSE_MEMORY_BUDGET
    from kube_offload.runtime.body_limit import MALLOC_ARENAS

    container = one(rendered_local, "Deployment", "kube-offload-extender")["spec"]["template"]["spec"]["containers"][0]
    args = parse_component_args(container["args"])
    assert (args.max_body_bytes, args.parse_memory_budget) == (DEFAULT_MAX_BODY_BYTES, DEFAULT_PARSE_MEMORY_BUDGET)
    assert {"name": "MALLOC_ARENA_MAX", "value": str(MALLOC_ARENAS)} in container["env"]
    docs = render(helm, LOCAL, {"extender": {"maxBodyBytes": "1Mi", "parseMemoryBudget": "64Mi"}})
    container = one(docs, "Deployment", "kube-offload-extender")["spec"]["template"]["spec"]["containers"][0]
    args = parse_component_args(container["args"])
    assert (args.max_body_bytes, args.parse_memory_budget) == (1024 * 1024, 64 * 1024 * 1024)


# --- health port, probes, dashboard (docs/observability.md) ---------------------------------


def _health_port_and_probes(container: dict[str, Any]) -> None:
    """The probes hit /healthz and /readyz over HTTP on the port named ``health``, which is
    the one ``--health-bind`` binds, on every address (a probe comes from the node)."""
    bind = parse_component_args(container["args"]).health_bind
    host, port = bind.rsplit(":", 1)
    [named] = [p for p in container["ports"] if p["name"] == "health"]
    assert (host, int(port)) == ("0.0.0.0", named["containerPort"])
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        get = container[probe]["httpGet"]
        assert (get["path"], get["port"], get.get("scheme", "HTTP")) == (path, "health", "HTTP"), probe
    assert container["livenessProbe"]["periodSeconds"] * container["livenessProbe"].get("failureThreshold", 3) >= 60


def test_vkubelet_and_enforcer_probe_their_health_port(helm: Helm, rendered_local: list[dict[str, Any]]) -> None:
    from kube_offload.runtime.health import HEALTHZ, READYZ

    assert (HEALTHZ, READYZ) == ("/healthz", "/readyz")
    vkubelets = [d for d in find(rendered_local, "Deployment", "vkubelet")]
    assert len(vkubelets) == 2
    for deployment in vkubelets:
        _health_port_and_probes(next(containers(deployment)))
    assert load_values(LOCAL)["vkubelet"]["healthPort"] != load_values(LOCAL)["vkubelet"]["kubeletPort"]
    [enforcer] = find(render(helm, REMOTE, ONE_CONSUMER), "Deployment", "enforcer")
    container = next(containers(enforcer))
    _health_port_and_probes(container)
    assert load_values(REMOTE)["enforcer"]["healthPort"] != load_values(REMOTE)["enforcer"]["webhook"]["port"]
    port = 4321
    [enforcer] = find(render(helm, REMOTE, {"enforcer": {"healthPort": port}}), "Deployment", "enforcer")
    assert parse_component_args(next(containers(enforcer))["args"]).health_bind == f"0.0.0.0:{port}"


def test_dashboard_configmap_ships_the_dashboard_for_the_grafana_sidecar(helm: Helm) -> None:
    assert not [d for d in render(helm, LOCAL) if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-dashboard")]
    docs = render(helm, LOCAL, {"dashboards": {"enabled": True, "namespace": "monitoring"}})
    [config_map] = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "kube-offload-dashboard"]
    assert config_map["metadata"]["namespace"] == "monitoring"
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads(config_map["data"]["kube-offload.json"])
    assert shipped == json.loads((LOCAL / "dashboards" / "kube-offload.json").read_text())



def test_stateless_local_components_run_two_replicas(local_docs: list[dict[str, Any]]) -> None:
    # Each replica answers from its own caches (docs/high-availability.md).
    for component in ("webhook", "extender"):
        [deployment] = find(local_docs, "Deployment", component)
        assert deployment["spec"]["replicas"] == 2, component


# --- the charts' pods on a cluster's chosen nodes (the real-node tier's values) -------------


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    spec = doc["spec"]
    if doc["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    return spec["template"]["spec"]


def test_every_pod_of_both_charts_is_placed_by_its_values(helm: Helm) -> None:
    """A cluster whose schedulable nodes are tainted (or where only some nodes can pull the
    image) must be able to place every pod of the charts, the certificate hook Jobs and
    the renewal CronJob included: with them unplaced, the install waits for a Secret that
    no pod on a usable node ever makes. The values are the real-node tier's."""
    from kube_offload_harness import chart_pods

    placement = chart_pods.real_node_placement()
    local = render(helm, LOCAL, {**chart_pods.local_values("local"),
                                 "remoteClusters": [{"id": "remote-1", "kubeconfigSecret": "remote-1-kubeconfig"}]})
    remote = render(helm, REMOTE, {**chart_pods.remote_values(), **ONE_CONSUMER})
    pods = [d for d in local + remote if d["kind"] in ("Deployment", "Job", "CronJob", "DaemonSet", "StatefulSet")]
    kinds = {(d["kind"], d["metadata"]["labels"]["app.kubernetes.io/component"]) for d in pods}
    assert {("Job", "certificates"), ("CronJob", "certificates"), ("Deployment", "webhook"), ("Deployment", "extender"),
            ("Deployment", "scheduler"), ("Deployment", "vkubelet"), ("Deployment", "enforcer")} <= kinds
    for doc in pods:
        spec = pod_spec(doc)
        where = f"{doc['kind']} {doc['metadata']['name']}"
        assert spec.get("nodeSelector") == placement["nodeSelector"], where
        assert spec.get("tolerations") == placement["tolerations"], where
    for doc in pods:
        if doc["kind"] == "Deployment":
            assert doc["spec"]["replicas"] == 1, doc["metadata"]["name"]
    # unset, nothing is rendered: the scheduler's defaults stand
    for doc in render(helm, LOCAL, {}) + render(helm, REMOTE, ONE_CONSUMER):
        if doc["kind"] in ("Deployment", "Job", "CronJob"):
            assert not {"nodeSelector", "tolerations", "affinity"} & set(pod_spec(doc)), doc["metadata"]["name"]


def test_vkubelet_mounts_extra_volumes_and_trusts_a_mounted_kubelet_client_ca(helm: Helm) -> None:
    """Where the cluster CA does not sign the apiserver's kubelet client certificate, the
    vkubelet trusts a CA mounted from a ConfigMap (kubectl logs/exec are refused otherwise)."""
    from kube_offload_harness import chart_pods

    values = {**chart_pods.local_values("local"),
              "remoteClusters": [{"id": "remote-1", "kubeconfigSecret": "remote-1-kubeconfig"}]}
    [deployment] = find(render(helm, LOCAL, values), "Deployment", "vkubelet")
    spec = pod_spec(deployment)
    [container] = spec["containers"]
    assert {"name": "kubelet-client-ca", "configMap": {"name": chart_pods.KUBELET_CLIENT_CA_CONFIGMAP}} in spec["volumes"]
    [mount] = [m for m in container["volumeMounts"] if m["name"] == "kubelet-client-ca"]
    args = parse_component_args(container["args"])
    assert args.kubelet_client_ca == f"{mount['mountPath']}/{chart_pods.KUBELET_CLIENT_CA_KEY}"
    # the chart's own mounts stay
    assert {m["name"] for m in container["volumeMounts"]} == {"remote-kubeconfig", "tmp", "kubelet-client-ca"}


def test_the_scheduler_image_the_real_node_tier_makes_is_the_one_the_chart_runs(helm: Helm) -> None:
    """The harness writes registry.k8s.io/kube-scheduler from the cached binary: the name
    and the binary's path must be the chart's, or the scheduler pod never starts."""
    from kube_offload_harness import chart_pods

    image = load_values(LOCAL)["scheduler"]["image"]
    assert chart_pods.KUBE_SCHEDULER_IMAGE == f"{image['repository']}:{image['tag']}"
    [deployment] = find(render(helm, LOCAL), "Deployment", "scheduler")
    [container] = pod_spec(deployment)["containers"]
    assert container["command"][0] == f"/{chart_pods.KUBE_SCHEDULER_PATH}"
    [binary] = [e for e in chart_pods.kube_scheduler_image_entries(b"\x7fELF") if e.path == chart_pods.KUBE_SCHEDULER_PATH]
    assert binary.mode & 0o005 == 0o005  # the chart's non-root user runs it


def test_peer_gateway_gives_the_vkubelet_pod_the_gateways_translation(helm: Helm) -> None:
    """``peer --gateway`` sets the vkubelet Deployment's remapping from the same four CIDRs
    the gateways are given (the vkubelet's flags never come from the user), and runs a
    gateway for the remote."""
    from kube_offload import fabric as fb
    from kube_offload import peering
    from kube_offload_harness import fabric_gateways

    cidrs = fb.FabricCIDRs.parse(local="172.31.4.0/24", local_remapped="172.30.4.0/24", remote="172.31.4.0/24",
                                 remote_remapped="172.30.7.0/24")
    options = peering.PeerOptions(
        local_cluster_id="local", remote_cluster_id="remote-1", remote_server="https://172.31.250.5:6443",
        remote_ca_pem=None, remote_chart=peering.ChartRef("r", "0", "."), local_chart=peering.ChartRef("l", "0", "."),
        gateway=peering.GatewayOptions(cidrs))
    docs = render(helm, LOCAL, peering.local_values_with_remote({}, options))
    [deployment] = find(docs, "Deployment", "vkubelet")
    args = parse_component_args(next(containers(deployment))["args"])
    assert [args.remote_pod_cidr, args.remote_pod_cidr_remapped, args.local_pod_cidr, args.local_pod_cidr_remapped] == \
        fabric_gateways.remapping_args(cidrs)[1::2]
    [gateway] = find(docs, "Deployment", "gateway")
    assert gateway["metadata"]["name"] == peering.local_gateway_name(options)


def test_gateway_runs_with_net_admin_only_and_reads_its_own_objects_only(helm: Helm) -> None:
    """The gateway (docs/security.md, "The gateway"): the node's network, root with NET_ADMIN
    alone, read-only root, one replica replaced by Recreate; its Role names its own key
    Secret and ConfigMap and nothing else; its Service carries WireGuard's UDP port."""
    values = {**TWO_REMOTES, "remoteClusters": [{**e, "gateway": {"enabled": True}} for e in TWO_REMOTES["remoteClusters"]]}
    docs = render(helm, LOCAL, values)
    gateways = find(docs, "Deployment", "gateway")
    assert len(gateways) == 2
    ports = set()
    for deployment in gateways:
        name = deployment["metadata"]["name"]
        spec = deployment["spec"]
        assert spec["replicas"] == 1 and spec["strategy"]["type"] == "Recreate"
        pod = spec["template"]["spec"]
        assert pod["hostNetwork"] is True and pod["serviceAccountName"] == name
        [container] = pod["containers"]
        security = container["securityContext"]
        assert security["capabilities"] == {"drop": ["ALL"], "add": ["NET_ADMIN"]}
        assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
        assert not security.get("privileged")
        args = parse_args(container["args"])
        assert args["--config-map"] == name and args["--key-secret"] == f"{name}-key"
        ports.add(args["--listen-port"])
        [role] = [r for r in find(docs, "Role", "gateway") if r["metadata"]["name"] == name]
        assert rules_of(role) == {("", "secrets"): {"get", "update"}, ("", "configmaps"): {"get", "patch"}}
        assert {n for rule in role["rules"] for n in rule["resourceNames"]} == {name, f"{name}-key"}
        [service] = [s for s in find(docs, "Service", "gateway") if s["metadata"]["name"] == name]
        assert service["spec"]["type"] == "NodePort" and service["spec"]["ports"][0]["protocol"] == "UDP"
    assert len(ports) == 2  # two gateways on one node: two ports
    [daemonset] = find(docs, "DaemonSet", "gateway-routes")
    terms = daemonset["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"][0] == {"key": "kube-offload.io/type", "operator": "NotIn",
                                                                    "values": ["virtual-node"]}
    # no gateway asked for: none rendered, no route agent either
    assert not find(render(helm, LOCAL, TWO_REMOTES), "Deployment", "gateway")
    assert not find(render(helm, LOCAL, TWO_REMOTES), "DaemonSet", "gateway-routes")


def parse_args(args: list[str]) -> dict[str, str]:
    return dict(a.split("=", 1) for a in args if a.startswith("--") and "=" in a)


def test_both_charts_share_one_gateway_template(helm: Helm) -> None:
    local = (LOCAL / "templates" / "_gateway.tpl").read_text().splitlines()[1:]
    remote = (REMOTE / "templates" / "_gateway.tpl").read_text().splitlines()[1:]
    assert local == remote
    docs = render(helm, REMOTE, {"consumers": [{"name": "local", "gateway": {"enabled": True}}]})
    [deployment] = find(docs, "Deployment", "gateway")
    assert deployment["metadata"]["namespace"] != "kube-offload-tenant-local"  # never where the consumer may port-forward
    args = parse_args(next(containers(deployment))["args"])
    assert args["--listen-port"] == "51920"
    # a provider's gateway lets only the consumer's own pods use the link, and may list pods for it
    assert args["--allow-pods-of"] == "local"
    [cluster_role] = find(docs, "ClusterRole", "gateway")
    assert rules_of(cluster_role) == {("", "pods"): {"list"}}
    # the consumer's own gateway has no such filter and no cluster-wide right
    local_docs = render(helm, LOCAL, {"localClusterId": "l", "remoteClusters": [
        {"id": "r", "kubeconfigSecret": "s", "gateway": {"enabled": True}}]})
    assert "--allow-pods-of" not in parse_args(next(containers(find(local_docs, "Deployment", "gateway")[0]))["args"])
    assert not find(local_docs, "ClusterRole", "gateway")


def test_vkubelet_custom_resources_become_flags_and_least_rights(helm: Helm) -> None:
    from vkubelet.reflection.settings import parse_custom_resource

    widgets = {"group": "example.com", "version": "v1", "resource": "widgets", "kind": "Widget",
               "out": ["spec.size", "spec.color"], "back": ["status.phase"]}
    gadgets = {"group": "example.org", "version": "v1beta1", "resource": "gadgets", "kind": "Gadget", "back": []}
    docs = render(helm, LOCAL, {**TWO_REMOTES, "vkubelet": {**TWO_REMOTES["vkubelet"], "customResources": [widgets, gadgets]}})
    for deployment in find(docs, "Deployment", "vkubelet"):
        [container] = deployment["spec"]["template"]["spec"]["containers"]
        flags = [a.split("=", 1)[1] for a in container["args"] if a.startswith("--reflect-custom-resource=")]
        parsed = [parse_custom_resource(flag) for flag in flags]
        assert [(p.key, p.out, p.back) for p in parsed] == [
            ("widgets.example.com", ("spec.size", "spec.color"), ("status.phase",)),
            ("gadgets.example.org", ("spec",), ()),
        ]
    [role] = [d for d in find(docs, "ClusterRole", "vkubelet") if d["metadata"]["name"].endswith("-vkubelet-custom-resources")]
    assert rules_of(role) == {
        ("example.com", "widgets"): {"get", "list", "watch"}, ("example.com", "widgets/status"): {"patch"},
        ("example.org", "gadgets"): {"get", "list", "watch"}, ("example.org", "gadgets/status"): {"patch"},
    }
    [binding] = [d for d in find(docs, "ClusterRoleBinding", "vkubelet") if d["metadata"]["name"] == role["metadata"]["name"]]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": f"{RELEASE}-vkubelet", "namespace": NAMESPACE}]
    # No kind opted in: no such role.
    assert not [d for d in find(render(helm, LOCAL, TWO_REMOTES), "ClusterRole", "vkubelet")
                if d["metadata"]["name"].endswith("-custom-resources")]
    with pytest.raises(Exception, match="needs group, version, resource and kind"):
        render(helm, LOCAL, {**TWO_REMOTES, "vkubelet": {**TWO_REMOTES["vkubelet"], "customResources": [{"group": "example.com", "resource": "widgets"}]}})


def test_enforcer_holds_only_the_custom_resources_its_values_list(helm: Helm) -> None:
    # RBAC lets the enforcer write a Role only with rights it holds (no "escalate"): the
    # kinds the provider's admin lists are the only ones a Consumer's grant can bind.
    docs = render(helm, REMOTE, {"enforcer": {"customResources": [{"group": "example.com", "resources": ["widgets", "gadgets"]}]}})
    [enforcer] = find(docs, "ClusterRole", "enforcer")
    verbs = {"get", "list", "watch", "create", "update", "patch", "delete"}
    assert {key: v for key, v in rules_of(enforcer).items() if key[0] == "example.com"} == {
        ("example.com", "widgets"): verbs, ("example.com", "gadgets"): verbs}
    assert not any("escalate" in rule["verbs"] for rule in enforcer["rules"])
    from enforcer.consumers.twin_grants import VERBS
    assert set(VERBS) == verbs
    with pytest.raises(Exception, match="needs group and resources"):
        render(helm, REMOTE, {"enforcer": {"customResources": [{"group": "example.com"}]}})
