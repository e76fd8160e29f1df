"""T5 span corruption: T5's lengths, exact shapes, and inputs + targets reconstruct the original tokens."""

import numpy as np
import pytest

from scalestudy.engine.data.span_corruption import (
    apply_noise_mask,
    compute_input_and_target_lengths,
    corrupted_lengths,
    random_spans_noise_mask,
)
from scalestudy.errors import ScalestudyError

V, EOS = 1000, 1


def reconstruct(inputs, targets, vocab_size=V, eos=EOS):
    """Undo the corruption: replace sentinel j in the inputs by the tokens after sentinel j in the targets."""
    assert inputs[-1] == eos and targets[-1] == eos
    hidden, current = {}, None
    for t in targets[:-1]:
        if t >= vocab_size - 100:
            current = int(t)
            hidden[current] = []
        else:
            hidden[current].append(int(t))
    out = []
    for t in inputs[:-1]:
        out.extend(hidden.pop(int(t)) if t >= vocab_size - 100 else [int(t)])
    assert not hidden
    return out


def test_t5_published_lengths():
    # T5 (Raffel et al.): 512 inputs at 15% noise, mean span 3 -> 568 raw tokens and 114 targets.
    assert compute_input_and_target_lengths(512, 0.15, 3.0) == (568, 114)
    assert compute_input_and_target_lengths(128) == (141, 29)
    raw, tgt = compute_input_and_target_lengths(512, 0.15, 3.0, target_len=100)
    assert corrupted_lengths(raw, 0.15, 3.0)[1] <= 100 and corrupted_lengths(raw + 1, 0.15, 3.0)[1] > 100
    with pytest.raises(ScalestudyError, match="noise_density must be in"):
        compute_input_and_target_lengths(128, 1.5)
    with pytest.raises(ScalestudyError, match="too short"):
        compute_input_and_target_lengths(128, target_len=1)


@pytest.mark.parametrize("seq_len,density,span", [(64, 0.15, 3.0), (128, 0.15, 3.0), (100, 0.3, 5.0), (256, 0.5, 2.0)])
def test_exact_lengths_and_reconstruction(seq_len, density, span):
    raw, target_len = compute_input_and_target_lengths(seq_len, density, span)
    for seed in range(50):
        rng = np.random.default_rng(seed)
        tokens = rng.integers(3, V - 100, size=raw)
        mask = random_spans_noise_mask(raw, density, rng, span)
        noise = int(round(raw * density))
        assert mask.sum() == noise and not mask[0]  # T5: exact noise count, starts with non-noise
        spans = int((mask & ~np.r_[False, mask[:-1]]).sum())
        assert spans == max(int(round(noise / span)), 1)
        inputs, targets = apply_noise_mask(tokens, mask, V, EOS)
        assert len(inputs) <= seq_len and len(targets) == target_len
        if density != 0.5:
            assert len(inputs) == seq_len
        assert reconstruct(inputs, targets) == tokens.tolist()
        sentinels = inputs[inputs >= V - 100]
        assert sentinels.tolist() == list(range(V - 1, V - 1 - spans, -1))  # <extra_id_0> = V-1, descending


def test_more_spans_than_sentinels_is_a_clear_error():
    mask = np.zeros(400, dtype=bool)
    mask[::2] = True
    with pytest.raises(ScalestudyError, match="200 noise spans exceed the 100 sentinels"):
        apply_noise_mask(np.arange(400), mask, V, EOS)


def test_mask_starting_with_noise_is_handled():
    tokens = np.arange(10, 20)
    mask = np.array([1, 1, 0, 0, 1, 0, 0, 0, 1, 1], dtype=bool)
    inputs, targets = apply_noise_mask(tokens, mask, V, EOS)
    assert inputs.tolist() == [999, 12, 13, 998, 15, 16, 17, 997, EOS]
    assert targets.tolist() == [999, 10, 11, 998, 14, 997, 18, 19, EOS]
    assert reconstruct(inputs, targets) == tokens.tolist()


def test_lengths_bisection_matches_the_token_by_token_scan_and_huge_lengths_are_instant():
    """T5's helper scans raw lengths one by one (seq_len 1e8 took 90 s); the bisection must give the same answer."""
    import time

    from scalestudy.specs.span_lengths import compute_input_and_target_lengths, corrupted_lengths

    def scan(seq_len, density, span, target_len):
        raw = 2
        while raw < 4 * seq_len and corrupted_lengths(raw + 1, density, span)[0] <= seq_len and (
                target_len is None or corrupted_lengths(raw + 1, density, span)[1] <= target_len):
            raw += 1
        return raw

    for density, span in ((0.15, 3.0), (0.3, 1.0), (0.8, 7.0)):
        for seq_len in (*range(4, 300, 7), 512, 4096):
            for target_len in (None, 20, 114):
                if corrupted_lengths(2, density, span)[1] > (target_len or 10**9):
                    continue
                raw, _ = compute_input_and_target_lengths(seq_len, density, span, target_len)
                assert raw == scan(seq_len, density, span, target_len), (density, span, seq_len, target_len)
    # closed form, not a scan: microseconds for 10^12 tokens (a scan would take hours); CPU time of this process,
    # with a bound no load or scheduling delay reaches (a wall-clock 0.1 s could be one lost time slice)
    t0 = time.process_time()
    assert compute_input_and_target_lengths(10**12)[1] == 222_222_222_222
    assert time.process_time() - t0 < 1.0
