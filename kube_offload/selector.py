"""Kubernetes label selectors in their string form (``kubectl -l`` syntax).

The namespace annotation ``kube-offload.io/cluster-selector`` holds one of these; the
webhook turns it into node-affinity matchExpressions and the scheduler extender evaluates
it against virtual-node labels, so both must read it exactly alike: that is why there is
one parser and one :class:`LabelSelector` with ``matches`` and
``to_node_selector_requirements`` side by side.

Grammar (as in k8s.io/apimachinery ``labels.Parse``)::

    selector    := "" | requirement ("," requirement)*
    requirement := "!" KEY | KEY | KEY ("=" | "==" | "!=") VALUE
                 | KEY ("in" | "notin") "(" VALUE ("," VALUE)* ")"

Whitespace between tokens is ignored. ``>``/``<`` (Gt/Lt) are part of the Kubernetes
string syntax but have no meaning for cluster labels here, so they are rejected with a
message saying so rather than silently half-supported.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

IN = "In"
NOT_IN = "NotIn"
EXISTS = "Exists"
DOES_NOT_EXIST = "DoesNotExist"
OPERATORS = (IN, NOT_IN, EXISTS, DOES_NOT_EXIST)

SYNTAX_HELP = (
    "accepted syntax: key=value, key==value, key!=value, key in (v1,v2), "
    "key notin (v1,v2), key, !key; join requirements with commas (AND)"
)

_NAME_MAX = 63
_PREFIX_MAX = 253
_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN_RE = re.compile(rf"^{_DNS_LABEL}(\.{_DNS_LABEL})*$")

# Characters that end an identifier, as in the Kubernetes lexer.
_SPECIAL = "=!(),<>"
_WHITESPACE = " \t\r\n"


class SelectorError(ValueError):
    """A selector string that does not parse; says where and what was expected."""

    def __init__(self, problem: str, *, text: str, position: int) -> None:
        self.problem = problem
        self.text = text
        self.position = position
        super().__init__(
            f"{problem} at position {position + 1} of {text!r}; {SYNTAX_HELP}"
        )

    @property
    def caret(self) -> str:
        """Two lines for terminals: the selector and a ``^`` under the offending spot."""
        return f"{self.text}\n{' ' * self.position}^"


def label_key_problem(key: str) -> str | None:
    """Why ``key`` is not a valid label key (Kubernetes qualified name), or None."""
    prefix, slash, name = key.rpartition("/")
    if slash:
        if not prefix:
            return f"label key {key!r} has an empty prefix before '/'"
        if len(prefix) > _PREFIX_MAX:
            return f"label key prefix {prefix!r} is longer than {_PREFIX_MAX} characters"
        if not _DNS_SUBDOMAIN_RE.match(prefix):
            return (
                f"label key prefix {prefix!r} must be a DNS subdomain "
                "(lowercase letters, digits, '-' and '.')"
            )
    if not name:
        return f"label key {key!r} has an empty name"
    if len(name) > _NAME_MAX:
        return f"label key name {name!r} is longer than {_NAME_MAX} characters"
    if not _NAME_RE.match(name):
        return (
            f"label key name {name!r} must start and end with a letter or digit and contain "
            "only letters, digits, '-', '_' and '.'"
        )
    return None


def label_value_problem(value: str) -> str | None:
    """Why ``value`` is not a valid label value, or None (the empty value is valid)."""
    if value == "":
        return None
    if len(value) > _NAME_MAX:
        return f"label value {value!r} is longer than {_NAME_MAX} characters"
    if not _NAME_RE.match(value):
        return (
            f"label value {value!r} must start and end with a letter or digit and contain "
            "only letters, digits, '-', '_' and '.'"
        )
    return None


@dataclass(frozen=True)
class Requirement:
    """One ANDed condition on one label key; ``=``/``!=`` are In/NotIn with one value."""

    key: str
    operator: str  # "In" | "NotIn" | "Exists" | "DoesNotExist"
    values: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.operator not in OPERATORS:
            raise ValueError(f"operator {self.operator!r} is not one of {', '.join(OPERATORS)}")
        if self.operator in (IN, NOT_IN) and not self.values:
            raise ValueError(f"operator {self.operator} needs at least one value")
        if self.operator in (EXISTS, DOES_NOT_EXIST) and self.values:
            raise ValueError(f"operator {self.operator} takes no values")

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator == EXISTS:
            return present
        if self.operator == DOES_NOT_EXIST:
            return not present
        if self.operator == IN:
            return present and labels[self.key] in self.values
        # NotIn / != match a missing key, exactly as Kubernetes selectors do.
        return not present or labels[self.key] not in self.values

    def to_node_selector_requirement(self) -> dict[str, Any]:
        expression: dict[str, Any] = {"key": self.key, "operator": self.operator}
        # The API rejects a values list (even empty) on Exists/DoesNotExist.
        if self.operator in (IN, NOT_IN):
            expression["values"] = list(self.values)
        return expression

    def __str__(self) -> str:
        if self.operator == EXISTS:
            return self.key
        if self.operator == DOES_NOT_EXIST:
            return f"!{self.key}"
        if len(self.values) == 1:
            op = "=" if self.operator == IN else "!="
            return f"{self.key}{op}{self.values[0]}"
        word = "in" if self.operator == IN else "notin"
        return f"{self.key} {word} ({','.join(self.values)})"


@dataclass(frozen=True)
class LabelSelector:
    """Requirements ANDed together; no requirement at all selects everything."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    def to_node_selector_requirements(self) -> list[dict[str, Any]]:
        return [r.to_node_selector_requirement() for r in self.requirements]

    def is_empty(self) -> bool:
        return not self.requirements

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


