"""`scalestudy demo`: a small real scaling study on this CPU (the CLI then writes its report).

Tiny T5 (t5-tiny, span corruption on the bundled corpus, fp32, gloo) under DeepSpeed ZeRO 0-3 and FSDP2
(zero 3 = reshard after forward) on 1 and 2 ranks: 10 real `scalestudy train` runs of a few steps each, run one
after the other so that their timings do not disturb each other. The tokenizer is trained once and shared.
Re-running with the same --output resumes (finished trials are kept).

Other processes on the machine disturb the timings too: a trial during which they kept busy more than the cores its
ranks left free, or during which its ranks' threads waited for a CPU (`disturbance`; machine_load.py), is measured
again once the machine is calm, within a time budget, and the less disturbed of the two measurements kept (a trial is
a real run: its step time stays wall-clock time). Busy time alone misses a queue: at load ~4.8 on 2 cores others
kept only 1.0-1.6 cores busy -- within what a 1-rank trial tolerates -- while the trials ran 2.2-2.4x slow.
"During" is the trial's timed steps (`timed_window`), not its whole run: the step time is their median, and they are
the last ~1-3 s of a 11-21 s trial (the rest is start-up), so a burst of others' work over the timed steps was
averaged away over the whole run and a burst during start-up, which no step time saw, counted in full.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from pathlib import Path

from scalestudy.errors import ScalestudyError

DEMO_SPEC = {
    "name": "demo",
    "description": "t5-tiny x {DeepSpeed ZeRO 0-3, FSDP2} x {1, 2} ranks on this CPU",
    "model": "t5-tiny",
    "strategies": [{"engine": "deepspeed", "zero": [0, 1, 2, 3]}, {"engine": "fsdp", "zero": 3}],
    "nproc": [1, 2],
    "micro_batch": 2,
    "global_batch": 4,
    "seq_len": 64,
    "target_len": 16,
    "precision": "fp32",
    "objective": "span",
    "lr": 3.0e-3,
    "steps": 10,
    "warmup_steps": 2,
    "warmup": 3,
    "timeout_s": 300,
    "device": "local-cpu",
}


def demo_spec(output: Path) -> dict:
    """The demo's spec, pointing every trial at one shared tokenizer in DIR/tokenizer/."""
    spec = dict(DEMO_SPEC)
    tokenizer = output / "tokenizer" / "tokenizer.json"
    if tokenizer.is_file():
        spec["train_options"] = {"tokenizer": str(tokenizer.resolve())}
    return spec


def prepare_tokenizer(output: Path) -> None:
    """Train the demo's tokenizer once (each trial would otherwise train its own, identical one)."""
    folder = output / "tokenizer"
    if (folder / "tokenizer.json").is_file():
        return
    from scalestudy.engine.data.pipeline import DataConfig, prepare

    prepare(DataConfig(seq_len=DEMO_SPEC["seq_len"], target_len=DEMO_SPEC["target_len"]), folder, write=True)


# What the demo writes first, before its store: a directory holding only these is an earlier demo stopped early
DEMO_FIRST = ("tokenizer", ".runner.lock")


def check_demo_dir(output: Path) -> None:
    """DIR is new, empty or the demo's own (its study store, or what it writes before the store): the demo writes
    its tokenizer, trials, report.md/.html and plots/ there, and a directory of other files would have its report.md
    or tokenizer/ replaced. (That the report's names are free is the `demo` command's check, before this: report/
    sits above study/.)"""
    from scalestudy.study.store import store_path

    if not output.is_dir():
        return
    if not store_path(output).exists():
        others = sorted(p.name for p in output.iterdir() if p.name not in DEMO_FIRST)
        if others:
            shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
            raise ScalestudyError(f"--output {output} holds {shown} and no study: the demo writes its study, trials, "
                                  "report and plots there -- choose a new or empty directory (a re-run into the "
                                  "demo's own directory resumes it)")


