"""A run that trains its own tokenizer, taken up again: its DIR/train_config.yaml as --config, and --resume."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

RUN = ["--model", "gpt2-tiny", "--objective", "causal", "--engine", "ddp", "--seq-len", "64", "--warmup", "1",
       "--no-progress"]


def scalestudy(cwd, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.run([sys.executable, "-m", "scalestudy", "train", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=300)


@pytest.mark.dist
@pytest.mark.slow
def test_a_runs_own_config_resumes_it_and_another_vocab_size_is_refused_before_anything_is_written(tmp_path):
    # -o relative: the config recorded the tokenizer as typed (run/tokenizer.json), which --config reads from
    # DIR itself (run/run/tokenizer.json): refused as a ready-made tokenizer given a vocab_size
    first = scalestudy(tmp_path, *RUN, "--vocab-size", "600", "--steps", "2", "-o", "run")
    assert first.returncode == 0, first.stderr
    run = tmp_path / "run"
    recorded = yaml.safe_load((run / "train_config.yaml").read_text())["data"]["tokenizer"]
    assert recorded == str((run / "tokenizer.json").resolve())  # resolved: tmp_path may sit behind a symlink
    written = {name: (run / name).read_bytes() for name in ("train_config.yaml", "summary.json")}

    # every rank refused it, after the launcher had rewritten the config and dropped the summary
    refused = scalestudy(tmp_path, *RUN, "--vocab-size", "700", "--steps", "3", "-o", "run", "--resume")
    assert refused.returncode == 2 and "--resume continues with run/tokenizer.json" in refused.stderr, refused.stderr
    assert {name: (run / name).read_bytes() for name in written} == written

    resumed = scalestudy(tmp_path, "--config", "run/train_config.yaml", "--steps", "3", "--resume")
    assert resumed.returncode == 0, resumed.stderr
