"""What a run's checkpoints record (the `latest` pointer, each checkpoint's meta.json) and whether --resume can
continue from them -- without torch, so `scalestudy train` refuses a resume it cannot do (and any other bad input)
before it imports torch (~2-15 s); engine/checkpoint.py writes and loads the checkpoints themselves."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from scalestudy.errors import ScalestudyError
from scalestudy.launch.commands import CHECKPOINTS_NAME

LATEST = "latest"


def checkpoint_root(out: Path) -> Path:
    return Path(out) / CHECKPOINTS_NAME


def latest(out: Path) -> Path | None:
    """The newest complete checkpoint directory, or None."""
    pointer = checkpoint_root(out) / LATEST
    if not pointer.is_file():
        return None
    try:
        name = json.loads(pointer.read_text(encoding="utf-8"))["dir"]
    except (ValueError, KeyError, TypeError, RecursionError):  # not the JSON `save` writes: none is named
        return None
    if not isinstance(name, str) or not name.startswith("step-") or "/" in name or "\\" in name:
        return None  # only a checkpoint directory of this run, never a path elsewhere
    path = checkpoint_root(out) / name
    return path if (path / "meta.json").is_file() else None


def read_meta(path: Path) -> dict:
    """A checkpoint's meta.json as `save` writes it (step, world_size, strategy, ...); a one-line error for
    anything else (written by another program, damaged), before any worker starts."""
    where = path / "meta.json"
    try:
        saved = json.loads(where.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # RecursionError: brackets nested thousands deep
        raise ScalestudyError(f"--resume: cannot read {where} ({type(exc).__name__}): not a checkpoint this run "
                              "wrote, or a damaged one") from None
    ok = isinstance(saved, dict) and all(isinstance(saved.get(k), int) and not isinstance(saved.get(k), bool)
                                         for k in ("step", "world_size"))
    if not ok or saved["step"] < 0 or saved["world_size"] < 1:
        raise ScalestudyError(f"--resume: {where} does not hold a checkpoint record (whole step and world_size): "
                              "not a checkpoint this run wrote, or a damaged one")
    return saved


def _with_defaults(saved: dict | None) -> dict | None:
    """A saved strategy with the Strategy fields added since it was written at their defaults (so adding a field
    does not make older checkpoints unresumable)."""
    from scalestudy.specs.strategy import Strategy

    if not isinstance(saved, dict):
        return saved
    known = set(Strategy.__dataclass_fields__)
    defaults = {k: v for k, v in Strategy().to_dict().items() if k not in saved}
    return {**defaults, **saved} if set(saved) <= known else saved


def check_resumable(out: Path, steps: int, world_size: int, strategy: dict, model: str | None = None) -> int:
    """The launcher's check, before any worker starts, that --resume can continue DIR; the step it resumes from."""
    path = latest(out)
    if path is None:
        raise ScalestudyError(f"--resume: no complete checkpoint under {checkpoint_root(out)}")
    saved = read_meta(path)
    check_files_listed(path, saved)
    check_files_whole(path)
    if model is not None and saved.get("model") not in (None, model):  # weights of another shape: refuse here
        raise ScalestudyError(f"--resume: checkpoint holds model {saved.get('model')}, this run trains {model}")
    if loads_any_layout(saved, strategy):  # resharded on load: any world size and tp/pp/dp layout
        pass
    elif saved["world_size"] != world_size:
        raise ScalestudyError(f"--resume: checkpoint was written by {saved['world_size']} ranks, this run has "
                              f"{world_size} (engine shards are per rank; FSDP and tp/pp checkpoints reshard)")
    elif _with_defaults(saved.get("strategy")) != strategy:
        raise ScalestudyError(f"--resume: checkpoint strategy differs from this run's: "
                              f"{strategy_differences(_with_defaults(saved.get('strategy')), strategy)}")
    # A run killed after its last checkpoint but before its summary is finished by --resume (no step is left to
    # train: the summary is written from the recorded metrics); a finished run is left as it is.
    if int(saved["step"]) > steps or int(saved["step"]) == steps and (out / "summary.json").exists():
        raise ScalestudyError(f"--resume: the checkpoint is at step {saved['step']}; raise --steps above it to "
                              "continue")
    return int(saved["step"])


