"""What `scalestudy tune` reports: the pick with its uncertainty; per trial the measured step time beside the
predictions before and after the refit, and their errors; every candidate with its final prediction and whether it
was measured. Written as DIR/tune.json and DIR/tune.md (the CLI prints the trial rows and the pick)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from scalestudy.atomicfile import write_text_atomic


def error_pct(pred: float | None, meas: float | None) -> float | None:
    """(predicted - measured) / measured in %; None when either is missing."""
    if pred is None or meas is None or not math.isfinite(pred) or meas <= 0:
        return None
    return 100.0 * (pred - meas) / meas


def efficiency_line(e) -> str:
    """The refit's terms in one line (an `EfficiencyFit`): factors on the cost model's parts, the communication
    factor per engine / family (what a measured engine's or family's collectives cost x the model), overheads."""
    def parts(d: dict, fmt) -> str:
        return ", ".join(f"{k} {fmt(v)}" for k, v in d.items()) or "none"

    comm_e = {k: max(0.0, e.comm + v) for k, v in e.comm_engine.items()}
    return (f"Efficiency terms: compute x{e.compute:.2f}, optimizer x{e.optimizer:.2f}, framework x{e.framework:.2f}, "
            f"engine hooks x{e.hooks:.2f}; communication x{e.comm:.2f} (per engine: "
            f"{parts(comm_e, lambda v: f'x{v:.2f}')}; per family, added to its engine's: "
            f"{parts(e.comm_family, lambda v: f'{v:+.2f}')}); "
            f"overhead {e.step_overhead_s * 1e3:.1f} ms per step + {e.overhead_s * 1e3:.1f} ms per micro-step "
            f"(+ per engine per micro-step: {parts(e.engine_overhead_s, lambda v: f'{v * 1e3:+.1f} ms')}; "
            f"per family per micro-step: {parts(e.family_overhead_s, lambda v: f'{v * 1e3:+.1f} ms')})")


def prediction_line(factor: dict) -> str:
    """One sentence: the factor the trials put on the cost model's predictions (`calibrate.ResidualFit.to_dict`)."""
    if not factor:
        return ""

    def parts(d: dict) -> str:
        return ", ".join(f"{k} x{math.exp(v):.2f}" for k, v in d.items()) or "none measured"

    return (f"Predictions: cost model x{math.exp(factor['level']):.2f} (per engine: {parts(factor['engine'])}; per "
            f"family: {parts(factor['family'])}; x{math.exp(factor['per_doubling']):.2f} per doubling of the "
            "micro-steps)")


def report_rows(result) -> list[dict]:
    """One row per trial of a `TuneResult`: measured and predicted step times, prediction errors in %."""
    rows = []
    for t in result.trials:
        rows.append({"trial": t.index, "strategy": t.label, "status": t.status, "measured_step_s": t.measured_step_s,
                     "predicted_uncalibrated_s": t.predicted_uncalibrated_s,
                     "predicted_before_s": t.predicted_before_s, "predicted_final_s": t.predicted_final_s,
                     "error_before_pct": error_pct(t.predicted_before_s, t.measured_step_s),
                     "error_final_pct": error_pct(t.predicted_final_s, t.measured_step_s),
                     "wall_s": t.wall_s, "reason": t.reason, "phase": t.phase, "round": t.round})
    return rows


def markdown_table(rows: list[dict]) -> str:
    def f(v, spec):
        return "n/a" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, spec)

    head = ("| # | strategy | status | measured s/step | predicted before s | error before % | predicted after "
            "calibration s | error after % | wall s |\n|---|---|---|---|---|---|---|---|---|\n")
    body = "".join(f"| {r['trial']} | {r['strategy']} | {r['status']} | {f(r['measured_step_s'], '.3f')} | "
                   f"{f(r['predicted_before_s'], '.3f')} | {f(r['error_before_pct'], '+.1f')} | "
                   f"{f(r['predicted_final_s'], '.3f')} | {f(r['error_final_pct'], '+.1f')} | "
                   f"{f(r['wall_s'], '.1f')} |\n" for r in rows)
    return head + body


