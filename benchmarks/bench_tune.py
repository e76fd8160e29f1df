"""Tuning on a noisy machine: `scalestudy tune`'s search, repeated, vs an exhaustive measured grid of the same space.

Live (one run, side by side; the load average is printed at start and end):
1. calibrate (micro-benchmarks on --nproc ranks; the measured CPU profile as base) -> hardware profile;
2. grid: every strategy of the space, one real `scalestudy train` trial each (or --grid-from an earlier run);
3. --repeats times: tune (screen, model-guided trials, interleaved re-measurement of close contenders); then its
   pick and the grid's best re-measured back to back (A B A B, same load) -- the grid's best is one noisy sample.
Prints the distribution over repeats of (pick vs grid best: grid value and back to back), (tune trial time / grid
trial time, with calibration) and the error of the final refit's predictions of the grid strategies tune did not run.
Targets (issue 15): every repeat within 5% of the best; <= 15% of the grid's trial time; predictions of strategies
not run within 15%.

Replay (--replay-only --grid-from RUN/bench_tune.json; no new trials): the same search, every trial answered by
the recorded grid: that strategy's recorded steps resampled (bootstrap, seeded) times a per-trial load factor
(lognormal, sd --replay-noise, drifting with correlation --replay-rho between consecutive trials). --seeds
replays; the pick is judged against the grid's recorded best and the strategy's recorded step.

    python benchmarks/bench_tune.py [--model t5-micro] [--nproc 2] [--global-batch 16] [--micro-batch 1,2,4,8]
        [--repeats 3] [--grid-from OLD/bench_tune.json] [--replay-only --seeds 20]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import random
import statistics
import subprocess
import time
from dataclasses import asdict
from pathlib import Path

from scalestudy.costmodel.calibrate import save_profile
from scalestudy.plan import tuner
from scalestudy.plan.space import Constraints
from scalestudy.plan.tune_report import error_pct, pick_line
from scalestudy.specs.hardware import DeviceSpec, get_device
from scalestudy.specs.model import get_model
from scalestudy.specs.strategy import Workload


def pct(a: float, b: float) -> float:
    return 100.0 * (a - b) / b


def load_avg() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip().split("load average:")[-1].strip()


def dist(xs: list[float], fmt: str = "+.1f") -> str:
    if not xs:
        return "n/a"
    return (f"min {min(xs):{fmt}} / median {statistics.median(xs):{fmt}} / max {max(xs):{fmt}} "
            f"(n={len(xs)})")


def back_to_back(cands, spec, w, args, a: str, b: str, out: Path) -> float | None:
    """Re-measure strategies a and b A B A B (same load for both); % of a's median over b's."""
    by_label = {c.strategy.label: c for c in cands}
    runs: dict[str, list[float]] = {a: [], b: []}
    tok = None
    for i, label in enumerate([a, b, a, b]):
        t = tuner.run_trial(100 + i, by_label[label], spec, w, args.nproc, out, steps=args.steps,
                            warmup=args.warmup, timeout_s=600, tokenizer=tok)
        tok = tok or tuner.shared_tokenizer([t])
        if t.measured_step_s:
            runs[label].append(t.measured_step_s)
    if not (runs[a] and runs[b]):
        return None
    gap = pct(statistics.median(runs[a]), statistics.median(runs[b]))
    print(f"    back to back (A B A B): {a} {runs[a]} vs {b} {runs[b]} s/step -> {gap:+.1f}%")
    return gap


def unmeasured_errors(result, grid: dict) -> list[float]:
    """|error| % of the final refit's predictions of grid strategies the tune did not run."""
    ran = {t.label for t in result.trials}
    return [abs(error_pct(r["predicted_s"], grid[r["strategy"]].measured_step_s)) for r in result.candidate_rows
            if r["strategy"] not in ran and r["strategy"] in grid]


def summarize(rows: list[dict], label: str) -> None:
    print(f"\n{label}: {len(rows)} repeat(s)")
    print(f"  pick vs grid best (grid's own one-sample values), %: {dist([r['gap_grid'] for r in rows])}; "
          f"within 5%: {sum(r['gap_grid'] <= 5 for r in rows)} of {len(rows)}")
    b2b = [r["gap_b2b"] for r in rows if r.get("gap_b2b") is not None]
    if b2b or any(r.get("same") for r in rows):
        b2b_all = b2b + [0.0 for r in rows if r.get("same")]
        print(f"  pick vs grid best back to back, % (pick = grid best counts 0): {dist(b2b_all)}; within 5%: "
              f"{sum(g <= 5 for g in b2b_all)} of {len(b2b_all)}")
    print(f"  tune trial time / grid trial time, %: {dist([r['share'] for r in rows], '.1f')} "
          f"(with calibration: {dist([r['share_cal'] for r in rows], '.1f')}); target <= 15%")
    errs = [e for r in rows for e in r["unmeasured_err"]]
    if errs:
        print(f"  |error| of final predictions of strategies tune did not run, %: median {statistics.median(errs):.1f},"
              f" max {max(errs):.1f}; within 15%: {sum(e <= 15 for e in errs)} of {len(errs)}")
    print(f"  trials per tune: {dist([r['trials'] for r in rows], '.0f')}; picks: "
          + ", ".join(f"{k} x{v}" for k, v in sorted(_count(r["pick"] for r in rows).items())))


