"""Pipeline fill and drain on one device type: estimate() charges every stage its own slot, as the per-stage path.

In 1F1B (and GPipe) the first micro-batch's forward passes every stage before the slowest one starts its m slots
and the last micro-batch's backward passes them again after it: step = sum_k slot_k + (m - 1) x max_k slot_k + tail
(stages.pipeline_seconds). A stage lighter than the slowest (no LM head) adds its own slot, not the slowest's: a
head-heavy GPT-2 124M at pp 4 was 1.3x slow when every stage was charged the last stage's slot.
"""

import pytest

from scalestudy.costmodel.estimate import estimate
from scalestudy.errors import ScalestudyError
from scalestudy.specs.hardware import ClusterSpec, DeviceGroup, get_device
from scalestudy.specs.presets import get_model
from scalestudy.specs.strategy import Strategy, Workload

DEV = get_device("a100-80gb")
ONE = ClusterSpec(device=DEV, nodes=2, gpus_per_node=8, name="one")
# the same ranks written as a device group: estimate() hands it to the per-stage path (stages.estimate_stages)
GROUPED = ClusterSpec(device=DEV, nodes=2, gpus_per_node=8, name="grouped", groups=(DeviceGroup(DEV, 16, 1.0, 2),))


def _strategy(engine: str, zero: int, pp: int, mb: int, precision: str = "bf16", schedule: str = "1f1b",
              v: int = 1, sp: bool = True) -> Strategy:
    return Strategy(engine=engine, zero=zero, tp=2, pp=pp, micro_batch=mb, recompute="full", precision=precision,
                    pp_schedule=schedule, virtual_stages=v, kernels="fused", sequence_parallel=sp)


CASES = [  # (model, strategy, global batch): head-heavy small models, a DeepSpeed bf16 fold, GPipe, a 7B, interleaved
    ("gpt2", _strategy("megatron", 0, 4, 1), 8),
    ("gpt2", _strategy("deepspeed", 1, 2, 4), 16),
    ("gpt2", _strategy("deepspeed", 1, 2, 4, "fp16", "gpipe"), 16),
    ("llama-7b", _strategy("megatron", 1, 4, 1), 32),
    ("llama-7b", _strategy("megatron", 1, 4, 1, schedule="interleaved", v=2), 32),
]


@pytest.mark.parametrize("name,st,gb", CASES)
def test_one_device_pipeline_matches_the_per_stage_path(name, st, gb):
    model, work = get_model(name), Workload(global_batch=gb, seq_len=1024)
    one, grouped = estimate(model, ONE, st, work), estimate(model, GROUPED, st, work)
    assert one.bubble_s == pytest.approx(grouped.bubble_s, rel=1e-9)
    assert one.step_s == pytest.approx(grouped.step_s, rel=1e-9)


def test_one_micro_batch_passes_each_stage_once():
    """m = 1: the step is every stage's slot once + the slowest tail; the LM head's stage is the slowest by far, the
    others add only their own (lighter) slots to the fill and drain."""
    model, work = get_model("gpt2"), Workload(global_batch=8, seq_len=1024)
    st = _strategy("megatron", 0, 4, 4)  # tp 2 x pp 4 on 16 ranks: dp 2 x mb 4 = 8, one micro-batch per step
    e = estimate(model, ONE, st, work)
    assert e.layout.grad_accum == 1
    stages = estimate(model, GROUPED, st, work).stages
    slots = [x.slot_s for x in stages]
    assert max(slots) == slots[-1] > 1.2 * min(slots)
    assert e.bubble_s == pytest.approx(sum(slots) - max(slots), rel=1e-9)
    assert e.step_s == pytest.approx(sum(slots) + max(x.tail_s for x in stages), rel=1e-9)


def test_interleaved_on_a_mixed_cluster_needs_a_decoder_and_whole_rounds():
    """The per-stage path runs the interleaved schedule for decoder-only models (a T5's chunks would mix encoder and
    decoder blocks per device) and, as estimate(), with micro-batches per step a multiple of pp (Megatron-LM)."""
    st = _strategy("megatron", 1, 4, 1, schedule="interleaved", v=2, sp=False)
    with pytest.raises(ScalestudyError, match="decoder-only"):
        estimate(get_model("t5-3b"), GROUPED, st, Workload(global_batch=32, seq_len=512))
    with pytest.raises(ScalestudyError, match="multiple of pp 4"):
        estimate(get_model("llama-7b"), GROUPED, st, Workload(global_batch=12, seq_len=1024))


