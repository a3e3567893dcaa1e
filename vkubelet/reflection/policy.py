"""Which local objects are reflected: deny-list or allow-list, per resource type (pure)."""

from __future__ import annotations

import enum
from typing import Mapping

from kube_offload import constants as c


class Policy(str, enum.Enum):
    # Everything, except objects annotated kube-offload.io/skip-reflection.
    DENY_LIST = "deny-list"
    # Nothing, except objects annotated kube-offload.io/allow-reflection.
    ALLOW_LIST = "allow-list"


POLICIES = tuple(p.value for p in Policy)


def _annotated(obj: Mapping, key: str) -> bool:
    """Set unless absent or ``false``: ``kubectl annotate ... key=`` and ``key=true``
    both mean yes, while ``key=false`` can turn it off without removing it."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    if key not in annotations:
        return False
    return str(annotations[key]).strip().lower() != "false"


def should_reflect(obj: Mapping, policy: Policy) -> bool:
    """Whether ``obj`` is reflected under ``policy``. Under an allow-list a skip
    annotation still wins: an object both allowed and skipped is skipped."""
    if _annotated(obj, c.ANNOTATION_SKIP_REFLECTION):
        return False
    if policy is Policy.ALLOW_LIST:
        return _annotated(obj, c.ANNOTATION_ALLOW_REFLECTION)
    return True
