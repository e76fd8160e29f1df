"""Emitted files for a strategy: DeepSpeed JSON, FSDP/DDP settings, train config, launch scripts (pure checks)."""

import json

import pytest
import yaml

from scalestudy.engine.config import TrainConfig
from scalestudy.plan.emit import deepspeed_config, emit, train_options, trainable
from scalestudy.specs.model import get_model
from scalestudy.specs.strategy import Strategy, Workload


def test_deepspeed_config_keys_follow_the_strategy():
    s = Strategy(engine="deepspeed", zero=3, offload_optimizer="cpu", offload_params="cpu", micro_batch=4,
                 precision="fp16", recompute="full")
    cfg = deepspeed_config(s, Workload(256, 512, 128), dp=32, grad_accum=2)
    assert (cfg["train_batch_size"], cfg["train_micro_batch_size_per_gpu"], cfg["gradient_accumulation_steps"]) == \
        (256, 4, 2)
    z = cfg["zero_optimization"]
    assert z["stage"] == 3 and z["offload_optimizer"]["device"] == "cpu" and z["offload_param"]["device"] == "cpu"
    assert cfg["fp16"]["enabled"] and not cfg["bf16"]["enabled"]
    assert cfg["optimizer"]["type"] == "AdamW" and "torch_adam" not in cfg["optimizer"]["params"]
    z0 = deepspeed_config(Strategy(zero=0, precision="fp32"), Workload(8, 64, 16), dp=2, grad_accum=4, cpu=True)
    assert z0["zero_optimization"] == {"stage": 0} and z0["optimizer"]["params"]["torch_adam"] is True
    with pytest.raises(AssertionError):
        deepspeed_config(Strategy(micro_batch=3), Workload(8, 64, 16), dp=2, grad_accum=1)


def test_emit_writes_a_train_config_that_train_accepts(tmp_path):
    model = get_model("t5-tiny")
    s = Strategy(engine="fsdp", zero=3, micro_batch=2, precision="fp32", recompute="full")
    w = Workload(8, 64, 16)
    paths = emit(tmp_path, model, s, w, dp=2, grad_accum=2, gpus_per_node=2, nnodes=1, cpu=True, steps=5)
    assert set(paths) == {"fsdp_config.json", "train_config.yaml", "launch_single_node.sh", "launch_multi_node.sh",
                          "launch_slurm.sbatch"}
    fsdp = json.loads(paths["fsdp_config.json"].read_text())
    assert fsdp["reshard_after_forward"] is True and fsdp["gradient_accumulation_steps"] == 2
    cfg = TrainConfig.from_dict(yaml.safe_load(paths["train_config.yaml"].read_text()))
    spec, strategy, workload, layout = cfg.validate(cuda=False)
    assert strategy == s and workload.global_batch == 8 and (layout.dp, layout.grad_accum) == (2, 2)
    single = paths["launch_single_node.sh"].read_text()
    assert "export OMP_NUM_THREADS" in single and "export DS_ACCELERATOR" in single
    assert paths["launch_single_node.sh"].stat().st_mode & 0o111
    assert not list(tmp_path.glob("*.tmp"))


def test_trainable_names_what_train_cannot_run():
    model, w = get_model("mt5-xxl"), Workload(256, 512, 128)
    ok = train_options(model, Strategy(engine="deepspeed", zero=2, micro_batch=4), w, nproc=8, nnodes=4)
    assert trainable(ok, cuda=True) is None
    tp = train_options(model, Strategy(tp=2, micro_batch=4), w, nproc=8, nnodes=4)
    assert "tp/pp" in trainable(tp, cuda=True)
    sel = train_options(model, Strategy(recompute="selective", micro_batch=4), w, nproc=8, nnodes=4)
    assert "selective" in trainable(sel, cuda=True)
    assert "GPU" in trainable(ok, cuda=False)  # bf16 on these CPUs is refused