def test_deepspeed_pipeline_accumulates_each_micro_batch_gradient(monkeypatch):
    """DeepSpeed's pipeline engine adds every micro-batch's weight gradients into an accumulator: bf16 the
    BF16_Optimizer fold (18 B per parameter), fp16 autograd's AccumulateGrad in place (3 x 2 B: .grad is neither
    cleared nor hooked under ZeRO 0/1); nothing on other engines (Megatron's fused wgrad accumulates in the GEMM)."""
    from scalestudy.costmodel.params import param_breakdown
    from scalestudy.costmodel.terms import hp_grad_accumulation_s

    model = get_model("llama-7b")
    p = param_breakdown(model)
    per_layer = p.decoder_layer_matmul // 2 + p.decoder_layer - p.decoder_layer_matmul  # tp 2
    fp16 = _strategy("deepspeed", 1, 4, 1, precision="fp16")
    assert hp_grad_accumulation_s(model, fp16, DEV, 2, 8, False) == pytest.approx(
        6 * 8 * per_layer / DEV.hbm_bytes_per_s)
    assert hp_grad_accumulation_s(model, fp16, DEV, 2, 8, True) == hp_grad_accumulation_s(model, fp16, DEV, 2, 8,
                                                                                          False)
    bf16 = _strategy("deepspeed", 1, 4, 1)
    assert hp_grad_accumulation_s(model, bf16, DEV, 2, 8, False) == pytest.approx(
        3 * hp_grad_accumulation_s(model, fp16, DEV, 2, 8, False))
    assert hp_grad_accumulation_s(model, _strategy("megatron", 1, 4, 1, precision="fp16"), DEV, 2, 8, False) == 0
    work = Workload(global_batch=32, seq_len=1024)
    with_add = estimate(model, ONE, fp16, work)
    assert with_add.compute_s == pytest.approx(estimate(model, GROUPED, fp16, work).compute_s, rel=1e-9)
    import scalestudy.costmodel.estimate as est_mod
    import scalestudy.costmodel.terms as terms_mod
    for mod in (est_mod, terms_mod):  # the add switched off: every one of the m slots is that much shorter
        monkeypatch.setattr(mod, "_deepspeed_pipeline_accumulates", terms_mod._deepspeed_bf16_pipeline)
    without = estimate(model, ONE, fp16, work)
    add = 6 * 8 * per_layer / DEV.hbm_bytes_per_s  # 32 layers over pp 4
    assert with_add.compute_s - without.compute_s == pytest.approx(with_add.layout.grad_accum * add, rel=1e-6)


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_one_device_t5_pipeline_memory_counts_each_stages_own_blocks(recompute):
    """A T5's encoder stack comes first: the stages holding it keep activations at the encoder length, more than
    the average block, as the per-stage path counts (t5-3b pp 2 without recompute: 10.0 GiB, not the 6.7 GiB of an
    even spread over encoder and decoder blocks)."""
    model, work = get_model("t5-3b"), Workload(global_batch=64, seq_len=512, target_len=128)
    st = _strategy("megatron", 1, 2, 4).replace(recompute=recompute)
    one, grouped = estimate(model, ONE, st, work), estimate(model, GROUPED, st, work)
    busiest = max(x.memory.activations for x in grouped.stages)  # `memory` there: the stage nearest its capacity
    assert one.memory.activations == pytest.approx(busiest, rel=1e-9)


@pytest.mark.parametrize("pp", [1, 2])
def test_t5_under_flash_holds_its_position_bias_masks_on_both_paths(pp):
    """A Hugging Face T5 under attention flash runs SDPA's memory-efficient kernel with its position bias as a float
    mask (costmodel/attention_bias.py): the saved masks and the bias gradient are priced on a cluster written as a
    device group (per-stage path) as on one device type; a pipeline stage holds those of the blocks it runs."""
    model, work = get_model("t5-3b"), Workload(global_batch=64, seq_len=512, target_len=128)
    st = Strategy(engine="ddp", pp=pp, micro_batch=4, attention="flash", attention_kernel="mem-efficient")
    one, grouped = estimate(model, ONE, st, work), estimate(model, GROUPED, st, work)
    assert one.strategy.attention_kernel == grouped.strategy.attention_kernel == "mem-efficient"
    busiest = max(x.memory.activations for x in grouped.stages)
    assert one.memory.activations == pytest.approx(busiest, rel=1e-9)
    unmasked = estimate(model, ONE, st.replace(attention_kernel="fa2"), work)
    assert one.memory.activations > unmasked.memory.activations  # the masks, at every pp


FSDP_CASES = [("llama-7b", 32, 1), ("llama-7b", 64, 2), ("gpt2", 32, 4)]


@pytest.mark.parametrize("name,gb,mb", FSDP_CASES)
def test_fsdp_exposure_is_in_every_stage_slot(name, gb, mb):
    """engine fsdp at pp > 1: the exposed FSDP gathers / reduce-scatters of every micro-batch (terms._sharded_dp_comm,
    all per micro-batch; train's pipeline Stage reduce-scatters each one) lengthen each stage's slot, so the fill and
    drain carry (pp - 1) more of them than the m slots (stage_terms.sharded_dp_in_slot); estimate() and the per-stage
    path agree, and the other engines still reduce after the drain."""
    model, work = get_model(name), Workload(global_batch=gb, seq_len=1024)
    st = Strategy(engine="fsdp", zero=3, tp=2, pp=2, micro_batch=mb, recompute="full", kernels="fused")
    one, grouped = estimate(model, ONE, st, work), estimate(model, GROUPED, st, work)
    assert one.step_s == pytest.approx(grouped.step_s, rel=1e-9)
    assert one.bubble_s == pytest.approx(grouped.bubble_s, rel=1e-9)
    assert one.dp_comm_s == pytest.approx(grouped.dp_comm_s, rel=1e-9) and one.dp_comm_s > 0
    stages = grouped.stages
    ga = one.layout.grad_accum
    assert all(x.dp_slot_s == pytest.approx(x.dp_comm_s / ga, rel=1e-12) for x in stages)
    assert all(x.tail_s == pytest.approx(x.optimizer_s + x.offload_s + x.framework_s + x.tied_sync_s) for x in stages)
    # one stage: nothing to fill, the exposure once per micro-batch as before
    flat = estimate(model, ONE, Strategy(engine="fsdp", zero=3, tp=2, pp=1, micro_batch=mb, recompute="full",
                                         kernels="fused"), work)
    assert flat.bubble_s == 0.0
    mega = estimate(model, GROUPED, _strategy("megatron", 1, 2, mb), work).stages
    assert all(x.dp_slot_s == 0.0 for x in mega)
