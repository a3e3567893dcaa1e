"""The JSON/YAML shape of ``kubectl offload`` output: camelCase keys, as Kubernetes writes."""

from __future__ import annotations

from typing import TypeVar, cast

T = TypeVar("T")


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def camel_keys(value: T) -> T:
    """``value`` with every snake_case key camelCased; other keys (resource names, phases,
    kinds) have no underscore and stay as they are (the shape, hence the type, is kept)."""
    if isinstance(value, dict):
        return cast(T, {camel(k) if isinstance(k, str) and "_" in k else k: camel_keys(v) for k, v in value.items()})
    if isinstance(value, list):
        return cast(T, [camel_keys(item) for item in value])
    return value
