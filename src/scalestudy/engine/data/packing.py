"""Sequence packing: documents are concatenated, each followed by eos, into one token stream; examples are fixed
windows of that stream (a window may span a document boundary, as in T5 and GPT pre-training)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from scalestudy.engine.data.knowledge import START


def pack(docs: Sequence[Sequence[int]], eos_id: int) -> np.ndarray:
    """int32 stream: doc_0 eos doc_1 eos ... ."""
    lengths = np.fromiter((len(d) + 1 for d in docs), dtype=np.int64, count=len(docs))
    out = np.empty(int(lengths.sum()), dtype=np.int32)
    ends = np.cumsum(lengths)
    for doc, end, n in zip(docs, ends, lengths):
        out[end - n: end - 1] = doc
        out[end - 1] = eos_id
    return out


def pack_flags(flags: Sequence[np.ndarray]) -> np.ndarray:
    """Knowledge-unit flags aligned with `pack`'s stream; each eos is a unit of its own."""
    eos = np.array([START], dtype=np.uint8)
    return np.concatenate([part for f in flags for part in (np.asarray(f, dtype=np.uint8), eos)])


def num_windows(stream_len: int, stride: int, window: int) -> int:
    """Number of full windows of `window` tokens starting every `stride` tokens."""
    return 0 if stream_len < window else (stream_len - window) // stride + 1
