"""Fused GPT blocks counted kernel by kernel (costmodel/fused_kernels.py) against the eager count of the same block
(costmodel/eager_kernels.gpt2_block): eager runs every fused kernel's reads and writes and more."""

from __future__ import annotations

import pytest

from scalestudy.costmodel.eager_kernels import gpt2_block
from scalestudy.costmodel.fused_kernels import gpt_block_fused
from scalestudy.costmodel.step import elementwise_bytes
from scalestudy.specs.presets import get_model


def test_gpt3_shape_moves_104_bytes_per_token_and_d_model():
    """a = 2, f = 4h: forward 2 x (2a + 3a + 1) h + 2a f = 38 h, backward 2 x (5a + 3a + 1 + 3a) h + 3a f = 66 h."""
    forward, backward = gpt_block_fused(1.0, 4.0, 2, False)
    assert (forward, backward) == (38.0, 66.0)


@pytest.mark.parametrize("ffn", ["gelu", "relu", "gelu_new"])
@pytest.mark.parametrize("a", [2, 4])
def test_eager_moves_at_least_the_fused_bytes(ffn, a):
    """Each pass: eager's separate dropout writes its output and the add reads it again (+2a per residual forward)."""
    fused = gpt_block_fused(1024.0, 4096.0, a, False)
    eager = gpt2_block(1024.0, 1024.0, 4096.0, a, ffn, eager_attention=False)
    assert eager[0] >= fused[0] + 4 * a * 1024 and eager[1] >= fused[1]


@pytest.mark.parametrize("name", ["gpt3-175b", "opt-175b", "mpt-30b", "gpt2"])
def test_published_presets_eager_not_below_fused(name):
    """The presets whose eager count fell below the footprint rule (0.82x) before the per-kernel fused count."""
    model = get_model(name)
    for flash in (True, False):
        fused = sum(elementwise_bytes(model, 1, 2048, 0, "bf16", flash, 1, False, "fused"))
        eager = sum(elementwise_bytes(model, 1, 2048, 0, "bf16", flash, 1, False, "eager"))
        assert eager > fused
