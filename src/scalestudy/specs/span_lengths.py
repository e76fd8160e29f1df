"""Lengths of T5 span corruption (Raffel et al. 2020, T5 codebase `compute_input_and_target_lengths`): pure Python.

A window of `raw_len` tokens loses `noise` tokens in `spans` spans; inputs keep the rest plus one sentinel per span
plus eos, targets hold one sentinel per span plus the noise tokens plus eos. The masking itself (numpy) lives in
engine/data/span_corruption.py; the run configuration (specs/run.py) uses these lengths to resolve `target_len`.
"""

from __future__ import annotations

from scalestudy.errors import ScalestudyError


def noise_counts(raw_len: int, noise_density: float, mean_span: float) -> tuple[int, int]:
    """(noise tokens, noise spans) for a window, with T5's guards against degenerate windows."""
    length = max(raw_len, 2)
    noise = min(max(int(round(length * noise_density)), 1), length - 1)
    spans = max(int(round(noise / mean_span)), 1)
    return noise, spans


def corrupted_lengths(raw_len: int, noise_density: float, mean_span: float) -> tuple[int, int]:
    """(inputs length, targets length) after corrupting `raw_len` tokens, eos included."""
    noise, spans = noise_counts(raw_len, noise_density, mean_span)
    return raw_len - noise + spans + 1, noise + spans + 1


def compute_input_and_target_lengths(seq_len: int, noise_density: float = 0.15, mean_noise_span_length: float = 3.0,
                                     target_len: int | None = None) -> tuple[int, int]:
    """(raw_len, target_len): the longest raw window whose inputs fit `seq_len`, and its targets length.

    Like T5's helper, but when `target_len` is given the window must also keep the targets within it (raw_len then
    shrinks and inputs come out shorter than seq_len, padded). Returned target_len is the exact need (<= given one).
    """
    if not 0.0 < noise_density < 1.0:
        raise ScalestudyError(f"noise_density must be in (0, 1), got {noise_density}")
    if mean_noise_span_length < 1.0:
        raise ScalestudyError(f"mean_noise_span_length must be >= 1, got {mean_noise_span_length}")
    if seq_len < 4:
        raise ScalestudyError(f"seq_len must be >= 4 for span corruption, got {seq_len}")

    def fits(raw: int) -> bool:
        inp, tgt = corrupted_lengths(raw, noise_density, mean_noise_span_length)
        return inp <= seq_len and (target_len is None or tgt <= target_len)

    raw = 2
    if not fits(raw):
        raise ScalestudyError(f"target_len {target_len} is too short for span corruption (needs at least "
                              f"{corrupted_lengths(2, noise_density, mean_noise_span_length)[1]})")
    # Inputs grow by at most one per raw token, so raw never exceeds ~seq_len / (1 - density) + a few. Inputs and
    # targets lengths never shrink as raw grows (noise and spans grow by 0 or 1 per token, spans only with noise), so
    # the longest fitting window is found by bisection: the result of T5's token-by-token scan in O(log seq_len).
    high = 4 * seq_len
    if fits(high):
        raw = high
    else:
        while high - raw > 1:  # fits(raw), not fits(high)
            mid = (raw + high) // 2
            raw, high = (mid, high) if fits(mid) else (raw, mid)
    targets = corrupted_lengths(raw, noise_density, mean_noise_span_length)[1]
    if noise_density == 0.5 and target_len is None and targets > seq_len:
        raw -= 1  # T5's "minor hack": keep targets no longer than inputs at density 0.5
        targets = corrupted_lengths(raw, noise_density, mean_noise_span_length)[1]
    return raw, targets
