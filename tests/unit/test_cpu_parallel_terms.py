"""The cost model's CPU tensor/pipeline terms (costmodel/cpu_parallel.py): train's hybrid backend on gloo ranks."""

from __future__ import annotations

import dataclasses

import pytest

from scalestudy.costmodel.comm import collective, links, p2p_time
from scalestudy.costmodel.constants import stored
from scalestudy.costmodel.estimate import estimate
from scalestudy.costmodel.memory import ACT_BYTES
from scalestudy.costmodel.step import EMBED_GRAD_BYTES, compute_times
from scalestudy.specs.hardware import make_cluster
from scalestudy.specs.presets import get_model
from scalestudy.specs.strategy import Strategy, Workload

LLAMA = get_model("llama-tiny")  # 2 layers, swiglu: 5 column- and 2 row-parallel projections per layer
WORK = Workload(global_batch=8, seq_len=128)
CPU = make_cluster("local-cpu", 1, 2)


def _cpu(**overheads):
    return dataclasses.replace(CPU, device=dataclasses.replace(CPU.device, engine_overhead_s=overheads))


def test_gpu_estimates_never_take_the_cpu_terms(monkeypatch):
    def refuse(*_a, **_k):
        raise AssertionError("CPU terms used for a GPU")

    monkeypatch.setattr("scalestudy.costmodel.estimate.hybrid_times", refuse)
    gpu = make_cluster("a100-80gb", 2, 8)
    for st in (Strategy(engine="ddp", tp=2, pp=2, micro_batch=1), Strategy(tp=2, micro_batch=2)):
        assert estimate(LLAMA, gpu, st, Workload(64, 128)).step_s > 0


def test_tp_prices_each_dtensor_collective_and_keeps_the_head_whole():
    st = Strategy(engine="ddp", tp=2, micro_batch=4, precision="fp32", sequence_parallel=False)
    est = estimate(LLAMA, CPU, st, WORK)
    ga = est.layout.grad_accum
    assert ga == 2
    act = 4 * 128 * LLAMA.d_model * ACT_BYTES["fp32"]
    ar = collective(2.0, act, 2, 2, links(CPU))
    # per layer and micro-batch: 2 forward all-reduces (o, down) + 5 backward (q, k, v, gate, up inputs)
    assert est.tp_comm_s == pytest.approx(ga * LLAMA.num_layers * 7 * ar)
    dev, cal = CPU.device, stored()
    sharded = compute_times(LLAMA, dev, "fp32", 2, 4, 128, 0, "none", True, False, cal)
    whole = compute_times(LLAMA, dev, "fp32", 1, 4, 128, 0, "none", True, False, cal)
    assert est.compute_s == pytest.approx(ga * (sharded.forward + sharded.backward + whole.head))
    # sequence parallelism: forward all-gather + reduce-scatter per sub-layer, backward 5 all-reduces + 2
    # all-gathers per layer, plus the scatter and gather of the sequence around the chunk
    sp = estimate(LLAMA, CPU, dataclasses.replace(st, sequence_parallel=True), WORK)
    ag = collective(1.0, act, 2, 2, links(CPU))
    assert sp.tp_comm_s == pytest.approx(ga * (LLAMA.num_layers * (4 * ag + 5 * ar + 2 * ag) + 2 * ag))
    # a calibration that measured gloo's reduce-scatter 4x slower per byte prices the 2 per layer so
    slow = dataclasses.replace(CPU, device=dataclasses.replace(CPU.device, collective_time_ratio={
        "reduce_scatter": 4.0}))
    latency = collective(1.0, act, 2, 2, (float("inf"), CPU.intra_latency, float("inf"), CPU.inter_latency))
    extra = estimate(LLAMA, slow, sp.strategy, WORK).tp_comm_s - sp.tp_comm_s
    assert extra == pytest.approx(ga * LLAMA.num_layers * 2 * 3.0 * (ag - latency))


def test_measured_dispatch_overheads_scale_with_projections_and_steps():
    st = Strategy(engine="ddp", tp=2, micro_batch=4, precision="fp32")
    base = estimate(LLAMA, _cpu(), st, WORK)
    timed = estimate(LLAMA, _cpu(**{"tp-linear": 1e-3, "tp-sp-sublayer": 2e-3, "tp-step": 5e-4}), st, WORK)
    linears, sublayers, ga = 2 * 7, 2 * 2, 2
    assert timed.tp_comm_s - base.tp_comm_s == pytest.approx(ga * (linears * 1e-3 + sublayers * 2e-3))
    assert timed.framework_s - base.framework_s == pytest.approx(linears * 5e-4)


