"""The demo on a shared machine: trials during which other processes kept the cores busy are measured again when it
is quiet, and the less disturbed measurement kept (study/demo.py, machine_load.py)."""

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from scalestudy.study import demo
from scalestudy.study.demo import DEMO_SPEC, allowed_others, remeasure_disturbed
from scalestudy.machine_load import OthersMeter, machine_busy_s, process_wait_s, runnable_threads, tree_cpu_s
from scalestudy.study.spec import parse_spec
from scalestudy.study.store import Store

LINUX_PROC = Path("/proc/stat").is_file()


def test_others_cores_is_machine_busy_less_this_tree_per_second():
    meter = OthersMeter()
    # (time, machine busy s, our tree's s): 10 s in which the machine was busy 15 core-s, 9 of them ours
    meter.samples = [(100.0, 50.0, 5.0), (105.0, 57.0, 9.0), (110.0, 65.0, 14.0)]
    assert meter.others_cores(100.0, 110.0) == pytest.approx((15.0 - 9.0) / 10.0)
    assert meter.others_cores(105.0, 110.0) == pytest.approx((8.0 - 5.0) / 5.0)
    assert meter.others_cores(101.0, 104.0) is None  # no two samples inside: unknown, not quiet


def test_a_trial_may_share_only_the_cores_its_ranks_leave_free():
    assert allowed_others(1, cores=2) == pytest.approx(1.0 + demo.SLACK_CORES)
    assert allowed_others(2, cores=2) == pytest.approx(demo.SLACK_CORES)
    assert allowed_others(4, cores=2) == pytest.approx(demo.SLACK_CORES)


@pytest.mark.skipif(not LINUX_PROC, reason="Linux /proc needed")
def test_this_trees_cpu_counts_a_busy_child_and_the_machine_sees_it():
    """A child spinning 1 s adds about 1 CPU-s to this tree (while it runs, and after it is reaped) and at least
    that much to the machine's busy time: others' share stays what it was."""
    busy0, ours0 = machine_busy_s(), tree_cpu_s()
    child = subprocess.Popen([sys.executable, "-c", "import time\nt = time.process_time()\n"
                              "while time.process_time() - t < 1.0: pass"])
    child.wait()
    busy1, ours1 = machine_busy_s(), tree_cpu_s()
    assert ours1 - ours0 >= 0.9  # the child's second, now in our cutime
    assert busy1 - busy0 >= ours1 - ours0 - 0.05


def _store_with(tmp_path, spec):
    """A demo store whose trials ran in the second named by their index: [10 i, 10 i + 9]."""
    with Store(tmp_path) as store:
        for i, t in enumerate(spec.trials):
            store.record_trial({"trial_id": t.trial_id, "status": "OK", "label": t.label, "world_size": t.world_size,
                                "step_s": 0.1, "started_at": 10.0 * i, "finished_at": 10.0 * i + 9},
                               [{"step": 1, "step_s": 0.1}])


class FakeMeter:
    """others_cores by trial window; every later window (a re-measurement) says `later`; the ranks' run-queue wait
    unknown unless `queued` gives it by trial window (`queued_later` for a re-measurement)."""

    def __init__(self, by_start: dict, later: float, quiet: bool = True, queued: dict | None = None,
                 queued_later: float | None = None):
        self.by_start, self.later, self.quiet, self.waits, self.asked = by_start, later, quiet, 0, []
        self.queued, self.queued_later = queued, queued_later

    def others_cores(self, t0, t1):
        return self.by_start.get(t0, 0.0) if t0 < 1000 else self.later

    def queued_threads(self, t0, t1):
        if self.queued is None:
            return None
        return self.queued.get(t0, 0.0) if t0 < 1000 else self.queued_later

    def wait_quiet(self, allowed, max_wait_s):
        self.waits += 1
        self.asked.append(round(allowed, 6))
        return self.quiet


def _rerun(tmp_path, step_s, status="OK"):
    runs = []

    def run(sub):
        (t,) = sub.trials
        runs.append(t.label)
        with Store(tmp_path) as store:
            store.record_trial({"trial_id": t.trial_id, "status": status, "label": t.label, "world_size": t.world_size,
                                "step_s": step_s, "started_at": 2000.0, "finished_at": 2009.0},
                               [{"step": 1, "step_s": step_s}])
    return runs, run


