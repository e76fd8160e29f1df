"""What `scalestudy tune` reports: per trial the measured step time beside the predictions before and after the
refit, and their errors; written as DIR/tune.json and DIR/tune.md (the CLI prints the same rows)."""

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


def report_rows(result) -> list[dict]:
    """One row per trial of a `TuneResult`: measured and predicted step times, prediction errors in %."""
    rows = []
    for t in result.trials:
        rows.append({"trial": t.index, "strategy": t.label, "status": t.status, "measured_step_s": t.measured_step_s,
                     "predicted_uncalibrated_s": t.predicted_uncalibrated_s,
                     "predicted_before_s": t.predicted_before_s, "predicted_final_s": t.predicted_final_s,
                     "error_before_pct": error_pct(t.predicted_before_s, t.measured_step_s),
                     "error_final_pct": error_pct(t.predicted_final_s, t.measured_step_s),
                     "wall_s": t.wall_s, "reason": t.reason})
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


def save_results(out_dir: Path, result, settings: dict, meta: dict) -> None:
    """DIR/tune.json (everything, with units) and DIR/tune.md (the table) of a finished tune."""
    rows = report_rows(result)
    data = {"meta": meta, "settings": settings, **result.to_dict(), "table": rows,
            "units": "seconds per optimizer step (median over measured steps, warm-up excluded); errors = "
                     "(predicted - measured) / measured in %"}
    write_text_atomic(out_dir / "tune.json", json.dumps(data, indent=2) + "\n")
    best = result.best.label if result.best else "none (no trial succeeded)"
    md = (f"# scalestudy tune: {meta.get('model')} on {meta.get('nproc')} rank(s)\n\n"
          f"Pick: **{best}**. Trials: {len(result.trials)}; stop: {result.stop_reason}.\n"
          f"Time: calibration {result.calibration_s:.1f} s + trials {result.trials_s:.1f} s = "
          f"{result.total_s:.1f} s (wall).\n\n" + markdown_table(rows))
    write_text_atomic(out_dir / "tune.md", md)
