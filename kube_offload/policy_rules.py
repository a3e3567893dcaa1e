"""One rule book for what a consumer may write on a provider: the shapes every rule shares (pure).

The provider's policy for a consumer (``Consumer spec.policy``, :mod:`kube_offload.provider_policy`)
is applied in two places. The provider refuses what goes beyond it (the enforcer's webhooks,
the remote chart's ValidatingAdmissionPolicies); an honest consumer's virtual kubelet takes
out, or lowers, what the provider would refuse before it sends anything, and tells its local
user why. So that the two cannot drift apart, each rule is written once, as one predicate
(a :class:`Rule` of :mod:`kube_offload.rule_book`): given an object and the :class:`Context`,
the :class:`Violation` s it finds. A violation says

* where: the field, from the object's root (``spec.tolerations[0].key``);
* what is wrong, naming the ``Consumer spec.policy`` key that would grant it, or saying that
  none can (``problem``), and what a writer would change by hand (``fix``);
* the honest consumer's fit: the :class:`Edit` s that make the object acceptable (drop the
  field or the item, lower the value), or none: then nothing taken out makes it acceptable
  without changing what the object is, and it is not sent.

From the same violations :func:`refusal_lines` words the provider's refusal and :func:`fit`
makes the consumer's object and its notes. The agreement tests run one table of cases through
the check, the fit and the real API server (tests/unit/kube_offload/test_rule_book.py,
tests/e2e/test_policy_agreement.py): the object the fit makes must pass the check, what the
fit refuses the check must refuse, and the API server (the chart's CEL, the enforcer's
webhooks) must give the check's verdict.
"""

from __future__ import annotations

import copy
import enum
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

from kube_offload import provider_policy as pp

# A field's place in an object: keys of objects, indexes of lists.
Path = tuple[str | int, ...]


class Malformed(ValueError):
    """The object does not have the shape its kind has; the message names the field (from
    the object's root) and what it must be."""


class FitAction(enum.Enum):
    """What the honest consumer does with what a rule refuses (the table's fit column)."""

    DROP = "drop the field"  # the field or item is taken out; the rest is sent
    ADJUST = "lower or adjust"  # the value becomes one the provider admits
    REFUSE = "refuse the whole object"  # nothing taken out makes it acceptable: not sent
    ASK = "ask, and read the answer"  # a request the provider answers in its status (a twin, a count)


class ProviderAction(enum.Enum):
    """What the provider does with what a rule finds."""

    REFUSES = "refuses it"  # at admission (and, for a pod, at every pod create)
    SETS = "sets it"  # on what it makes (the pod): nothing is refused


class Kind(enum.Enum):
    """What a rule judges."""

    POD = "Pod"  # a ShadowPod's pod template: metadata (labels, annotations) and spec
    SERVICE = "Service"
    ENDPOINT_SLICE = "EndpointSlice"
    INGRESS = "Ingress"
    CLAIM = "PersistentVolumeClaim"
    SECRET = "Secret"
    TOKEN_REQUEST = "TokenRequest"
    TWIN_REQUEST = "TwinNamespace"
    TENANT_COUNT = "objects held"  # {"counted": <key>, "held": n}: how many a consumer keeps
    CUSTOM_RESOURCE = "custom resource"


class _Delete:
    def __repr__(self) -> str:
        return "DELETE"


DELETE: Any = _Delete()


@dataclass(frozen=True)
class Edit:
    """One change of the consumer's fit: the field at ``path`` takes ``value``, or is taken
    out (:data:`DELETE`; an item of a list goes, the list keeps its order)."""

    path: Path
    value: Any = DELETE


@dataclass(frozen=True)
class Violation:
    # The Consumer spec.policy key that would grant it ("pods.tolerations"), or "" when no
    # key can (a tolerate-all, a hostPath volume).
    key: str
    field: str  # the field, from the object's root: "spec.tolerations[0].key"
    problem: str  # what is wrong and which key grants it (or that none can); no field, no fix
    fix: str = ""  # what the writer changes by hand: "remove it"
    edits: tuple[Edit, ...] = ()  # the consumer's fit; () : not sent at all
    done: str = "dropped"  # how the consumer's note words its edits

    @property
    def refuses_object(self) -> bool:
        return not self.edits


@dataclass(frozen=True)
class EndpointFacts:
    """What only the provider knows of an EndpointSlice's addresses: why one is never a
    consumer's endpoint (a node, the Service range, the API server), and whether one is a
    pod the enforcer made in that twin. The consumer knows none of it: None there."""

    never: Callable[[str], str | None]
    own_pod: Callable[[str], bool]


