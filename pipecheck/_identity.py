"""A mapping keyed by object identity that holds its keys weakly (plain Python, no torch)."""

from __future__ import annotations

import weakref
from typing import Generic, Optional, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class IdentityWeakMap(Generic[K, V]):
    """A mapping from objects to values by identity that holds the objects weakly.

    Unlike ``weakref.WeakKeyDictionary`` it never calls the key's ``__hash__`` or ``__eq__``
    (a user's class may define them), and an entry goes when its key is collected. The values
    must not refer to their key (that would keep it alive). Raises ``TypeError`` from
    :meth:`set` for an object that cannot be weakly referenced."""

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref, V]] = {}

    def get(self, key: K) -> Optional[V]:
        entry = self._entries.get(id(key))
        if entry is None or entry[0]() is not key:
            return None
        return entry[1]

    def set(self, key: K, value: V) -> None:
        ident = id(key)
        entries = self._entries

        def forget(ref: weakref.ref, ident: int = ident) -> None:  # the key was collected
            current = entries.get(ident)
            if current is not None and current[0] is ref:
                del entries[ident]

        entries[ident] = (weakref.ref(key, forget), value)

    def pop(self, key: K) -> Optional[V]:
        entry = self._entries.get(id(key))
        if entry is None or entry[0]() is not key:
            return None
        del self._entries[id(key)]
        return entry[1]

    def values(self) -> list[V]:
        return [value for ref, value in list(self._entries.values()) if ref() is not None]

    def __len__(self) -> int:
        return len(self._entries)
