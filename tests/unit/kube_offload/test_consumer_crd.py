"""The Consumer CRD's spec.policy schema follows kube_offload/provider_policy.py: the
same sections and keys, the same kinds, the same defaults (so `kubectl get consumer -o
yaml` shows what the enforcer applies), and a fully defaulted policy parses back to
DEFAULT_POLICY."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kube_offload import provider_policy as pp

CRD = Path(__file__).resolve().parents[3] / "kube_offload" / "manifests" / "consumer-crd.yaml"
KIND_TO_SCHEMA = {"list": "array", "bool": "boolean", "string": "string", "int": "integer", "counts": "object"}


def policy_schema() -> dict:
    crd = yaml.safe_load(CRD.read_text())
    [version] = crd["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["policy"]


def defaulted(schema: dict) -> object:
    """What the API server's structural defaulting makes of an absent field: the
    field's default, with the defaults of its own properties filled in."""
    if "default" not in schema:
        return None
    value = schema["default"]
    if isinstance(value, dict):
        value = dict(value)
        for name, sub in (schema.get("properties") or {}).items():
            if name not in value and "default" in sub:
                value[name] = defaulted(sub)
    return value


def test_the_sections_and_keys_are_the_modules():
    schema = policy_schema()
    assert set(schema["properties"]) == {*pp.SCHEMA, pp.QUOTA_MODE_KEY, pp.CUSTOM_RESOURCES_KEY}
    for section, (_attr, fields) in pp.SCHEMA.items():
        properties = schema["properties"][section]["properties"]
        assert set(properties) == set(fields), section
        for name, (_field, kind) in fields.items():
            prop = properties[name]
            assert prop["type"] == KIND_TO_SCHEMA[kind], f"{section}.{name}"
            if kind == "list":
                assert prop["items"]["type"] == "string", f"{section}.{name}"
            if kind == "counts":
                assert set(prop["properties"]) == set(pp.OBJECT_COUNT_KINDS), f"{section}.{name}"


def test_the_custom_resource_entries_are_the_modules():
    items = policy_schema()["properties"][pp.CUSTOM_RESOURCES_KEY]["items"]
    assert tuple(items["properties"]) == pp.CUSTOM_RESOURCE_KEYS
    assert items["required"] == ["group", "resource"]


def test_the_defaults_are_the_modules():
    assert defaulted(policy_schema()) == pp.policy_to_spec(pp.DEFAULT_POLICY)
    assert pp.parse_policy(defaulted(policy_schema())) == pp.DEFAULT_POLICY  # type: ignore[arg-type]


def test_every_section_defaults_so_a_partial_policy_shows_all_keys():
    # A provider that writes one key still gets every other key's default shown.
    schema = policy_schema()
    assert schema["default"] == {}
    for section in pp.SCHEMA:
        assert schema["properties"][section]["default"] == {}, section


@pytest.mark.parametrize(
    "path, allowed",
    [
        (("services", "types"), pp.GRANTABLE_SERVICE_TYPES),
        ((pp.QUOTA_MODE_KEY,), pp.QUOTA_MODES),
    ],
)
def test_enums_are_the_modules(path, allowed):
    prop = policy_schema()
    for part in path:
        prop = prop["properties"][part]
    enum = prop["items"]["enum"] if prop["type"] == "array" else prop["enum"]
    assert tuple(enum) == tuple(allowed)


def test_the_drain_schema_is_what_read_drain_reads():
    from kube_offload import consumers as co

    crd = yaml.safe_load(CRD.read_text())
    [version] = crd["spec"]["versions"]
    drain = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["drain"]
    assert sorted(drain["required"]) == sorted([co.DRAIN_STARTED, co.DRAIN_GRACE])
    assert drain["properties"][co.DRAIN_STARTED] == {**drain["properties"][co.DRAIN_STARTED], "type": "string", "format": "date-time"}
    grace = drain["properties"][co.DRAIN_GRACE]
    assert (grace["type"], grace["minimum"], grace["maximum"]) == ("integer", 0, co.DRAIN_MAX_GRACE_SECONDS)
    # Not defaulted: its absence means "not drained".
    assert "default" not in drain
