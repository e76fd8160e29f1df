"""Unfused optimizer loops (Strategy.optimizer_loop, costmodel/step.optimizer_loop_s): a Python loop over the
parameter tensors launches every op of the update as its own kernel -- torch AdamW foreach=False / transformers'
AdamW 8 per tensor, nanoT5's AdamWScale 12 and two host syncs, the 2019 fp16 FP16_Optimizer of Megatron-LM 9 and
two host syncs, HF Trainer on torch 1.x 10 (AdamW, clip, zero_grad) -- priced at the fitted per-launch cost, plus
the bytes those ops move beyond the fused update's."""

import pytest

from scalestudy.costmodel import published
from scalestudy.costmodel.constants import stored
from scalestudy.costmodel.estimate import estimate
from scalestudy.costmodel.step import OPTIMIZER_BYTES, OPTIMIZER_LOOPS, optimizer_loop_s
from scalestudy.costmodel.zero3 import zero3_gathers
from scalestudy.errors import ScalestudyError
from scalestudy.specs.hardware import get_device, make_cluster
from scalestudy.specs.strategy import OPTIMIZER_LOOPS as strategy_loops
from scalestudy.specs.strategy import Strategy, Workload


@pytest.mark.parametrize("loop,device,launches,loop_bytes", [
    ("engine", "a100-80gb", 0, None),  # fused / multi-tensor: OPTIMIZER_BYTES alone (terms.optimizer_offload)
    ("per-tensor", "a100-80gb", 8, 80.0),
    ("per-tensor-rms", "h100-80gb", 12 + 2, 76.0),  # + the two syncs, each one launch gap
    ("per-tensor-rms", "local-cpu", 0, None),  # CPU profiles measure their own optimizer step
    ("per-tensor-fp16", "v100-32gb", 9 + 2, 68.0),  # Megatron-LM 2019 FP16_Optimizer: overflow sum + clip norm syncs
    ("per-tensor-hf", "v100-32gb", 7 + 2 + 1, 88.0),  # HF Trainer, torch 1.x: AdamW, clip norm + scale, zero_grad
    ("deepspeed-serial", "v100-32gb", 4 + 2, 58.0),  # DeepSpeed ZeRO-1/2 < 0.13.2: overflow sum + norm .item()
    ("foreach", "h100-80gb", 0, 80.0),  # torch AdamW's GPU default (train): the per-tensor passes, foreach launches
    ("deepspeed-unfused", "a100-80gb", 13 + 1, 114.0),  # DeepSpeed 0.19 ZeRO-0 16-bit FP16_UnfusedOptimizer (train)
])
def test_loop_pays_its_launches_per_tensor_and_its_extra_bytes(loop, device, launches, loop_bytes):
    dev, k = get_device(device), 3e-5
    seconds = optimizer_loop_s(loop, 2.5e8, 282, "bf16", dev, k)
    if loop_bytes is None:
        assert seconds == 0.0
    else:
        extra = 2.5e8 * (loop_bytes - OPTIMIZER_BYTES["bf16"]) / dev.hbm_bytes_per_s
        assert seconds == pytest.approx(282 * launches * k + extra)


def test_estimate_adds_it_to_the_optimizer_step_once_per_step_over_the_ranks_tensors():
    """nanoT5's T5 v1.1 base: 282 tensors, one GPU, two micro-batches; DeepSpeed ZeRO-1 steps one flat partition
    (its 1/dp share of the bytes); an offloaded optimizer runs CPU Adam, no device loop."""
    row = {r["id"]: r for r in published.load()["throughput"]}["nanot5-base-a100-bf16-eager"]
    model = published.row_model(row["id"], row["model"])
    one, work = make_cluster("a100-80gb", 1, 1), Workload(global_batch=128, seq_len=512, target_len=114)
    base = Strategy(engine="ddp", micro_batch=64, attention="eager", kernels="eager")
    looped = Strategy(engine="ddp", micro_batch=64, attention="eager", kernels="eager", optimizer_loop="per-tensor-rms")
    fused, loop = estimate(model, one, base, work), estimate(model, one, looped, work)
    tensors = zero3_gathers(model, 1, 1, model.total_layers, 10**8).tensors
    assert tensors == 282  # 12 x 9 encoder + 12 x 14 decoder + 2 position biases + 2 final norms + shared + lm_head
    k = stored().kernel_overhead_s
    assert loop.optimizer_s - fused.optimizer_s == pytest.approx(
        optimizer_loop_s("per-tensor-rms", loop.params_per_device, tensors, "bf16", one.device, k))
    assert loop.compute_s == fused.compute_s and "optim-per-tensor-rms" in looped.label
    eight = make_cluster("a100-80gb", 1, 8)
    ds = Strategy(engine="deepspeed", zero=1, micro_batch=16, attention="eager", optimizer_loop="per-tensor")
    ds_fused = Strategy(engine="deepspeed", zero=1, micro_batch=16, attention="eager")
    extra = estimate(model, eight, ds, work).optimizer_s - estimate(model, eight, ds_fused, work).optimizer_s
    local = loop.params_per_device / 8
    assert extra == pytest.approx(optimizer_loop_s("per-tensor", local, 1, "bf16", eight.device, k))
    offloaded = Strategy(engine="deepspeed", zero=1, micro_batch=16, attention="eager", offload_optimizer="cpu")
    assert estimate(model, eight, offloaded, work).optimizer_s == estimate(
        model, eight, Strategy(**{**offloaded.to_dict(), "optimizer_loop": "per-tensor"}), work).optimizer_s


