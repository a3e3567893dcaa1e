"""The JSON/YAML shape of ``kubectl offload`` output: camelCase keys, as Kubernetes writes."""

from __future__ import annotations

from typing import Any


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def camel_keys(value: Any) -> Any:
    """``value`` with every snake_case key camelCased; other keys (resource names, phases,
    kinds) have no underscore and stay as they are."""
    if isinstance(value, dict):
        return {camel(k) if isinstance(k, str) and "_" in k else k: camel_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [camel_keys(item) for item in value]
    return value
