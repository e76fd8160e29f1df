"""Numbers standing for a memo's inputs, so a hot path keys its memo by one int instead of hashing ~20-40 fields per
call: equal numbers, equal inputs. Objects enter the key by id(); the numbering keeps a reference to them and checks
identity on a hit, so an id reused by a new object after the old one was freed never returns the old number."""

from __future__ import annotations

import itertools

LIMIT = 100_000  # entries before the table is cleared (a number is never reused, so clearing only costs re-numbering)


class InputNumbers:
    def __init__(self, counter: itertools.count):
        self._numbers: dict[tuple, tuple] = {}
        self._next = counter

    def number(self, key: tuple, a: object, b: object, c: object) -> int:
        """The number of `key`, whose objects a, b and c entered it by id()."""
        hit = self._numbers.get(key)
        if hit is not None and hit[1] is a and hit[2] is b and hit[3] is c:
            return hit[0]
        if len(self._numbers) > LIMIT:
            self._numbers.clear()
        number = next(self._next)
        self._numbers[key] = (number, a, b, c)
        return number