@dataclass(frozen=True)
class Context:
    """What a rule reads besides the object: the Consumer's terms, where the object goes, and
    facts only one side knows (the provider's API server audiences, its other consumers)."""

    policy: pp.ProviderPolicy = pp.DEFAULT_POLICY
    consumer_id: str = ""
    namespace: str = ""  # the twin namespace (the provider's name of it)
    # The Consumer's quota as read under its quota mode (kube_offload.consumer_quota).
    quota: Mapping[str, int] = field(default_factory=dict)
    endpoint_facts: EndpointFacts | None = None
    # TokenRequests: the provider API server's own audiences (what a request naming none gets).
    api_audiences: tuple[str, ...] = ()
    # Twin requests: whether a name is another consumer of this provider; the enforcer's namespace.
    other_consumer: Callable[[str], bool] = lambda _name: False
    release_namespace: str = ""
    older_consumers: tuple[str, ...] = ()  # the ids of the consumers admitted before this one
    newer_consumers: tuple[str, ...] = ()  # and after it
    # Custom resources: the kind written (group, plural) and, on an update, the object before.
    group: str = ""
    resource: str = ""
    old_object: Mapping[str, Any] | None = None

    @property
    def who(self) -> str:
        return f'consumer "{self.consumer_id}"' if self.consumer_id else "this consumer"


Check = Callable[[Mapping[str, Any], Context], list[Violation]]


@dataclass(frozen=True)
class Rule:
    """One row of the rule book: the policy key it applies (or, for what no key can grant,
    the rule's own name, under ``never.``), what it judges, its predicate, the consumer's fit,
    what the provider does, and where the provider does it (docs/security.md's table)."""

    key: str
    kind: Kind
    check: Check
    fit: FitAction
    enforced_by: str
    provider: ProviderAction = ProviderAction.REFUSES

    @property
    def grantable(self) -> bool:
        return not self.key.startswith(NEVER)


NEVER = "never."


# --- wording --------------------------------------------------------------------------------------
def grant(key: str) -> str:
    """How a provider grants what a key holds: the clause refusals end with."""
    return f"the provider grants it with Consumer {pp.POLICY}.{key}"


def granted_list(items: tuple[str, ...] | list[str]) -> str:
    return ", ".join(items) if items else "none"


_FIELD_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Objects whose keys are data (label keys, resource names), written [key] in a field path.
_MAPS = frozenset({"labels", "annotations", "nodeSelector", "requests", "limits", "resources", "data"})


def field_text(path: Path) -> str:
    """``("spec", "tolerations", 0, "key")`` as ``spec.tolerations[0].key``;
    ``("metadata", "labels", "a/b")`` as ``metadata.labels[a/b]``."""
    out = ""
    parent: str | int | None = None
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif parent in _MAPS or not _FIELD_NAME.match(part):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
        parent = part
    return out


def refusal_lines(violations: list[Violation], prefix: str = "") -> list[str]:
    """The provider's refusal, one line per violation: the field (``prefix`` put before it,
    e.g. ``spec.pod.`` for a ShadowPod's template), what is wrong, the key, the fix."""
    lines = []
    for v in violations:
        line = f"{prefix}{v.field}: {v.problem}"
        lines.append(f"{line}; {v.fix}" if v.fix else line)
    return lines


