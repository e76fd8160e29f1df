"""Run a study: expand the spec, skip finished trials, run the rest, record each result as it finishes.

Each trial is a real `scalestudy train` process (`trials.py` builds its config and command) run by an executor:
`local.py` (trial processes on this machine, `scalestudy.launch.process`) or `slurm.py` (job arrays). The outcome is
classified OK / OOM / FAILED / TIMEOUT and written to the store in one transaction (`store.py`). A hung or dead
trial never stops the sweep. Re-running resumes: finished trials are skipped (unless `retry` names their status),
interrupted ones re-run from scratch.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path

from scalestudy.errors import ScalestudyError
from scalestudy.launch.process import kill_marked
from scalestudy.study import env as envinfo
from scalestudy.study.local import LocalExecutor
from scalestudy.study.predict import predict
from scalestudy.study.slurm import SlurmExecutor, print_scripts
from scalestudy.outputs import check_output_dir
from scalestudy.study.spec import EXECUTORS, StudySpec, Trial, load_spec
from scalestudy.study.store import STATUSES, Store, store_path


@dataclass
class StudyRun:
    """What one `run_study` call did."""

    out: Path
    total: int
    skipped_finished: int
    ran: int = 0
    counts: dict = field(default_factory=lambda: {s: 0 for s in STATUSES})
    filtered: tuple[str, ...] = ()
    wall_s: float = 0.0


class _Lock:
    """One runner per study directory (flock: released by the kernel even when the runner is killed)."""

    def __init__(self, out: Path) -> None:
        import fcntl

        self.fh = open(out / ".runner.lock", "a+")  # noqa: SIM115 - held for the run's lifetime
        try:
            fcntl.flock(self.fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.fh.close()
            raise ScalestudyError(f"another runner is working on {out} (wait for it or kill it)") from None

    def release(self) -> None:
        self.fh.close()


def pending_trials(spec: StudySpec, store: Store, retry: tuple[str, ...] = ()) -> tuple[list[Trial], int]:
    """Trials still to run (never finished, or finished with a status in `retry`) and how many are skipped."""
    done = {t["trial_id"]: t["status"] for t in store.trials()}
    todo = [t for t in spec.trials if t.trial_id not in done or done[t.trial_id] in retry]
    return todo, len(spec.trials) - len(todo)


def filter_unfit(spec: StudySpec, trials: list[Trial]) -> tuple[list[Trial], list[str]]:
    """With `skip_unfit`, drop trials the cost model predicts will not fit in device memory."""
    if not spec.skip_unfit:
        return trials, []
    kept, dropped = [], []
    for t in trials:
        pred = predict(t, spec.device)
        if pred.get("pred_fits") == 0:
            dropped.append(f"{t.label}: predicted {pred['pred_per_device_bytes'] / 2**30:.1f} GiB per device "
                           f"does not fit {spec.device}")
        else:
            kept.append(t)
    return kept, dropped


def check_study_dir(out: Path, name: str) -> None:
    """Before anything is written: DIR is a writable directory (or can be made), any store in it is an intact study
    store of this study (checked read-only), and no other runner holds it."""
    import fcntl

    check_output_dir(out)
    if store_path(out).exists():
        with Store(out, create=False) as store:
            previous = store.get_meta("name")
        if previous is not None and previous != name:
            raise ScalestudyError(f"{out} holds study {previous!r}, not {name!r}: choose another --output")
    lock = out / ".runner.lock"
    if lock.exists() and not lock.is_file():  # the runner's lock file: nothing else may sit at its name
        raise ScalestudyError(f"{lock} exists and is not a file (the runner locks the study through it): remove it")
    if lock.is_file():
        with open(lock) as fh:  # read-only: probing the lock must not create or change the file
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise ScalestudyError(f"another runner is working on {out} (wait for it or kill it)") from None


def open_study(spec: StudySpec, out: Path) -> Store:
    out.mkdir(parents=True, exist_ok=True)
    store = Store(out)
    previous = store.get_meta("name")
    if previous is not None and previous != spec.name:
        store.close()
        raise ScalestudyError(f"{out} holds study {previous!r}, not {spec.name!r}: choose another --output")
    store.set_meta("name", spec.name)
    store.set_meta("spec", spec.source)
    store.set_meta("device", spec.device)
    store.set_meta("trial_ids", [t.trial_id for t in spec.trials])
    return store


def run_study(spec: StudySpec | str | Path, out: str | Path, *, executor: str | None = None,
              concurrency: int | None = None, retry: tuple[str, ...] = (), dry_run: bool = False,
              progress: bool = True, console=None, wait: bool = True) -> StudyRun:
    """Run (or resume) a study into `out` (DIR/study.sqlite, DIR/trials/<trial_id>/)."""
    if not isinstance(spec, StudySpec):
        spec = load_spec(spec)
    out = Path(out).resolve()  # trial processes run in their own directory: a relative path would miss
    kind = executor or spec.executor
    bad = set(retry) - set(STATUSES)
    if bad:
        raise ScalestudyError(f"--retry takes statuses among {', '.join(STATUSES)}, got {', '.join(sorted(bad))}")
    if kind not in EXECUTORS:
        raise ScalestudyError(f"--executor must be one of {', '.join(EXECUTORS)}, got {kind!r}")
    if concurrency is not None and concurrency < 1:
        raise ScalestudyError(f"--concurrency must be >= 1, got {concurrency}")
    # Slurm-only switches given for local trials did nothing: the sweep ran (and waited) as without them
    if not wait and kind != "slurm":
        raise ScalestudyError("--no-wait returns once Slurm jobs are submitted: use it with --executor slurm (local "
                              "trials run in this process's children)")
    if concurrency is not None and kind == "slurm":
        raise ScalestudyError("--concurrency sets how many local trials run at once; Slurm schedules its jobs itself: "
                              "drop --concurrency or use --executor local")
    check_study_dir(out, spec.name)
    if kind == "local":
        check_local_inputs(spec)
    if dry_run and kind == "slurm":
        return _slurm_dry_run(spec, out, console)
    if dry_run:
        raise ScalestudyError("--dry-run prints the Slurm scripts: use it with --executor slurm")
    multi = [t for t in spec.trials if t.nodes > 1]
    if kind == "local" and multi:
        raise ScalestudyError(f"{len(multi)} trials need {max(t.nodes for t in multi)} nodes: the local executor runs "
                              "on one machine (use --executor slurm)")
    made = [p for p in (out, out / ".runner.lock") if not p.exists()]  # taken back if no store can be made there
    out.mkdir(parents=True, exist_ok=True)
    lock = _Lock(out)
    try:
        kill_marked(out)  # leftovers of a runner that was killed
        try:
            store = open_study(spec, out)
        except ScalestudyError:  # e.g. a full disk: the folder is left as it was, no stray lock
            lock.release()
            for p in reversed(made):
                with contextlib.suppress(OSError):  # a folder something else wrote into stays
                    p.rmdir() if p.is_dir() else p.unlink()
            raise
        env = envinfo.capture()
        store.set_meta("env", env)
        try:
            todo, skipped = pending_trials(spec, store, retry)
            todo, unfit = filter_unfit(spec, todo)
            result = StudyRun(out=out, total=len(spec.trials), skipped_finished=skipped,
                              filtered=tuple(spec.skipped) + tuple(unfit))
            start = time.time()
            if kind == "slurm":
                SlurmExecutor(spec, out, store, env, console=console).run(todo, wait=wait)
            else:
                LocalExecutor(spec, out, store, env, concurrency=concurrency or spec.concurrency,
                              progress=progress, console=console).run(todo)
            result.ran = len(todo)
            result.wall_s = time.time() - start
            result.counts = store.counts()
            return result
        finally:
            store.close()
    finally:
        lock.release()


def check_local_inputs(spec: StudySpec) -> None:
    """What every local trial reads, checked once before any starts (study run, search): a missing or unreadable
    corpus, tokenizer or lexicon, or this machine's damaged cached CPU profile, would fail each trial in its ranks."""
    from scalestudy.engine.data.corpora import check_corpus_file

    for corpus in [d for d in spec.data if not d.startswith("hf:")]:  # every trial would fail on it
        check_corpus_file(corpus)
    options = spec.trials[0].options() if spec.trials else {}
    for key in ("tokenizer", "lexicon"):  # train_options naming files (made absolute when the spec was loaded)
        if options.get(key) and Path(options[key]).exists() and not Path(options[key]).is_file():
            raise ScalestudyError(f"train_options {key} {options[key]} is not a regular file (a directory, a FIFO or "
                                  "a device): every trial would fail on it")
        if options.get(key) and not Path(options[key]).is_file():
            raise ScalestudyError(f"train_options {key} {options[key]}: no such file (every trial would fail on it)")
    _check_inputs_read(spec.data, options, sorted({t.model for t in spec.trials}))
    if spec.device == "local-cpu":  # each CPU trial's launcher reads this machine's cached profile
        from scalestudy.costmodel.cpu_profile import local_cpu_profile

        local_cpu_profile(measure=False)


