"""Tuning efficiency on this machine: `scalestudy tune`'s search vs an exhaustive measured grid of the same space.

One run, side by side:
1. calibrate (micro-benchmarks on --nproc ranks) -> hardware profile;
2. tune: screen + model-guided trials with refit efficiency terms (`scalestudy.plan.tuner.search_strategies`);
3. grid: every strategy of the same space, one real `scalestudy train` trial each, same steps and warm-up.
Prints: the grid's measured best, the tuned pick and its grid-measured step time (gap in %), the fraction of the
grid's trial time the tune used (with and without its calibration), and predicted vs measured step time for every
trial tune ran (before = model fitted on the earlier trials only; after = final refit) and for the whole grid under
the final refit. Targets (issue 5): pick within 5% of the grid's best, <= 30% of the grid's trial time, prediction
within 15% after calibration.

    python benchmarks/bench_tune.py [--model t5-tiny] [--nproc 2] [--global-batch 8] [--micro-batch 2,4]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import time
from pathlib import Path

from scalestudy.plan import tuner
from scalestudy.plan.space import Constraints
from scalestudy.plan.tune_report import error_pct
from scalestudy.specs.hardware import get_device
from scalestudy.specs.model import get_model
from scalestudy.specs.strategy import Workload


def pct(a: float, b: float) -> float:
    return 100.0 * (a - b) / b


def confirm(cands, spec, w, args, pick: str, best: str, out: Path) -> None:
    """Re-measure the tune's pick and the grid's best back to back, twice (A B A B), so both see the same load."""
    by_label = {c.strategy.label: c for c in cands}
    runs: dict[str, list[float]] = {pick: [], best: []}
    tok = None
    for i, label in enumerate([pick, best, pick, best]):
        t = tuner.run_trial(100 + i, by_label[label], spec, w, args.nproc, out / "confirm", steps=args.steps,
                            warmup=args.warmup, timeout_s=600, tokenizer=tok)
        tok = tok or tuner.shared_tokenizer([t])
        if t.measured_step_s:
            runs[label].append(t.measured_step_s)
    if runs[pick] and runs[best]:
        a, b = statistics.median(runs[pick]), statistics.median(runs[best])
        print(f"back-to-back re-measurement (A B A B): tune pick {pick} {a:.3f} s/step vs grid best {best} "
              f"{b:.3f} s/step -> {pct(a, b):+.1f}% (target <= +5%); runs {runs}")


def replay(cands, spec, w, args, grid, best, calib_s, grid_trial_s, out) -> None:
    """The same search with every trial answered by the grid's measurement of that strategy (no new runs).

    The live comparison above mixes two things: the search's choices and the machine's load drifting between the
    tune's trials and the grid's (other jobs share these 2 cores). Replaying on the grid isolates the choices.
    """
    measured = {t.label: t for t in grid}

    def from_grid(index, cand, model, workload, nproc, out_dir, **kw):
        g = measured[cand.strategy.label]
        return tuner.TuneTrial(index, g.label, g.strategy, g.grad_accum, g.status, g.measured_step_s,
                               kw["predicted_before_s"], kw["predicted_uncalibrated_s"], g.wall_s, g.steps, g.run_dir,
                               g.reason)

    live = tuner.run_trial
    tuner.run_trial = from_grid
    try:
        settings = tuner.TuneSettings(steps=args.steps, warmup=args.warmup, budget_s=1e9, screen=args.screen)
        r = tuner.search_strategies(cands, spec, w, args.nproc, out / "replay", settings, calibration_s=calib_s,
                                    log=lambda m: None)
    finally:
        tuner.run_trial = live
    used = sum(t.wall_s for t in r.trials)
    print()
    print(f"replay of the search on the grid's measurements (same load conditions for every answer): "
          f"{len(r.trials)} trials [{', '.join(t.label for t in r.trials)}]")
    if r.best:
        print(f"  pick {r.best.label} {r.best.measured_step_s:.3f} s/step -> "
              f"{pct(r.best.measured_step_s, best.measured_step_s):+.1f}% vs grid best {best.label} "
              f"{best.measured_step_s:.3f} s/step (target <= +5%); trial time {100 * used / grid_trial_s:.1f}% of "
              f"the grid's, {100 * (used + calib_s) / grid_trial_s:.1f}% with calibration (target <= 30%)")
    errs = [abs(error_pct(t.predicted_final_s, t.measured_step_s)) for t in r.trials if t.status == "OK"]
    errs_b = [abs(error_pct(t.predicted_before_s, t.measured_step_s)) for t in r.trials[1:]
              if t.status == "OK"]
    if errs:
        print(f"  |error| after calibration on its trials: max {max(errs):.1f}%, median {statistics.median(errs):.1f}%"
              f"; before each trial (fit on earlier trials only, trials 2+): "
              f"median {statistics.median(errs_b) if errs_b else float('nan'):.1f}%")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="t5-tiny")
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--global-batch", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--target-len", type=int, default=32)
    ap.add_argument("--micro-batch", default="2,4")
    ap.add_argument("--recompute", default="none")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--screen", type=int, default=3)
    ap.add_argument("--out", default="/tmp/bench_tune")
    ap.add_argument("--profile", default=None, help="skip calibration: use this profile YAML")
    ap.add_argument("--grid-from", default=None, help="reuse the grid of an earlier run's bench_tune.json (said so "
                                                      "in the output) instead of measuring it again")
    ap.add_argument("--replay-only", action="store_true", help="only replay the search on --grid-from's grid")
    args = ap.parse_args()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    spec = get_model(args.model)
    w = Workload(args.global_batch, args.seq_len, args.target_len if spec.is_encoder_decoder else 0)
    log = lambda m: print("  " + m, flush=True)  # noqa: E731
    started = dt.datetime.now(dt.timezone.utc)

    if args.profile:
        device, calib_s = get_device(args.profile), 0.0
    else:
        device, _, calib_s = tuner.calibrate(out / "tune", args.nproc, get_device("local-cpu"))
    cons = Constraints(tp=(1,), pp=(1,), recompute=tuple(args.recompute.split(",")), precision="fp32",
                       micro_batch=tuple(int(x) for x in args.micro_batch.split(",")), offload_optimizer=("none",),
                       offload_params=("none",))
    cands = tuner.local_candidates(spec, device, args.nproc, w, cons)
    print(f"space: {len(cands)} strategies ({args.model}, {args.nproc} ranks, global batch {args.global_batch}, "
          f"seq {w.seq_len}+{w.target_len}); trials of {args.steps} steps, {args.warmup} warm-up excluded")
    print(f"calibration: {calib_s:.1f} s")
    if args.replay_only:  # decisions only, on an earlier run's grid (needs --grid-from and that run's --profile)
        rec = json.loads(Path(args.grid_from).read_text())
        grid = [tuner.TuneTrial(**t) for t in rec["grid"]]
        ok = [t for t in grid if t.status == "OK"]
        replay(cands, spec, w, args, grid, min(ok, key=lambda t: t.measured_step_s), rec["calibration_s"],
               sum(t.wall_s for t in grid), out)
        return

    print("tune:")
    settings = tuner.TuneSettings(steps=args.steps, warmup=args.warmup, budget_s=1e9, screen=args.screen)
    tuned = tuner.search_strategies(cands, spec, w, args.nproc, out / "tune", settings, calibration_s=calib_s,
                                    log=log)
    print(f"  stop: {tuned.stop_reason}")

    print("grid:" if not args.grid_from else f"grid: REUSED from {args.grid_from} (measured in an earlier run)")
    grid: list[tuner.TuneTrial] = []
    t0 = time.perf_counter()
    if args.grid_from:
        grid = [tuner.TuneTrial(**t) for t in json.loads(Path(args.grid_from).read_text())["grid"]]
    for i, c in enumerate(cands if not args.grid_from else [], 1):
        t = tuner.run_trial(i, c, spec, w, args.nproc, out / "grid", steps=args.steps, warmup=args.warmup,
                            timeout_s=600, tokenizer=tuner.shared_tokenizer(grid))
        grid.append(t)
        shown = f"{t.measured_step_s:.3f} s" if t.measured_step_s else t.reason
        log(f"{i}/{len(cands)} {t.label}: {t.status} {shown} ({t.wall_s:.0f} s wall)")
    grid_wall = time.perf_counter() - t0
    grid_trial_s = sum(t.wall_s for t in grid)

    ok = {t.label: t for t in grid if t.status == "OK"}
    best = min(ok.values(), key=lambda t: t.measured_step_s)
    pick = tuned.best
    print()
    print(f"bench_tune  {started:%Y-%m-%d %H:%M} UTC  ({args.model}, {args.nproc} ranks, {len(cands)} strategies; "
          "step times are seconds per optimizer step, median over measured steps)")
    print(f"grid best (measured):            {best.label}  {best.measured_step_s:.3f} s/step")
    if pick is None:
        print("tune pick: none (no trial succeeded)")
    else:
        in_grid = ok.get(pick.label)
        gap = pct(in_grid.measured_step_s, best.measured_step_s) if in_grid else float("nan")
        print(f"tune pick:                       {pick.label}  {pick.measured_step_s:.3f} s/step in its own trial, "
              f"{in_grid.measured_step_s if in_grid else float('nan'):.3f} s/step in the grid -> "
              f"{gap:+.1f}% vs grid best (target <= +5%)")
    tune_trial_s = sum(t.wall_s for t in tuned.trials)
    print(f"time: grid {len(grid)} trials {grid_trial_s:.0f} s; tune {len(tuned.trials)} trials {tune_trial_s:.0f} s "
          f"+ calibration {calib_s:.0f} s = {tune_trial_s + calib_s:.0f} s -> "
          f"{100 * (tune_trial_s + calib_s) / grid_trial_s:.1f}% of the grid's trial time with calibration, "
          f"{100 * tune_trial_s / grid_trial_s:.1f}% without (target <= 30%)")
    print()
    print(f"{'tune trial':48s} {'measured':>9s} {'pred before':>11s} {'err %':>7s} {'pred after':>10s} {'err %':>7s}")
    for t in tuned.trials:
        eb = error_pct(t.predicted_before_s, t.measured_step_s)
        ea = error_pct(t.predicted_final_s, t.measured_step_s)
        print(f"{t.index:2d} {t.label:45s} {t.measured_step_s or float('nan'):9.3f} {t.predicted_before_s:11.3f} "
              f"{eb if eb is not None else float('nan'):+7.1f} {t.predicted_final_s or float('nan'):10.3f} "
              f"{ea if ea is not None else float('nan'):+7.1f}")
    errs_after = [abs(error_pct(t.predicted_final_s, t.measured_step_s)) for t in tuned.trials
                  if t.status == "OK"]
    if errs_after:
        print(f"after calibration, |error| on tune's trials: max {max(errs_after):.1f}%, "
              f"median {statistics.median(errs_after):.1f}% (target <= 15%)")
    by_label = {c.strategy.label: c for c in cands}
    grid_err = []
    print()
    print(f"{'grid strategy (final refit, out of sample)':48s} {'measured':>9s} {'predicted':>9s} {'err %':>7s}")
    for t in grid:
        if t.status != "OK":
            print(f"{t.label:48s} {t.status}: {t.reason}")
            continue
        p = tuned.model.predict(by_label[t.label])
        e = error_pct(p, t.measured_step_s)
        grid_err.append(abs(e))
        print(f"{t.label:48s} {t.measured_step_s:9.3f} {p:9.3f} {e:+7.1f}")
    if grid_err:
        print(f"final refit on the whole grid: |error| max {max(grid_err):.1f}%, median "
              f"{statistics.median(grid_err):.1f}%")
    if pick is not None and pick.label != best.label:
        confirm(cands, spec, w, args, pick.label, best.label, out)
    replay(cands, spec, w, args, grid, best, calib_s, grid_trial_s, out)
    record = {"date": f"{started:%Y-%m-%d %H:%M} UTC", "args": vars(args), "calibration_s": calib_s,
              "tune": tuned.to_dict(), "grid": [t.to_dict() for t in grid], "grid_wall_s": grid_wall}
    (out / "bench_tune.json").write_text(json.dumps(record, indent=2))
    print(f"wrote {out / 'bench_tune.json'}")


if __name__ == "__main__":
    main()
