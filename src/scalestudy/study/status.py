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
        finished = store.trials()
        done = {t["trial_id"] for t in finished}
        started = {a["trial_id"] for a in store.attempts()} - outstanding  # submitted to Slurm: not interrupted
        failures = [{"status": t["status"], "label": t["label"],
                     "reason": (t["error_tail"] or "").splitlines()[0] if t["error_tail"] else ""}
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
    of the error the trial ended with)."""
    with Store(directory, create=False) as store:
        return [{"label": t["label"], "status": t["status"], "step_s": t.get("step_s"),
                 "tokens_per_s": t.get("tokens_per_s"), "loss": t.get("loss"), "wall_s": t.get("wall_s"),
                 "reason": "" if t["status"] == "OK" else _first_line(t.get("error_tail"))}
                for t in store.trials()]


def _first_line(text: str | None) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[0] if lines else "no output"
