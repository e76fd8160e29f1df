"""ERNIE-style knowledge masking (Sun et al. 2019 "ERNIE"; ERNIE 3.0 Titan): mask whole words, phrases and entities.

Three unit levels, as in ERNIE: a *word* (a run of letters/digits; each punctuation mark is its own unit), a *phrase*
and an *entity*. Entities come from a user lexicon (one entry per line, e.g. "land of Egypt"); phrases from a small
built-in detector fitted on the corpus:
- capitalised multi-word names ("Jesus Christ", "Holy Ghost"): two or more adjacent capitalised words, where a
  capitalised word only counts if it is more often capitalised than not in the corpus (so "And", "The" do not);
- frequent collocations: adjacent lowercase word pairs seen >= `min_count` times whose pointwise mutual information
  is >= `min_pmi` nats, neither among the `common_words` most frequent words ("burnt offering", "seventh day").
Entities are matched first (longest entry at each word; overlapping occurrences merge into one unit), detected
phrases fill the gaps between them (leftmost-longest). A unit is never split: all its tokens are masked or none
are. The masked units then go through the same sentinel/target format as T5 span corruption.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from scalestudy.errors import ScalestudyError

UNIT_RE = re.compile(r"\w+(?:['’]\w+)*|[^\w\s]")  # a word (with inner apostrophes) or one punctuation mark
# Lookup table: is code point c whitespace (str.isspace)? Every whitespace code point is <= U+3000.
_IS_SPACE = np.array([chr(c).isspace() for c in range(0x3001)] + [False])
# Per-token flags stored beside the token stream: bit 0 = first token of a unit, bits 1-2 = unit kind.
START = 1
WORD, PHRASE, ENTITY = 0, 1, 2


def load_lexicon(path: str | Path) -> list[str]:
    """Entries of a lexicon file: one per line, blank lines and lines starting with '#' ignored."""
    path = Path(path)
    if path.exists() and not path.is_file():  # was 'not found': a FIFO's read would block, a folder is no file
        raise ScalestudyError(f"lexicon {path} is not a regular file (a directory, a FIFO or a device)")
    if not path.is_file():
        raise ScalestudyError(f"lexicon file not found: {path}")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[: exc.start].count(b"\n") + 1
        raise ScalestudyError(f"{path} line {line} is not valid UTF-8") from None
    entries = [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
    if not entries:
        raise ScalestudyError(f"lexicon {path} has no entries")
    return entries


class PhraseMatcher:
    """Finds entity and phrase spans in a text's word/punctuation units; fitted once per corpus, deterministic."""

    def __init__(self, lexicon: Sequence[str] = (), names: frozenset[str] = frozenset(),
                 collocations: frozenset[tuple[str, str]] = frozenset()):
        self.entries: dict[str, list[tuple[str, ...]]] = {}
        for entry in lexicon:
            words = tuple(UNIT_RE.findall(entry))
            if words:
                self.entries.setdefault(words[0], []).append(words)
        for options in self.entries.values():
            options.sort(key=len, reverse=True)  # longest first: "land of Egypt" before "land"
        self.names = names
        self.collocations = collocations

    @classmethod
    def fit(cls, docs: Sequence[str], lexicon: Sequence[str] = (), min_count: int = 10, min_pmi: float = 3.0,
            common_words: int = 40, detect: bool = True) -> PhraseMatcher:
        if not detect:
            return cls(lexicon)
        words: Counter = Counter()
        pairs: Counter = Counter()
        for doc in docs:
            found = UNIT_RE.findall(doc)
            words.update(found)
            pairs.update(zip(found, found[1:]))
        lower: Counter = Counter()
        for w, c in words.items():
            lower[w.lower()] += c
        names = frozenset(w for w, c in words.items() if w[0].isupper() and 2 * c > lower[w.lower()])
        total = sum(words.values())
        # Function words ("of", "the", "had") make high-PMI pairs that are not phrases: leave out the most frequent.
        common = {w for w, _ in lower.most_common(common_words)}
        collocations = frozenset(
            (a, b) for (a, b), c in pairs.items()
            if c >= min_count and a.islower() and b.islower() and a not in common and b not in common
            and math.log(c * total / (words[a] * words[b])) >= min_pmi
        )
        return cls(lexicon, names, collocations)

    def spans(self, units: Sequence[str]) -> list[tuple[int, int, int]]:
        """Non-overlapping (first unit, last unit + 1, kind) phrase/entity spans over a text's units, left to right.

        `units` are the text's words and punctuation marks in order (UNIT_RE): adjacent words are separated by
        whitespace only, so a phrase never runs across punctuation. Lexicon entities come first: overlapping
        occurrences ("Son of God" / "God of Israel") merge into one span, so no occurrence is ever cut. Detected
        phrases fill the gaps between entities.
        """
        out: list[tuple[int, int, int]] = []
        for first, last in self._entities(units):
            if out and first < out[-1][1]:
                out[-1] = (out[-1][0], max(out[-1][1], last), ENTITY)
            else:
                out.append((first, last, ENTITY))
        phrases: list[tuple[int, int, int]] = []
        gap_start = 0
        for first, last, _ in out + [(len(units), len(units), WORD)]:
            phrases.extend(self._phrases(units, gap_start, first))
            gap_start = last
        return sorted(out + phrases)

    def _entities(self, units: Sequence[str]):
        """(first, last + 1) of the longest lexicon entry starting at each unit, in order."""
        entries = self.entries
        for i, word in enumerate(units):
            for words in entries.get(word, ()):
                if tuple(units[i: i + len(words)]) == words:
                    yield i, i + len(words)
                    break

    def _phrases(self, units: Sequence[str], start: int, stop: int) -> list[tuple[int, int, int]]:
        """Capitalised names and collocations inside units[start:stop], leftmost-longest."""
        out = []
        names, collocations = self.names, self.collocations
        i = start
        while i < stop:
            n = 0
            if units[i] in names:
                n = 1
                while i + n < stop and units[i + n] in names:
                    n += 1
                n = n if n >= 2 else 0
            if not n and i + 1 < stop and (units[i], units[i + 1]) in collocations:
                n = 2
            if n:
                out.append((i, i + n, PHRASE))
                i += n
            else:
                i += 1
        return out


