"""What `scalestudy plan --emit` writes is exactly what runs: the emitted single-node script trains, and the engine
settings the run used (DIR/ds_config.json, the JSON handed to deepspeed.initialize; fsdp/ddp_config.json, the
arguments of fully_shard / DistributedDataParallel) equal the emitted files; the multi-node script runs for real as
two torchrun "nodes" (one c10d rendezvous on 127.0.0.1, one rank each)."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from scalestudy.cli import main

pytestmark = pytest.mark.dist

SETTINGS = {"deepspeed": "ds_config.json", "fsdp": "fsdp_config.json", "ddp": "ddp_config.json"}


@pytest.fixture(scope="module")
def tokenizer(bundled_tokenizer):
    """The bundled corpus's tokenizer (trained once per session, tests/conftest.py); passing it to `plan --emit`
    also checks it is carried."""
    return bundled_tokenizer


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _plan_emit(out: Path, tokenizer: str, *extra: str) -> dict:
    try:
        main(["plan", "--model", "t5-tiny", "--gpu", "local-cpu", "--seq-len", "32", "--target-len", "8",
              "--train-steps", "2", "--micro-batch", "2", "--tokenizer", tokenizer,
              "--emit", str(out), "--json", *extra])
    except SystemExit as exc:
        assert exc.code == 0
    return json.loads((out / "plan.json").read_text())


def _env() -> dict:
    return dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false",
                PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")


def _run_two_nodes(emit_dir: Path, cwd: Path, run_id: str) -> Path:
    """Start the emitted multi-node script twice (two "nodes" on one c10d rendezvous); the one run's summary.json."""
    env = dict(_env(), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), RUN_ID=run_id)
    nodes = [subprocess.Popen(["bash", str(emit_dir / "launch_multi_node.sh")], env=env, cwd=cwd,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    outputs = [node.communicate(timeout=300)[0] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], "\n".join(o[-2000:] for o in outputs)
    summaries = list(cwd.glob("runs/*/summary.json"))
    assert len(summaries) == 1, outputs
    return summaries[0]


# DDP's emitted settings (ZeroRedundancyOptimizer at zero 1): the two-node run below, through the multi-node script.
@pytest.mark.parametrize("engine, zero, ranks, offload", [("deepspeed", 2, 2, "none"), ("fsdp", 3, 1, "cpu")])
def test_emitted_single_node_script_runs_the_emitted_settings(tmp_path, capsys, tokenizer, engine, zero, ranks,
                                                              offload):
    emit_dir = tmp_path / "emit"
    plan = _plan_emit(emit_dir, tokenizer, "--gpus-per-node", str(ranks), "--global-batch", "4", "--engine", engine,
                      "--zero", str(zero), "--offload-optimizer", offload, "--offload-params", offload)
    capsys.readouterr()
    run_dir = tmp_path / "run"
    proc = subprocess.run(["bash", str(emit_dir / "launch_single_node.sh"), "--output", str(run_dir),
                           "--no-progress", "--warmup", "0"], env=_env(), cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    # FSDP2's 449-character UserWarning that a T5 block 'returned a view tensor' (its position bias; nothing writes
    # block outputs in place) is noise, filtered on every fsdp path: a plain `train --engine fsdp` printed it per rank
    assert "returned a view tensor" not in proc.stdout + proc.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["steps"] == 2 and summary["world_size"] == ranks
    assert summary["strategy"]["engine"] == engine and summary["strategy"]["zero"] == zero
    assert summary["strategy"]["offload_params"] == offload  # FSDP2 CPUOffloadPolicy for the fsdp case
    assert summary["grad_accum"] == plan["layout"]["grad_accum"] == 4 // (2 * ranks)
    used = json.loads((run_dir / SETTINGS[engine]).read_text())
    assert used == json.loads((emit_dir / SETTINGS[engine]).read_text())
    from scalestudy.specs.run import RunConfig

    assert RunConfig.from_yaml(run_dir / "train_config.yaml").data.tokenizer == tokenizer  # carried by --emit


def test_emitted_multi_node_script_runs_two_nodes_through_one_rendezvous(tmp_path, capsys, tokenizer):
    emit_dir = tmp_path / "emit"
    _plan_emit(emit_dir, tokenizer, "--nodes", "2", "--gpus-per-node", "1", "--global-batch", "4",
               "--engine", "ddp", "--zero", "1", "--offload-optimizer", "none", "--tp", "1", "--pp", "1")
    capsys.readouterr()
    summary_file = _run_two_nodes(emit_dir, tmp_path, "emitted-2-nodes")
    summary = json.loads(summary_file.read_text())
    assert summary["world_size"] == 2 and summary["dp"] == 2 and summary["steps"] == 2
    assert summary["strategy"]["engine"] == "ddp" and summary["strategy"]["zero"] == 1
    used = json.loads((summary_file.parent / "ddp_config.json").read_text())
    assert used == json.loads((emit_dir / "ddp_config.json").read_text()) and used["zero_redundancy_optimizer"]
    from scalestudy.specs.run import RunConfig

    recorded = RunConfig.from_yaml(summary_file.parent / "train_config.yaml")  # the run records its configuration
    assert recorded.replace(output="x") == RunConfig.from_yaml(emit_dir / "train_config.yaml").replace(output="x")


MIXED_CPU_CLUSTER = """\
name: cpu-fast-slow
gpus_per_node: 1
groups:                     # two one-rank "nodes"; the second measured at a quarter of the first's speed
  - {device: local-cpu, nodes: 1}
  - {device: local-cpu, nodes: 1, speed: 0.25}
"""
LLAMA_4_LAYERS = {"model_type": "llama", "hidden_size": 128, "intermediate_size": 384, "num_hidden_layers": 4,
                  "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 8192,
                  "max_position_embeddings": 256, "_name_or_path": "llama-4-layers"}  # llama-tiny with 4 blocks


def test_mixed_cluster_plan_emits_uneven_stage_layers_that_train_runs(tmp_path, capsys, tokenizer):
    """A cluster YAML mixing a fast and a slow node: the planner's pipeline gives the fast stage more blocks, the
    estimate beats the even split, and the emitted multi-node script trains with exactly those stage layers."""
    from scalestudy.costmodel.estimate import estimate
    from scalestudy.specs.hardware import load_cluster
    from scalestudy.specs.presets import get_model
    from scalestudy.specs.strategy import Strategy, Workload

    (tmp_path / "cluster.yaml").write_text(MIXED_CPU_CLUSTER)
    (tmp_path / "llama").mkdir()
    (tmp_path / "llama" / "config.json").write_text(json.dumps(LLAMA_4_LAYERS))
    emit_dir = tmp_path / "emit"
    try:
        main(["plan", "--model", str(tmp_path / "llama"), "--cluster", str(tmp_path / "cluster.yaml"),
              "--seq-len", "32", "--global-batch", "4", "--micro-batch", "2", "--pp", "2", "--engine", "fsdp",
              "--train-steps", "2", "--tokenizer", tokenizer, "--emit", str(emit_dir), "--json"])
    except SystemExit as exc:
        assert exc.code == 0
    capsys.readouterr()
    plan = json.loads((emit_dir / "plan.json").read_text())
    layers = plan["strategy"]["stage_layers"]
    assert plan["rank"] == 1 and layers[0] > layers[1] and sum(layers) == 4
    stages = plan["estimate"]["stages"]["per_stage"]
    assert [s["device"] for s in stages] == ["local-cpu", "local-cpu@0.25x"]
    cluster, spec = load_cluster(tmp_path / "cluster.yaml"), get_model(str(tmp_path / "llama"))
    even = estimate(spec, cluster, Strategy.from_dict({**plan["strategy"], "stage_layers": []}),
                    Workload(global_batch=4, seq_len=32))
    assert plan["estimate"]["time"]["step_s"] < even.step_s
    summary = json.loads(_run_two_nodes(emit_dir, tmp_path, "mixed-2-nodes").read_text())
    assert summary["status"] == "ok" and summary["world_size"] == 2 and summary["steps"] == 2
    assert summary["strategy"]["stage_layers"] == layers and summary["strategy"]["pp"] == 2


def test_emitted_cross_node_tp_trains_across_two_nodes(tmp_path, capsys, tokenizer):
    """A tensor-parallel group that spans nodes (--tp 2 on one-rank nodes: plan prices it over the NICs, as estimate
    does) is emitted as a run `train` accepts: the two-node script trains it with tp 2 over both "nodes"."""
    (tmp_path / "llama").mkdir()
    (tmp_path / "llama" / "config.json").write_text(json.dumps(LLAMA_4_LAYERS))
    emit_dir = tmp_path / "emit"
    try:
        main(["plan", "--model", str(tmp_path / "llama"), "--gpu", "local-cpu", "--nodes", "2", "--gpus-per-node", "1",
              "--seq-len", "32", "--global-batch", "2", "--micro-batch", "2", "--tp", "2", "--pp", "1",
              "--engine", "fsdp", "--train-steps", "2", "--tokenizer", tokenizer, "--emit", str(emit_dir), "--json"])
    except SystemExit as exc:
        assert exc.code == 0
    capsys.readouterr()
    plan = json.loads((emit_dir / "plan.json").read_text())
    assert plan["strategy"]["tp"] == 2 and plan["cluster"]["nodes"] == 2
    summary = json.loads(_run_two_nodes(emit_dir, tmp_path, "cross-node-tp").read_text())
    assert summary["status"] == "ok" and summary["world_size"] == 2 and summary["steps"] == 2
    assert summary["strategy"]["tp"] == 2 and summary["dp"] == 1