def run_demo(output: str | Path = "scalestudy-demo", *, console=None, progress: bool = True):
    """Run (or resume) the demo study into `output`; return its `StudyRun` (the report is `scalestudy report`'s)."""
    from rich.console import Console

    from scalestudy.study.runner import check_study_dir, run_study
    from scalestudy.study.spec import parse_spec

    console = console or Console()
    output = Path(output)
    check_study_dir(output, DEMO_SPEC["name"])  # before the tokenizer is written into it
    check_demo_dir(output)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from scalestudy.costmodel.cpu_profile import local_cpu_profile

    # before the trials, not beside them; a cached profile measured under load measured again if it is quiet now.
    # Before DIR is made too: a damaged cached profile is refused with nothing written
    local_cpu_profile(log=lambda msg: console.print(msg, highlight=False), remeasure_noisy=True)
    output.mkdir(parents=True, exist_ok=True)
    prepare_tokenizer(output)
    spec = parse_spec(demo_spec(output), "demo spec")
    kept = _finished(spec, output)
    resumed = f" ({kept} of them finished before: kept, not run again)" if kept else ""
    console.print(f"scalestudy demo: {len(spec.trials)} real training runs{resumed} (t5-tiny, DeepSpeed ZeRO 0-3 and "
                  f"FSDP, 1-2 CPU ranks) into {output}/study.sqlite. The first DeepSpeed run on a fresh machine compiles "
                  "a C++ op (~1 min, cached in ~/.cache/torch_extensions).", highlight=False,
                  soft_wrap=not console.is_terminal)  # a terminal cut it mid-word ("fre|sh"); logs keep one line
    from scalestudy.machine_load import OthersMeter

    with OthersMeter() as meter:
        result = run_study(spec, output, progress=progress, console=console)
        remeasure_disturbed(spec, output, meter, console=console)
    return result


def _finished(spec, output: Path) -> int:
    """How many of the demo's trials a re-run finds finished in `output` (it resumes: they are not run again)."""
    from scalestudy.study.runner import pending_trials
    from scalestudy.study.store import Store

    if not (output / "study.sqlite").is_file():
        return 0
    with Store(output, create=False) as store:
        return pending_trials(spec, store)[1]


# Others may keep this many cores busy beyond those the trial's ranks leave free (e.g. a shell, the sampler itself)
# before a trial counts as disturbed; beside a 1-rank trial on 2 cores one busy process costs little, beside a 2-rank
# one it takes a third of each rank's core.
SLACK_CORES = 0.25
# A disturbed trial is run again once others use at least this many cores fewer than during it (or are within the
# slack): on a machine that is never idle a burst's victims still get a calmer measurement.
CALMER_CORES = 0.5
REMEASURE_BUDGET_S = 150.0  # re-measuring stops starting trials after this long (the demo's budget is 10 min)
QUIET_WAIT_S = 20.0  # how long to wait for a calmer machine before each re-measurement


# A trial's ranks may spend this share of the timed steps waiting for a CPU (summed over the trial's threads, per
# rank) before it counts as disturbed: its launcher and gloo's threads wake now and then beside the ranks. Above the
# 1.6% a rank's timing thread waited in a CPU profile measured at load 1.0 (costmodel/cpu_profile.py NOISY_WAIT's
# note), a third of the 15% step error the demo is held to; at load 5-7 here (2026-12-03) every trial's threads
# waited 0.56-1.03 s per rank-second while the step times came out 2.3-3.8x the prediction.
QUEUED_SLACK = 0.05


def allowed_others(world_size: int, cores: int | None = None) -> float:
    """Cores other processes may keep busy beside a trial of `world_size` single-threaded ranks undisturbed."""
    return max(0.0, (cores or os.cpu_count() or 1) - world_size) + SLACK_CORES


# The OthersMeter samples once a second: the timed steps' window is widened by this much on each side so that it
# holds at least two samples (a 7-step window of t5-tiny is 0.5-2.5 s).
SAMPLE_MARGIN_S = 1.5


def timed_window(row: dict, metrics: list[dict]) -> tuple[float, float]:
    """(start, end) in epoch seconds of the steps a stored trial's step time is the median of: from the end of its
    last warm-up step (the trial's `warmup` steps are not timed) to the end of its last step (each step's
    `wall_time` in its metrics), widened by SAMPLE_MARGIN_S; the whole trial where the metrics do not say."""
    ends = sorted((int(m["step"]), float(m["wall_time"])) for m in map(_metric_data, metrics) if "wall_time" in m)
    warmup = int(row.get("warmup") or 0)
    timed = [end for step, end in ends if step > warmup]
    if not timed:
        return float(row["started_at"]), float(row["finished_at"])
    untimed = [end for step, end in ends if step <= warmup]
    start = untimed[-1] if untimed else timed[0]
    return start - SAMPLE_MARGIN_S, timed[-1] + SAMPLE_MARGIN_S


