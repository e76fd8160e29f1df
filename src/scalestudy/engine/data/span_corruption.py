"""T5 span corruption (Raffel et al. 2020, T5 codebase `random_spans_noise_mask`, `compute_input_and_target_lengths`).

A window of `raw_len` tokens is split into alternating non-noise / noise spans (always starting with non-noise);
each noise span is replaced by one sentinel in the inputs, and the targets list each sentinel followed by the tokens
it hides. Both end with eos:
    inputs  = non-noise tokens + one sentinel per span + eos   (length raw - noise + spans + 1)
    targets = one sentinel per span + noise tokens + eos       (length noise + spans + 1)
With noise = round(raw * density) and spans = round(noise / mean_span_length), as in T5.
Example: seq_len 512, density 0.15, mean span 3 -> raw_len 568, target_len 114 (T5's published numbers).
"""

from __future__ import annotations

import numpy as np

from scalestudy.errors import ScalestudyError

# The length arithmetic is pure Python in specs/ (the run configuration resolves target lengths without the engine).
from scalestudy.specs.span_lengths import (compute_input_and_target_lengths, corrupted_lengths,  # noqa: F401
                                           noise_counts)


def _random_segmentation(num_items: int, num_segments: int, rng: np.random.Generator) -> np.ndarray:
    """Lengths of a random partition of `num_items` into `num_segments` non-empty segments."""
    first_in_segment = np.zeros(num_items, dtype=np.int64)
    first_in_segment[1:] = rng.permutation(np.arange(num_items - 1) < num_segments - 1)
    segment_id = np.cumsum(first_in_segment)
    return np.bincount(segment_id, minlength=num_segments)


def random_spans_noise_mask(length: int, noise_density: float, rng: np.random.Generator,
                            mean_noise_span_length: float = 3.0) -> np.ndarray:
    """Boolean noise mask of `length` tokens with T5's span statistics (non-noise first)."""
    orig_length = length
    length = max(length, 2)
    noise, spans = noise_counts(length, noise_density, mean_noise_span_length)
    noise_lengths = _random_segmentation(noise, spans, rng)
    nonnoise_lengths = _random_segmentation(length - noise, spans, rng)
    interleaved = np.stack([nonnoise_lengths, noise_lengths], axis=1).reshape(-1)
    span_starts = np.cumsum(interleaved)[:-1]
    start_indicator = np.zeros(length, dtype=np.int64)
    start_indicator[span_starts] = 1
    is_noise = np.cumsum(start_indicator) % 2 == 1
    return is_noise[:orig_length]


def apply_noise_mask(tokens: np.ndarray, mask: np.ndarray, vocab_size: int, eos_id: int
                     ) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, targets): each maximal noise run becomes one sentinel (`<extra_id_0>` = vocab_size-1, descending).

    Inputs keep the non-noise tokens with sentinel j in place of noise run j; targets are sentinel j followed by run
    j's tokens, for every run. For T5's masks this equals T5's noise_span_to_unique_sentinel /
    nonnoise_span_to_unique_sentinel pair; it also handles masks that start with noise (knowledge masking).
    """
    tokens = np.asarray(tokens, dtype=np.int64)
    mask = np.asarray(mask, dtype=bool)
    span_start = mask & ~np.concatenate([[False], mask[:-1]])
    n_spans = int(span_start.sum())
    if n_spans > 100:
        raise ScalestudyError(f"{n_spans} noise spans exceed the 100 sentinels; lower seq_len or noise density")
    sentinel = vocab_size - 1 - (np.cumsum(span_start) - 1)
    inputs = np.where(span_start, sentinel, tokens)[~mask | span_start]
    noise_at = np.flatnonzero(mask)
    starts = span_start[noise_at]
    targets = np.empty(len(noise_at) + n_spans, dtype=np.int64)
    positions = np.arange(len(noise_at)) + np.cumsum(starts)
    targets[positions] = tokens[noise_at]
    targets[positions[starts] - 1] = sentinel[noise_at][starts]
    return np.append(inputs, eos_id), np.append(targets, eos_id)


def pad_to(values: np.ndarray, length: int, pad: int) -> np.ndarray:
    if len(values) > length:
        raise ScalestudyError(f"internal: sequence of {len(values)} tokens does not fit length {length}")
    out = np.full(length, pad, dtype=np.int64)
    out[: len(values)] = values
    return out