def token_flags(text: str, offsets: Sequence[tuple[int, int]], matcher: PhraseMatcher) -> np.ndarray:
    """Per-token uint8 flags (unit start bit + kind) for one document's tokens, from their character offsets.

    Character units: each word / punctuation mark, with entity and phrase spans merged into one unit. Whitespace
    belongs to the unit after it (so a lone "▁" token joins the next word). A token touching two units merges them.
    """
    n_tokens = len(offsets)
    matches = list(UNIT_RE.finditer(text))
    if not matches or not n_tokens:
        return np.full(n_tokens, START, dtype=np.uint8)
    unit_start = np.array([m.start() for m in matches])
    is_start = np.ones(len(matches), dtype=bool)
    kind = np.zeros(len(matches), dtype=np.uint8)
    for first, last, k in matcher.spans([m.group() for m in matches]):
        is_start[first + 1: last] = False  # one unit for the whole span
        kind[first:last] = k
    unit_of_match = np.cumsum(is_start) - 1
    kind_of_unit = np.zeros(unit_of_match[-1] + 1, dtype=np.uint8)
    kind_of_unit[unit_of_match] = kind
    offs = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    begin = np.minimum(offs[:, 0], len(text) - 1)
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    # A token's first unit: the match holding its first character, or, when that is whitespace (the "▁" of a word
    # start), the next match. Its last unit: the match holding its last character (never before the first).
    on_space = _IS_SPACE[np.minimum(codes[begin], 0x3001)]
    first = np.where(on_space, np.searchsorted(unit_start, begin, side="left"),
                     np.searchsorted(unit_start, begin, side="right") - 1)
    first = np.clip(first, 0, len(matches) - 1)
    last = np.searchsorted(unit_start, np.maximum(offs[:, 1] - 1, begin), side="right") - 1
    last = np.maximum(last, first)
    lo, hi = unit_of_match[first], unit_of_match[last]
    prev_hi = np.maximum.accumulate(np.concatenate([[-1], hi[:-1]]))
    starts = lo > prev_hi
    return (starts.astype(np.uint8) * START) | (np.maximum(kind_of_unit[lo], kind_of_unit[hi]) << 1)


