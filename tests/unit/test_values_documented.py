"""Every key of the charts' values.yaml is in docs/install.md's values tables (issue 41: the
tables had lost remoteClusters[].slices, vkubelet.handbackAfter, consumers[].pools,
furtherOffloading and homeAPIRelay).

Keys are read from the values as parsed, and the keys of a list's entries from the
commented example under the list (``remoteClusters: []``, ``consumers: []``), as
``remoteClusters[].slices``. A key is documented by a table row that names it whole
(`` `vkubelet.handbackAfter` ``), or names its last part beside its parent
(`` `vkubelet.leaderElection.enabled` / `leaseDuration` ``, `` `webhook.*`: `nodeSelector` ``,
`` `remoteClusters[]` | ... `slices` ``). Maps of free-form content (``resources``, the
security contexts) count as one key.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
INSTALL = REPO / "docs" / "install.md"
# Maps whose content is Kubernetes' own (requests and limits, security contexts): one key.
OPAQUE = {"resources", "podSecurityContext", "containerSecurityContext"}
# The lists whose entries the values document in a comment, and that comment's entry indent.
ENTRY_LINE = re.compile(r"^#\s{1,3}(?:- |  )(?P<key>[A-Za-z][A-Za-z0-9]*):")


def value_keys(values: dict[str, Any], prefix: str = "") -> Iterator[str]:
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and key not in OPAQUE:
            yield from value_keys(value, f"{path}.")
        else:
            yield path


def entry_keys(text: str, list_key: str) -> Iterator[str]:
    """The keys of one entry of ``list_key``, from the commented example right under it."""
    lines = text.splitlines()
    start = lines.index(f"{list_key}: []") + 1
    for line in lines[start:]:
        if not line.startswith("#"):
            return
        match = ENTRY_LINE.match(line)
        if match and len(line) - len(line.lstrip("# ")) <= 5:  # the entry's own keys, not nested ones
            yield f"{list_key}[].{match.group('key')}"


def section(chart: str) -> list[str]:
    text = INSTALL.read_text()
    start = text.index(f"chart (`charts/{chart}/values.yaml`")
    end = min(i for i in (text.find("\nRemote chart (", start + 1), text.find("\n## ", start)) if i > 0)
    return [line for line in text[start:end].splitlines() if line.startswith("|")]


def documented(key: str, rows: list[str]) -> bool:
    parent, _, leaf = key.rpartition(".")
    for row in rows:
        tokens = re.findall(r"`([^`]+)`", row)
        if key in tokens or f"{key}[]" in tokens:
            return True
        if parent and leaf in tokens and any(t in (parent, f"{parent}.*") or t.startswith(f"{parent}.") for t in tokens):
            return True
    return False


@pytest.mark.parametrize("chart, lists", [("kube-offload-local", ["remoteClusters"]),
                                          ("kube-offload-remote", ["consumers"])])
def test_every_values_key_is_in_the_install_docs_values_table(chart: str, lists: list[str]) -> None:
    text = (REPO / "charts" / chart / "values.yaml").read_text()
    keys = [*value_keys(yaml.safe_load(text)), *(k for name in lists for k in entry_keys(text, name))]
    rows = section(chart)
    assert len(keys) > 40 and rows, "the test reads the values and the table"
    missing = [key for key in keys if not documented(key, rows)]
    assert missing == [], f"values of {chart} missing from docs/install.md's table: {missing}"


def test_the_check_finds_a_missing_key() -> None:
    rows = ["| `vkubelet.leaderElection.enabled` / `leaseDuration` | x | y |", "| `webhook.*`: `nodeSelector` | | |"]
    assert documented("vkubelet.leaderElection.leaseDuration", rows)
    assert documented("webhook.nodeSelector", rows)
    assert not documented("vkubelet.handbackAfter", rows)
    assert not documented("webhook.tolerations", rows)