def pick_line(pick: dict) -> str:
    """One sentence: the pick, its step time with the 95% interval, and how far the runner-up is."""
    if not pick:
        return "Pick: none (no trial succeeded)."
    lo, hi = pick["ci95_s"]
    text = (f"Pick: {pick['label']}: {pick['step_s']:.3f} s/step (95% interval {lo:.3f}-{hi:.3f} s; "
            f"{pick['trials']} trial(s); noise {100 * pick['noise_rel']:.1f}% per trial)")
    if pick.get("runner_up"):
        verdict = "clearly slower" if pick["distinguishable"] else "within the noise"
        text += (f"; runner-up {pick['runner_up']} {pick['runner_up_gap_pct']:+.1f}% "
                 f"(+-{pick['gap_se_pct']:.1f}% s.e., {verdict})")
    inseparable = pick.get("inseparable") or []
    if inseparable:
        text += (f". Not separated from {', '.join(inseparable)} by the re-measurements this budget allowed: "
                 "picked by the lowest load-adjusted step time")
    return text + "."


def budget_line(budget: dict) -> str:
    """One sentence: the trial time charged against the budget and what was not charged (s of wall time)."""
    if not budget:
        return ""
    limit = f"{budget['limit_s']:.0f} s" if budget.get("limit_s") is not None else "no cap"
    text = (f"Budget: {budget['charged_s']:.0f} s of trial time charged of {limit} allowed (steps + start-up, "
            f"typical start-up {budget['typical_startup_s']:.1f} s)")
    if budget.get("startup_not_charged_s", 0.0) > 0.5:
        text += (f"; {budget['startup_not_charged_s']:.0f} s of slow start-ups (beyond 2x the typical) not "
                 "charged")
    return text + "."


def candidate_table(rows: list[dict]) -> str:
    """Markdown: every candidate, measured or not, with its final prediction."""
    def f(v, spec):
        return "n/a" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, spec)

    head = ("| strategy | measured | trials | measured s/step | predicted s/step | prediction +-% | uncalibrated s |\n"
            "|---|---|---|---|---|---|---|\n")
    def pct(rel):
        return None if rel is None else 100 * rel

    body = "".join(f"| {r['strategy']} | {'yes' if r['measured'] else r['status']} | {r['trials']} | "
                   f"{f(r['measured_step_s'], '.3f')} | {f(r['predicted_s'], '.3f')} | "
                   f"{f(pct(r['predicted_uncertainty_rel']), '.0f')} | "
                   f"{f(r['predicted_uncalibrated_s'], '.3f')} |\n" for r in rows)
    return head + body


def save_results(out_dir: Path, result, settings: dict, meta: dict) -> None:
    """DIR/tune.json (everything, with units) and DIR/tune.md (the table) of a finished tune."""
    rows = report_rows(result)
    data = {"meta": meta, "settings": settings, **result.to_dict(), "table": rows,
            "units": "seconds per optimizer step (median over measured steps, warm-up excluded); errors = "
                     "(predicted - measured) / measured in %; *_rel = relative (0.05 = 5%), one standard "
                     "deviation"}
    write_text_atomic(out_dir / "tune.json", json.dumps(data, indent=2) + "\n")
    grid = result.grid_estimate_s
    share = (f" ({100 * sum(t.wall_s for t in result.trials) / grid:.1f}% of the estimated {grid:.0f} s of "
             "trials an exhaustive grid would take)") if grid > 0 else ""
    factor = prediction_line(result.model.to_dict().get("prediction_factor", {}))
    md = (f"# scalestudy tune: {meta.get('model')} on {meta.get('nproc')} rank(s)\n\n"
          f"{pick_line(result.pick)}\nTrials: {len(result.trials)}; stop: {result.stop_reason}.\n"
          f"{budget_line(result.budget)}\n"
          f"{efficiency_line(result.model.fit_)}.\n" + (f"{factor}.\n" if factor else "")
          + f"Time: calibration {result.calibration_s:.1f} s + trials {result.trials_s:.1f} s = "
          f"{result.total_s:.1f} s (wall){share}.\n\n## Trials\n\n" + markdown_table(rows)
          + "\n## Every candidate (final predictions; prediction +-% = the larger of the predictions' leave-one-out "
            "error and the sd of their factor for that strategy, with the measurement noise; one standard "
            "deviation)\n\n" + candidate_table(result.candidate_rows))
    write_text_atomic(out_dir / "tune.md", md)
