"""estimate(): schema, invariants, CPU support, invalid input, throughput bookkeeping."""

import dataclasses
import json

import pytest

from scalestudy.costmodel.estimate import _tied_embedding_sync, estimate
from scalestudy.costmodel.flops import training_flops
from scalestudy.errors import ScalestudyError
from scalestudy.specs.hardware import make_cluster
from scalestudy.specs.presets import get_model
from scalestudy.specs.strategy import Strategy, Workload


def _est(model="mt5-large", nodes=1, gpn=8, gpu="a100-40gb", work=None, **st):
    return estimate(get_model(model), make_cluster(gpu, nodes, gpn), Strategy(**st),
                    work or Workload(global_batch=64, seq_len=512, target_len=114, train_tokens=1e9))


def test_schema_keys_and_json():
    d = _est(zero=2, micro_batch=4).to_dict()
    json.dumps(d)
    for key in ("params_total", "fits", "mfu", "hfu", "memory", "time", "throughput", "flops", "layout"):
        assert key in d
    assert set(d["memory"]["parts"]) == {"params", "grads", "optimizer", "activations", "buffers", "transient",
                                         "overhead"}
    assert d["memory"]["per_device_bytes"] == pytest.approx(sum(d["memory"]["parts"].values()))
    assert d["time"]["step_s"] == pytest.approx(sum(d["time"]["parts"].values()))
    for key in ("tokens_per_s", "model_tflops_per_device", "hardware_tflops_per_device", "samples_per_s"):
        assert d["throughput"][key] > 0
    assert d["params_total"] == 1_229_581_312


def test_throughput_bookkeeping():
    e = _est(zero=1, micro_batch=2, recompute="full", recompute_early_stop="off")  # whole blocks re-run
    w = e.workload
    assert e.model_flops == pytest.approx(training_flops(e.model, w))
    assert e.hardware_flops == pytest.approx(training_flops(e.model, w, "full"))
    # this Hugging Face T5's default checkpoint early-stops (transformers 5.x, non-reentrant): fewer FLOPs executed
    d = _est(zero=1, micro_batch=2, recompute="full")
    assert d.model_flops == e.model_flops and e.model_flops < d.hardware_flops < e.hardware_flops
    assert e.tokens_per_s == pytest.approx(64 * (512 + 114) / e.step_s)
    assert e.mfu == pytest.approx(e.model_tflops_per_device * 1e12 / 312e12)
    assert e.hfu > e.mfu and 0 < e.mfu < 1
    assert e.time_to_train_s == pytest.approx(1e9 / e.tokens_per_s)
    assert e.device_hours == pytest.approx(e.time_to_train_s * 8 / 3600)


def test_more_nodes_more_throughput_and_recompute_costs_time():
    # enough accumulation per rank for the gradient traffic to hide (with 256 sequences 4 nodes are slower than 1:
    # the seed study's finding, tests/unit/test_costmodel_zero3_scaling.py)
    small = _est(zero=2, micro_batch=4, work=Workload(2048, 512, 114))
    big = _est(zero=2, micro_batch=4, nodes=4, work=Workload(2048, 512, 114))
    assert big.tokens_per_s > small.tokens_per_s
    assert big.tokens_per_s < 4 * small.tokens_per_s  # communication is not free
    assert _est(micro_batch=4, recompute="full").step_s > _est(micro_batch=4).step_s


def test_encoder_decoder_target_defaults_to_the_span_corruption_need():
    e = _est(work=Workload(global_batch=8, seq_len=256))  # target_len 0: as in train, plan and estimate's CLI
    assert e.target_len == 58 and e.tokens_per_step == 8 * (256 + 58)
    assert e.model_flops == training_flops(e.model, e.workload)  # the same rule in training_flops


@pytest.mark.parametrize("engine,zero", [("ddp", 0), ("ddp", 1), ("deepspeed", 0), ("deepspeed", 3), ("fsdp", 2),
                                         ("fsdp", 3)])
