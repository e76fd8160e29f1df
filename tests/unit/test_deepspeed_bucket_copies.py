"""DeepSpeed's flatten / average / copy-back around its bucketed gradient all-reduce (allreduce_and_copy, DeepSpeed
v0.5.5 stage2.py and runtime/engine.py): step.bucket_copy_s, priced per step by stage_terms._bucket_copy_s where
the reduction runs after the backward through that path."""

import pytest

from scalestudy.costmodel.constants import stored
from scalestudy.costmodel.estimate import estimate
from scalestudy.costmodel.step import BUCKET_COPY_PASSES, bucket_copy_s
from scalestudy.costmodel.zero3 import zero3_gathers
from scalestudy.specs.hardware import get_device, make_cluster
from scalestudy.specs.presets import get_model
from scalestudy.specs.strategy import Strategy, Workload

GPT2 = get_model("gpt2")
WORK = Workload(global_batch=128, seq_len=1024)
V100 = make_cluster("v100-32gb", 1, 16)


def _ds(**kw) -> Strategy:
    fields = dict(engine="deepspeed", zero=1, micro_batch=8, precision="fp16", attention="eager",
                  overlap_grad_comm=False, zero1_all_reduce=True)
    fields.update(kw)
    return Strategy(**fields)


def _copies_in_optimizer_s(cluster, with_copies: Strategy, without: Strategy) -> float:
    return estimate(GPT2, cluster, with_copies, WORK).optimizer_s - estimate(GPT2, cluster, without, WORK).optimizer_s


def test_bucket_copies_are_six_passes_at_hbm_speed_and_a_launch_per_tensor():
    dev, k = get_device("v100-32gb"), stored().kernel_overhead_s
    assert bucket_copy_s(1e8, 0, 2, dev, k) == pytest.approx(1e8 * 2 * BUCKET_COPY_PASSES / dev.hbm_bytes_per_s)
    assert bucket_copy_s(0, 148, 2, dev, k) == pytest.approx(148 * k)
    assert bucket_copy_s(1e8, 148, 2, get_device("local-cpu"), k) == 0.0  # gloo ranks: cpu_collectives prices them


def test_zero1_all_reduce_after_the_backward_pays_the_copies_of_every_gradient_of_the_rank():
    """GPT-2 124M, fp16 ZeRO-1 on 16 V100s without overlap_comm (the dsautotune2021hf DeepSpeed rows): the copies
    run over the whole model's gradients (not the rank's 1/dp partition) and its every tensor."""
    est = estimate(GPT2, V100, _ds(), WORK)
    tensors = zero3_gathers(GPT2, 1, 1, GPT2.num_layers, est.params_per_device).tensors
    want = bucket_copy_s(est.params_per_device, tensors, 2, V100.device, stored().kernel_overhead_s)
    assert _copies_in_optimizer_s(V100, _ds(), _ds(zero1_all_reduce=False)) == pytest.approx(want)
    assert 3e-3 < want < 10e-3  # ~4 ms of launches + ~1.6 ms of bytes against a ~0.3 s step


def test_no_copies_where_the_reduction_takes_another_path():
    # ZeRO-1 with overlap_comm: its hooks reduce during the backward (not priced here); ZeRO-2: contiguous buckets
    assert _copies_in_optimizer_s(V100, _ds(overlap_grad_comm=True), _ds(overlap_grad_comm=True,
                                                                         zero1_all_reduce=False)) == 0.0
    assert estimate(GPT2, V100, _ds(zero=2), WORK).optimizer_s == \
        estimate(GPT2, V100, _ds(zero=2, zero1_all_reduce=False), WORK).optimizer_s
    # the bf16 pipeline's BF16_Optimizer reduces one flat buffer: no per-tensor copies
    a100 = make_cluster("a100-80gb", 1, 8)
    bf16_pipe = dict(pp=2, precision="bf16", micro_batch=4)
    assert _copies_in_optimizer_s(a100, _ds(**bf16_pipe), _ds(zero1_all_reduce=False, **bf16_pipe)) == 0.0


def test_zero0_and_the_pipeline_engine_reduce_through_the_copies_whatever_overlap_says():
    """ZeRO-0 (engine.buffered_allreduce_fallback) never overlaps; under the pipeline engine ZeRO-1 reduces in its
    ReduceGrads instruction after the drain (terms._deepspeed_pipeline_reduces_after)."""
    a100 = make_cluster("a100-80gb", 1, 8)
    piped = dict(pp=2, micro_batch=4)
    assert _copies_in_optimizer_s(a100, _ds(overlap_grad_comm=True, **piped),
                                  _ds(overlap_grad_comm=True, zero1_all_reduce=False, **piped)) > 0.0
    zero0 = estimate(GPT2, V100, _ds(zero=0), WORK)
    tensors = zero3_gathers(GPT2, 1, 1, GPT2.num_layers, zero0.params_per_device).tensors
    assert zero0.optimizer_s >= bucket_copy_s(zero0.params_per_device, tensors, 2, V100.device,
                                              stored().kernel_overhead_s)


def test_ddp_copies_every_bucket_back_to_the_gradients_after_the_backward():
    """PyTorch DDP (gradient_as_bucket_view False): Reducer::copy_bucket_to_grad, one copy_ per parameter tensor of
    its fp32 gradient (read + write) once the last bucket is reduced; no DDP wrapper, no copies, for one process."""
    from scalestudy.costmodel.step import DDP_COPY_BACK_PASSES

    ddp = Strategy(engine="ddp", micro_batch=8, precision="fp16", attention="eager")
    est = estimate(GPT2, V100, ddp, WORK)
    tensors = zero3_gathers(GPT2, 1, 1, GPT2.num_layers, est.params_per_device).tensors
    want = bucket_copy_s(est.params_per_device, tensors, 4, V100.device, stored().kernel_overhead_s,
                         DDP_COPY_BACK_PASSES)
    alone = estimate(GPT2, make_cluster("v100-32gb", 1, 1), ddp, Workload(global_batch=8, seq_len=1024))
    assert est.optimizer_s - alone.optimizer_s == pytest.approx(want)
    assert want == pytest.approx(est.params_per_device * 8 / V100.device.hbm_bytes_per_s
                                 + tensors * stored().kernel_overhead_s)
