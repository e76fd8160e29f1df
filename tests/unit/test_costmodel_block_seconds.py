"""A T5 pipeline stage's blocks are priced by their seconds, not their FLOPs (costmodel/block_seconds.py): a decoder
block runs more kernels and smaller GEMMs (the target length) than an encoder block, so it costs a larger fraction of
an encoder block's seconds than of its FLOPs. Each test is a hand computation from step.compute_times of the whole
model with one block more, independent of block_seconds' own arithmetic."""

from __future__ import annotations

import dataclasses

import pytest

from scalestudy.costmodel.alignment import pads_vocab
from scalestudy.costmodel.block_seconds import block_seconds, encoder_decoder_time_shares
from scalestudy.costmodel.constants import stored
from scalestudy.costmodel.estimate import estimate
from scalestudy.costmodel.fp8 import recipe as fp8_recipe
from scalestudy.costmodel.op_checkpoint import early_stop
from scalestudy.costmodel.options import DEFAULT_OPTIONS
from scalestudy.costmodel.stages import estimate_stages, layer_costs
from scalestudy.costmodel.step import compute_times
from scalestudy.costmodel.memory import loss_kernel
from scalestudy.costmodel.terms import attention_kernel
from scalestudy.specs.hardware import ClusterSpec, get_device
from scalestudy.specs.presets import get_model
from scalestudy.specs.strategy import Strategy, Workload, logit_shards, resolve_software, vocab_shards

# HF's t5-3b (d_model 1024, d_ff 16384) on 4 A100 nodes, laid out as NeMo's launcher CI runs its T5 3B
# (nemoci2208t5: tp 2, pp 2, encoder-first split, 512 / 128 tokens); megatron engine, no recompute: nothing but the
# blocks and the head in a stage's compute
DEV = get_device("a100-80gb")
CLUSTER = ClusterSpec(device=DEV, nodes=4, gpus_per_node=8, name="t5")
STRATEGY = Strategy(engine="megatron", zero=0, tp=2, pp=2, micro_batch=24, recompute="none", precision="bf16",
                    attention="eager", sequence_parallel=False)
WORK = Workload(global_batch=1920, seq_len=512, target_len=128)


def _passes(model, st: Strategy) -> float:
    """Forward + backward seconds of one micro-batch of `model`'s blocks, as stages.estimate_stages prices them."""
    ct = compute_times(model, DEV, st.precision, st.tp, st.micro_batch, WORK.seq_len, WORK.target_len, st.recompute,
                       st.attention == "flash", False, stored(), st.kernels, attention_kernel(st, DEV), early_stop(st),
                       loss_kernel(st), pads_vocab(st.engine), vocab_shards(st, st.tp), st.cublas, st.tf32,
                       logit_shards(st, st.tp), fp8_recipe(st.engine))
    return ct.forward + ct.backward


def _one_more(model, encoder: int = 0, decoder: int = 0):
    return dataclasses.replace(model, num_layers=model.num_layers + encoder,
                               num_decoder_layers=model.num_decoder_layers + decoder)


def test_a_decoder_block_costs_more_of_an_encoder_block_in_seconds_than_in_flops():
    """Seconds of one block of each kind, each the difference of the whole model with one such block more; their
    ratio against the FLOP ratio stages.layer_costs shares by: 0.544 against 0.447 here (pipe2: 0.56-0.79 against
    0.46-0.51 over NeMo's T5 shapes)."""
    model, st = get_model("t5-3b"), resolve_software(STRATEGY, get_model("t5-3b"))
    base = _passes(model, st)
    enc_s = _passes(_one_more(model, encoder=1), st) - base
    dec_s = _passes(_one_more(model, decoder=1), st) - base
    costs, _ = layer_costs(model, WORK.seq_len, WORK.target_len)
    enc_f, dec_f = costs[0], costs[-1]
    assert 0.42 < dec_f / enc_f < 0.52  # its FLOPs: a decoder block over 128 targets + cross-attention
    assert 0.50 < dec_s / enc_s < 0.80  # its seconds: more kernels, smaller GEMMs
    assert dec_s / enc_s > dec_f / enc_f + 0.05
    # every compute term is a sum over blocks of a per-kind amount (block_seconds' premise): the whole model's
    # blocks are its encoder blocks' and decoder blocks' seconds, nothing else; block_seconds agrees
    assert base == pytest.approx(model.num_layers * enc_s + model.num_decoder_layers * dec_s, rel=1e-9)
    assert block_seconds(base, base + dec_s, model.num_layers, model.num_decoder_layers) == \
        pytest.approx((enc_s, dec_s), rel=1e-9)


def test_a_stage_costs_its_own_blocks_seconds_on_both_paths():
    """pp 2, encoder first: stage 0 holds the 24 encoder blocks, stage 1 the 24 decoder blocks + the LM head. Each
    stage's compute per micro-batch is its blocks' seconds (by hand: 24 x an encoder block's, 24 x a decoder block's
    + the head), not its share of the FLOPs times the whole; estimate() charges the slowest of the two."""
    model = get_model("t5-3b")
    st = resolve_software(STRATEGY, model)
    base = _passes(model, st)
    enc_s = _passes(_one_more(model, encoder=1), st) - base
    dec_s = _passes(_one_more(model, decoder=1), st) - base
    assert st.stage_split(model.total_layers) == (24, 24)
    assert encoder_decoder_time_shares(model, (24, 24), lambda m: _passes(m, st)) == \
        pytest.approx((24 * enc_s / base, 24 * dec_s / base), rel=1e-9)
    per_stage = estimate_stages(model, CLUSTER, st, WORK, DEFAULT_OPTIONS)  # (estimate() resolves the software)
    first, last = per_stage.stages
    head = last.compute_s - 24 * dec_s  # the LM head's forward + backward, on the last stage only
    assert first.compute_s == pytest.approx(24 * enc_s, rel=1e-9)
    assert 0 < head < 0.1 * last.compute_s
    costs, _ = layer_costs(model, WORK.seq_len, WORK.target_len)
    flop_share = sum(costs[:24]) / sum(costs)
    assert abs(first.compute_s / (flop_share * base) - 1) > 0.05  # the FLOP split: a different figure
    one = estimate(model, CLUSTER, STRATEGY, WORK)
    ga = one.layout.grad_accum
    assert one.compute_s / ga == pytest.approx(max(first.compute_s, last.compute_s), rel=1e-9)
