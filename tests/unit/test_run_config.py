"""TrainConfig (YAML + flags, validation), the learning-rate schedule and the printed cluster commands."""

from __future__ import annotations

import math

import pytest

from scalestudy.engine.backends.common import lr_multiplier
from scalestudy.engine.config import TrainConfig
from scalestudy.engine.launch import launch_commands
from scalestudy.errors import ScalestudyError


def test_flags_override_yaml_and_yaml_overrides_defaults(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("engine: deepspeed\nzero: 2\nlr: 1e-3\nmicro-batch: 4\nsteps: 50\n")
    cfg = TrainConfig.merged(str(path), {"steps": 7, "seed": None})
    assert (cfg.engine, cfg.zero, cfg.micro_batch, cfg.steps, cfg.seed) == ("deepspeed", 2, 4, 7, 1234)
    assert cfg.lr == pytest.approx(1e-3)  # YAML 1.1 reads 1e-3 as a string; we accept it as a number


@pytest.mark.parametrize("text, message", [
    ("stepz: 3\n", "unknown training option(s): stepz"),
    ("steps: many\n", "steps must be an integer"),
    ("- a\n- b\n", "must hold a mapping"),
])
def test_bad_yaml_is_one_clear_error(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ScalestudyError, match=message.replace("(", r"\(").replace(")", r"\)")):
        TrainConfig.merged(str(path), {})


@pytest.mark.parametrize("changes, message", [
    ({"model": "t5-nano"}, "unknown model 't5-nano'"),
    ({"engine": "fsdp", "zero": 1}, "engine fsdp supports zero stage 2, 3, not 1"),
    ({"nproc": 3, "micro_batch": 2, "global_batch": 8}, "not divisible by micro-batch 2 x dp 3"),
    ({"nproc": 2, "micro_batch": 4, "global_batch": 12}, "not divisible by micro-batch 4 x dp 2"),
    ({"tp": 2, "nproc": 2}, "no tensor/pipeline-parallel implementation"),
    ({"precision": "bf16"}, "needs a GPU"),
    ({"objective": "causal"}, "encoder-decoder: use --objective span"),
    ({"model": "gpt2-tiny"}, "decoder-only: use --objective causal"),
    ({"recompute": "selective"}, "use none or full"),
    ({"engine": "ddp", "offload_optimizer": "cpu"}, "optimizer offload needs DeepSpeed"),
    ({"steps": 0}, "--steps must be >= 1"),
])
def test_validation_errors(changes, message):
    with pytest.raises(ScalestudyError, match=message.replace("(", r"\(")):
        TrainConfig(**changes).validate(cuda=False)


def test_layout_derives_accumulation():
    _, strategy, workload, layout = TrainConfig(nproc=2, micro_batch=2, global_batch=16).validate()
    assert (layout.dp, layout.grad_accum, workload.global_batch) == (2, 4, 16)
    assert strategy.precision == "fp32"
    assert TrainConfig(nproc=2, micro_batch=3).effective_global_batch() == 6


def test_schedule_warmup_then_cosine_to_floor():
    cfg = TrainConfig(steps=110, warmup_steps=10, min_lr_ratio=0.1, decay="cosine")
    ramp = [lr_multiplier(s, cfg) for s in range(10)]
    assert ramp == pytest.approx([(s + 1) / 10 for s in range(10)])
    assert lr_multiplier(10, cfg) == pytest.approx(1.0)
    assert lr_multiplier(60, cfg) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert lr_multiplier(110, cfg) == pytest.approx(0.1)
    linear = cfg.replace(decay="linear")
    assert lr_multiplier(60, linear) == pytest.approx(0.1 + 0.9 * 0.5)


def test_cluster_commands_name_nodes_ranks_and_config(tmp_path):
    cfg = TrainConfig(nnodes=4, nproc=8, output=str(tmp_path / "run"))
    text = launch_commands(cfg)
    assert "torchrun --nnodes 4 --nproc-per-node 8 --rdzv-backend c10d" in text
    assert "#SBATCH --nodes=4" in text and "#SBATCH --gpus-per-node=8" in text
    assert f"--config {tmp_path / 'run' / 'train_config.yaml'}" in text
    assert "srun" in text and "$SLURM_JOB_ID" in text
