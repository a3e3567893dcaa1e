"""The offloading policy of a namespace, read from its labels and annotation.

Users write the policy with ``kubectl label/annotate namespace``; the webhook validates it
(so a typo is refused with a message naming the key and the accepted values), mutates pods
from it, and the scheduler extender filters nodes with it. Namespaces are plain dicts in
the API's JSON shape (camelCase), as everywhere in kube-offload.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kube_offload import constants as c
from kube_offload.selector import LabelSelector, SelectorError, parse_selector

SELECTOR_FORMS: tuple[str, ...] = (
    "key=value",
    "key!=value",
    "key in (v1,v2)",
    "key notin (v1,v2)",
    "key",
    "!key",
)

# The keys that make up a policy, in the order problems are reported.
POLICY_KEYS: tuple[str, ...] = (
    c.LABEL_ENABLED,
    c.LABEL_POD_PLACEMENT,
    c.LABEL_NAMESPACE_MAPPING,
    c.ANNOTATION_CLUSTER_SELECTOR,
)


class PolicyError(ValueError):
    """One bad policy value: which key, what value, what would have been accepted."""

    def __init__(
        self, key: str, value: str, allowed: tuple[str, ...], *, detail: str = ""
    ) -> None:
        self.key = key
        self.value = value
        self.allowed = allowed
        self.detail = detail
        super().__init__(_describe(key, value, allowed, detail))


def _describe(key: str, value: str, allowed: tuple[str, ...], detail: str) -> str:
    if key == c.ANNOTATION_CLUSTER_SELECTOR:
        return (
            f"{key}: {value!r} is not a valid label selector ({detail}); "
            f"use requirements like {', '.join(SELECTOR_FORMS)}, joined by commas"
        )
    if key == c.LABEL_ENABLED:
        return (
            f'{key}: "{value}" is not valid; the only accepted value is "{c.ENABLED_VALUE}" '
            "(remove the label to turn offloading off)"
        )
    hint = ""
    for candidate in allowed:
        # Values are case-sensitive in Kubernetes; say so when that is the only problem.
        if candidate.lower() == value.strip().lower():
            hint = f" (did you mean {candidate}? values are case-sensitive)"
            break
    return f'{key}: "{value}" is not valid; use one of {", ".join(allowed)}{hint}'


@dataclass(frozen=True)
class NamespacePolicy:
    namespace: str
    enabled: bool
    placement: str  # one of constants.PLACEMENTS
    mapping: str  # one of constants.MAPPINGS
    cluster_selector: LabelSelector  # empty = every remote cluster
    # True: not the namespace's own policy but the one a pod that opted in with the
    # kube-offload RuntimeClass gets (kube_offload/opt_in.py); messages then say so.
    opt_in: bool = False


def _metadata_map(namespace: dict[str, Any], field: str) -> dict[str, Any]:
    metadata = namespace.get("metadata") or {}
    value = metadata.get(field) if isinstance(metadata, dict) else None
    return value if isinstance(value, dict) else {}


def _problems(namespace: dict[str, Any]) -> tuple[dict[str, Any], list[PolicyError]]:
    """The parsed fields (with defaults) and every problem, in POLICY_KEYS order."""
    labels = _metadata_map(namespace, "labels")
    annotations = _metadata_map(namespace, "annotations")
    errors: list[PolicyError] = []
    fields: dict[str, Any] = {
        "enabled": False,
        "placement": c.DEFAULT_PLACEMENT,
        "mapping": c.DEFAULT_MAPPING,
        "cluster_selector": LabelSelector(()),
    }

    enabled = labels.get(c.LABEL_ENABLED)
    if enabled is not None:
        if enabled == c.ENABLED_VALUE:
            fields["enabled"] = True
        else:
            errors.append(PolicyError(c.LABEL_ENABLED, str(enabled), (c.ENABLED_VALUE,)))

    for key, field, allowed in (
        (c.LABEL_POD_PLACEMENT, "placement", c.PLACEMENTS),
        (c.LABEL_NAMESPACE_MAPPING, "mapping", c.MAPPINGS),
    ):
        value = labels.get(key)
        if value is None:
            continue
        if value in allowed:
            fields[field] = value
        else:
            errors.append(PolicyError(key, str(value), tuple(allowed)))

    selector_text = annotations.get(c.ANNOTATION_CLUSTER_SELECTOR)
    if selector_text is not None:
        try:
            fields["cluster_selector"] = parse_selector(str(selector_text))
        except SelectorError as exc:
            errors.append(
                PolicyError(
                    c.ANNOTATION_CLUSTER_SELECTOR,
                    str(selector_text),
                    SELECTOR_FORMS,
                    detail=f"{exc.problem} at position {exc.position + 1}",
                )
            )
    return fields, errors


def namespace_name(namespace: dict[str, Any]) -> str:
    metadata = namespace.get("metadata") or {}
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return name if isinstance(name, str) else ""


def policy_from_namespace(namespace: dict[str, Any]) -> NamespacePolicy:
    """The namespace's policy, defaults filled in; raises the first :class:`PolicyError`."""
    fields, errors = _problems(namespace)
    if errors:
        raise errors[0]
    return NamespacePolicy(namespace=namespace_name(namespace), **fields)


def validate_namespace(namespace: dict[str, Any]) -> list[PolicyError]:
    """Every problem with the namespace's policy keys (empty list = valid)."""
    return _problems(namespace)[1]


def policy_values(namespace: dict[str, Any]) -> dict[str, str | None]:
    """The raw value of each policy key (None when absent), to tell what an update changed."""
    labels = _metadata_map(namespace, "labels")
    annotations = _metadata_map(namespace, "annotations")
    return {
        key: (annotations if key == c.ANNOTATION_CLUSTER_SELECTOR else labels).get(key)
        for key in POLICY_KEYS
    }