def test_unknown_loop_is_refused_in_one_line():
    with pytest.raises(ScalestudyError, match="unknown optimizer_loop 'apex'"):
        Strategy(engine="ddp", optimizer_loop="apex")
    # DeepSpeed ZeRO-0's FP16_UnfusedOptimizer exists at ZeRO-0 only (train's DeepSpeed in 16 bits)
    with pytest.raises(ScalestudyError, match="deepspeed-unfused describes DeepSpeed ZeRO-0"):
        Strategy(engine="deepspeed", zero=1, optimizer_loop="deepspeed-unfused")
    # DeepSpeed's serial overflow / norm checks describe its ZeRO optimizer only (estimate and plan alike)
    with pytest.raises(ScalestudyError, match="deepspeed-serial describes DeepSpeed's ZeRO optimizer"):
        Strategy(engine="ddp", optimizer_loop="deepspeed-serial")
    from scalestudy.plan.space import Constraints
    with pytest.raises(ScalestudyError, match="it needs --engine deepspeed"):
        Constraints(engines=("deepspeed", "fsdp"), optimizer_loop="deepspeed-serial")
    with pytest.raises(ScalestudyError, match="it needs --engine deepspeed --zero 0"):
        Constraints(engines=("deepspeed",), optimizer_loop="deepspeed-unfused")
    # every value the Strategy (so estimate / plan / YAML) accepts is priced: one list of names in each place
    assert set(strategy_loops) == {"engine", *OPTIMIZER_LOOPS}


def test_megatron_2019_rows_step_every_tensor_of_their_rank_with_the_fp16_loop():
    """Megatron-LM a0368ddf (engine megatron, no ZeRO): FP16_Optimizer loops over all 484 tensors of the 1.2B (40
    blocks x 12 + 2 embeddings + final norm weight and bias) on every tensor-parallel rank, so the loop's launches
    do not shrink with tp (the strong-scaling rows), only its bytes do."""
    rows = {r["id"]: r for r in published.load()["throughput"]}
    ids = [i for i, r in rows.items() if r["source"] == "megatron2019"]
    assert ids and all(rows[i]["software"]["optimizer_loop"] == "per-tensor-fp16" for i in ids)
    k, work = stored().kernel_overhead_s, Workload(global_batch=8, seq_len=1024)
    model = published.row_model("megatron2019-1.2b-1g", rows["megatron2019-1.2b-1g"]["model"])
    for tp in (1, 8):
        cluster = make_cluster("v100-32gb", 1, tp)
        kw = dict(engine="megatron", tp=tp, micro_batch=8, recompute="full", precision="fp16", attention="eager")
        fused = estimate(model, cluster, Strategy(**kw), work)
        loop = estimate(model, cluster, Strategy(**kw, optimizer_loop="per-tensor-fp16"), work)
        assert zero3_gathers(model, tp, 1, model.total_layers, 10**9).tensors == 484
        assert loop.optimizer_s - fused.optimizer_s == pytest.approx(
            484 * 11 * k + loop.params_per_device * (68.0 - OPTIMIZER_BYTES["fp16"]) / cluster.device.hbm_bytes_per_s)


