"""Where a study stands: outcomes so far, interrupted trials, trials not started; for Slurm studies results are
collected and queued/running tasks counted from squeue/sacct (`slurm.refresh`)."""

from __future__ import annotations

from pathlib import Path

from scalestudy.study.store import Store


def status(directory: str | Path) -> dict:
    directory = Path(directory)
    with Store(directory, create=False) as store:  # read-only: works on a study the user cannot write
        is_slurm = store.get_meta("executor") == "slurm"
    slurm, outstanding = None, set()
    if is_slurm:  # collect results, record tasks Slurm says ended (writes the store), ask squeue/sacct what runs
        from scalestudy.study.slurm import refresh

        with Store(directory, create=False, readonly=False) as store:
            seen = refresh(directory, store)
        outstanding = seen.outstanding
        slurm = {"queued": seen.live("PENDING"), "error": seen.error, "submitted": len(outstanding),
                 "running": sum(s.live and s.state != "PENDING" for s in seen.states.values())}
    with Store(directory, create=False) as store:
        planned = store.get_meta("trial_ids", [])
        planned = [p for p in planned if isinstance(p, str)] if isinstance(planned, list) else []  # damaged: none
        finished = store.trials()
        done = {t["trial_id"] for t in finished}
        started = {a["trial_id"] for a in store.attempts()} - outstanding  # submitted to Slurm: not interrupted
        failures = [{"status": t["status"], "label": _label(t), "reason": _first_line(t["error_tail"], "")}
                    for t in finished if t["status"] != "OK"]
        return {
            "name": store.get_meta("name"),
            "counts": store.counts(),
            "total": len(set(planned) | done),
            "interrupted": len((started - done) & set(planned)) if planned else len(started - done),
            "not_started": len(set(planned) - done - started - outstanding),
            "failures": failures,
            "slurm": slurm,  # None for local studies; else live counts from squeue/sacct (and why not, if not)
        }


def trial_rows(directory: str | Path) -> list[dict]:
    """One row per finished trial, in the order they ran: label, outcome, median s/step and tokens/s (encoder +
    decoder tokens, whole job), final loss (nats/token), wall time (s) and, unless OK, the reason (the first line
    of the error the trial ended with).
    Values a store holds in the wrong type (written by another tool, damaged) come back as None (shown as "-").
    """
    with Store(directory, create=False) as store:
        return [{"label": _label(t), "status": t["status"], "step_s": _number(t.get("step_s")),
                 "tokens_per_s": _number(t.get("tokens_per_s")), "loss": _number(t.get("loss")),
                 "wall_s": _number(t.get("wall_s")),
                 "reason": "" if t["status"] == "OK" else _first_line(t.get("error_tail"))}
                for t in store.trials()]


def _number(value) -> float | None:
    """A finite number, else None (SQLite keeps whatever a column was given)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or abs(value) == float("inf"):
        return None
    return value


def _label(t: dict) -> str:
    return str(t.get("label") or t["trial_id"])


def _first_line(text, empty: str = "no output") -> str:
    lines = [line.strip() for line in str(text or "").splitlines() if line.strip()]
    return lines[0] if lines else empty
