"""Memos whose keys hold objects by id() (hashing a ModelSpec or a ~40-field Strategy is most of a lookup's time
otherwise). IdMemo keeps each entry's objects alive beside its value: ids are unique among live objects, so while
the entry lives no other object can take theirs, and a plain dict lookup finds only an entry of these very objects
(no identity check on a hit). InputNumbers, on it, numbers a memo's inputs, so a hot path keys its memo by one int
instead of hashing ~20-40 fields per call: equal numbers, equal inputs."""

from __future__ import annotations

import itertools

LIMIT = 100_000  # entries before a table is cleared (a number is never reused, so clearing only costs re-numbering)


class IdMemo(dict):
    """key -> value (never None); `get` is dict's. Store with `put`, which keeps the objects the key names by id."""

    __slots__ = ("_alive",)

    def __init__(self) -> None:
        super().__init__()
        self._alive: dict[tuple, tuple] = {}

    def put(self, key: tuple, objects: tuple, value):
        """Store `value` under `key`, keeping `objects` (those whose id() the key holds) alive; returns `value`."""
        if len(self) > LIMIT:
            self.clear()
        self[key] = value
        self._alive[key] = objects
        return value

    def clear(self) -> None:
        super().clear()
        self._alive.clear()


class InputNumbers:
    def __init__(self, counter: itertools.count):
        self._numbers = IdMemo()
        self._next = counter

    def number(self, key: tuple, a: object, b: object, c: object) -> int:
        """The number of `key`, whose objects a, b and c entered it by id()."""
        number = self._numbers.get(key)
        return self._numbers.put(key, (a, b, c), next(self._next)) if number is None else number