def _count(xs) -> dict:
    out: dict = {}
    for x in xs:
        out[x] = out.get(x, 0) + 1
    return out


class GridReplay:
    """Answers trials from a recorded grid: the strategy's recorded steps resampled, times a drifting load."""

    def __init__(self, grid: list[tuner.TuneTrial], seed: int, noise: float, rho: float, warmup: int) -> None:
        self.grid = {t.label: t for t in grid}
        self.rng = random.Random(seed)
        self.noise, self.rho, self.warmup = noise, rho, warmup
        self.log_load = self.rng.gauss(0, noise)

    def __call__(self, index, cand, model, workload, nproc, out_dir, **kw) -> tuner.TuneTrial:
        g = self.grid[cand.strategy.label]
        self.log_load = self.rho * self.log_load + math.sqrt(1 - self.rho ** 2) * self.rng.gauss(0, self.noise)
        load = math.exp(self.log_load)
        steps = g.step_times_s or ([g.measured_step_s] if g.measured_step_s else [])
        drawn = [self.rng.choice(steps) * load for _ in steps]
        measured = statistics.median(drawn) if drawn and g.status == "OK" else None
        return tuner.TuneTrial(index, g.label, g.strategy, g.grad_accum, g.status, measured,
                               kw.get("predicted_before_s", math.nan), kw.get("predicted_uncalibrated_s", math.nan),
                               g.wall_s, g.steps, g.run_dir,
                               g.reason, step_times_s=drawn, startup_s=g.startup_s)


def replay(cands, spec, w, args, grid: list[tuner.TuneTrial], calib_s: float) -> list[dict]:
    ok = {t.label: t for t in grid if t.status == "OK"}
    best = min(ok.values(), key=lambda t: t.measured_step_s)
    grid_s = sum(t.wall_s for t in grid)
    rows = []
    live = tuner.run_trial
    try:
        for seed in range(args.seeds):
            tuner.run_trial = GridReplay(grid, seed, args.replay_noise, args.replay_rho, args.warmup)
            settings = tuner.TuneSettings(steps=args.steps, warmup=args.warmup, budget_s=1e9, screen=args.screen,
                                          budget_fraction=args.budget_fraction, contenders=args.contenders,
                                      identify=args.identify)
            r = tuner.search_strategies(cands, spec, w, args.nproc, Path(args.out) / "replay", settings,
                                        calibration_s=calib_s, log=lambda m: None)
            used = sum(t.wall_s for t in r.trials)
            label = r.pick.get("label")
            rows.append({"pick": label, "gap_grid": pct(ok[label].measured_step_s, best.measured_step_s),
                         "share": 100 * used / grid_s, "share_cal": 100 * (used + calib_s) / grid_s,
                         "trials": len(r.trials), "unmeasured_err": unmeasured_errors(r, ok)})
    finally:
        tuner.run_trial = live
    print(f"replay: grid best {best.label} {best.measured_step_s:.3f} s/step; load noise sd {args.replay_noise:.0%},"
          f" consecutive-trial correlation {args.replay_rho}; {args.seeds} seeds")
    summarize(rows, "replay on the recorded grid")
    return rows


def save_record(path: Path, record: dict) -> None:
    """bench_tune.json, written whole (temp file + rename): a reader never sees half a file."""
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=2))
    tmp.replace(path)


