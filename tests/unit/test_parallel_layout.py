"""tp/pp layouts: one-line errors before any process starts, and the layer split over pipeline chunks."""

from __future__ import annotations

import pytest

from scalestudy.errors import ScalestudyError
from scalestudy.specs.parallel_layout import chunk_layer_counts
from scalestudy.specs.run import RunConfig
from scalestudy.specs.strategy import Strategy


def config(**flat) -> RunConfig:
    base = {"model": "llama-tiny", "objective": "causal", "engine": "fsdp", "zero": 3, "nproc": 4, "seq_len": 32,
            "global_batch": 8, "micro_batch": 1, "precision": "fp32"}
    return RunConfig().replace(**{**base, **flat})


@pytest.mark.parametrize("flat, message", [
    ({"tp": 3}, "tp 3 x pp 1 does not divide the world size 4"),
    ({"tp": 4}, "tp 4 does not divide the 2 key/value heads of llama-tiny"),  # GQA: 4 query heads, 2 KV heads
    ({"tp": 8, "nproc": 8}, "tp 8 does not divide the 4 attention heads of llama-tiny"),
    ({"pp": 4}, "pp 4 exceeds the 2 layers of llama-tiny"),
    ({"pp": 2, "pp_schedule": "interleaved", "virtual_stages": 2}, "pp 2 x virtual_stages 2 exceeds the 2 layers"),
    ({"pp": 2, "stage_layers": [2, 1]}, "stage_layers sum to 3, the model has 2 layers"),
    ({"tp": 2, "seq_len": 33}, "seq_len 33 is not divisible"),
    ({"pp": 2, "global_batch": 2}, "pp 2 needs >= 2 micro-batches per step"),
    ({"pp": 2, "tp": 2, "engine": "deepspeed", "zero": 1}, "tp/pp > 1 run on FSDP2"),
    ({"tp": 2, "engine": "ddp", "zero": 1}, "tp/pp > 1 run on FSDP2"),
    ({"tp": 8, "nproc": 8, "model": "gpt2-tiny"}, "tp 8 does not divide the 4 attention heads of gpt2-tiny"),
    ({"tp": 2, "model": "t5-tiny", "objective": "span", "target_len": 7}, "target_len 7 is not divisible"),
])
def test_bad_layouts_are_one_line_errors(flat, message):
    with pytest.raises(ScalestudyError, match=message.replace("(", r"\(").replace("+", r"\+")) as info:
        config(**flat).validate()
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("flat", [
    {"tp": 2}, {"pp": 2}, {"tp": 2, "pp": 2}, {"tp": 2, "pp": 2, "sequence_parallel": False},
    {"pp": 2, "engine": "ddp", "zero": 0, "stage_layers": [1, 1]},
    {"tp": 2, "pp": 2, "model": "t5-tiny", "objective": "span", "target_len": 8, "pp_schedule": "interleaved",
     "virtual_stages": 2},
    {"pp": 2, "model": "gpt2-tiny"}, {"tp": 2, "pp": 2, "model": "gpt2-tiny"},  # GPT-2's fused q/k/v re-laid out
])
def test_supported_layouts_validate(flat):
    _, strategy, _, layout = config(**flat).validate()
    assert layout.tp * layout.pp * layout.dp == 4 and strategy.tp == flat.get("tp", 1)


@pytest.mark.parametrize("pp, v, stage_layers, layers, expected", [
    (1, 1, (), 4, [4]),
    (2, 1, (), 5, [3, 2]),
    (2, 1, (3, 1), 4, [3, 1]),  # uneven, e.g. a slower second device
    (2, 2, (), 4, [1, 1, 1, 1]),  # interleaved: chunk s on rank s % pp
    (2, 2, (3, 2), 5, [2, 1, 1, 1]),  # rank 0 holds chunks 0 and 2 (2 + 1 layers), rank 1 chunks 1 and 3
])
def test_layers_per_chunk(pp, v, stage_layers, layers, expected):
    strategy = Strategy(engine="fsdp", zero=3, pp=pp, pp_schedule="interleaved" if v > 1 else "1f1b",
                        virtual_stages=v, stage_layers=stage_layers)
    assert chunk_layer_counts(strategy, layers) == expected