def test_pipeline_step_is_the_slowest_stage_per_micro_batch_plus_one_pass_of_the_others():
    st = Strategy(engine="ddp", pp=2, micro_batch=1, precision="fp32")
    dev = _cpu(**{"pp-microbatch": 1e-3})
    est = estimate(LLAMA, dev, st, WORK)
    ga = est.layout.grad_accum
    ct = compute_times(LLAMA, dev.device, "fp32", 1, 1, 128, 0, "none", True, False, stored())
    boundary = 128 * LLAMA.d_model * 4
    comm = 2 * p2p_time(boundary, False, dev) + 1e-3  # one boundary: send and receive, plus the schedule
    layer_half = (ct.forward + ct.backward) / 2
    embed = LLAMA.vocab_size * LLAMA.d_model * EMBED_GRAD_BYTES / dev.device.hbm_bytes_per_s  # first stage's
    last, first = layer_half + ct.head - embed + comm, layer_half + embed + comm  # the head: last is slowest
    assert est.compute_s == pytest.approx(ga * (layer_half + ct.head - embed))
    assert est.pp_comm_s == pytest.approx(ga * comm)
    assert est.bubble_s == pytest.approx(first)  # not (pp - 1) slots of the slowest stage
    assert est.compute_s + est.pp_comm_s + est.bubble_s == pytest.approx(ga * last + first)
    gpipe = estimate(LLAMA, dev, dataclasses.replace(st, pp_schedule="gpipe"), WORK)
    assert gpipe.step_s == pytest.approx(est.step_s)  # same fill and drain with blocking sends on one thread


def test_hybrid_ddp_has_no_ddp_wrapper_cost():
    dev = _cpu(**{"ddp-0": 1e-3, "ddp-0@multi": 1e-3})
    dp2 = estimate(LLAMA, dev, Strategy(engine="ddp", micro_batch=4, precision="fp32"), WORK)
    tp2 = estimate(LLAMA, dev, Strategy(engine="ddp", tp=2, micro_batch=4, precision="fp32"), WORK)
    fixed = dev.device.step_overhead_s + dev.device.microstep_overhead_s * dp2.layout.grad_accum
    assert dp2.framework_s == pytest.approx(fixed + 2 * 2 * 2e-3)  # DDP: 4 sublayers x its hooks, 1 micro-batch
    fixed = dev.device.step_overhead_s + dev.device.microstep_overhead_s * tp2.layout.grad_accum
    assert tp2.framework_s == pytest.approx(fixed)


def test_a_measured_dtensor_collective_replaces_the_ring_latency():
    """The profile's 64 KiB DTensor all-reduce time, plus the ring's bytes term for what a message has beyond it."""
    st = Strategy(engine="ddp", tp=2, micro_batch=4, precision="fp32", sequence_parallel=False)
    est = estimate(LLAMA, _cpu(**{"tp-collective@multi": 1e-3}), st, WORK)
    lk = links(CPU)
    act = 4 * 128 * LLAMA.d_model * 4

    def bytes_term(n):
        return collective(2.0, n, 2, 2, lk) - collective(2.0, n, 2, 2, (float("inf"), lk[1], float("inf"), lk[3]))

    per = 1e-3 + bytes_term(act) - bytes_term(65536)
    assert est.tp_comm_s == pytest.approx(est.layout.grad_accum * LLAMA.num_layers * 7 * per)


def test_hybrid_fsdp_step_term_is_charged_once_per_step():
    """FSDP's step() part of the profile ("fsdp-3/step", per sublayer per optimizer step) on the hybrid backend:
    once per step for the slowest stage's sublayers, not per micro-batch."""
    st = Strategy(engine="fsdp", zero=3, tp=2, micro_batch=1, precision="fp32")
    base = estimate(LLAMA, _cpu(**{"fsdp-3": 1e-3}), st, WORK)
    timed = estimate(LLAMA, _cpu(**{"fsdp-3": 1e-3, "fsdp-3/step": 5e-3}), st, WORK)
    assert base.layout.grad_accum > 1
    assert timed.framework_s - base.framework_s == pytest.approx(LLAMA.num_layers * 2 * 5e-3)
