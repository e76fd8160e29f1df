"""Where a study stands: outcomes so far, interrupted trials, trials not started (and Slurm results collected)."""

from __future__ import annotations

from pathlib import Path

from scalestudy.study.store import Store


def status(directory: str | Path) -> dict:
    directory = Path(directory)
    with Store(directory, create=False) as store:  # read-only: works on a study the user cannot write
        slurm = store.get_meta("executor") == "slurm"
    if slurm:  # collecting Slurm results from shared storage writes them into the store
        from scalestudy.study.slurm import collect

        with Store(directory, create=False, readonly=False) as store:
            collect(directory, store)
    with Store(directory, create=False) as store:
        planned = store.get_meta("trial_ids", [])
        finished = store.trials()
        done = {t["trial_id"] for t in finished}
        started = {a["trial_id"] for a in store.attempts()}
        failures = [{"status": t["status"], "label": t["label"],
                     "reason": (t["error_tail"] or "").splitlines()[0] if t["error_tail"] else ""}
                    for t in finished if t["status"] != "OK"]
        return {
            "name": store.get_meta("name"),
            "counts": store.counts(),
            "total": len(set(planned) | done),
            "interrupted": len((started - done) & set(planned)) if planned else len(started - done),
            "not_started": len(set(planned) - done - started),
            "failures": failures,
        }