def unit_bounds(flags: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(starts, ends, kinds) of the units of a token window; the window's first token always starts a unit."""
    starts = np.flatnonzero(flags & START)
    if len(flags) and (len(starts) == 0 or starts[0] != 0):
        starts = np.concatenate([[0], starts])
    ends = np.append(starts[1:], len(flags))
    kinds = (flags[starts] >> 1) if len(starts) else np.zeros(0, np.uint8)
    return starts, ends, kinds


def knowledge_noise_mask(flags: np.ndarray, noise_density: float, rng: np.random.Generator,
                         mean_noise_span_length: float = 3.0, knowledge_weight: float = 4.0,
                         limit: int | None = None, max_targets: int | None = None, max_spans: int = 100
                         ) -> np.ndarray:
    """Noise mask made of whole units, about `noise_density` of the first `limit` tokens (default: all).

    Only units that end within the first `limit` tokens are masked; later tokens stay unmasked (slack that the
    pipeline uses to fill the inputs to exactly seq_len). With `max_targets`, a span is taken only while the targets
    (noise tokens + one sentinel per span + eos) stay within it; never more than `max_spans` spans (sentinels).

    Units are visited in a weighted random order (phrases and entities `knowledge_weight` times as likely to come
    early as words). A word starts a span that grows over the following plain words up to `mean_noise_span_length`
    tokens (T5's span length); a phrase or entity is one span by itself. A span is taken only if it keeps the
    total within the budget round(n * density), so the density is met from below, never overshot.
    """
    mask = np.zeros(len(flags), dtype=bool)
    n = len(flags) if limit is None else min(limit, len(flags))
    if n < 2:
        return mask
    budget = min(max(int(round(n * noise_density)), 1), n - 1)
    starts, ends, kinds = unit_bounds(flags)
    eligible = int(np.searchsorted(ends, n, side="right"))  # units ending within the limit
    starts, ends, kinds = starts[:eligible], ends[:eligible], kinds[:eligible]
    weights = np.where(kinds > WORD, knowledge_weight, 1.0)
    order = np.argsort(-rng.random(len(starts)) ** (1.0 / weights), kind="stable")  # Efraimidis-Spirakis
    unit_masked = np.zeros(len(starts), dtype=bool)
    masked = spans = 0
    max_targets = max_targets if max_targets is not None else n + 1
    for u in order:
        if unit_masked[u]:
            continue
        last = u
        if kinds[u] == WORD:
            while (ends[last] - starts[u] < mean_noise_span_length and last + 1 < len(starts)
                   and kinds[last + 1] == WORD and not unit_masked[last + 1]):
                last += 1
        size = ends[last] - starts[u]
        # A new span joins any masked neighbour instead of adding a sentinel.
        new_spans = 1 - int(u > 0 and unit_masked[u - 1]) - int(last + 1 < len(starts) and unit_masked[last + 1])
        if (masked + size > budget or masked + size + spans + new_spans + 1 > max_targets
                or spans + new_spans > max_spans):
            continue
        unit_masked[u: last + 1] = True
        mask[starts[u]: ends[last]] = True
        masked += size
        spans += new_spans
        if masked >= budget:
            break
    return mask
