"""What `scalestudy plan --emit` writes really runs: DeepSpeed accepts the JSON, the launch script trains."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from scalestudy.cli import main

pytestmark = pytest.mark.dist

DS_CHECK = r"""
import json, sys
import torch, deepspeed
from scalestudy.engine.models import build_model
from scalestudy.specs.model import get_model

cfg = json.load(open(sys.argv[1]))
model = build_model(get_model("t5-tiny"), seed=0)
engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
assert engine.train_batch_size() == cfg["train_batch_size"]
assert engine.train_micro_batch_size_per_gpu() == cfg["train_micro_batch_size_per_gpu"]
assert engine.gradient_accumulation_steps() == cfg["gradient_accumulation_steps"]
assert engine.zero_optimization_stage() == cfg["zero_optimization"]["stage"]
g = torch.Generator().manual_seed(0)
mb = cfg["train_micro_batch_size_per_gpu"]
ids = torch.randint(2, 8192, (mb, 32), generator=g)
labels = torch.randint(2, 8192, (mb, 8), generator=g)
losses = []
for _ in range(3 * cfg["gradient_accumulation_steps"]):
    loss = engine(input_ids=ids, labels=labels).loss
    engine.backward(loss)
    engine.step()
    losses.append(loss.item())
assert losses[-1] < losses[0], losses  # the same batch again: the optimizer really steps
print("DS_OK", engine.global_steps, type(optimizer).__name__, losses[0], losses[-1])
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _plan_emit(tmp: Path, *extra: str) -> dict:
    try:
        main(["plan", "--model", "t5-tiny", "--gpu", "local-cpu", "--nodes", "1", "--seq-len", "32",
              "--target-len", "8", "--emit", str(tmp), "--json", *extra])
    except SystemExit as exc:
        assert exc.code == 0
    return json.loads((tmp / "plan.json").read_text())


def test_emitted_deepspeed_json_is_accepted_by_deepspeed_initialize(tmp_path, capsys):
    plan = _plan_emit(tmp_path, "--gpus-per-node", "1", "--global-batch", "4", "--engine", "deepspeed",
                      "--zero", "2", "--offload", "none", "--micro-batch", "2")
    capsys.readouterr()
    assert plan["strategy"]["engine"] == "deepspeed" and plan["strategy"]["zero"] == 2
    cfg = json.loads((tmp_path / "ds_config.json").read_text())
    assert cfg["gradient_accumulation_steps"] == 2 and cfg["train_batch_size"] == 4
    env = dict(os.environ, DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1", RANK="0", LOCAL_RANK="0", WORLD_SIZE="1",
               LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    env.setdefault("TORCH_EXTENSIONS_DIR", str(Path.home() / ".cache" / "torch_extensions"))
    proc = subprocess.run([sys.executable, "-c", DS_CHECK, str(tmp_path / "ds_config.json")], env=env,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "DS_OK 3 DeepSpeedZeroOptimizer" in proc.stdout


def test_emitted_launch_script_runs_scalestudy_train(tmp_path, capsys):
    emit_dir = tmp_path / "emit"
    plan = _plan_emit(emit_dir, "--gpus-per-node", "2", "--global-batch", "4", "--train-steps", "2")
    capsys.readouterr()
    run_dir = tmp_path / "run"
    env = dict(os.environ, OMP_NUM_THREADS="1", PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    proc = subprocess.run(["bash", str(emit_dir / "launch_single_node.sh"), "--output", str(run_dir),
                           "--no-progress", "--warmup", "0"], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["steps"] == 2 and summary["world_size"] == 2
    assert summary["strategy"] == plan["strategy"]
    assert summary["global_batch"] == 4 and summary["grad_accum"] == plan["layout"]["grad_accum"]