def export_terms(cands, grid: list[tuner.TuneTrial], rec: dict, args, path: Path) -> None:
    """A recorded grid as a small fixture: per strategy the cost model's step terms (the refit's inputs, on the
    run's profile) and the measured median step, so a unit test can replay the refit without the cost model."""
    by = {c.strategy.label: c for c in cands}
    rows = []
    for t in grid:
        if t.status != "OK" or t.label not in by:
            continue
        terms = tuner.terms(by[t.label])
        rows.append({"strategy": t.label, "micro_batch": by[t.label].strategy.micro_batch,
                     **{k: (round(v, 5) if isinstance(v, float) else v) for k, v in asdict(terms).items()},
                     "measured_step_s": round(t.measured_step_s, 4),
                     "step_spread_rel": round(tuner.step_spread(t.step_times_s) or 0.0, 4)})
    meta = {"source": f"benchmarks/bench_tune.py grid of {rec['date']} (load then: {rec.get('load', '?')})",
            "model": args.model, "nproc": args.nproc, "global_batch": args.global_batch,
            "seq": f"{args.seq_len}+{args.target_len}", "steps": args.steps, "warmup": args.warmup,
            "convention": "seconds per optimizer step; measured_step_s = median over the trial's steps after "
                          "warm-up; step_spread_rel = 1.4826 x MAD / median of those steps; the other fields are "
                          "calibrate.StepTerms of the cost model on the run's profile"}
    path.write_text(json.dumps({"meta": meta, "strategies": rows}, indent=1))
    print(f"wrote {len(rows)} strategies' step terms and measured steps to {path}")


def with_collective_ratios(device: DeviceSpec, microbench: Path) -> DeviceSpec:
    """A record from before profiles carried collective_time_ratio: take it from the run's microbench.json."""
    if device.collective_time_ratio or not microbench.is_file():
        return device
    from dataclasses import replace

    from scalestudy.costmodel.calibrate import collective_time_ratios

    meas = json.loads(microbench.read_text())
    ratios = collective_time_ratios(meas.get("collectives", []), int(meas.get("world_size", 1)),
                                    device.intra_node_latency_s, device.intra_node_bytes_per_s)
    print(f"collective time ratios from {microbench}: {ratios} (measured / modelled time at the largest message)")
    return replace(device, collective_time_ratio=ratios)


def measure_grid(cands, spec, w, args, out: Path, record: dict) -> list[tuner.TuneTrial]:
    """Every strategy once; bench_tune.json is rewritten after each trial ("grid_complete": false until the
    last), so a grid can be replayed (--grid-from --replay-only) while the live repeats still run, or after a
    run was killed."""
    grid: list[tuner.TuneTrial] = []
    for i, c in enumerate(cands, 1):
        t = tuner.run_trial(i, c, spec, w, args.nproc, out / "grid", steps=args.steps, warmup=args.warmup,
                            timeout_s=600, tokenizer=tuner.shared_tokenizer(grid))
        grid.append(t)
        shown = f"{t.measured_step_s:.3f} s" if t.measured_step_s else t.reason
        print(f"  {i}/{len(cands)} {t.label}: {t.status} {shown} ({t.wall_s:.0f} s wall; load {load_avg()})",
              flush=True)
        save_record(out / "bench_tune.json", {**record, "load": load_avg(), "grid": [g.to_dict() for g in grid],
                                              "grid_complete": i == len(cands), "repeats": []})
    return grid