def _metric_data(m: dict) -> dict:
    """A stored metrics row's full record (the store keeps it as JSON in `data`), with its step."""
    data = json.loads(m["data"]) if isinstance(m.get("data"), str) else {}
    return {**data, "step": m.get("step", data.get("step", 0))}


def disturbance(row: dict, meter, metrics: list[dict] = ()) -> float | None:
    """How disturbed a stored trial's timed steps were (`timed_window`; its whole run where the metrics lack the step
    times), in cores: the larger of the cores others kept busy beyond `allowed_others` and the threads of this tree
    that waited for a CPU beyond QUEUED_SLACK per rank (> 0: disturbed; None: unknown). The first sees others' work
    on the cores the ranks leave free, the second a queue longer than the cores, which busy time cannot."""
    if row.get("status") != "OK" or row.get("started_at") is None or row.get("finished_at") is None:
        return None
    window = timed_window(row, list(metrics))
    world_size = int(row["world_size"])
    used, queued = meter.others_cores(*window), meter.queued_threads(*window)
    excess = [v for v in (None if used is None else used - allowed_others(world_size),
                          None if queued is None else queued - QUEUED_SLACK * world_size) if v is not None]
    return max(excess) if excess else None


def remeasure_disturbed(spec, output: Path, meter, *, console=None, budget_s: float = REMEASURE_BUDGET_S,
                        quiet_wait_s: float = QUIET_WAIT_S, run=None) -> list[str]:
    """Run each trial that others disturbed once more, the most disturbed first, while `budget_s` lasts, each
    after waiting up to `quiet_wait_s` for others to use CALMER_CORES fewer cores than during it (none more once
    they did not: a steady load); keep the less disturbed measurement. -> the labels of the trials whose new
    measurement was kept."""
    from scalestudy.study.runner import run_study
    from scalestudy.study.store import Store

    run = run or (lambda sub: run_study(sub, output, retry=("OK",), progress=False, console=console))
    say = (lambda msg: console.print(msg, highlight=False, soft_wrap=not console.is_terminal)) if console else \
        (lambda msg: None)
    with Store(output) as store:
        rows = {r["trial_id"]: r for r in store.trials()}
        steps = {t: store.metrics(t) for t in rows}
    scored = [(d, rows[t.trial_id], t) for t in spec.trials if t.trial_id in rows
              for d in [disturbance(rows[t.trial_id], meter, steps[t.trial_id])] if d is not None and d > 0]
    if not scored:
        return []
    excess = [d for d, _, _ in scored]
    say(f"{len(scored)} trial(s) ran while other processes disturbed them by {min(excess):.2f}-{max(excess):.2f} "
        f"cores (busy beside them, or their ranks waiting for one of this machine's {os.cpu_count()} cores): "
        "measuring them again when it is calmer")
    kept, deadline = [], time.time() + budget_s
    for before, old, trial in sorted(scored, key=lambda x: -x[0]):
        if time.time() >= deadline:
            break
        free = allowed_others(trial.world_size)
        if not meter.wait_quiet(max(free, before + free - CALMER_CORES), quiet_wait_s):  # a steady load: waiting
            say(f"  the machine stayed as busy for {quiet_wait_s:.0f} s: the measurements stand")  # would not help
            break
        old_metrics = [json.loads(m["data"]) for m in steps[trial.trial_id]]
        run(replace(spec, trials=(trial,)))
        with Store(output) as store:
            # run_study recorded its one-trial spec as the study's plan (trial_ids): the plan is still every trial
            store.set_meta("trial_ids", [t.trial_id for t in spec.trials])
            new = {r["trial_id"]: r for r in store.trials()}.get(trial.trial_id, {})
            after = disturbance(new, meter, store.metrics(trial.trial_id))
            if after is None or after >= before:  # failed, unknown or no calmer: the first measurement stands
                store.record_trial(old, old_metrics)
                continue
        kept.append(trial.label)
        say(f"  {trial.label}: {old['step_s']:.3g} s/step disturbed by {before:.2f} cores -> "
            f"{new['step_s']:.3g} s/step by {max(0.0, after):.2f}")
    return kept
