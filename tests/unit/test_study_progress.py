"""The sweep's progress line at 80 columns: counts and times whole (rich cut them to '10/…', 'elapsed 0:01…')."""

import io

from rich.console import Console

from scalestudy.study.progress import SweepProgress


def test_progress_line_fits_80_columns_without_cutting_numbers():
    buf = io.StringIO()
    progress = SweepProgress(10, console=Console(file=buf, width=80, force_terminal=False))
    with progress:
        for i in range(10):
            progress.finished({"status": "OK", "label": f"t5-tiny ds-z{i % 4} ws2 mb2 gb4 lr0.003", "step_s": 0.06,
                               "tokens_per_s": 5e3, "loss": 6.3, "wall_s": 9.0}, ["t5-tiny fsdp-z3 ws2 mb2 gb4 lr0.003"])
    bar = [line for line in buf.getvalue().splitlines() if not line.startswith("OK")]
    text = "\n".join(bar)
    assert "…" not in text and max(len(line) for line in bar) <= 80
    assert "10/10" in text and "elapsed 0:00:0" in text and "TIMEOUT 0" in text


def test_eta_shown_when_trials_take_longer_than_rich_speed_window():
    """Rich's own ETA is the speed over its last 30 s: with trials of 40 s it stayed -:--:-- for the whole sweep
    (the demo on a loaded 2-core machine, 19-46 s a trial). ETA = mean pace so far x trials left, less the time the
    running trial has had."""
    from scalestudy.study.progress import EtaColumn

    now = [0.0]
    buf = io.StringIO()
    progress = SweepProgress(10, console=Console(file=buf, width=80, force_terminal=False, get_time=lambda: now[0]))
    row = {"status": "OK", "label": "t5-tiny ds-z0 ws1 mb2 gb4 lr0.003", "step_s": 0.1, "tokens_per_s": 1e3,
           "loss": 6.3, "wall_s": 40.0}
    with progress:
        task = progress.progress.tasks[0]
        assert str(EtaColumn().render(task)) == "-:--:--"  # nothing finished: no pace yet
        for t in (40.0, 80.0):
            now[0] = t
            progress.finished(row, [])
        assert str(EtaColumn().render(task)) == "0:05:20"  # 8 left x 40 s
        now[0] = 90.0
        assert str(EtaColumn().render(task)) == "0:05:10"  # counts down while the next trial runs


def test_a_finished_trial_states_tokens_per_s_as_a_plain_rate():
    """The demo printed '1.47e+03 tokens/s' beside a step in seconds: a rate reads as 1,470 tokens/s."""
    from scalestudy.study.progress import describe

    row = {"status": "OK", "label": "t5-tiny ds-z0 ws2", "step_s": 0.217, "tokens_per_s": 1472.4, "loss": 6.37,
           "wall_s": 26.1}
    assert "1,472 tokens/s" in describe(row) and "e+" not in describe(row)
    assert "45.2 tokens/s" in describe({**row, "tokens_per_s": 45.2})