def _steps(tmp_path):
    with Store(tmp_path) as store:
        return {r["label"]: r["step_s"] for r in store.trials()}, {m["trial_id"]: m["step_s"] for m in store.metrics()}


@pytest.mark.parametrize("later, kept_new", [(0.0, True), (1.9, False)])
def test_disturbed_trials_are_measured_again_and_the_quieter_kept(tmp_path, monkeypatch, later, kept_new):
    monkeypatch.setattr(demo.os, "cpu_count", lambda: 2)
    spec = parse_spec(dict(DEMO_SPEC), "demo")
    _store_with(tmp_path, spec)
    ws2 = [i for i, t in enumerate(spec.trials) if t.world_size == 2]
    ws1 = [i for i, t in enumerate(spec.trials) if t.world_size == 1]
    # others kept 1.5 cores busy during the first 2-rank trial (disturbed) and during a 1-rank one (1 core free +
    # slack: disturbed only above 1.25), 1.0 during another 1-rank one (not disturbed)
    meter = FakeMeter({10.0 * ws2[0]: 1.5, 10.0 * ws1[0]: 1.5, 10.0 * ws1[1]: 1.0}, later=later)
    runs, run = _rerun(tmp_path, 0.05)
    kept = remeasure_disturbed(spec, tmp_path, meter, run=run)
    assert runs == [spec.trials[ws2[0]].label, spec.trials[ws1[0]].label]  # the most disturbed first
    # each run again once others use half a core fewer than during it, or are within what the trial tolerates
    assert meter.asked == [1.0, 1.25]
    steps, metric_steps = _steps(tmp_path)
    again = {spec.trials[ws2[0]].label, spec.trials[ws1[0]].label}
    assert {label for label, s in steps.items() if s == 0.05} == (again if kept_new else set())
    assert sorted(kept) == (sorted(again) if kept_new else [])
    assert sorted(metric_steps.values()) == sorted(steps.values())  # the kept run's per-step metrics with it


def test_a_busy_machine_or_a_failed_rerun_keeps_the_first_measurement(tmp_path, monkeypatch):
    monkeypatch.setattr(demo.os, "cpu_count", lambda: 2)
    spec = parse_spec(dict(DEMO_SPEC), "demo")
    _store_with(tmp_path, spec)
    ws2 = [i for i, t in enumerate(spec.trials) if t.world_size == 2]
    busy = FakeMeter({10.0 * ws2[0]: 1.5, 10.0 * ws2[1]: 1.4}, later=0.0, quiet=False)
    runs, run = _rerun(tmp_path, 0.05)
    assert remeasure_disturbed(spec, tmp_path, busy, run=run) == [] and runs == []
    assert busy.waits == 1  # a steady load: one wait for quiet, not one per trial
    failed = FakeMeter({10.0 * ws2[0]: 1.5}, later=0.0)
    runs, run = _rerun(tmp_path, 0.05, status="FAILED")
    assert remeasure_disturbed(spec, tmp_path, failed, run=run) == [] and len(runs) == 1
    steps, _ = _steps(tmp_path)
    assert set(steps.values()) == {0.1}
    with Store(tmp_path) as store:
        assert {r["status"] for r in store.trials()} == {"OK"}


def test_no_disturbed_trial_runs_nothing(tmp_path):
    spec = parse_spec(dict(DEMO_SPEC), "demo")
    _store_with(tmp_path, spec)
    runs, run = _rerun(tmp_path, 0.05)
    assert remeasure_disturbed(spec, tmp_path, FakeMeter({}, later=0.0), run=run) == [] and runs == []


def _meter_with_others(busy_seconds: set[int], ranks: int, until: int = 30) -> OthersMeter:
    """A real OthersMeter's samples, one a second: others kept 2 cores busy in `busy_seconds` (second t = [t, t+1)),
    none otherwise; this tree's `ranks` ranks one core each throughout."""
    meter, busy, ours = OthersMeter(), 0.0, 0.0
    for t in range(until + 1):
        meter.samples.append((float(t), busy, ours))
        busy, ours = busy + ranks + (2.0 if t in busy_seconds else 0.0), ours + ranks
    return meter