# --- lexer ---------------------------------------------------------------------------------

_IDENT = "identifier"
_EOF = "end of text"


@dataclass(frozen=True)
class _Token:
    kind: str  # _IDENT, _EOF, or the symbol itself ("=", "==", "!=", "!", "(", ")", ",", ">", "<")
    text: str
    position: int

    def describe(self) -> str:
        if self.kind == _EOF:
            return "the end of the text"
        return repr(self.text)


def _tokens(text: str) -> Iterator[_Token]:
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch in _WHITESPACE:
            i += 1
            continue
        if ch in "=!" and i + 1 < n and text[i + 1] == "=":
            yield _Token(ch + "=", ch + "=", i)
            i += 2
            continue
        if ch in _SPECIAL:
            yield _Token(ch, ch, i)
            i += 1
            continue
        start = i
        while i < n and text[i] not in _SPECIAL and text[i] not in _WHITESPACE:
            i += 1
        yield _Token(_IDENT, text[start:i], start)
    yield _Token(_EOF, "", n)


# --- parser --------------------------------------------------------------------------------


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = list(_tokens(text))
        self.index = 0

    def peek(self) -> _Token:
        return self.tokens[self.index]

    def take(self) -> _Token:
        token = self.tokens[self.index]
        if token.kind != _EOF:
            self.index += 1
        return token

    def fail(self, problem: str, token: _Token) -> SelectorError:
        return SelectorError(problem, text=self.text, position=token.position)

    def selector(self) -> LabelSelector:
        if self.peek().kind == _EOF:
            return LabelSelector(())
        requirements = [self.requirement()]
        while True:
            token = self.take()
            if token.kind == _EOF:
                break
            if token.kind != ",":
                raise self.fail(f"expected ',' or the end, found {token.describe()}", token)
            requirements.append(self.requirement())
        # Canonical order (as Kubernetes sorts by key) so equal selectors compare equal.
        requirements.sort(key=lambda r: r.key)
        return LabelSelector(tuple(requirements))

    def key(self) -> str:
        token = self.take()
        if token.kind != _IDENT:
            raise self.fail(f"expected a label key, found {token.describe()}", token)
        if token.text in ("in", "notin"):
            raise self.fail(f"expected a label key, found the keyword {token.text!r}", token)
        problem = label_key_problem(token.text)
        if problem:
            raise self.fail(problem, token)
        return token.text

    def value(self) -> str:
        """One value; absent (next is ',' ')' or the end) means the empty value, as in k8s."""
        token = self.peek()
        if token.kind in (",", ")", _EOF):
            return ""
        self.take()
        if token.kind != _IDENT:
            raise self.fail(f"expected a label value, found {token.describe()}", token)
        problem = label_value_problem(token.text)
        if problem:
            raise self.fail(problem, token)
        return token.text

    def value_set(self, word: str) -> tuple[str, ...]:
        opening = self.take()
        if opening.kind != "(":
            raise self.fail(
                f"expected '(' after {word!r}, found {opening.describe()}", opening
            )
        if self.peek().kind == ")":
            raise self.fail(f"{word!r} needs at least one value", self.peek())
        values = [self.value()]
        while True:
            token = self.take()
            if token.kind == ")":
                break
            if token.kind != ",":
                raise self.fail(
                    f"expected ',' or ')' in the value list, found {token.describe()}", token
                )
            values.append(self.value())
        return tuple(sorted(set(values)))

    def requirement(self) -> Requirement:
        if self.peek().kind == "!":
            self.take()
            key = self.key()
            after = self.peek()
            if after.kind not in (",", _EOF):
                raise self.fail(
                    f"'!{key}' takes no operator or value, found {after.describe()}", after
                )
            return Requirement(key, DOES_NOT_EXIST)
        key = self.key()
        token = self.peek()
        if token.kind in (",", _EOF):
            return Requirement(key, EXISTS)
        self.take()
        if token.kind in ("=", "=="):
            return Requirement(key, IN, (self.value(),))
        if token.kind == "!=":
            return Requirement(key, NOT_IN, (self.value(),))
        if token.kind == _IDENT and token.text == "in":
            return Requirement(key, IN, self.value_set("in"))
        if token.kind == _IDENT and token.text == "notin":
            return Requirement(key, NOT_IN, self.value_set("notin"))
        if token.kind in (">", "<"):
            raise self.fail(
                f"the {token.text!r} operator is not supported in cluster selectors", token
            )
        raise self.fail(
            f"expected an operator (=, ==, !=, in, notin) after {key!r}, "
            f"found {token.describe()}",
            token,
        )


def parse_selector(text: str) -> LabelSelector:
    """Parse ``text``; blank text is the empty selector (matches everything).

    Raises :class:`SelectorError` naming the position and what was expected.
    """
    return _Parser(text).selector()