def live(cands, spec, w, args, grid, calib_s, out: Path) -> list[dict]:
    ok = {t.label: t for t in grid if t.status == "OK"}
    best = min(ok.values(), key=lambda t: t.measured_step_s)
    grid_s = sum(t.wall_s for t in grid)
    rows = []
    for rep in range(args.repeats):
        print(f"tune repeat {rep + 1}/{args.repeats} (load {load_avg()}):", flush=True)
        settings = tuner.TuneSettings(steps=args.steps, warmup=args.warmup, budget_s=1e9, screen=args.screen,
                                      budget_fraction=args.budget_fraction, contenders=args.contenders,
                                      identify=args.identify)
        r = tuner.search_strategies(cands, spec, w, args.nproc, out / f"tune{rep + 1}", settings,
                                    calibration_s=calib_s, log=lambda m: print("    " + m, flush=True))
        print(f"    stop: {r.stop_reason}\n    {pick_line(r.pick)}")
        label = r.pick.get("label")
        used = sum(t.wall_s for t in r.trials)
        row = {"pick": label, "gap_grid": pct(ok[label].measured_step_s, best.measured_step_s) if label in ok
               else math.nan, "share": 100 * used / grid_s, "share_cal": 100 * (used + calib_s) / grid_s,
               "trials": len(r.trials), "unmeasured_err": unmeasured_errors(r, ok), "same": label == best.label,
               "tune": r.to_dict()}
        if label and label != best.label and not args.no_back_to_back:
            row["gap_b2b"] = back_to_back(cands, spec, w, args, label, best.label, out / f"b2b{rep + 1}")
        rows.append(row)
    summarize(rows, "live tune vs grid")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="t5-micro")
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--global-batch", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--target-len", type=int, default=32)
    ap.add_argument("--micro-batch", default="1,2,4,8")
    ap.add_argument("--recompute", default="none")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--screen", type=int, default=3)
    ap.add_argument("--budget-fraction", type=float, default=0.15)
    ap.add_argument("--contenders", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3, help="live tunes against the one grid")
    ap.add_argument("--no-back-to-back", action="store_true", help="skip the A B A B re-measurement per repeat")
    ap.add_argument("--out", default="/tmp/bench_tune")
    ap.add_argument("--profile", default=None, help="skip calibration: use this profile YAML")
    ap.add_argument("--grid-from", default=None, help="reuse the grid (and profile) of an earlier run's "
                                                      "bench_tune.json (said so in the output)")
    ap.add_argument("--replay-only", action="store_true", help="only replay the search on --grid-from's grid")
    ap.add_argument("--seeds", type=int, default=20, help="replays (--replay-only)")
    ap.add_argument("--identify", type=int, default=1, help="tune's identification trials (TuneSettings.identify)")
    ap.add_argument("--export-terms", default=None, help="write --grid-from's strategies as a small JSON fixture "
                                                         "(cost-model step terms + measured step) and stop")
    ap.add_argument("--replay-noise", type=float, default=0.10, help="sd of the replay's per-trial load (log)")
    ap.add_argument("--replay-rho", type=float, default=0.9, help="correlation of consecutive trials' load")
    args = ap.parse_args()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    spec = get_model(args.model)
    w = Workload(args.global_batch, args.seq_len, args.target_len if spec.is_encoder_decoder else 0)
    started = dt.datetime.now(dt.timezone.utc)
    print(f"bench_tune {started:%Y-%m-%d %H:%M} UTC, load average at start {load_avg()}, "
          f"{os.cpu_count()} CPUs")
    rec = json.loads(Path(args.grid_from).read_text()) if args.grid_from else None
    if rec:  # a record from before profiles were stored in it needs --profile (else the static local-cpu)
        device = DeviceSpec(**rec["device"]) if "device" in rec else get_device(args.profile or "local-cpu")
        device = with_collective_ratios(device, Path(args.grid_from).parent / "calibration" / "microbench.json")
        calib_s = rec["calibration_s"]
    elif args.profile:
        device, calib_s = get_device(args.profile), 0.0
    else:
        device, calib_s = tuner.tuning_device(out / "calibration", args.nproc, None)
    cons = Constraints(tp=(1,), pp=(1,), recompute=tuple(args.recompute.split(",")), precision="fp32",
                       micro_batch=tuple(int(x) for x in args.micro_batch.split(",")), offload_optimizer=("none",),
                       offload_params=("none",))
    cands = tuner.local_candidates(spec, device, args.nproc, w, cons)
    print(f"space: {len(cands)} strategies ({args.model}, {args.nproc} ranks, global batch {args.global_batch}, "
          f"seq {w.seq_len}+{w.target_len}); trials of {args.steps} steps, {args.warmup} warm-up excluded; "
          f"calibration {calib_s:.1f} s")
    if rec:
        grid = [tuner.TuneTrial(**t) for t in rec["grid"]]
        print(f"grid: REUSED from {args.grid_from} (measured {rec['date']}, load then: {rec.get('load', '?')})")
        if not rec.get("grid_complete", True):  # a run still measuring (or killed): only what it measured
            have = {t.label for t in grid}
            cands = [c for c in cands if c.strategy.label in have]
            print(f"grid INCOMPLETE: {len(grid)} strategies measured; the search runs over those {len(cands)}")
    if args.export_terms:
        if not rec:
            raise SystemExit("--export-terms needs --grid-from")
        export_terms(cands, grid, rec, args, Path(args.export_terms))
        return
    if args.replay_only:
        if not rec:
            raise SystemExit("--replay-only needs --grid-from")
        replay(cands, spec, w, args, grid, calib_s)
        return
    head = {"date": f"{started:%Y-%m-%d %H:%M} UTC", "args": vars(args), "calibration_s": calib_s,
            "device": asdict(device)}
    if not rec:
        print(f"grid ({len(cands)} trials):")
        grid = measure_grid(cands, spec, w, args, out, head)
        save_profile(device, out / "profile.yaml", "bench_tune's hardware profile")
    rows = live(cands, spec, w, args, grid, calib_s, out)
    record = {**head, "load": load_avg(), "grid": [t.to_dict() for t in grid], "grid_complete": True,
              "repeats": rows}
    save_record(out / "bench_tune.json", record)
    print(f"load average at end {load_avg()}; wrote {out / 'bench_tune.json'}")
    replay(cands, spec, w, args, grid, calib_s)


if __name__ == "__main__":
    started = time.perf_counter()
    main()
    print(f"bench wall {time.perf_counter() - started:.0f} s")
