"""The per-machine CPU profile: cached, reused, static on request; its overhead terms reach the step time."""

from dataclasses import replace

import math

import pytest

from scalestudy.costmodel import cpu_profile
from scalestudy.costmodel.calibrate import save_profile
from scalestudy.costmodel.estimate import estimate
from scalestudy.specs.hardware import ClusterSpec, get_device, make_cluster
from scalestudy.specs.presets import get_model
from scalestudy.specs.strategy import Strategy, Workload


def test_cached_profile_is_used_for_local_cpu_and_nothing_else(tmp_path, monkeypatch):
    monkeypatch.setenv("SCALESTUDY_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("SCALESTUDY_CPU_PROFILE", "measured")
    measured = replace(get_device("local-cpu"), step_overhead_s=0.01, microstep_overhead_s=0.002,
                       layer_overhead_s=1e-4)
    save_profile(measured, cpu_profile.profile_path())
    monkeypatch.setattr(cpu_profile, "measure_profile", lambda *a, **k: pytest.fail("must reuse the cache"))
    cluster = cpu_profile.measured_cluster(make_cluster("local-cpu", 1, 2))
    assert cluster.device.step_overhead_s == 0.01 and cluster.gpus_per_node == 2
    gpu = make_cluster("a100-80gb", 1, 8)
    assert cpu_profile.measured_cluster(gpu) is gpu
    monkeypatch.setenv("SCALESTUDY_CPU_PROFILE", "static")
    assert cpu_profile.measured_cluster(make_cluster("local-cpu", 1, 2)).device.step_overhead_s == 0.0


def test_missing_profile_is_measured_once(tmp_path, monkeypatch):
    monkeypatch.setenv("SCALESTUDY_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("SCALESTUDY_CPU_PROFILE", "measured")
    calls = []

    def fake_measure(path, log=None):
        calls.append(path)
        return save_profile(replace(get_device("local-cpu"), step_overhead_s=0.5), path)

    monkeypatch.setattr(cpu_profile, "measure_profile", fake_measure)
    assert cpu_profile.local_cpu_profile().step_overhead_s == 0.5
    assert cpu_profile.local_cpu_profile().step_overhead_s == 0.5
    assert len(calls) == 1


def test_overhead_terms_add_to_the_step_time():
    base = get_device("local-cpu")
    spec, work = get_model("t5-tiny"), Workload(4, 64, 16)
    plain = estimate(spec, ClusterSpec(device=base, nodes=1, gpus_per_node=1), Strategy(precision="fp32",
                     micro_batch=2), work)
    dev = replace(base, step_overhead_s=0.01, microstep_overhead_s=0.002, layer_overhead_s=1e-4)
    over = estimate(spec, ClusterSpec(device=dev, nodes=1, gpus_per_node=1), Strategy(precision="fp32",
                    micro_batch=2), work)
    sublayer_passes = 3 * (2 * 2 + 3 * 2)  # fwd + 2x bwd; 2 encoder blocks x 2 sublayers, 2 decoder blocks x 3
    grad_accum = 2
    expected = 0.01 + grad_accum * (0.002 + sublayer_passes * 1e-4)
    assert over.step_s - plain.step_s == pytest.approx(expected, rel=1e-6)


def test_fit_overheads_recovers_known_terms():
    scale, step, micro, layer = 1.7, 0.01, 0.003, 2e-4
    points = []
    for pred, acc, sub in ((0.01, 1, 5), (0.03, 1, 15), (0.04, 2, 5), (0.02, 2, 15), (0.08, 4, 10)):
        points.append((pred, acc, sub, scale * pred + step + acc * (micro + 3 * sub * layer)))
    assert cpu_profile.fit_overheads(points) == pytest.approx((scale, step, micro, layer), rel=1e-6)
    assert cpu_profile.fit_overhead_terms(points).split == "measured"


# (layers, micro-batch, accumulation) of the timed steps, multiplicative load noise (sd): a design whose depths and
# accumulations pull the per-micro-batch and per-sublayer columns apart separates them through 2% noise; the
# profile's own design at 10% (one burst of load) cannot, and the fit falls back to the operator-count split
# instead of handing all of it to one term (the 407 us / 0 vs 0 / 8.4 ms profiles of one machine, 2026-12-02)
@pytest.mark.parametrize("design, noise, split", [
    (((1, 1, 1), (6, 1, 1), (1, 1, 4), (6, 1, 4), (1, 8, 1), (3, 4, 2), (6, 2, 2), (2, 1, 8), (4, 8, 1)), 0.02,
     "measured"),
    (((1, 1, 1), (3, 1, 1), (1, 4, 1), (1, 8, 1), (1, 1, 2), (2, 2, 1), (3, 4, 2)), 0.10, "op-count ratio"),
])
def test_fit_overheads_separates_micro_batch_from_sublayer_cost_or_says_it_cannot(design, noise, split):
    import random

    scale, micro, layer = 1.6, 2.5e-3, 2.5e-4
    rng = random.Random(3)
    points = []
    for layers, mb, acc in design:
        sub, pred = 5 * layers, 4e-3 * acc * mb * (1 + 0.8 * layers)  # compute grows with depth and micro-batch
        true = scale * pred + acc * (micro + 3 * sub * layer)
        points.append((pred, acc, sub, true * math.exp(rng.gauss(0.0, noise))))
    fit = cpu_profile.fit_overhead_terms(points)
    assert fit.split == split and ("not separable" in fit.note()) == (split != "measured")  # the profile says which
    if split == "measured":
        assert fit.microstep_s == pytest.approx(micro, rel=0.35) and fit.layer_s == pytest.approx(layer, rel=0.2)
    else:
        assert fit.microstep_s == pytest.approx(cpu_profile.MICROSTEP_SUBLAYER_PASSES * fit.layer_s)
        per_micro_step = fit.microstep_s + 3 * 10 * fit.layer_s  # t5-tiny's 10 sublayers: the total stays measured
        assert per_micro_step == pytest.approx(micro + 3 * 10 * layer, rel=0.5)


def test_engine_overhead_scales_with_sublayers_and_micro_batches(tmp_path):
    base = get_device("local-cpu")
    dev = replace(base, engine_overhead_s={"deepspeed-3": 1e-3})
    spec, work = get_model("t5-tiny"), Workload(4, 64, 16)
    cluster = ClusterSpec(device=dev, nodes=1, gpus_per_node=1)
    z3 = estimate(spec, cluster, Strategy(zero=3, precision="fp32", micro_batch=2), work)
    z2 = estimate(spec, cluster, Strategy(zero=2, precision="fp32", micro_batch=2), work)
    assert z3.framework_s == pytest.approx(2 * (2 * 2 + 3 * 2) * 1e-3)  # 2 micro-batches x 10 sublayers
    assert z2.framework_s == 0.0
    path = save_profile(dev, tmp_path / "p.yaml")  # the dict survives the YAML round trip
    assert get_device(str(path)).engine_overhead_s == {"deepspeed-3": 1e-3}


def test_multi_rank_engine_term_applies_only_with_several_ranks():
    dev = replace(get_device("local-cpu"), engine_overhead_s={"deepspeed-2": 1e-3, "deepspeed-2@multi": 2e-3})
    spec, st = get_model("t5-tiny"), Strategy(zero=2, precision="fp32", micro_batch=2)
    one = estimate(spec, ClusterSpec(device=dev, nodes=1, gpus_per_node=1), st, Workload(4, 64, 16))
    two = estimate(spec, ClusterSpec(device=dev, nodes=1, gpus_per_node=2), st, Workload(4, 64, 16))
    assert one.framework_s == pytest.approx(2 * 10 * 1e-3)  # 2 micro-batches x 10 sublayers
    assert two.framework_s == pytest.approx(1 * 10 * 3e-3)  # 1 micro-batch per rank, both terms


def test_engine_step_term_is_charged_once_per_optimizer_step_whatever_the_accumulation():
    """"/step" keys (profile format 9: the engine's step() timed apart from its passes) do not grow with the
    micro-batches, in estimate() and in the per-stage model alike; "@multi/step" only with several ranks."""
    from scalestudy.specs.hardware import DeviceGroup

    dev = replace(get_device("local-cpu"), engine_overhead_s={"ddp-1": 1e-3, "ddp-1/step": 4e-3,
                                                              "ddp-1@multi/step": 2e-3})
    spec, st = get_model("t5-tiny"), Strategy(engine="ddp", zero=1, precision="fp32", micro_batch=1)
    one = ClusterSpec(device=dev, nodes=1, gpus_per_node=1)
    for ga in (1, 8):
        assert estimate(spec, one, st, Workload(ga, 64, 16)).framework_s == pytest.approx(10 * (ga * 1e-3 + 4e-3))
    two = ClusterSpec(device=dev, nodes=1, gpus_per_node=2)
    plain = estimate(spec, two, st, Workload(16, 64, 16))
    assert plain.framework_s == pytest.approx(10 * (8 * 1e-3 + 6e-3))
    staged = estimate(spec, replace(two, groups=(DeviceGroup(dev, 2),)), st, Workload(16, 64, 16))
    assert staged.stages and staged.framework_s == pytest.approx(plain.framework_s, rel=1e-9)


def test_profile_times_the_step_apart_from_the_micro_batches(monkeypatch):
    """engine/cpu_profile.engine_overheads: a micro-batch that is not the last against plain PyTorch's is the
    per-micro-batch term; the last one's extra (the boundary reduction) and the step against plain's are per step."""
    from scalestudy.engine import cpu_profile as measure

    monkeypatch.setattr(measure, "ENGINES", (("ddp", 1),))
    monkeypatch.setattr(measure, "time_steps", lambda *a, **k: (0.10, 0.02))  # plain: per micro-batch, step
    monkeypatch.setattr(measure, "time_engine", lambda *a, **k: (0.11, 0.15, 0.05))  # inner, last, step
    out = measure.engine_overheads()
    sublayers = 2 * 2 + 3 * 2  # t5-tiny
    assert out["ddp-1"] == pytest.approx(0.01 / sublayers)
    assert out["ddp-1/step"] == pytest.approx((0.15 - 0.11 + 0.05 - 0.02) / sublayers)


def test_engine_terms_carry_the_fits_miss_at_the_timed_shape(monkeypatch):
    """engine/cpu_profile.fit_miss: the plain-step fit misses t5-tiny's own step (mb 2, accumulation 1 and 2) by
    what the plain rounds timed beyond its price, per micro-batch; the one-rank engine terms (timed against plain
    PyTorch at that shape) carry that miss, so the model gives back the engine's timed step there, at either
    accumulation, instead of the fit's plain step plus the engine's extra (the demo's 1-rank trials run that shape)."""
    from scalestudy.engine import cpu_profile as measure

    dev = replace(get_device("local-cpu"), step_overhead_s=0.004, microstep_overhead_s=0.003, layer_overhead_s=3e-4)
    spec, st = get_model("t5-tiny"), Strategy(engine="ddp", zero=0, precision="fp32", micro_batch=2)
    one = ClusterSpec(device=dev, nodes=1, gpus_per_node=1)
    fitted = [estimate(spec, one, st, Workload(2 * acc, 64, 16)).step_s for acc in (1, 2)]
    timed = (fitted[0] + 0.006, fitted[1] + 0.012)  # plain PyTorch at that shape: 6 ms per micro-batch above the fit
    assert measure.fit_miss(dev, timed) == pytest.approx(0.006)
    # a miss that is not linear in the micro-batches: the least-squares line through 0 over accumulation 1 and 2
    assert measure.fit_miss(dev, (fitted[0] + 0.010, fitted[1] + 0.010)) == pytest.approx((0.010 + 2 * 0.010) / 5)
    plain = (timed[1] - timed[0], 2 * timed[0] - timed[1])  # plain PyTorch's micro-batch and step, timed beside
    inner, last, update = plain[0] + 0.03, plain[0] + 0.05, plain[1] + 0.02  # the engine's, timed at that shape
    monkeypatch.setattr(measure, "ENGINES", (("ddp", 0),))
    monkeypatch.setattr(measure, "time_steps", lambda *a, **k: plain)
    monkeypatch.setattr(measure, "time_engine", lambda *a, **k: (inner, last, update))
    terms = measure.engine_overheads(miss=measure.fit_miss(dev, timed))
    priced = ClusterSpec(device=replace(dev, engine_overhead_s=terms), nodes=1, gpus_per_node=1)
    assert estimate(spec, priced, st, Workload(4, 64, 16)).step_s == pytest.approx(inner + last + update, rel=1e-9)
    assert estimate(spec, priced, st, Workload(2, 64, 16)).step_s == pytest.approx(last + update, rel=1e-9)
    # without the miss the model prices the fit's plain step plus the engine's extra: 12 ms short here
    unmissed = ClusterSpec(device=replace(dev, engine_overhead_s=measure.engine_overheads()), nodes=1,
                           gpus_per_node=1)
    assert estimate(spec, unmissed, st, Workload(4, 64, 16)).step_s == pytest.approx(inner + last + update - 0.012)


def test_measured_memory_rates_price_the_cpu_optimizer_step():
    """A CPU profile's copy curve and optimizer rows (costmodel/cpu_memory.py): bandwidth interpolated in log2 size
    and clamped; the trainer's clip + AdamW step = parameters at the rate of a step that size + a measured cost per
    extra tensor (from the row of many small tensors), one tensor over the 32 MB mmap threshold at its own measured
    rate; DeepSpeed ZeRO-1/2/3 step one flat partition plus two copies of it; GPUs keep OPTIMIZER_BYTES."""
    from scalestudy.costmodel import cpu_memory

    mib = 1 << 20
    dev = replace(get_device("local-cpu"), copy_bandwidth=[[mib, 40e9], [64 * mib, 10e9]],
                  optimizer_step_s=[[1, 1 << 18, 1e-3], [64, 1 << 24, 0.5 + 63 * 20e-6],
                                    [256, 1 << 18, 1e-3 + 255 * 20e-6], [1, 1 << 24, 2.0]])
    assert cpu_memory.bandwidth(dev, 8 * mib) == pytest.approx(25e9) and cpu_memory.bandwidth(dev, 1e12) == 10e9
    assert cpu_memory.copy_s(dev, 64 * mib, 2) == pytest.approx(4 * 64 * mib / 10e9)
    rates, per_tensor = cpu_memory.optimizer_rates(dev)
    assert per_tensor == pytest.approx(20e-6) and rates[-1][1] == pytest.approx(0.5 / (1 << 24))
    assert cpu_memory.optimizer_step_s(dev, 1 << 24, 101) == pytest.approx(0.5 + 100 * 20e-6)
    assert cpu_memory.optimizer_step_s(dev, 1 << 21, 1) == pytest.approx((1 << 21) * 0.5 * (1e-3 / (1 << 18) + 0.5 / (1 << 24)))
    assert cpu_memory.optimizer_step_s(dev, 1 << 24, 1) == pytest.approx(2.0)  # one 64 MB tensor: its own rate
    m, work = get_model("t5-micro"), Workload(16, 128, 32)
    cluster = ClusterSpec(device=dev, nodes=1, gpus_per_node=2)
    psi = estimate(m, cluster, Strategy(precision="fp32", micro_batch=8), work).params_per_device

    def opt(engine, zero, device=dev):
        return estimate(m, replace(cluster, device=device), Strategy(engine=engine, zero=zero, precision="fp32",
                                                                     micro_batch=8), work).optimizer_s

    assert opt("ddp", 0) == pytest.approx(cpu_memory.optimizer_step_s(dev, psi, 144))  # every tensor, every param
    assert opt("ddp", 1) == pytest.approx(cpu_memory.optimizer_step_s(dev, psi / 2, 72))  # ZeroRedundancyOptimizer
    assert opt("fsdp", 2) == pytest.approx(cpu_memory.optimizer_step_s(dev, psi / 2, 144))  # every DTensor shard
    assert opt("deepspeed", 2) == pytest.approx(cpu_memory.optimizer_step_s(dev, psi / 2, 1)
                                                + cpu_memory.copy_s(dev, 4 * psi / 2, 2))  # flat fp32 partition
    assert opt("ddp", 0, get_device("local-cpu")) == pytest.approx(psi * 28 / get_device("local-cpu").hbm_bytes_per_s)
    gpu = get_device("a100-80gb")
    assert opt("ddp", 0, replace(gpu, copy_bandwidth=dev.copy_bandwidth, optimizer_step_s=dev.optimizer_step_s)) \
        == opt("ddp", 0, gpu)


def test_per_stage_model_takes_the_measured_collectives_out_of_the_multi_rank_overhead_like_estimate():
    """costmodel/cpu_engine.multi_overhead is the one definition: a cluster given as device groups (the per-stage
    model, costmodel/stages.py) charges the same engine framework time as estimate() on the plain cluster."""
    from scalestudy.specs.hardware import DeviceGroup

    dev = replace(get_device("local-cpu"), engine_overhead_s={"deepspeed-3": 0.002, "deepspeed-3@multi": 0.01},
                  collective_time_ratio={"all_reduce": 1.0, "all_gather": 1.5, "reduce_scatter": 4.0})
    spec, work, st = get_model("t5-tiny"), Workload(8, 64, 16), Strategy(engine="deepspeed", zero=3,
                                                                         precision="fp32", micro_batch=2)
    plain = estimate(spec, ClusterSpec(device=dev, nodes=1, gpus_per_node=2), st, work)
    staged = estimate(spec, ClusterSpec(device=dev, nodes=1, gpus_per_node=2, groups=(DeviceGroup(dev, 2),)), st, work)
    assert staged.stages and staged.framework_s == pytest.approx(plain.framework_s, rel=1e-9)
    assert plain.framework_s < 2 * (2 * 2 + 3 * 2) * 0.012  # the collectives' excess is out of "@multi"



def test_gloo_collectives_are_priced_at_their_measured_ratio_for_their_message_size():
    """cpu_collectives.rate: the calibration's measured / modelled ratio at the collective's own message size
    (interpolated in log2 size, clamped), the largest message's without a by-size table, 1 when not measured; a
    model of small per-layer gathers (gpt2-tiny under FSDP) pays the small-message ratio, not the 16 MB one."""
    from scalestudy.costmodel import cpu_collectives

    base = replace(get_device("local-cpu"), collective_time_ratio={"all_gather": 2.0, "reduce_scatter": 2.0})
    dev = replace(base, collective_ratio_by_size={"all_gather": [[4096, 0.5], [16 << 20, 2.0]],
                                                  "reduce_scatter": [[4096, 0.5], [16 << 20, 2.0]]})
    assert cpu_collectives.rate(dev, "all_gather", 4096) == 0.5 and cpu_collectives.rate(dev, "all_gather", 1e12) == 2.0
    assert cpu_collectives.rate(dev, "all_gather", 2 ** 18) == pytest.approx(1.25)  # halfway in log2 size
    assert cpu_collectives.rate(base, "all_gather", 4096) == 2.0
    assert cpu_collectives.rate(replace(dev, collective_time_ratio={}), "all_gather", 4096) == 1.0

    def comm(device):
        return estimate(get_model("gpt2-tiny"), ClusterSpec(device=device, nodes=1, gpus_per_node=2),
                        Strategy(engine="fsdp", zero=3, precision="fp32", micro_batch=1), Workload(16, 128, 0)
                        ).dp_comm_total_s

    assert comm(dev) < comm(base)


@pytest.mark.parametrize("field, value, says", [
    ("copy_bandwidth", "x", "list of 2-number rows"), ("copy_bandwidth", [[0, 5e9]], "must be > 0"),
    ("fresh_copy_bandwidth", [[1, 2, 3]], "2-number rows"), ("fresh_copy_bandwidth", [[1e6, 0]], "must be > 0"),
    ("optimizer_step_s", [[1, 2]], "3-number rows"), ("optimizer_step_s", [[0, 2, 1e-3]], "a whole number >= 1"),
    ("collective_ratio_by_size", [1], "map collectives"), ("collective_ratio_by_size", {"all_gather": [[0, 1]]},
                                                          "must be > 0"),
])
def test_profile_memory_and_ratio_tables_reject_bad_rows_in_one_line(field, value, says):
    from dataclasses import asdict

    from scalestudy.errors import ScalestudyError
    from scalestudy.specs.hardware import _device_from_dict

    with pytest.raises(ScalestudyError, match=says) as err:
        _device_from_dict({**asdict(get_device("local-cpu")), field: value}, "p.yaml")
    assert "\n" not in str(err.value)


def test_deepspeed_and_fsdp_on_gloo_ranks_follow_their_code_paths():
    """cpu_collectives.gloo_dp_comm (CPU ranks with measured gloo rates): DeepSpeed ZeRO-1/2 all-reduce the whole
    reduce bucket plus its copies (ZeRO-2 after every micro-batch, ZeRO-1 once; the copy into the bucket allocated
    for each backward and the flatten into a fresh buffer at the fresh-copy rate); ZeRO-3 gathers a small model
    once per micro-batch in ONE prefetched call of stage3_prefetch_bucket_size elements at most (the backward
    reuses it); DDP + ZeroRedundancyOptimizer all-reduces the gradients, then broadcasts every parameter tensor in
    place (all_reduce's rate, not all_gather's); FSDP2 gathers and reduce-scatters in every micro-batch (train's
    gradient_sync every_micro_batch); devices without measured rates keep terms._dp_comm's model."""
    import math

    from scalestudy.costmodel import cpu_collectives
    from scalestudy.costmodel.cpu_memory import copy_s, fresh_copy_s
    from scalestudy.costmodel.engines import engine_comm
    from scalestudy.costmodel.zero3 import zero3_gathers

    mib = 1 << 20
    dev = replace(get_device("local-cpu"), collective_time_ratio={"all_reduce": 1.0, "all_gather": 1.5,
                                                                   "reduce_scatter": 3.0},
                  copy_bandwidth=[[mib, 40e9], [256 * mib, 20e9]], fresh_copy_bandwidth=[[mib, 30e9], [256 * mib, 2e9]])
    m = get_model("t5-micro")

    def comm(engine, zero, mb, device=dev):
        return estimate(m, ClusterSpec(device=device, nodes=1, gpus_per_node=2),
                        Strategy(engine=engine, zero=zero, precision="fp32", micro_batch=mb), Workload(16, 128, 32))

    e = comm("deepspeed", 1, 8)
    psi, grads = e.params_per_device, 4.0 * e.params_per_device
    lat = dev.intra_node_latency_s
    gather = grads / 2 / dev.intra_node_bytes_per_s / 0.95 + lat  # one ring all-gather of the gradients
    all_reduce = 2 * gather
    # copied into a bucket allocated afresh, flattened into a fresh buffer; divided in place, slices copied back
    reduction = all_reduce + fresh_copy_s(dev, grads, 2.0) + copy_s(dev, grads, 1.0 + 2.0 / 2)
    boundary = fresh_copy_s(dev, grads / 2) + 1.5 * gather
    assert e.dp_comm_total_s == pytest.approx(reduction + boundary, rel=1e-9)
    assert comm("deepspeed", 1, 1).dp_comm_total_s == pytest.approx(e.dp_comm_total_s, rel=1e-9)
    assert comm("deepspeed", 2, 1).dp_comm_total_s == pytest.approx(8 * reduction + boundary, rel=1e-9)
    z3 = comm("deepspeed", 3, 8).dp_comm_total_s
    z = zero3_gathers(m, 1, 1, m.total_layers, psi)
    each = 4.0 * z.gathered_elems  # 38M elements < the 5e7 prefetch bucket: one coalesced gather per pass
    one_pass = 1.5 * (each / 2 / dev.intra_node_bytes_per_s / 0.95 + lat) \
        + fresh_copy_s(dev, each) - copy_s(dev, each) + copy_s(dev, each / 2)  # its pages faulted, our shard cat in
    reduce_scatter = 3.0 * gather + fresh_copy_s(dev, grads) + copy_s(dev, grads, 1.5)
    assert z3 == pytest.approx(one_pass + reduce_scatter, rel=1e-9)
    assert comm("deepspeed", 3, 1).dp_comm_total_s == pytest.approx(8 * z3, rel=1e-9)  # all per micro-batch
    eng = engine_comm("deepspeed")
    assert [cpu_collectives.zero3_fetches(x, eng) for x in (1e6, 5e7, 5e7 + 1, 1.2e8)] == [1, 1, 2, 3]
    # DDP + ZeroRedundancyOptimizer: DDP's all-reduce in 25 MB buckets, then one in-place broadcast per tensor
    buckets = math.ceil(psi / 6.25e6)
    ddp_reduce = 2 * (grads / 2 / dev.intra_node_bytes_per_s / 0.95 + buckets * lat)
    sync = grads / dev.intra_node_bytes_per_s / 0.95 + z.tensors * lat
    for mb in (1, 8):  # once per step
        assert comm("ddp", 1, mb).dp_comm_total_s == pytest.approx(ddp_reduce + sync, rel=1e-9)
    slow_gather = replace(dev, collective_time_ratio={**dev.collective_time_ratio, "all_gather": 5.0})
    assert comm("ddp", 1, 8, slow_gather).dp_comm_total_s == pytest.approx(ddp_reduce + sync, rel=1e-9)
    f8, f1 = comm("fsdp", 3, 8).dp_comm_total_s, comm("fsdp", 3, 1).dp_comm_total_s
    units = 2 * m.num_layers + 1  # fully_shard per block and the root
    ring = (grads / 2) / dev.intra_node_bytes_per_s / 0.95 + units * lat  # every unit's ring once, fp32
    per_gather = 1.5 * ring + units * fresh_copy_s(dev, grads / units, 1.5)
    per_reduce = 3.0 * ring + units * fresh_copy_s(dev, grads / units, 1.5)
    assert f1 - f8 == pytest.approx(7 * (2 * per_gather + per_reduce), rel=1e-9)  # 7 more micro-batches
    assert f8 == pytest.approx(2 * per_gather + per_reduce, rel=1e-9)
    plain = replace(dev, collective_time_ratio={})
    assert cpu_collectives.gloo_dp_comm(e.strategy, None, psi, None, 12, 4, ClusterSpec(device=plain, nodes=1,
                                        gpus_per_node=2), (), 2, 1, 1) is None
