"""Jump detection flags points that break from a smooth power-law trend, and leaves smooth series alone."""

import numpy as np
import pytest

from scalestudy.errors import ScalestudyError
from scalestudy.scaling.jumps import detect_jumps

N = np.logspace(6, 10, 8)
LOSS = 1.69 + 406.4 / N**0.34  # saturating power law (Chinchilla's N term)


def test_smooth_series_are_not_flagged():
    assert detect_jumps(N, LOSS) == []
    assert detect_jumps(N, 3.0 * N**-0.1) == []
    noisy = LOSS * np.exp(0.01 * np.random.default_rng(0).normal(size=len(N)))
    assert detect_jumps(N, noisy) == []


def test_emergent_step_is_flagged_where_it_happens():
    accuracy = np.array([0.010, 0.011, 0.012, 0.013, 0.30, 0.35, 0.40, 0.42])
    flags = detect_jumps(N, accuracy)
    assert [f.index for f in flags] == [4]
    assert flags[0].test == "forecast" and flags[0].expected < 0.02 and flags[0].score > flags[0].threshold


def test_single_jump_in_a_noisy_loss_series():
    loss = LOSS * np.exp(0.01 * np.random.default_rng(0).normal(size=len(N)))
    loss[5] *= 0.75
    flags = detect_jumps(N, loss)
    assert [f.index for f in flags] == [5]
    assert flags[0].expected == pytest.approx(LOSS[5], rel=0.05)
    # Unsorted input: the flag refers to the series sorted by scale.
    perm = np.random.default_rng(1).permutation(len(N))
    assert [f.scale for f in detect_jumps(N[perm], loss[perm])] == [N[5]]


def test_metrics_that_cross_zero_use_a_linear_scale():
    y = 0.5 * np.log(N) - 8.0  # crosses zero: trend y = c + m log x
    assert detect_jumps(N, y) == []
    y2 = y.copy()
    y2[6] += 3.0
    assert [f.index for f in detect_jumps(N, y2)] == [6]


def test_bad_series_are_clear_errors():
    with pytest.raises(ScalestudyError, match="at least 4 runs"):
        detect_jumps(N[:3], LOSS[:3])
    with pytest.raises(ScalestudyError, match="positive scales"):
        detect_jumps(-N, LOSS)
    with pytest.raises(ScalestudyError, match="equal length"):
        detect_jumps(N, LOSS[:-1])


def test_grid_study_in_params_and_tokens():
    rng = np.random.default_rng(2)
    n, d = (a.ravel() for a in np.meshgrid(np.logspace(7, 9, 4), np.logspace(9, 10.5, 4)))
    loss = (1.69 + 406.4 / n**0.34 + 410.7 / d**0.28) * np.exp(0.01 * rng.normal(size=n.size))
    scale = np.column_stack([n, d])
    assert detect_jumps(scale, loss) == []  # many N per compute: smooth in (N, D), not in C alone
    accuracy = np.where(6 * n * d >= 1e19, 0.5, 0.02) * np.exp(0.01 * rng.normal(size=n.size))
    flags = detect_jumps(scale, accuracy)
    assert flags and all(6 * f.scale[0] * f.scale[1] >= 1e19 for f in flags)
    jumped = loss.copy()
    jumped[7] *= 0.7
    assert [f.scale for f in detect_jumps(scale, jumped)] == [(n[7], d[7])]
