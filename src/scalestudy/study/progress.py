"""The sweep's live display: trials done / left, outcome counts, elapsed time and ETA (rich)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Column
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

from scalestudy.study.store import STATUSES

COLOURS = {"OK": "green", "OOM": "magenta", "FAILED": "red", "TIMEOUT": "yellow"}


def _fmt(value, unit: str, scale: float = 1.0, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value * scale:.{digits}g} {unit}"


def _rate(value) -> str:
    """Tokens/s as a reader reads a rate: 1,470 tokens/s, not _fmt's 1.47e+03 (3 significant digits below 100)."""
    return "n/a" if value is None else f"{value:,.0f} tokens/s" if value >= 100 else _fmt(value, "tokens/s")


def describe(row: dict) -> str:
    """One line about a finished trial, units included."""
    status = row["status"]
    text = f"[{COLOURS[status]}]{status:7}[/] {row['label']}"
    if status == "OK":
        text += (f"  step {_fmt(row.get('step_s'), 's')} (median after warm-up)  "
                 f"{_rate(row.get('tokens_per_s'))}  final loss {_fmt(row.get('loss'), 'nats/token')}")
    else:
        reason = (row.get("error_tail") or "").splitlines()[:1]
        text += f"  ({reason[0] if reason else 'no output'})"
    return text + f"  wall {row['wall_s']:.1f} s"


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes // 60:d}:{minutes % 60:02d}:{secs:02d}"


class EtaColumn(ProgressColumn):
    """Time left at the sweep's mean pace: (elapsed at the last finished trial / trials finished) x trials left, less
    the time the running trial has had since. Rich's TimeRemainingColumn divides by the speed over its last 30 s
    (speed_estimate_period), which holds at most one finished trial once trials take longer than that -- the demo's
    take 19-46 s on 2 cores, a cluster's minutes -- so it showed -:--:-- for the whole sweep."""

    def render(self, task) -> Text:
        style = "progress.remaining"
        if task.finished:
            return Text(_clock(0), style=style)
        done_at = task.fields.get("done_at")
        if not task.completed or done_at is None or task.total is None or task.elapsed is None:
            return Text("-:--:--", style=style)
        left = done_at / task.completed * (task.total - task.completed) - (task.elapsed - done_at)
        return Text(_clock(max(0.0, left)), style=style)


class SweepProgress:
    """Context manager; `finished(row)` after each trial."""

    def __init__(self, total: int, *, enabled: bool = True, console: Console | None = None) -> None:
        self.console = console or Console()
        self.counts = {s: 0 for s in STATUSES}
        self.total = total
        self.done = 0
        # only the info text (counts, running trials) wraps, at spaces; numbers and times are never cut ("0:01…")
        whole = {"table_column": Column(no_wrap=True)}
        self.progress = Progress(
            TextColumn("[bold]trials", **whole), BarColumn(bar_width=10 if self.console.width < 120 else 40),
            MofNCompleteColumn(**whole), TextColumn("elapsed", **whole), TimeElapsedColumn(**whole),
            TextColumn("ETA", **whole), EtaColumn(table_column=Column(no_wrap=True)),
            TextColumn("{task.fields[info]}", table_column=Column(ratio=1, overflow="fold")), expand=True,
            console=self.console, disable=not enabled, transient=False,
        )
        self.task = self.progress.add_task("trials", total=total, info=self._info(""), done_at=None)

    def _info(self, running: str) -> str:
        counts = " ".join(f"{s} {n}" for s, n in self.counts.items())
        run = f" | running: {running}" if running else ""
        return f"left {self.total - self.done} | {counts}{run}"

    def __enter__(self) -> SweepProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.stop()

    def running(self, labels: list[str]) -> None:
        self.progress.update(self.task, info=self._info(", ".join(labels)))

    def finished(self, row: dict, running: list[str]) -> None:
        self.done += 1
        self.counts[row["status"]] += 1
        # one line per trial in logs; a terminal's lines wrap at spaces (it cut them mid-word: "1.95e+|03")
        self.progress.console.print(describe(row), highlight=False, soft_wrap=not self.progress.console.is_terminal)
        elapsed = self.progress.tasks[0].elapsed  # when this trial finished (the one task): EtaColumn's pace
        self.progress.update(self.task, advance=1, info=self._info(", ".join(running)), done_at=elapsed)