def test_cpu_strategies_for_one_and_two_ranks(engine, zero):
    for ranks in (1, 2):
        e = _est("t5-tiny", gpu="local-cpu", gpn=ranks, engine=engine, zero=zero, precision="fp32", micro_batch=4,
                 work=Workload(global_batch=8 * ranks, seq_len=128, target_len=32))
        assert e.fits and 0 < e.mfu < 1 and e.step_s > 0
        assert e.peak_flops == 80e9
        assert e.to_dict()["memory"]["device_total_bytes"] == e.per_device_bytes  # gloo: no NCCL/cuBLAS buffers


def test_cpu_rejects_bf16():
    with pytest.raises(ScalestudyError, match="does not support bf16"):
        _est("t5-tiny", gpu="local-cpu", gpn=2, engine="ddp", micro_batch=4, work=Workload(8, 128, 32))


@pytest.mark.parametrize("kwargs,work,match", [
    ({"tp": 3}, None, "not divisible by tp 3 x pp 1"),
    ({"tp": 4, "gpn": 6, "nodes": 2}, Workload(48, 512, 114), "does not divide 6 devices per node"),
    ({"tp": 12, "nodes": 3}, None, "tp 12 is not a multiple of 8 devices per node"),  # tp 16 on 2 nodes is priced
    ({"tp": 8, "model": "gpt2"}, Workload(64, 512), "heads are not divisible by tp"),
    ({"pp": 5}, None, "not divisible by tp 1 x pp 5"),
    ({"micro_batch": 3}, None, "global_batch 64 is not divisible"),
    ({"pp": 2, "stage_layers": (5, 5), "model": "gpt2"}, Workload(64, 512), "stage_layers sum to 10, the model has 12"),
])
def test_invalid_layouts_raise(kwargs, work, match):
    model = kwargs.pop("model", "mt5-large")
    gpn = kwargs.pop("gpn", 8)
    nodes = kwargs.pop("nodes", 1)
    with pytest.raises(ScalestudyError, match=match):
        _est(model, nodes=nodes, gpn=gpn, work=work, **kwargs)


def test_negative_sizes_raise():
    with pytest.raises(ScalestudyError):
        Workload(global_batch=-1, seq_len=512)
    with pytest.raises(ScalestudyError):
        Strategy(micro_batch=0)
    with pytest.raises(ScalestudyError):
        make_cluster("a100-40gb", nodes=0)


def test_fsdp_cpu_offload_moves_states_to_the_host_and_costs_pcie_time():
    cluster = make_cluster("a100-80gb", nodes=1, gpus_per_node=8)
    spec, work = get_model("mt5-xl"), Workload(64, 512, 114)
    on = estimate(spec, cluster, Strategy(engine="fsdp", zero=3, micro_batch=4), work)
    off = estimate(spec, cluster, Strategy(engine="fsdp", zero=3, micro_batch=4, offload_optimizer="cpu",
                                           offload_params="cpu"), work)
    assert off.memory.params == off.memory.grads == off.memory.optimizer == 0.0
    assert off.memory.host_bytes == pytest.approx(16.0 * off.params_per_device / 8)
    assert off.offload_s > 0 and off.step_s > on.step_s and off.per_device_bytes < on.per_device_bytes
    # the engine's host optimizer, torch's fused CPU AdamW (engines.yaml fsdp host_optimizer): 28 B per fp32
    # parameter against DeepSpeed CPU-Adam's 30, at its memory-bound host rate
    rate = cluster.device.cpu_adam_params_per_s * 30.0 / 28.0
    assert off.optimizer_s == pytest.approx(off.params_per_device / 8 * 8 / rate)