def _trial_with_steps(world_size: int) -> tuple[dict, list[dict]]:
    """A 10-step trial that ran 0-20 s: start-up until 12 s, then one step a second (steps 1-3 warm-up, not timed),
    its metrics as the store keeps them (the step record as JSON in `data`)."""
    row = {"status": "OK", "world_size": world_size, "warmup": 3, "started_at": 0.0, "finished_at": 20.0}
    metrics = [{"step": s, "data": json.dumps({"step": s, "step_s": 1.0, "wall_time": 12.0 + s})} for s in range(1, 11)]
    return row, metrics


def test_the_timed_window_is_the_steps_after_the_warmup_widened_to_hold_samples():
    row, metrics = _trial_with_steps(1)
    assert demo.timed_window(row, metrics) == pytest.approx((15.0 - demo.SAMPLE_MARGIN_S, 22.0 + demo.SAMPLE_MARGIN_S))
    no_times = [{"step": m["step"], "data": json.dumps({"step": m["step"]})} for m in metrics]
    assert demo.timed_window(row, no_times) == (0.0, 20.0)  # the metrics do not say: the whole trial


def test_disturbed_means_during_the_timed_steps_not_during_start_up(monkeypatch):
    """The step time is the median of the timed steps, the last few seconds of the trial: others' burst over them
    disturbs a 1-rank trial though its whole run's average stays within the free core; a burst during start-up
    (which no timed step saw) does not disturb a 2-rank trial though its whole run's average is above the slack."""
    monkeypatch.setattr(demo.os, "cpu_count", lambda: 2)
    row, metrics = _trial_with_steps(1)
    late = _meter_with_others(set(range(16, 22)), ranks=1)
    assert late.others_cores(0.0, 20.0) < allowed_others(1)  # whole run: 8 core-s over 20 s
    assert demo.disturbance(row, late, metrics) > 0
    row, metrics = _trial_with_steps(2)
    early = _meter_with_others(set(range(2, 8)), ranks=2)
    assert early.others_cores(0.0, 20.0) > allowed_others(2)  # whole run: 12 core-s over 20 s
    assert demo.disturbance(row, early, metrics) <= 0


def test_queued_threads_is_the_descendants_run_queue_wait_per_second():
    """Each process counts from its first to its last sample in the span: one that exits (or starts) inside it adds
    the wait it gained while sampled; its disappearance is not a negative wait."""
    meter = OthersMeter()
    meter.queue_samples = [(0.0, 3, {11: 1.0, 12: 5.0}), (1.0, 3, {11: 1.5, 12: 5.5}),
                           (2.0, 3, {11: 2.0, 13: 0.0}), (4.0, 3, {11: 3.0, 13: 0.4})]
    # pid 11: 2.0 s over 4 s; pid 12 (exits after 1 s): 0.5 s; pid 13 (starts at 2 s): 0.4 s
    assert meter.queued_threads(0.0, 4.0) == pytest.approx((2.0 + 0.5 + 0.4) / 4.0)
    assert meter.queued_threads(0.5, 1.5) is None  # one sample: unknown, not calm
    meter.queue_samples = [(0.0, 3, {}), (1.0, 3, {})]  # the kernel reports no wait: unknown
    assert meter.queued_threads(0.0, 1.0) is None


def test_ranks_waiting_in_a_queue_disturb_a_trial_that_busy_time_calls_calm(monkeypatch):
    """At load ~4.8 others kept 1.0-1.6 of 2 cores busy: within what a 1-rank trial tolerates (1.25), yet a fair
    share over their ~3.3 runnable threads left the rank queued more than half the time."""
    monkeypatch.setattr(demo.os, "cpu_count", lambda: 2)
    row, metrics = _trial_with_steps(1)
    meter = _meter_with_others(set(), ranks=1)
    for t, (_, busy, ours) in enumerate(meter.samples):  # others 1.2 cores busy throughout
        meter.samples[t] = (float(t), busy + 1.2 * t, ours)
        meter.queue_samples.append((float(t), 5, {101: 0.55 * t}))  # the rank waits 0.55 s a second
    assert meter.others_cores(*demo.timed_window(row, metrics)) < allowed_others(1)
    assert demo.disturbance(row, meter, metrics) == pytest.approx(0.55 - demo.QUEUED_SLACK)
    calm = _meter_with_others(set(), ranks=1)
    calm.queue_samples = [(float(t), 1, {101: 0.01 * t}) for t in range(31)]
    assert demo.disturbance(row, calm, metrics) <= 0