# --- reading an object ----------------------------------------------------------------------------
def mapping(parent: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    """``parent[key]`` as an object ({} when absent), else :class:`Malformed` naming ``where.key``."""
    value = parent.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise Malformed(f"{_join(where, key)}: must be an object")
    return value


def items(parent: Mapping[str, Any], key: str, where: str) -> Iterator[tuple[int, Mapping[str, Any]]]:
    """(index, item) of the list of objects ``parent[key]`` (none when absent), else
    :class:`Malformed` naming the field."""
    value = parent.get(key)
    if value is None:
        return
    if not isinstance(value, list):
        raise Malformed(f"{_join(where, key)}: must be a list")
    for index, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise Malformed(f"{_join(where, key)}[{index}]: must be an object")
        yield index, item


def strings(parent: Mapping[str, Any], key: str, where: str) -> list[str]:
    """The list of strings ``parent[key]`` ([] when absent), else :class:`Malformed`."""
    value = parent.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise Malformed(f"{_join(where, key)}: must be a list of strings")
    return list(value)


def text(parent: Mapping[str, Any], key: str, where: str) -> str:
    """The string ``parent[key]`` ("" when absent or null), else :class:`Malformed`."""
    value = parent.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise Malformed(f"{_join(where, key)}: must be a string")
    return value


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


# --- the consumer's fit ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Fitted:
    """The object as the honest consumer sends it (a copy), with what it changed and what
    refuses it (non-empty: it is not sent)."""

    obj: dict[str, Any]
    adjusted: tuple[Violation, ...] = ()
    refused: tuple[Violation, ...] = ()


def fit(obj: Mapping[str, Any], violations: list[Violation]) -> Fitted:
    """``obj`` with every violation's edits applied (a copy), or, when a violation has none,
    unchanged and refused. A container the edits empty (a toleration list, a node affinity)
    is taken out too, as if never written; one the writer left empty stays."""
    fitted: dict[str, Any] = copy.deepcopy(dict(obj))
    refused = tuple(v for v in violations if v.refuses_object)
    adjusted = tuple(v for v in violations if not v.refuses_object)
    if refused:
        return Fitted(fitted, adjusted, refused)
    edits = [edit for v in adjusted for edit in v.edits]
    for edit in edits:
        if edit.value is not DELETE:
            _set(fitted, edit.path, edit.value)
    deletions = _covering([edit.path for edit in edits if edit.value is DELETE])
    # Resolved before anything moves, so that list indexes still mean what the check saw.
    resolved = [(chain, path[-1]) for path in deletions if (chain := _chain(fitted, path)) is not None]
    by_list: dict[int, tuple[list[Any], set[int]]] = {}
    for chain, last in resolved:
        parent = chain[-1]
        if isinstance(parent, list) and isinstance(last, int):
            by_list.setdefault(id(parent), (parent, set()))[1].add(last)
        elif isinstance(parent, dict):
            parent.pop(last, None)
    for values, indexes in by_list.values():
        values[:] = [v for i, v in enumerate(values) if i not in indexes]
    for chain, _last in resolved:
        _prune(fitted, chain)
    return Fitted(fitted, adjusted, ())


def _covering(paths: list[Path]) -> list[Path]:
    """The paths not inside another one of ``paths`` (taking out a list takes out its items)."""
    unique = sorted(set(paths), key=len)
    kept: list[Path] = []
    for path in unique:
        if not any(path[: len(k)] == k for k in kept):
            kept.append(path)
    return kept


def _chain(obj: Any, path: Path) -> list[Any] | None:
    """The containers from ``obj`` down to the parent of ``path``'s last step, or None when
    the path does not lead anywhere (nothing to take out)."""
    chain = [obj]
    current = obj
    for step in path[:-1]:
        try:
            current = current[step]
        except (KeyError, IndexError, TypeError):
            return None
        if not isinstance(current, (dict, list)):
            return None
        chain.append(current)
    last = path[-1] if path else None
    parent = chain[-1]
    if isinstance(parent, dict) and last in parent:
        return chain
    if isinstance(parent, list) and isinstance(last, int) and 0 <= last < len(parent):
        return chain
    return None


def _prune(root: dict[str, Any], chain: list[Any]) -> None:
    """Take out the containers of ``chain`` a deletion left empty, deepest first, never a
    top-level field (``spec``, ``metadata``)."""
    for depth in range(len(chain) - 1, 1, -1):
        container, parent = chain[depth], chain[depth - 1]
        if container:
            return
        if isinstance(parent, dict):
            for key, value in list(parent.items()):
                if value is container:
                    del parent[key]
        elif isinstance(parent, list):
            parent[:] = [v for v in parent if v is not container]


def _set(obj: dict[str, Any], path: Path, value: Any) -> None:
    current: Any = obj
    for step in path[:-1]:
        if isinstance(current, dict):
            current = current.setdefault(step, {})
        elif isinstance(current, list) and isinstance(step, int) and 0 <= step < len(current):
            current = current[step]
        else:
            return
    if isinstance(current, dict):
        current[path[-1]] = value
    elif isinstance(current, list) and isinstance(path[-1], int) and 0 <= path[-1] < len(current):
        current[path[-1]] = value


def note_text(v: Violation) -> str:
    """What the consumer's local user reads about one violation: the field, what the virtual
    kubelet did (or that the object is not sent), and why."""
    if v.refuses_object:
        return f"{v.field}: {v.problem}; not sent" + (f" ({v.fix})" if v.fix else "")
    return f"{v.field} {v.done}: {v.problem}"