def test_deepspeed_cpu_offload_adam_at_the_host_rate_and_zero3_copies_in_series():
    """DeepSpeed CPU Adam runs at the host's rate: ZeRO-Offload (Ren et al. 2021, Table 4: 1e9 parameters in 0.22 s
    on a DGX-2 host, 48 cores, 256 GB/s) scaled by the lesser of cores and memory bandwidth (DGX H200: 112 cores,
    614.4 GB/s), 1.29x slower when several ranks share the host unbound (DeepSpeed PR #7474: 3084 vs 2383 ms with
    --bind_cores_to_rank), plus the host passes of step(): the in-place unscale/clip of the fp32 gradients (8 B) and,
    ZeRO-1/2, the bf16 cast of the updated partition into a pinned buffer (6 B) beside Adam's ~30 B per parameter.
    ZeRO-1/2: the fp32 gradient copies (4 B per parameter) do not ride the backward -- stage_1_and_2.py reads an
    overflow flag back to the host per parameter between them, inside the backward's hook -- and the bf16
    parameters go up after the step: both in series. ZeRO-3: the gradient copies run with no backward left to hide
    behind -- each 16-bit partition down to the host buffer, back up, then down as fp32 (2 + 2 + 4 B: the partition
    buffer lives on the host when the optimizer is offloaded, stage3.py v0.6.0 - v0.19.8) -- and the updated
    partition goes up through torch's pageable path (cast on the host), 4.5x a pinned fp32 copy (DeepSpeed PR #5301's
    measurement of that path)."""
    from scalestudy.costmodel.engines import engine_comm
    unbound = engine_comm("deepspeed").unbound_ranks_host_adam_slowdown  # engines.yaml, DeepSpeed PR #7474
    assert unbound == pytest.approx(1.294, abs=0.001)
    cluster = make_cluster("h200", nodes=1, gpus_per_node=8)
    dev = cluster.device
    assert dev.cpu_adam_params_per_s == pytest.approx(1e9 / 0.22 * min(112 / 48, 614.4 / 256), rel=0.01)
    spec, work = get_model("gpt2-xl"), Workload(64, 1024)
    adam = {z: estimate(spec, cluster, Strategy(engine="deepspeed", zero=z, micro_batch=8, offload_optimizer="cpu"),
                        work) for z in (2, 3)}
    local = adam[3].params_per_device / 8  # this rank's partition
    node_adam = local * 8 / dev.cpu_adam_params_per_s * unbound
    assert adam[2].optimizer_s == pytest.approx(node_adam * (1 + 14 / 30))
    assert adam[2].offload_s == pytest.approx(local * (4 + 2) / dev.pcie_bytes_per_s)
    assert adam[3].optimizer_s == pytest.approx(node_adam * (1 + 8 / 30))
    assert adam[3].offload_s == pytest.approx(local * (2 + 2 + 4 + 4 * 4.5) / dev.pcie_bytes_per_s)
    both = estimate(spec, cluster, Strategy(engine="deepspeed", zero=3, micro_batch=8, offload_optimizer="cpu",
                                            offload_params="cpu"), work)  # the 16-bit partition is on the host
    assert both.optimizer_s == pytest.approx(adam[2].optimizer_s)  # unscale + host cast, as ZeRO-1/2
    assert both.offload_s == pytest.approx((local * 8 + 2 * local * 2) / dev.pcie_bytes_per_s)  # grads + 2 fetches
    alone = estimate(spec, make_cluster("h200", nodes=8, gpus_per_node=1),
                     Strategy(engine="deepspeed", zero=3, micro_batch=8, offload_optimizer="cpu"), work)
    # one rank, bound: its pinned fp32 partition and gradients (12 of CPU-Adam's 30 B, and the 8 B unscale pass) on
    # one of the DGX H200 host's 2 NUMA nodes (70d728d: terms.numa_pinned_slowdown)
    numa = (12 + 8) / (30 + 8) * 2 / 1
    assert alone.optimizer_s == pytest.approx(local / dev.cpu_adam_params_per_s * (1 + 8 / 30) * numa)
    assert alone.offload_s == pytest.approx(local * (8 + 4 * 6.0) / dev.pcie_bytes_per_s)  # #5301: 6x on one GPU