def test_each_pipeline_stage_steps_the_tensors_of_its_own_blocks():
    """t5-base over 2 stages (12 encoder + 12 decoder blocks), per-stage path: each stage loops over the tensors of
    its own blocks (price_stage's zero3 count), not over its share of the FLOPs -- the encoder stage's larger share
    charged it ~16 blocks' tensors and the decoder stage ~8."""
    from scalestudy.costmodel.options import DEFAULT_OPTIONS
    from scalestudy.costmodel.stages import estimate_stages
    from scalestudy.specs.presets import get_model

    model, two = get_model("t5-base"), make_cluster("a100-80gb", 1, 2)
    work = Workload(global_batch=32, seq_len=512, target_len=114)
    fused = Strategy(engine="megatron", pp=2, micro_batch=4)
    looped = Strategy(**{**fused.to_dict(), "optimizer_loop": "per-tensor"})
    base, loop = (estimate_stages(model, two, st, work, DEFAULT_OPTIONS).stages for st in (fused, looped))
    k = stored().kernel_overhead_s
    for a, b in zip(base, loop):
        tensors = zero3_gathers(model, 1, 2, a.layers, a.params).tensors
        assert b.optimizer_s - a.optimizer_s == pytest.approx(
            optimizer_loop_s("per-tensor", a.params, tensors, fused.precision, two.device, k))


def test_deepspeed_zero1_checks_each_gradient_tensor_of_its_partition_before_the_flat_step():
    """DeepSpeed 0.5.x stage2.py (ZeRO-1/2, the dsautotune2021hf / BigScience 2021 / Megatron-DeepSpeed 2023 rows):
    overflow sum and norm .item() per tensor of the rank's averaged_gradients -- its 1/dp of the tensors plus the
    one cut at its start -- on top of the flat step; GPT-2 xl on 16 V100: 580 tensors -> 38 per rank."""
    rows = {r["id"]: r for r in published.load()["throughput"]}
    ds = [r for r in rows.values() if r["source"] == "dsautotune2021hf" and r["engine"] == "deepspeed"]
    assert ds and all(r["software"]["optimizer_loop"] == "deepspeed-serial" for r in ds)
    row = rows["dsat-hf-gpt2-xl-v100-16g-ds-z1-mb1"]
    model, node = published.row_model(row["id"], row["model"]), make_cluster("v100-32gb", 1, 16)
    work, k = Workload(global_batch=16, seq_len=1024), stored().kernel_overhead_s
    kw = dict(engine="deepspeed", zero=1, micro_batch=1, precision="fp16", attention="eager")
    flat = estimate(model, node, Strategy(**kw), work)
    serial = estimate(model, node, Strategy(**kw, optimizer_loop="deepspeed-serial"), work)
    assert zero3_gathers(model, 1, 1, model.total_layers, 10**9).tensors == 580  # 48 x 12 + wte, wpe, ln_f w + b
    assert serial.optimizer_s - flat.optimizer_s == pytest.approx(optimizer_loop_s(
        "deepspeed-serial", flat.params_per_device / 16, 37 + 1, "fp16", node.device, k))
    assert serial.compute_s == flat.compute_s


def test_deepspeed_2020_stage1_checks_every_gradient_tensor_of_the_model():
    """DeepSpeed 0.3.0 runtime/zero/stage1.py step(): CheckOverflow over every fp16 group and get_grad_norm over the
    whole group before it frees the gradients it does not own -- the 580 tensors of GPT-2 1.5B on each of 8 ranks,
    4 kernels + 2 host syncs and 20 B per parameter of the model, not its partition's 1/8 (deepspeed-serial)."""
    model = published.row_model("dszt-gpt2-1.5b-z1-v100-8g",
                                {"d_model": 1600, "layers": 48, "heads": 16, "vocab": 50304, "seq": 1024})
    node, k = make_cluster("v100-32gb", 1, 8), stored().kernel_overhead_s
    work = Workload(global_batch=8, seq_len=1024)
    kw = dict(engine="deepspeed", zero=1, micro_batch=1, precision="fp16", attention="eager")
    flat = estimate(model, node, Strategy(**kw), work)
    whole = estimate(model, node, Strategy(**kw, optimizer_loop="deepspeed-stage1-whole"), work)
    psi = flat.params_per_device  # ZeRO-1 holds every fp16 weight and gradient
    assert whole.optimizer_s - flat.optimizer_s == pytest.approx(
        580 * (4 + 2) * k + 20.0 * psi / node.device.hbm_bytes_per_s)
    with pytest.raises(ScalestudyError, match="deepspeed-stage1-whole describes DeepSpeed's ZeRO stage 1"):
        Strategy(engine="deepspeed", zero=2, optimizer_loop="deepspeed-stage1-whole")
