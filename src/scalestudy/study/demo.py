"""`scalestudy demo`: a small real scaling study on this CPU (the CLI then writes its report).

Tiny T5 (t5-tiny, span corruption on the bundled corpus, fp32, gloo) under DeepSpeed ZeRO 0-3 and FSDP2
(zero 3 = reshard after forward) on 1 and 2 ranks: 10 real `scalestudy train` runs of a few steps each, run one
after the other so that their timings do not disturb each other. The tokenizer is trained once and shared.
Re-running with the same --output resumes (finished trials are kept).
"""

from __future__ import annotations

import os
from pathlib import Path

DEMO_SPEC = {
    "name": "demo",
    "description": "t5-tiny x {DeepSpeed ZeRO 0-3, FSDP2} x {1, 2} ranks on this CPU",
    "model": "t5-tiny",
    "strategies": [{"engine": "deepspeed", "zero": [0, 1, 2, 3]}, {"engine": "fsdp", "zero": 3}],
    "nproc": [1, 2],
    "micro_batch": 2,
    "global_batch": 4,
    "seq_len": 64,
    "target_len": 16,
    "precision": "fp32",
    "objective": "span",
    "lr": 3.0e-3,
    "steps": 10,
    "warmup_steps": 2,
    "warmup": 3,
    "timeout_s": 300,
    "device": "local-cpu",
}


def demo_spec(output: Path) -> dict:
    """The demo's spec, pointing every trial at one shared tokenizer in DIR/tokenizer/."""
    spec = dict(DEMO_SPEC)
    tokenizer = output / "tokenizer" / "tokenizer.json"
    if tokenizer.is_file():
        spec["train_options"] = {"tokenizer": str(tokenizer.resolve())}
    return spec


def prepare_tokenizer(output: Path) -> None:
    """Train the demo's tokenizer once (each trial would otherwise train its own, identical one)."""
    folder = output / "tokenizer"
    if (folder / "tokenizer.json").is_file():
        return
    from scalestudy.engine.data.pipeline import DataConfig, prepare

    prepare(DataConfig(seq_len=DEMO_SPEC["seq_len"], target_len=DEMO_SPEC["target_len"]), folder, write=True)


def run_demo(output: str | Path = "scalestudy-demo", *, console=None, progress: bool = True):
    """Run (or resume) the demo study into `output`; return its `StudyRun` (the report is `scalestudy report`'s)."""
    from rich.console import Console

    from scalestudy.study.runner import check_study_dir, run_study
    from scalestudy.study.spec import parse_spec

    console = console or Console()
    output = Path(output)
    check_study_dir(output, DEMO_SPEC["name"])  # before the tokenizer is written into it
    output.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    prepare_tokenizer(output)
    from scalestudy.costmodel.cpu_profile import local_cpu_profile

    local_cpu_profile(log=lambda msg: console.print(msg, highlight=False))  # before the trials: not beside them
    spec = parse_spec(demo_spec(output), "demo spec")
    console.print(f"scalestudy demo: {len(spec.trials)} real training runs (t5-tiny, DeepSpeed ZeRO 0-3 and FSDP, "
                  f"1-2 CPU ranks) into {output}/study.sqlite. The first DeepSpeed run on a fresh machine compiles "
                  "a C++ op (~1 min, cached in ~/.cache/torch_extensions).", highlight=False, soft_wrap=True)
    return run_study(spec, output, progress=progress, console=console)