def test_fa3_runs_the_causal_triangle_at_its_published_rate():
    """FlashAttention-3 (Shah et al. 2024, arXiv 2407.08608) counts causal attention as the lower triangle it executes,
    and its Hopper rate (device YAML fa3 0.57: forward 75% of peak, backward 1.5x FlashAttention-2's 35%) is on that
    count: a decoder's causal self-attention runs (n+1)/2n of the square, n = 128-row query tiles. So does cuDNN's
    fused attention where it runs (a device stating its rate: Hopper; the paper measures it on the same count); on A100
    Transformer Engine runs FlashAttention instead, and fa2 stays on the full square (its YAML fractions are taken
    against it)."""
    from scalestudy.costmodel.step import executed_attention_share
    from scalestudy.specs.hardware import get_device
    gpt = get_model("gpt2-xl")
    assert executed_attention_share(gpt, 128, "fa3") == 1.0
    assert executed_attention_share(gpt, 131072, "fa3") == pytest.approx(0.5 + 0.5 / 1024)
    assert executed_attention_share(gpt, 131072, "fa2") == 1.0
    h100, a100 = get_device("h100-80gb"), get_device("a100-80gb")
    assert executed_attention_share(gpt, 131072, "cudnn", h100) == pytest.approx(0.5 + 0.5 / 1024)
    assert executed_attention_share(gpt, 131072, "cudnn", a100) == 1.0  # TE runs FlashAttention-2 there
    assert executed_attention_share(gpt, 131072, "fa2", h100) == 1.0
    assert executed_attention_share(get_model("t5-small"), 512, "fa3") == 1.0  # encoder-decoder: not split
    cluster = make_cluster("h200", nodes=1, gpus_per_node=8)
    pair = 3.5 / (1 / 0.75 + 2.5 / 0.525)  # forward + a backward of 2.5x its FLOPs
    assert cluster.device.flash_attention_fraction == {"fa2": 0.35, "fa3": pytest.approx(pair, abs=0.005),
                                                       "cudnn": pytest.approx(pair, abs=0.005),  # FA3 >= cuDNN
                                                       "mem-efficient": 0.19}  # costmodel/attention_bias.py
    work = Workload(8, 1024)
    times = {k: estimate(gpt, cluster, Strategy(engine="deepspeed", zero=3, attention_kernel=k), work).compute_s
             for k in ("engine", "fa2", "fa3")}
    assert times["engine"] == times["fa2"] > times["fa3"]
    with pytest.raises(ScalestudyError, match="unknown attention_kernel"):
        Strategy(attention_kernel="fa4")


def test_pipeline_schedules_bubble_and_memory():
    cluster = make_cluster("a100-80gb", nodes=2, gpus_per_node=8)
    # the vocabulary padded to 50304 (as Megatron / nanoGPT): the odd 50257 would make the head GEMMs unaligned (slower)
    spec, work = get_model("gpt2-xl").with_vocab(50304), Workload(128, 1024)
    one = estimate(spec, cluster, Strategy(pp=4, micro_batch=2), work)
    gpipe = estimate(spec, cluster, Strategy(pp=4, micro_batch=2, pp_schedule="gpipe"), work)
    inter = estimate(spec, cluster, Strategy(pp=4, micro_batch=2, pp_schedule="interleaved", virtual_stages=2), work)
    assert gpipe.bubble_s == pytest.approx(one.bubble_s)  # same (pp-1) slots
    assert gpipe.memory.activations > one.memory.activations  # every micro-batch in flight
    # interleaving doubles the per-micro-batch sends; the tied embedding's first/last-stage all-reduce is per step
    sync = _tied_embedding_sync(spec, Strategy(pp=4), 1, True, cluster)  # stage 0 on node 0, stage 3 on node 1
    assert sync > 0 and one.pp_comm_s > sync
    assert inter.bubble_s < 0.6 * one.bubble_s and inter.pp_comm_s - sync == pytest.approx(2 * (one.pp_comm_s - sync))
    untied = estimate(dataclasses.replace(spec, tie_word_embeddings=False), cluster, Strategy(pp=4, micro_batch=2), work)
    assert untied.pp_comm_s == pytest.approx(one.pp_comm_s - sync)
    uneven = estimate(spec, cluster, Strategy(pp=4, micro_batch=2, stage_layers=(15, 11, 11, 11)), work)
    # the slowest stage sets the slot: 15 blocks on the first stage against 12 blocks + the LM head (~2.6 blocks of
    # gpt2-xl) on the last; giving the head's stage fewer blocks (BLOOM's embedding slots) balances the pipeline
    assert 1.0 < uneven.compute_s / one.compute_s <= 1.1
    balanced = estimate(spec, cluster, Strategy(pp=4, micro_batch=2, stage_layers=(13, 13, 13, 9)), work)
    assert balanced.compute_s < 0.95 * one.compute_s


