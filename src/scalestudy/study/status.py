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
