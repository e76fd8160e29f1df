"""The options a run config is written in: its sections (model, workload, optimizer, data, output; `strategy` is the
frozen `Strategy`), the flat names the `train` flags and older flat YAML files use for them (`FLAT_KEYS`), and the
hint for a training option written into a file that is no run config (a cluster file's `learning_rate`).

Apart from `run.py`, which builds and checks a RunConfig out of these sections, so that a spec reader the run config
itself imports (the cluster file reader, for its world-size limit) can name a training option without a circle."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Iterable

from scalestudy.specs.near_keys import nearest
from scalestudy.specs.strategy import Strategy


@dataclass(frozen=True)
class ModelSection:
    source: str = "t5-tiny"  # preset name or a Hugging Face config.json path
    dropout: float = 0.0  # T5 v1.1 / mT5 pre-training used none; also keeps engines bit-comparable


@dataclass(frozen=True)
class WorkloadSection:
    seq_len: int = 128  # encoder (or decoder-only) length in tokens
    target_len: int = 0  # decoder length of span/knowledge objectives; 0 -> what span corruption of seq_len needs
    global_batch: int = 0  # sequences per optimizer step; 0 -> micro_batch x dp (no accumulation)
    nproc: int = 1  # ranks per node
    nnodes: int = 1
    steps: int = 100  # optimizer steps in total (resumed ones included)


@dataclass(frozen=True)
class OptimizerSection:
    """AdamW, linear warm-up, then decay to min_lr_ratio x lr at the last step."""

    lr: float = 1e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 10
    decay: str = "cosine"
    weight_decay: float = 0.01
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    grad_clip: float = 1.0  # 0 disables clipping
    seed: int = 1234  # weights and data order


# The smallest vocabulary train learns a tokenizer at (engine/data/tokenizer.py): 3 specials and T5's 100 sentinels,
# the rest pieces
MIN_VOCAB_SIZE = 512


@dataclass(frozen=True)
class DataSection:
    objective: str = "span"  # span, knowledge (encoder-decoder) or causal (decoder-only)
    files: tuple[str, ...] = ()  # empty -> the bundled corpus
    text_field: str = "text"
    lexicon: str | None = None
    tokenizer: str | None = None  # tokenizer.json; trained on the corpus when None
    vocab_size: int = 8192


@dataclass(frozen=True)
class OutputSection:
    dir: str = "runs/train"
    resume: bool = False
    save_every: int = 0  # 0 -> only the final checkpoint
    timing_warmup: int = 2  # measured steps excluded from the summary medians
    progress: bool = True
    crash_after_step: int = 0  # tests only: die hard right after this step (after its checkpoint)


SECTIONS: dict[str, type] = {"model": ModelSection, "workload": WorkloadSection, "optimizer": OptimizerSection,
                             "data": DataSection, "output": OutputSection}


def _flat_keys() -> dict[str, tuple[str, str]]:
    """Flat option name (train flag) -> (section, field). Strategy fields keep their names, so new ones flow."""
    keys = {name: ("strategy", name) for name in Strategy.__dataclass_fields__}
    for section, cls in SECTIONS.items():
        for f in fields(cls):
            keys.setdefault(f.name, (section, f.name))
    keys.update({"model": ("model", "source"), "data": ("data", "files"), "output": ("output", "dir"),
                 "warmup": ("output", "timing_warmup")})
    for renamed in ("source", "files", "dir", "timing_warmup"):
        keys.pop(renamed, None)
    return keys


FLAT_KEYS = _flat_keys()
FLAT_NAMES = {place: key for key, place in FLAT_KEYS.items()}  # (section, field) -> the flat key a user writes
RUN_OPTIONS_DOC = "docs/run-options.md"  # every flat key in a table (tests/unit/test_run_config.py checks it)
SECTION_ONLY = {"strategy", *SECTIONS} - set(FLAT_KEYS)  # section names that are no flat option (workload, ...)


def training_option_hint(unknown: Iterable[str], file_kind: str) -> str:
    """' (learning_rate as lr, steps: a training option of a run config (...), not of a cluster file)' for the
    unknown keys of a `file_kind` file that name a training option, '' where none does."""
    near = {k: nearest(k, FLAT_KEYS) for k in sorted(map(str, unknown))}
    named = [f"{k} as {v}" if k != v else k for k, v in near.items() if v]
    return (f" ({', '.join(named)}: a training option of a run config (`scalestudy train --config`), not of "
            f"{file_kind})") if named else ""