def test_power_limit_slows_compute_by_the_sustained_clock():
    """H100 SXM at a 500 W board limit: the GEMMs run at the clock the GH100 datasheet points give for 500 W
    (1545 MHz at 400 W, 1830 at 700 W -> 1640 MHz); HBM-bound work keeps its rate; no faster above 700 W."""
    from scalestudy.costmodel.efficiency import matmul_efficiency, sustained_clock_ratio
    from scalestudy.specs.hardware import ClusterSpec, get_device

    h100 = get_device("h100-80gb")
    capped = ClusterSpec(device=h100, nodes=1, gpus_per_node=8, power_limit_w=500).device
    assert sustained_clock_ratio(h100) == 1.0
    assert sustained_clock_ratio(capped) == pytest.approx(1640 / 1830, rel=1e-3)
    assert matmul_efficiency(capped, 4096) / matmul_efficiency(h100, 4096) == pytest.approx(1640 / 1830, rel=1e-3)
    assert sustained_clock_ratio(ClusterSpec(device=h100, power_limit_w=800).device) == 1.0
    with pytest.raises(ScalestudyError, match="positive number of watts"):
        ClusterSpec(device=h100, power_limit_w=True)
    args = (get_model("gpt2-xl"), Strategy(engine="fsdp", zero=3, micro_batch=8), Workload(global_batch=64,
                                                                                           seq_len=1024))
    full, cut = (estimate(args[0], ClusterSpec(device=h100, nodes=1, gpus_per_node=8, power_limit_w=w), *args[1:])
                 for w in (700, 500))
    assert 1.0 < cut.compute_s / full.compute_s < 1830 / 1640  # the element-wise (HBM) part is not slowed
    assert cut.optimizer_s == full.optimizer_s and cut.peak_flops == full.peak_flops  # MFU keeps the datasheet


def test_op_level_checkpointing_keeps_every_other_projection():
    """recompute op (torchtitan): a Llama block keeps q, v, gate and down outputs, its input and the attention
    output; k, o and up are re-run in the backward -- in memory between full and selective (which, with flash
    attention, keeps everything), in hardware FLOPs above selective; GPT-2's biased Conv1D projections (addmm)
    keep none."""
    from scalestudy.costmodel.op_checkpoint import projections

    llama = get_model("llama-7b")
    assert [name for name, *_, saved in projections(llama) if saved] == ["q", "v", "gate", "down"]
    assert not any(saved for *_, saved in projections(get_model("gpt2-xl")))
    w = Workload(global_batch=16, seq_len=2048)
    run = {rc: estimate(llama, make_cluster("h100-80gb", 1, 8), Strategy(engine="fsdp", zero=3, micro_batch=2,
                                                                         recompute=rc), w)
           for rc in ("none", "selective", "op", "full")}
    act = {rc: e.memory.activations for rc, e in run.items()}
    assert act["full"] < act["op"] < act["selective"] <= act["none"]  # flash: selective keeps all but the softmax
    assert run["selective"].hardware_flops < run["op"].hardware_flops < run["full"].hardware_flops
    assert run["selective"].step_s < run["op"].step_s < run["full"].step_s
    with pytest.raises(ScalestudyError, match="decoder-only"):
        _est(recompute="op")


