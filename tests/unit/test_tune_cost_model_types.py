"""tune measures trials of `train`: a model type train cannot build (a cost-model-only preset or config.json) is
refused in one line before it calibrates. It used to calibrate this CPU first, write hardware_profile.yaml and
microbench.json into --output, and then say only 'no strategy for q3 on 1 rank(s) both fits and is runnable here'."""

from __future__ import annotations

import pytest

from scalestudy.cli import main
from scalestudy.errors import ScalestudyError
from scalestudy.specs.model import check_trainable
from scalestudy.specs.presets import PRESETS


def test_tune_refuses_a_cost_model_only_model_before_writing_anything(tmp_path, capsys):
    out = tmp_path / "tune"
    with pytest.raises(SystemExit) as exc:
        main(["tune", "--model", "opt-125m", "--nproc", "1", "--global-batch", "2", "--seq-len", "32",
              "--output", str(out)])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "--model opt-125m: opt models (opt-125m) are read by the cost model only" in err
    assert not out.exists()


def test_train_types_pass_the_check():
    for name in ("t5-tiny", "gpt2-tiny", "llama-tiny"):
        check_trainable(PRESETS[name])
    with pytest.raises(ScalestudyError, match="bloom models .* cost model only"):
        check_trainable(PRESETS["bloom-176b"])
