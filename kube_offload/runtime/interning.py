"""One shared copy of each string a cache holds.

An informer parses every watch event with its own ``json.loads``: the same keys
("metadata", "resourceVersion", "containers") and the same values (namespace names,
images, condition types) are new string objects in every cached object. Interning them
(``sys.intern``) makes the thousands of copies one; strings are compared as before, so a
reader cannot tell. Interned strings are mortal: freed with their last user.
"""

from __future__ import annotations

import sys
from typing import TypeVar, cast

T = TypeVar("T")


def interned(value: T) -> T:
    """``value`` with every string in it (dict keys and values) interned. Dicts and lists
    are rebuilt (of the same shape: the type is kept); other scalars are kept as they are."""
    if isinstance(value, str) and type(value) is str:  # not a str subclass: intern takes exact str
        return cast(T, sys.intern(value))
    if isinstance(value, dict):
        return cast(T, {(sys.intern(k) if type(k) is str else k): interned(v) for k, v in value.items()})
    if isinstance(value, list):
        return cast(T, [interned(item) for item in value])
    return value