def test_flash_attention_core_runs_at_its_kernels_device_ceiling():
    """FlashAttention-2 reaches 35% of an H100's peak (FA3 paper) -- below the GEMM curve, so an FSDP run's attention
    core is slower than cuDNN's fused attention, which Transformer Engine (engine megatron) picks on Hopper; on A100
    FA2 is GEMM-class (its 50-73% cap does not bind) and the engines agree; eager attention keeps the GEMM curve."""
    from scalestudy.costmodel.efficiency import attention_efficiency, matmul_efficiency
    from scalestudy.costmodel.step import compute_times
    from scalestudy.costmodel.constants import stored
    from scalestudy.specs.hardware import get_device

    h100, a100, cal = get_device("h100-80gb"), get_device("a100-80gb"), stored()
    assert attention_efficiency(h100, 724, "fa2", cal) == pytest.approx(0.35)
    assert attention_efficiency(h100, 724, "cudnn", cal) == pytest.approx(min(matmul_efficiency(h100, 724, cal), 0.57))
    assert attention_efficiency(h100, 724, "cudnn", cal) > 0.35
    assert attention_efficiency(a100, 724, "fa2", cal) == matmul_efficiency(a100, 724, cal)
    spec = get_model("llama-7b")
    args = (spec, h100, "bf16", 1, 1, 8192, 0, "none")
    fa2, cudnn = (compute_times(*args, True, False, cal, "fused", k) for k in ("fa2", "cudnn"))
    eager = compute_times(*args, False, False, cal, "fused", "fa2")
    assert fa2.forward > cudnn.forward and fa2.linear == cudnn.linear == eager.linear
    w, cluster = Workload(global_batch=16, seq_len=8192), make_cluster("h100-80gb", 1, 8)
    fsdp, mcore = (estimate(spec, cluster, Strategy(engine=e, zero=z, micro_batch=2), w)
                   for e, z in (("fsdp", 3), ("megatron", 1)))
    assert fsdp.compute_s > 1.1 * mcore.compute_s  # s = 8192: attention is a third of the FLOPs
    a = make_cluster("a100-80gb", 1, 8)
    assert estimate(spec, a, Strategy(engine="fsdp", zero=3, micro_batch=2), w).compute_s == pytest.approx(
        estimate(spec, a, Strategy(engine="megatron", zero=1, micro_batch=2), w).compute_s)


def test_interleaved_chunks_sync_their_gradients_behind_the_later_chunks():
    """Megatron-Core's interleaved schedule reduces each model chunk's gradients right after its last backward, so
    all but the last chunk's reduce-scatter hides behind the later chunks' cooldown: less exposed DP time than 1F1B
    with the same traffic (the bubble differs too; compare only the data-parallel part)."""
    from scalestudy.costmodel.terms import _chunk_window

    assert _chunk_window(Strategy(pp=1)) == 1.0 and _chunk_window(Strategy(pp=4, micro_batch=1)) == 1.0
    assert _chunk_window(Strategy(pp=4, pp_schedule="interleaved", virtual_stages=4)) == pytest.approx(1 + 3 * 3 / 4)
    spec, cluster = get_model("llama-70b"), make_cluster("h100-80gb", 16, 8)
    w = Workload(global_batch=256, seq_len=4096)
    base = dict(engine="megatron", zero=1, tp=8, pp=4, micro_batch=1, sequence_parallel=True, overlap_grad_comm=True,
                overlap_param_gather=True)
    one = estimate(spec, cluster, Strategy(**base), w)
    inter = estimate(spec, cluster, Strategy(**base, pp_schedule="interleaved", virtual_stages=5), w)
    assert inter.dp_comm_total_s == pytest.approx(one.dp_comm_total_s)
    assert inter.dp_comm_s < one.dp_comm_s


