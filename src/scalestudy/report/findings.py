"""Automatic findings: sentences with the numbers behind them, computed from the OK trials.

Conventions: times are medians of seconds per optimizer step after the timing warm-up; "A is X% faster than B"
means B's seconds per step / A's - 1 (so X% more steps per second), and from twice as fast on the ratio itself reads
better: "A is 3.4x faster" (B's seconds per step / A's = 3.4); memory is peak memory per rank.
"""

from __future__ import annotations

import statistics

from scalestudy.report.plots import MIB, efficiency_points, percent_error
from scalestudy.report.table import StudyData


def _ranks(n: int) -> str:
    return f"{n} rank" + ("s" if n != 1 else "")


def _signed(pct: float) -> str:
    """A signed whole percentage without '-0'."""
    return f"{round(pct):+d}%"


def _faster(a: float, b: float) -> str:
    """How much faster a step time `a` is than `b`: '25% faster' below 2x, '3.4x faster' from 2x on."""
    ratio = b / a
    return f"{100.0 * (ratio - 1.0):.0f}% faster" if ratio < 2 else f"{ratio:.2g}x faster"


def _slower(a: float, b: float) -> str:
    """How much slower a step time `b` is than a faster `a`: '20% slower' below 2x, '3.4x slower' from 2x on."""
    return _faster(a, b).replace("faster", "slower")


def stage_comparisons(data: StudyData) -> list[str]:
    """Per model and world size: the fastest vs the slowest strategy, and ZeRO-2 vs ZeRO-3 (the paper's question)."""
    out = []
    for model in data.models():
        pts = data.points(model, "step_s")
        sizes = sorted({n for p in pts.values() for n in p})
        for n in sizes:
            at = {s: p[n] for s, p in pts.items() if n in p}
            if len(at) < 2:
                continue
            fast, slow = min(at, key=at.get), max(at, key=at.get)
            if at[fast] == at[slow]:
                continue
            out.append(f"At {_ranks(n)} for {model}, {fast} is the fastest ({at[fast]:.3g} s/step) and {slow} the "
                       f"slowest ({at[slow]:.3g} s/step): {fast} is {_faster(at[fast], at[slow])}.")
            for two, three in (("ds-z2", "ds-z3"), ("fsdp-z2", "fsdp-z3")):
                if two in at and three in at:
                    a, b = at[two], at[three]
                    how = _faster(a, b) if a <= b else _slower(b, a)
                    out.append(f"{two.replace('ds-z', 'ZeRO-').replace('fsdp-z', 'FSDP zero-')} is {how} "
                               f"than {three.replace('ds-z', 'ZeRO-').replace('fsdp-z', 'FSDP zero-')} at "
                               f"{_ranks(n)} for {model} ({a:.3g} vs {b:.3g} s/step).")
    return out


def _rate(tokens_per_s: float) -> str:
    """A rate as the trials table prints it: 989 -> 1,271 tokens/s, not .4g's 989.3 -> 1271 (or 1.2e+06 on GPUs)."""
    return f"{tokens_per_s:,.0f}" if tokens_per_s >= 100 else f"{tokens_per_s:.3g}"


def scaling(data: StudyData) -> list[str]:
    """Throughput gain from the smallest to the largest world size, per strategy; and where adding ranks hurt."""
    out = []
    for model in data.models():
        eff = efficiency_points(data, model)
        tps = data.points(model, "tokens_per_s")
        no_gain = []
        for series, pts in eff.items():
            n0, n1 = min(pts), max(pts)
            gain = tps[series][n1] / tps[series][n0]
            out.append(f"{model} {series}: {_ranks(n0)} -> {_ranks(n1)} changes throughput {gain:.2f}x "
                       f"({_rate(tps[series][n0])} -> {_rate(tps[series][n1])} tokens/s), scaling efficiency "
                       f"{pts[n1]:.0f}%.")
            if gain <= 1.0:
                no_gain.append(series)
        if eff and no_gain:
            out.append(f"For {model}, adding ranks did not increase throughput for {len(no_gain)} of {len(eff)} "
                       f"strategies ({', '.join(no_gain)}).")
    return out


def memory(data: StudyData) -> list[str]:
    """Memory per rank of the highest vs lowest ZeRO stage at the largest world size, per model."""
    out = []
    for model in data.models():
        pts = data.points(model, "peak_mem_bytes")
        sizes = sorted({n for p in pts.values() for n in p})
        if not sizes:
            continue
        n = sizes[-1]
        ds = {s: p[n] for s, p in pts.items() if n in p and s.startswith("ds-z")}
        if len(ds) >= 2:
            lo, hi = min(ds, key=ds.get), max(ds, key=ds.get)
            saving = 100.0 * (1 - ds[lo] / ds[hi])
            out.append(f"At {_ranks(n)} for {model}, {lo} needs {saving:.0f}% less memory per rank than {hi} "
                       f"({ds[lo] / MIB:.1f} vs {ds[hi] / MIB:.1f} MiB).")
    return out