def _check_inputs_read(data: tuple[str, ...], options: dict, models: list[str] = ()) -> None:
    """The corpus files (their first document), tokenizer and lexicon read as each trial's `train` reads them: an
    empty, binary or non-UTF-8 file, or a tokenizer with more tokens than a model's embedding has rows, fails here
    in one line, not in every trial after its ranks started."""
    from scalestudy.engine.data.corpora import read_corpus
    from scalestudy.engine.data.knowledge import load_lexicon
    from scalestudy.engine.data.pipeline import check_vocab
    from scalestudy.engine.data.tokenizer import load_tokenizer
    from scalestudy.specs.presets import get_model

    for path in data:
        if not path.startswith("hf:"):  # hub datasets are fetched by the trials
            read_corpus(path, options.get("text_field") or "text", max_docs=1)
    if options.get("tokenizer"):
        size = load_tokenizer(options["tokenizer"]).get_vocab_size()
        for model in models:  # the check train's launcher makes (engine/launch.py _prepare_data)
            try:
                check_vocab(get_model(model), size)
            except ScalestudyError as exc:
                raise ScalestudyError(f"train_options tokenizer {options['tokenizer']}: {exc}") from None
    if options.get("lexicon"):
        load_lexicon(options["lexicon"])


def _slurm_dry_run(spec: StudySpec, out: Path, console) -> StudyRun:
    """Write and print the Slurm scripts of the trials still to run; submit nothing."""
    todo = list(spec.trials)
    if (out / "study.sqlite").is_file():
        with Store(out) as store:
            todo, _ = pending_trials(spec, store)
    todo, unfit = filter_unfit(spec, todo)
    print_scripts(spec, out, todo, unfit, console)
    return StudyRun(out=out, total=len(spec.trials), skipped_finished=len(spec.trials) - len(todo))