def test_deepspeed_bf16_pipeline_all_reduces_its_unsharded_buffer_in_bf16_after_the_pipeline():
    """DeepSpeed's pipeline engine in bf16 runs the BF16_Optimizer: one unsharded gradient buffer all-reduced over
    the data-parallel group after the pipeline drains (not overlapped) -- fp32 in memory, cast to bf16 on the wire
    (engine.communication_data_type) -- then a bf16 parameter all-gather: 1.5x the bytes of ZeRO-1's reduce-scatter
    + all-gather of the same stage in fp16. The tied embedding's gradient crosses from the last to the first stage
    in fp32 (weight._hp_grad, all-reduced as it is): twice the fp16 pipeline's."""
    spec, cluster = get_model("llama-7b"), make_cluster("a100-80gb", 4, 8)
    w = Workload(global_batch=256, seq_len=1024)
    # fp16 priced as ZeRO-1's reduce-scatter variant, named (DeepSpeed's default all-reduces: zero1_all_reduce)
    bf16, fp16 = (estimate(spec, cluster, Strategy(engine="deepspeed", zero=1, tp=2, pp=4, micro_batch=2,
                                                   precision=p, zero1_all_reduce=False), w) for p in ("bf16", "fp16"))
    assert bf16.dp_comm_s == pytest.approx(bf16.dp_comm_total_s)
    assert bf16.dp_comm_total_s == pytest.approx(1.5 * fp16.dp_comm_total_s, rel=0.05)
    # at DeepSpeed's default the fp16 ZeRO-1 pipeline all-reduces too: the same bytes as bf16's
    fp16_default = estimate(spec, cluster, Strategy(engine="deepspeed", zero=1, tp=2, pp=4, micro_batch=2,
                                                    precision="fp16"), w)
    assert fp16_default.dp_comm_total_s == pytest.approx(bf16.dp_comm_total_s, rel=0.05)
    # fp16 ZeRO-1 too: the PipelineEngine reduces only in its ReduceGrads instruction (no gradient-accumulation
    # boundary inside a backward), whatever overlap_grad_comm says; without a pipeline it overlaps the last backward
    assert fp16.dp_comm_s == pytest.approx(fp16.dp_comm_total_s)
    flat = estimate(spec, cluster, Strategy(engine="deepspeed", zero=1, tp=2, micro_batch=2, precision="fp16"), w)
    assert flat.dp_comm_s < flat.dp_comm_total_s
    tied = {p: _tied_embedding_sync(spec, Strategy(engine="deepspeed", zero=1, pp=4, precision=p), 2, True, cluster)
            for p in ("bf16", "fp16")}
    assert tied["bf16"] == pytest.approx(2 * tied["fp16"], rel=0.01)


def test_deepspeed_bf16_pipeline_folds_bf16_gradients_into_fp32_every_micro_batch():
    """BF16_Optimizer.update_hp_grads after every micro-batch's backward (pipe/engine.py): 18 bytes of HBM traffic
    per parameter of the stage, so the slot grows by the stage's parameters per GPU / HBM bandwidth -- halved by
    doubling tp, the same whatever the micro-batch; fp16 (ZeRO-1 accumulates in .grad) pays autograd's in-place add
    (3 x 2 B per parameter, a third), Megatron none (its fused wgrad GEMMs accumulate)."""
    from scalestudy.costmodel.params import param_breakdown
    from scalestudy.costmodel.terms import hp_grad_accumulation_s

    spec, dev = get_model("llama-7b"), make_cluster("a100-80gb", 4, 8).device
    fold = {(tp, mb, p, e): hp_grad_accumulation_s(spec, Strategy(engine=e, zero=1, tp=tp, pp=4, micro_batch=mb,
                                                                  precision=p), dev, tp, 8, False)
            for tp, mb, p, e in ((2, 1, "bf16", "deepspeed"), (2, 4, "bf16", "deepspeed"), (4, 1, "bf16", "deepspeed"),
                                 (2, 1, "fp16", "deepspeed"), (2, 1, "bf16", "megatron"))}
    block = param_breakdown(spec).decoder_layer_matmul / 2
    assert fold[2, 1, "bf16", "deepspeed"] == pytest.approx(18 * 8 * block / dev.hbm_bytes_per_s, rel=1e-3)
    assert fold[2, 4, "bf16", "deepspeed"] == fold[2, 1, "bf16", "deepspeed"]
    assert fold[4, 1, "bf16", "deepspeed"] == pytest.approx(fold[2, 1, "bf16", "deepspeed"] / 2, rel=1e-3)
    assert fold[2, 1, "fp16", "deepspeed"] == pytest.approx(fold[2, 1, "bf16", "deepspeed"] / 3, rel=1e-3)
    assert fold[2, 1, "bf16", "megatron"] == 0.0