def prediction(data: StudyData) -> list[str]:
    out = []
    # the measured CPU profile predicts a machine to itself (its timings leave out other processes' share of the
    # CPU: engine/cpu_wait.py); on a busy machine the steps less their run-queue wait are what it stands for
    for meas, pred, what in (("step_s", "pred_step_s", "step time"),
                             ("unqueued_step_s", "pred_step_s", "step time less the steps' run-queue wait"),
                             ("peak_mem_bytes", "pred_mem_bytes", "memory per rank")):
        errs = [(percent_error(t[pred], t[meas]), t["label"]) for t in data.ok if t.get(meas) and t.get(pred)]
        if not errs:
            continue
        med = statistics.median(abs(e) for e, _ in errs)
        worst = max(errs, key=lambda x: abs(x[0]))
        bias = statistics.median(e for e, _ in errs)
        out.append(f"Cost model {what}: median |error| {med:.0f}% over {len(errs)} trials (median signed error "
                   f"{_signed(bias)}, + = over-prediction); worst {_signed(worst[0])} for {worst[1]}.")
    missing = [t for t in data.ok if t.get("pred_error")]
    if missing:
        out.append(f"No cost-model prediction for {len(missing)} trials: {missing[0]['pred_error']}.")
    return out


def outcomes(data: StudyData) -> list[str]:
    counts: dict[str, int] = {}
    for t in data.trials:
        counts[t["status"]] = counts.get(t["status"], 0) + 1
    text = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    line = f"{len(data.trials)} of {data.planned or len(data.trials)} planned trials finished ({text})."
    out = [line, *data.gaps()]
    for t in data.failed:
        first = (t.get("error_tail") or "").splitlines()[:1]
        out.append(f"{t['status']}: {t['label']} ({first[0] if first else 'no output'}).")
    return out


SAME_RUN = ("model", "world_size", "global_batch", "seq_len", "target_len", "objective", "lr", "warmup_steps",
            "steps", "seed", "precision", "train_options")


def consistency(data: StudyData) -> list[str]:
    """Strategies that train the same model on the same data should give the same loss curve: how close are they?"""
    groups: dict[tuple, list[dict]] = {}
    for t in data.ok:
        if data.metrics.get(t["trial_id"]):
            groups.setdefault(tuple(t.get(k) for k in SAME_RUN), []).append(t)
    out = []
    for key, members in groups.items():
        if len(members) < 2:
            continue
        curves = [{m["step"]: m["loss"] for m in data.metrics[t["trial_id"]] if m.get("loss") is not None}
                  for t in members]
        steps = sorted(set.intersection(*(set(c) for c in curves)))
        if not steps:
            continue
        gap = max(max(c[s] for c in curves) - min(c[s] for c in curves) for s in steps)
        names = ", ".join(sorted({data.series(t) for t in members}))
        out.append(f"Loss curves of {len(members)} strategies ({names}) for {key[0]} at {_ranks(key[1])} (same data, "
                   f"seed and hyperparameters) differ by at most {gap:.2g} nats/token over {len(steps)} steps.")
    return out


def losses(data: StudyData) -> list[str]:
    done = [t for t in data.ok if t.get("loss") is not None]
    if not done:
        return []
    best = min(done, key=lambda t: t["loss"])
    worst = max(done, key=lambda t: t["loss"])
    trained = [f"{best['steps']} steps"] if best.get("steps") is not None else []
    trained += [f"({best['tokens']:,.0f} tokens)"] if best.get("tokens") is not None else []  # not '3.2e+03'
    after = f" after {' '.join(trained)}" if trained else ""
    if f"{best['loss']:.3f}" == f"{worst['loss']:.3f}":  # 'ranges 6.369-6.369; lowest for X' named a tie a winner
        return [f"Final training loss {best['loss']:.3f} nats/token in every OK trial ({len(done)}){after}."]
    return [f"Final training loss ranges {best['loss']:.3f}-{worst['loss']:.3f} nats/token; lowest for "
            f"{best['label']}{after}."]


SECTIONS = (outcomes, stage_comparisons, scaling, memory, prediction, consistency, losses)


def findings(data: StudyData) -> list[str]:
    """Every section's sentences; a section the stored values break (overflowing numbers of a damaged store) says
    so in one line instead of ending the report."""
    out = []
    for section in SECTIONS:
        try:
            out += section(data)
        except (ArithmeticError, ValueError) as exc:
            out.append(f"No {section.__name__.replace('_', ' ')} findings: the stored values do not allow them "
                       f"({type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}).")
    return out