def test_a_queued_trial_is_measured_again_and_kept_only_when_it_waited_less(tmp_path, monkeypatch):
    monkeypatch.setattr(demo.os, "cpu_count", lambda: 2)
    spec = parse_spec(dict(DEMO_SPEC), "demo")
    _store_with(tmp_path, spec)
    ws1 = [i for i, t in enumerate(spec.trials) if t.world_size == 1]
    for queued_later, kept_new in ((0.02, True), (0.8, False)):
        meter = FakeMeter({}, later=0.0, queued={10.0 * ws1[0]: 0.6}, queued_later=queued_later)
        runs, run = _rerun(tmp_path, 0.05)
        kept = remeasure_disturbed(spec, tmp_path, meter, run=run)
        assert runs == [spec.trials[ws1[0]].label]
        assert kept == ([spec.trials[ws1[0]].label] if kept_new else [])


def test_waiting_for_quiet_needs_few_runnable_threads_too(monkeypatch):
    """Others' busy cores within the allowance but 3 threads runnable besides the sampler: not quiet."""
    meter = OthersMeter(interval_s=0.01)
    now = [100.0]
    monkeypatch.setattr("scalestudy.machine_load.time.time", lambda: now[0])
    monkeypatch.setattr("scalestudy.machine_load.time.sleep", lambda s: now.__setitem__(0, now[0] + s))
    meter.samples = [(97.0 + i, 10.0 + 0.2 * i, 0.0) for i in range(4)]  # 0.2 cores busy
    meter.queue_samples = [(97.0 + i, 4, {}) for i in range(4)]
    assert meter.wait_quiet(0.25, max_wait_s=0.0) is False
    meter.queue_samples = [(97.0 + i, 1, {}) for i in range(4)]
    assert meter.wait_quiet(0.25, max_wait_s=0.0) is True


@pytest.mark.skipif(not LINUX_PROC, reason="Linux /proc needed")
def test_this_process_run_queue_wait_and_the_runnable_count_are_read():
    waited = process_wait_s(os.getpid())
    assert waited is not None and waited >= 0.0
    assert process_wait_s(os.getpid()) >= waited  # it only grows
    assert runnable_threads() >= 1  # the reader itself runs


def test_a_remeasurement_leaves_the_study_plan_whole(tmp_path, monkeypatch):
    """run_study records the spec it runs as the study's plan (the store's trial_ids): a re-measurement's one-trial
    spec made the demo's report say '10 of 1 planned trials finished'."""
    from scalestudy.study.runner import open_study

    monkeypatch.setattr(demo.os, "cpu_count", lambda: 2)
    spec = parse_spec(dict(DEMO_SPEC), "demo")
    open_study(spec, tmp_path).close()
    _store_with(tmp_path, spec)
    ws2 = [i for i, t in enumerate(spec.trials) if t.world_size == 2]
    runs, record = _rerun(tmp_path, 0.05)

    def run(sub):  # as run_study: the spec it was given becomes the plan, then the trial runs
        open_study(sub, tmp_path).close()
        record(sub)

    meter = FakeMeter({10.0 * ws2[0]: 1.5}, later=0.0)
    assert remeasure_disturbed(spec, tmp_path, meter, run=run) == [spec.trials[ws2[0]].label] == runs
    with Store(tmp_path) as store:
        assert store.get_meta("trial_ids") == [t.trial_id for t in spec.trials]


def test_a_resumed_demo_says_how_many_trials_it_keeps(tmp_path):
    """Re-running the demo into its directory resumes: it announced '10 real training runs' and then ran none."""
    spec = parse_spec(demo.demo_spec(tmp_path), "demo spec")
    assert demo._finished(spec, tmp_path) == 0  # a fresh directory: no store yet, none created
    assert not (tmp_path / "study.sqlite").exists()
    _store_with(tmp_path, replace(spec, trials=spec.trials[:3]))
    assert demo._finished(spec, tmp_path) == 3