def file_sizes(path: Path) -> dict[str, int]:
    """{name under `path`: size in bytes} of every file of a checkpoint being saved (meta.json's "files")."""
    return {file.relative_to(path).as_posix(): file.stat().st_size for file in sorted(path.rglob("*"))
            if file.is_file()}


def check_files_listed(path: Path, saved: dict) -> None:
    """Every file `save` listed in meta.json is there at the size it was written: a checkpoint copied without one
    of its files (a rank's optimizer shard, the model state) or one cut short is refused before the workers start
    and DIR's summary is dropped; the ranks found it only when torch.load failed. Checkpoints written before the
    list existed have none: nothing to compare."""
    files = saved.get("files")
    if not isinstance(files, dict):
        return
    for name, size in files.items():
        file = path / str(name)
        try:
            have = file.stat().st_size if file.is_file() else None
        except OSError:
            have = None
        if have != size:
            what = "is missing" if have is None else f"has {have:,} bytes, {size:,} were written"
            raise ScalestudyError(f"--resume: checkpoint file {file} {what}: restore the checkpoint, or train from "
                                  "scratch in a new --output")


def check_files_whole(path: Path) -> None:
    """Each torch file of checkpoint `path` opens as the zip archive torch.save writes (its records under one
    folder beside data.pkl), each JSON parses: a copy cut short or another zip file is refused here, before the
    workers start and DIR's summary is dropped (torch.load's failure was a traceback in every rank). Reads the
    archives' directories, not their data."""
    for file in sorted(path.rglob("*")):
        try:
            if file.suffix == ".pt":
                with zipfile.ZipFile(file) as archive:
                    names = archive.namelist()
                if not any(name.count("/") == 1 and name.endswith("/data.pkl") for name in names):
                    raise ValueError("a zip archive without the data.pkl torch.save writes")
            elif file.suffix == ".json":
                json.loads(file.read_text(encoding="utf-8"))
        except (OSError, zipfile.BadZipFile, ValueError, RecursionError) as exc:
            raise ScalestudyError(f"--resume: checkpoint file {file} is damaged ({type(exc).__name__}: {exc}): "
                                  "restore the checkpoint, or train from scratch in a new --output") from None


def check_same_data(out: Path, fingerprint: str, seed: int) -> None:
    """The data a resume prepared is the data the checkpoint was trained on (the fingerprint of tokenizer, token
    stream and example settings its data position records, and the seed of its order), checked by the launcher
    once the data is prepared: the ranks refused another corpus, objective, seq_len or seed only after DIR's summary
    had been dropped and its config rewritten, calling the checkpoint damaged."""
    path = latest(out)
    try:
        state = json.loads((path / "stream-rank0.json").read_text(encoding="utf-8")) if path else None
    except (OSError, ValueError, RecursionError):
        return  # damaged or absent: the ranks name it
    if not isinstance(state, dict):
        return
    if state.get("seed") not in (None, seed):
        raise ScalestudyError(f"--resume: the checkpoint's data order has seed {state['seed']}, this run {seed}: "
                              f"resume with --seed {state['seed']}, or train anew into another --output")
    if state.get("fingerprint") not in (None, fingerprint):
        raise ScalestudyError("--resume: the checkpoint was trained on other data or data settings (corpus, "
                              "tokenizer, objective, seq_len, target_len): resume with the run's own, or train anew "
                              "into another --output")


def strategy_differences(saved, strategy: dict) -> str:
    """Only the keys that differ, 'key: checkpoint X vs this run Y' (the whole ~30-key dict hid them)."""
    if not isinstance(saved, dict):
        return f"the checkpoint records no strategy ({saved!r})"
    missing = "(not set)"
    return "; ".join(f"{k}: checkpoint {saved.get(k, missing)} vs this run {strategy.get(k, missing)}"
                     for k in sorted(set(saved) | set(strategy)) if saved.get(k, missing) != strategy.get(k, missing))


def loads_any_layout(saved: dict, strategy: dict) -> bool:
    """Sharded checkpoints under full-model names (engine/parallel/checkpoint.py: FSDP2 and the tp/pp hybrid
    backend) load into any layout of those backends, e.g. one written under tp2 x pp2 resumes under dp4."""
    resharding_engine = strategy.get("engine") == "fsdp" or strategy.get("tp", 1) > 1 or strategy.get("pp", 1) > 1
    return bool(saved.get("any_layout")) and resharding_engine
