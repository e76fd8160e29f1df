"""Measure this CPU for the cost model: micro-benchmarks plus the framework overhead of real training steps.

The micro-benchmarks (engine/microbench.py, on 2 ranks: matmul rates, copy bandwidth vs buffer size, the
optimizer step vs parameters and tensors, gloo collectives) give the compute, memory and link terms.
What they cannot see is the fixed time PyTorch spends per operator, per micro-batch and per optimizer step, which
dominates small models on a CPU. So this module times real training
steps of T5 models of the t5-tiny shape at two depths, two micro-batch sizes and two accumulation counts
(plain PyTorch, AdamW, fp32, one process), predicts the same steps with the cost model on the measured profile, and
fits the measured time as
    scale x predicted + step_overhead_s + accumulation x (microstep_overhead_s + 3 x sublayers x layer_overhead_s)
(3 passes per sublayer: forward, and backward counted as two, as costmodel/step.py applies it; `scale` corrects the
micro-benchmarks' compute rate for what small training kernels reach and is folded into the GEMM efficiencies)
(non-negative least squares on relative errors; the per-micro-batch / per-sublayer split is kept only where the
timings separate it, else set by operator count: costmodel/cpu_profile.fit_overhead_terms, said in the profile). Then
each engine's own cost (DeepSpeed ZeRO 0-3, FSDP2, DDP: wrappers, hooks, bucketing, the trainer's per-step statistics)
is timed through scalestudy's real backends on one rank, for the t5-tiny shape, and stored per engine in two parts
timed in the same steps: the forward + backward passes as seconds per sublayer per micro-batch above plain PyTorch's
("<engine>-<zero>"), the optimizer step as seconds per sublayer per optimizer step above plain PyTorch's clip + AdamW
("<engine>-<zero>/step": work an engine does once in its step(), which must not grow with the accumulation count),
the per-micro-batch one plus what the fitted model misses per micro-batch of plain PyTorch's step at that shape
(`fit_miss`)
(`engine_overhead_s`; tensor and pipeline parallelism's dispatch and schedule costs too, engine/parallel_profile.py),
and again on `nproc` ranks under torchrun: what the ranks cost beyond the one-rank prediction (gloo collectives of
many small buckets, ranks sharing cores) in each phase is stored as "<engine>-<zero>@multi" and
"<engine>-<zero>@multi/step".
The profile (a DeviceSpec YAML) is what `scalestudy.costmodel.cpu_profile` caches.

    python -m scalestudy.engine.cpu_profile --output PATH.yaml [--nproc 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import torch

from scalestudy.costmodel.cpu_engine import PER_STEP
from scalestudy.costmodel.cpu_profile import PROGRESS_MARK
from scalestudy.engine.cpu_wait import Meter, clock, peer_wait, wait_s
from scalestudy.engine.op_builds import extensions_dir, pin_ninja
from scalestudy.engine.single_rank import init_single_rank_group

# (layers per stack, micro-batch, accumulation): enough spread to separate compute from the three overhead terms
CONFIGS = ((1, 1, 1), (3, 1, 1), (1, 4, 1), (1, 8, 1), (1, 1, 2), (2, 2, 1), (3, 4, 2))
# t5-tiny's own shape at the engines' micro-batch, accumulation 1 and 2 (`engine_overheads`): timed in the same rounds
# (the first is one of CONFIGS), not fitted -- what the fit misses there (`fit_miss`)
ENGINE_SHAPE = ((2, 2, 1), (2, 2, 2))
SEQ_LEN, TARGET_LEN = 64, 16
# Rounds of the plain steps: three, and more (up to MAX_ROUNDS) while each config's two best disagree by more than
# AGREE (median over the configs): the best is then not yet a quiet machine's.
ROUNDS, MAX_ROUNDS, AGREE = 3, 6, 0.05


def time_steps(spec, micro_batch: int, accum: int, steps: int = 8, warmup: int = 2, phases: bool = False,
               meter: Meter | None = None):
    """Median seconds of one optimizer step (accum micro-batches of random tokens) of plain PyTorch training; with
    `phases`, (median s of one micro-batch's forward + backward, median s of the clip + optimizer step). Seconds on
    `cpu_wait.clock`: what other processes took of the wall time is not counted (and is added to `meter`)."""
    from scalestudy.engine.hf_model import build_hf_model

    torch.manual_seed(0)
    model = build_hf_model(spec)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, spec.vocab_size, (micro_batch, SEQ_LEN))
    labels = torch.randint(0, spec.vocab_size, (micro_batch, TARGET_LEN))
    times, passes, updates = [], [], []
    for i in range(warmup + steps):
        w0, t0 = time.perf_counter(), clock()
        for _ in range(accum):
            loss = model(input_ids=ids, labels=labels).loss / accum
            loss.backward()
        t1 = clock()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if i >= warmup:
            t2, wall = clock(), time.perf_counter() - w0
            times.append(t2 - t0)
            passes.append(t1 - t0)
            updates.append(t2 - t1)
            if meter is not None:
                meter.add(wall, wall - (t2 - t0))
    if phases:  # plain PyTorch's micro-batches are all alike: one is the passes / accum
        return statistics.median(passes) / accum, statistics.median(updates)
    return statistics.median(times)


def _best(runs: list[tuple]) -> tuple:
    """Each component's best (smallest) over repeats: load from other processes only ever adds time, and what the
    run queue does not show of it (their traffic through shared caches and memory) moves some repeats, not all."""
    return tuple(min(r[k] for r in runs) for k in range(len(runs[0])))


def spread(runs: list[float]) -> float:
    """Largest over smallest of repeated timings, less 1: how far the repeats disagree."""
    return max(runs) / min(runs) - 1.0 if runs and min(runs) > 0 else 0.0


ENGINES = (("deepspeed", 0), ("deepspeed", 1), ("deepspeed", 2), ("deepspeed", 3), ("fsdp", 2), ("fsdp", 3),
           ("ddp", 0), ("ddp", 1))


def time_engine(engine: str, zero: int, micro_batch: int = 2, accum: int = 2, steps: int = 6, warmup: int = 2,
                meter: Meter | None = None) -> tuple[float, float, float]:
    """Median seconds of (one micro-batch's forward + backward that is not the step's last, the last one, the
    optimizer_step + the trainer's per-step statistics all-gather) of t5-tiny through scalestudy's backend for
    (engine, zero) on this process's ranks (its micro_step calls, as forward_backward makes them). What differs
    between the last micro-batch and the others (the gradient reduction at the accumulation boundary: DDP's
    all-reduce outside no_sync, DeepSpeed's boundary reduce, FSDP's reduce-scatter) and the step are done once per
    optimizer step; the rest once per micro-batch. Seconds less the run-queue wait of the step's most-preempted rank
    (`cpu_wait.peer_wait`; added to `meter`)."""
    import torch.distributed as dist

    from scalestudy.engine.backends import make_backend
    from scalestudy.engine.hf_model import build_hf_model
    from scalestudy.specs.presets import get_model
    from scalestudy.specs.run import RunConfig
    from scalestudy.specs.strategy import Strategy, Workload, resolve_layout

    init_single_rank_group()
    world = dist.get_world_size()
    spec = get_model("t5-tiny")
    strategy = Strategy(engine=engine, zero=zero, precision="fp32", micro_batch=micro_batch)
    workload = Workload(micro_batch * accum * world, SEQ_LEN, TARGET_LEN)
    tmp = tempfile.TemporaryDirectory()  # the backends write their resolved settings into the run directory
    cfg = RunConfig.build("t5-tiny", strategy, workload, nproc=world, steps=warmup + steps, output=tmp.name)
    layout = resolve_layout(strategy, world, workload.global_batch)
    torch.manual_seed(0)
    backend = make_backend(build_hf_model(spec), cfg, strategy, layout, torch.device("cpu"))
    inputs = {"input_ids": torch.randint(0, spec.vocab_size, (micro_batch, SEQ_LEN)),
              "labels": torch.randint(0, spec.vocab_size, (micro_batch, TARGET_LEN))}
    stats = torch.zeros(6, dtype=torch.float64)
    walls, waits = [], []  # per timed step: (inner, last, update) wall seconds and run-queue seconds
    try:
        for i in range(warmup + steps):
            marks = [(time.perf_counter(), wait_s())]
            for k in range(accum):
                backend.micro_step(dict(inputs), last=k == accum - 1)
                marks.append((time.perf_counter(), wait_s()))
            backend.optimizer_step()
            dist.all_gather([torch.empty_like(stats) for _ in range(world)], stats)  # the trainer's gather_stats
            marks.append((time.perf_counter(), wait_s()))
            if i >= warmup:
                spans = ((marks[0], marks[-3]), (marks[-3], marks[-2]), (marks[-2], marks[-1]))
                walls += [b[0] - a[0] for a, b in spans]
                waits += [b[1] - a[1] for a, b in spans]
    finally:
        backend.close()
        tmp.cleanup()
    waits = peer_wait(waits)  # a rank blocked in a collective on a preempted peer lost that peer's wait too
    if meter is not None:
        meter.add(sum(walls), sum(waits))
    net = [max(0.0, w - q) for w, q in zip(walls, waits)]
    inner = [x / max(1, accum - 1) for x in net[0::3]]
    return statistics.median(inner), statistics.median(net[1::3]), statistics.median(net[2::3])


def fit_miss(device, timed: tuple[float, float]) -> float:
    """Seconds per micro-batch by which plain PyTorch's t5-tiny steps at mb 2, accumulation 1 and 2 (`timed`, the
    best of the plain-step rounds) exceed what the fitted profile `device` prices for them (< 0: it over-prices).
    The fit spreads its error over seven configs (residuals of up to ~10-15% each); the engine terms are measured
    against plain PyTorch at this one shape, so without this a trial at that shape (the demo's 1-rank trials: mb 2,
    accumulation 2) is predicted at the fit's plain step plus the engine's extra and carries the fit's miss there
    (plain t5-tiny mb 2 priced 12% under its timing at accumulation 1 in a quiet fresh-clone CI's profile, 15-17%
    under at accumulation 2 in two profiles at load 5-18; 2026-12-03/04, benchmarks/RESULTS.md).
    Per micro-batch: what the fit cannot place is the split between its per-micro-batch and per-sublayer terms
    (`fit_overhead_terms`, set by operator count), which at a given depth misses once per micro-batch (the step's
    clip + AdamW are priced by their own micro-benchmark); the least-squares line through 0 of the miss over the two
    accumulation counts."""
    from scalestudy.costmodel.estimate import estimate
    from scalestudy.specs.hardware import ClusterSpec
    from scalestudy.specs.presets import get_model
    from scalestudy.specs.strategy import Strategy, Workload

    _, mb, _ = ENGINE_SHAPE[0]
    spec = get_model("t5-tiny")
    cluster = ClusterSpec(device=replace(device, engine_overhead_s={}), nodes=1, gpus_per_node=1)
    st = Strategy(engine="ddp", precision="fp32", micro_batch=mb)
    accs = [acc for _, _, acc in ENGINE_SHAPE]
    misses = [t - estimate(spec, cluster, st, Workload(mb * acc, SEQ_LEN, TARGET_LEN)).step_s
              for t, acc in zip(timed, accs)]
    return sum(a * m for a, m in zip(accs, misses)) / sum(a * a for a in accs)


def engine_overheads(log=print, meter: Meter | None = None, miss: float = 0.0) -> dict[str, float]:
    """{"deepspeed-3": seconds per sublayer per micro-batch above plain PyTorch, "deepspeed-3/step": seconds per
    sublayer per optimizer step above plain PyTorch, ...} for the t5-tiny shape, from the same timed steps: a
    micro-batch that is not the last against plain PyTorch's; the last one's extra and the step against plain
    PyTorch's clip + AdamW (`time_engine`); the micro-batch's plus `miss` (`fit_miss`), so that the cost model gives
    back the engine's timed step at that shape, not the fit's plain step plus the engine's extra."""
    from scalestudy.specs.presets import get_model

    spec = get_model("t5-tiny")
    sublayers = 2 * spec.num_layers + 3 * spec.num_decoder_layers
    micro_batch, accum = 2, 2
    out = {}
    for engine, zero in ENGINES:
        # plain PyTorch right beside the engine, alternating, three times each, the best of each: the same machine
        # load for both, and a load burst during one timing does not become an engine cost
        plain, timed = [], []
        announce(f"  {engine} ZeRO-{zero}, beside plain PyTorch")
        try:
            for _ in range(3):
                plain.append(time_steps(spec, micro_batch, accum, phases=True, meter=meter))
                timed.append(time_engine(engine, zero, micro_batch, accum, meter=meter))
        except Exception as exc:  # noqa: BLE001 - an engine that cannot run here keeps no overhead term
            log(f"engine {engine}-{zero} not timed: {type(exc).__name__}: {exc}")
            continue
        (plain_micro, plain_update), (micro, last, update) = _best(plain), _best(timed)
        out[f"{engine}-{zero}"] = max(0.0, micro - plain_micro + miss) / sublayers
        out[f"{engine}-{zero}{PER_STEP}"] = max(0.0, last - micro + update - plain_update) / sublayers
    return out


def multi_rank_engine_times(output: Path) -> None:
    """Under torchrun: every rank times every engine (3 times, the best); rank 0 writes {"deepspeed-3": s, ...,
    "_wait": [wall s, run-queue s] of the timed steps}."""
    import json

    import torch.distributed as dist

    dist.init_process_group("gloo")
    out = {}
    meter = Meter()
    for engine, zero in ENGINES:
        try:
            out[f"{engine}-{zero}"] = _best([time_engine(engine, zero, meter=meter) for _ in range(3)])
        except Exception:  # noqa: BLE001 - an engine that cannot run here keeps no multi-rank term
            continue
    out["_wait"] = [meter.wall, meter.waited]
    if dist.get_rank() == 0:
        output.write_text(json.dumps(out), encoding="utf-8")
    dist.barrier()
    dist.destroy_process_group()


def multi_rank_overheads(device, nproc: int, timeout_s: float = 600.0, meter: Meter | None = None
                         ) -> dict[str, float]:
    """{"deepspeed-3@multi": s per sublayer per micro-batch, "deepspeed-3@multi/step": s per sublayer per optimizer
    step, ...}: what `nproc` ranks on this machine cost beyond the cost model's prediction with the one-rank profile
    (gloo collectives of the engine's many small buckets, ranks sharing the cores), timed with torchrun, the same
    t5-tiny steps as `engine_overheads`. The model is linear in the accumulation count, so its per-micro-batch
    part is the difference of its steps at accumulation 2 and 1 and its per-step part the rest; a micro-batch that
    is not the last is held against the first, the last one's extra and the optimizer step against the second."""
    import json
    import subprocess
    import sys

    from scalestudy.costmodel.estimate import estimate
    from scalestudy.specs.hardware import ClusterSpec
    from scalestudy.specs.presets import get_model
    from scalestudy.specs.strategy import Strategy, Workload

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "engines.json"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", "-m",
               "scalestudy.engine.cpu_profile", "--engine-times", str(path)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        if proc.returncode != 0 or not path.is_file():
            return {}
        measured = json.loads(path.read_text(encoding="utf-8"))
    wall, waited = measured.pop("_wait", (0.0, 0.0))
    if meter is not None:
        meter.add(wall, waited)
    spec = get_model("t5-tiny")
    sublayers = 2 * spec.num_layers + 3 * spec.num_decoder_layers
    micro_batch = 2
    # reference: collectives at the all_reduce fit's rate (what "@multi" is defined against; estimate costs the
    # measured per-op rates and takes this excess out again: costmodel/cpu_engine.py)
    cluster = ClusterSpec(device=replace(device, collective_time_ratio={}), nodes=1, gpus_per_node=nproc)
    out = {}
    for key, (micro, last, update) in measured.items():
        engine, zero = key.rsplit("-", 1)
        st = Strategy(engine=engine, zero=int(zero), precision="fp32", micro_batch=micro_batch)
        one, two = (estimate(spec, cluster, st, Workload(micro_batch * acc * nproc, SEQ_LEN, TARGET_LEN)).step_s
                    for acc in (1, 2))
        out[f"{key}@multi"] = max(0.0, micro - (two - one)) / sublayers
        out[f"{key}@multi{PER_STEP}"] = max(0.0, last - micro + update - (2 * one - two)) / sublayers
    return out


def announce(text: str) -> None:
    """A progress line for the parent (costmodel/cpu_profile._run_profile shows it; the rest of the output is kept
    for a failure's message): the measurement takes minutes, which passed in silence."""
    print(f"{PROGRESS_MARK} {text}", file=sys.stderr, flush=True)


class Phases:
    """Wall seconds per named part of the measurement (`with phases("name"):`), written into the profile's note:
    where a fresh machine's first prediction spends its time. Each part is announced as it starts (k of `total`)."""

    def __init__(self, total: int = 0) -> None:
        self.seconds: dict[str, float] = {}
        self.total = total

    @contextmanager
    def __call__(self, name: str):
        if name not in self.seconds:
            announce(f"{len(self.seconds) + 1}/{self.total} {name}" if self.total else name)
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0

    def __str__(self) -> str:
        return ", ".join(f"{name} {s:.0f} s" for name, s in self.seconds.items())


def agreement(rounds: list[list[float]]) -> float:
    """Median over configs of (second-best / best - 1) of a config's rounds: how far the best round may still hold
    load (inf with fewer than 2 rounds)."""
    if len(rounds) < 2:
        return float("inf")
    return statistics.median(spread(sorted(r[k] for r in rounds)[:2]) for k in range(len(rounds[0])))


def measure(output: Path, nproc: int = 2, attempt: int = 1) -> Path:
    from scalestudy.costmodel.calibrate import profile_from_microbench, save_profile
    from scalestudy.costmodel.cpu_profile import ProfileQuality, fit_overhead_terms
    from scalestudy.costmodel.estimate import estimate
    from scalestudy.engine.microbench import launch
    from scalestudy.engine.parallel_profile import multi_rank_parallel, parallel_overheads
    from scalestudy.specs.hardware import ClusterSpec, get_device
    from scalestudy.specs.presets import get_model
    from scalestudy.specs.strategy import Strategy, Workload

    t0 = time.perf_counter()
    load = os.getloadavg()[0]
    phases = Phases(total=6 if nproc > 1 else 4)  # the `with phases(...)` blocks below
    bench, one, many = Meter(), Meter(), Meter()  # run-queue share of the micro-benchmarks, 1-rank, n-rank timings
    with tempfile.TemporaryDirectory() as tmp, phases("micro-benchmarks"):
        meas = launch(str(Path(tmp) / "microbench.json"), nproc, quick=True)
    bench.add(*meas.get("wait", (0.0, 0.0)))
    device = profile_from_microbench(meas, get_device("local-cpu"), "local-cpu")
    base = get_model("t5-tiny")
    points = []
    timed_configs = CONFIGS + tuple(c for c in ENGINE_SHAPE if c not in CONFIGS)
    specs = {layers: replace(base, name=f"t5-tiny-{layers}", num_layers=layers, num_decoder_layers=layers)
             for layers, _, _ in timed_configs}
    # rounds, interleaved, the best of each config's medians (trials report their median step): what other
    # processes took from a round through the run queue is not counted (cpu_wait.py), and one whose traffic slowed
    # it some other way does not end up in the fit; more rounds while the two best disagree
    with phases("plain steps"):
        rounds = []
        while len(rounds) < ROUNDS or (len(rounds) < MAX_ROUNDS and agreement(rounds) > AGREE):
            rounds.append([time_steps(specs[layers], mb, accum, meter=one) for layers, mb, accum in timed_configs])
    for k, (layers, mb, accum) in enumerate(CONFIGS):
        spec = specs[layers]
        measured = min(r[k] for r in rounds)
        est = estimate(spec, ClusterSpec(device=device, nodes=1, gpus_per_node=1), Strategy(engine="ddp",
                       precision="fp32", micro_batch=mb), Workload(mb * accum, SEQ_LEN, TARGET_LEN))
        sublayers = 2 * layers + 3 * layers
        points.append((est.step_s, accum, sublayers, measured))
    fit = fit_overhead_terms(points)
    scale, step, micro, layer = fit.scale, fit.step_s, fit.microstep_s, fit.layer_s
    # the compute factor folds into the GEMM efficiencies and the memory bandwidth (what compute time reads)
    # capped at the peak, as the measured curve is (efficiency_curve): a device YAML takes fractions in (0, 1]
    device = replace(device, matmul_efficiency=[[n, min(f / scale, 1.0)] for n, f in device.matmul_efficiency],
                     hbm_bytes_per_s=device.hbm_bytes_per_s / scale, layer_overhead_s=layer,
                     microstep_overhead_s=micro, step_overhead_s=step)
    at_shape = tuple(min(r[timed_configs.index(c)] for r in rounds) for c in ENGINE_SHAPE)
    miss = fit_miss(device, at_shape)
    with phases("engines on 1 rank"):
        engines = engine_overheads(meter=one, miss=miss)
    with phases("tp/pp on 1 rank"):
        engines.update(parallel_overheads())  # tensor/pipeline parallelism's own framework time (parallel_profile.py)
    device = replace(device, engine_overhead_s=engines)
    if nproc > 1:
        with phases(f"engines on {nproc} ranks"):
            engines = {**engines, **multi_rank_overheads(device, nproc, meter=many)}
        with phases(f"tp collective on {nproc} ranks"):
            engines.update(multi_rank_parallel(device, nproc))
    device = replace(device, engine_overhead_s=engines,
                     source=device.source + f"; framework overheads fitted on {len(points)} timed plain-PyTorch T5 "
                                            f"steps: {fit.note()}")
    total = Meter()
    for m in (bench, one, many):
        total.add(m.wall, m.waited)
    quality = ProfileQuality(waited=total.share(), spread=agreement(rounds), rounds=len(rounds), attempt=attempt)
    note = (f"per-machine CPU profile (scalestudy.engine.cpu_profile, {time.perf_counter() - t0:.0f} s: {phases}; "
            f"load average {load:.1f} at the start; other processes held the CPU {bench.share():.0%} of the "
            f"micro-benchmarks' timed runs, {one.share():.0%} of the 1-rank and {many.share():.0%} of the "
            f"{nproc}-rank steps, not counted); overhead split: {fit.split}; measured steps s: "
            + ", ".join(f"L{c[0]} mb{c[1]} acc{c[2]} {p[3]:.4f}" for c, p in zip(CONFIGS, points))
            + f" (not fitted: L2 mb2 acc2 {at_shape[1]:.4f}); the fit's miss at t5-tiny mb2, added to the engine "
              f"terms: {miss * 1e3:+.2f} ms per micro-batch"
            + f"; {quality.text()}")
    return save_profile(device, output, note)


def trial_op_environment() -> None:
    """The environment scalestudy's trials give DeepSpeed (launch/process.py trial_environment): CPU ops, and one
    cache (and one ninja: op_builds.pin_ninja) for the C++ ops it JIT-compiles (shm_comm, cpu_adam). torch builds
    under TORCH_EXTENSIONS_DIR/<op> when it is set and under ~/.cache/torch_extensions/py<version>_cpu/<op> when it
    is not, so a profile timing DeepSpeed without it compiles shm_comm (~30-50 s) a second time beside the trials'
    copy. Set once, before anything runs: this process's one-rank timings and every torchrun worker it starts
    inherit it."""
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(extensions_dir()))
    pin_ninja()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--attempt", type=int, default=1, help="(internal) which measurement of this machine")
    parser.add_argument("--engine-times", type=Path, help="(internal, under torchrun) time the engines on every rank")
    args = parser.parse_args(argv)
    trial_op_environment()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    if args.engine_times:
        multi_rank_engine_times(args.engine_times)
        return
    if not args.output:
        parser.error("--output is required")
    print(measure(args.output, args.nproc, args.attempt))


if __name__ == "__main__":
    main()
