"""Every command that takes --model takes a config.json (file or folder) as well as a preset, and passes the path on
(never the config's display name) wherever a later process looks the model up. In-process, table-driven."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from scalestudy.costmodel.params import param_count
from scalestudy.specs.presets import get_model
from _cli import run_cli as _cli

CONFIG = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 8192, "max_position_embeddings": 256,
          "attention_bias": True, "_name_or_path": "my-llama"}  # the name is a label, not a preset or a path
CLUSTER = ["--gpu", "a100-40gb", "--nodes", "1", "--gpus-per-node", "2", "--global-batch", "8", "--seq-len", "64"]


@pytest.fixture
def model_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative paths, as a user types them
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "config.json").write_text(json.dumps(CONFIG))
    return tmp_path / "mine"


@pytest.mark.parametrize("ref", ["mine", "mine/config.json"])
def test_estimate_and_plan_take_a_config(model_dir, capsys, ref):
    code, out, err = _cli(capsys, ["estimate", "--model", ref, *CLUSTER, "--engine", "deepspeed", "--zero", "2",
                                   "--micro-batch", "2", "--json"])
    assert code == 0, err
    assert json.loads(out)["params_total"] == param_count(get_model(str(model_dir))) == (
        # embedding + head, 2 blocks (q, o; k, v; gate/up/down; 2 norms; q,k,v,o biases), final norm
        2 * 8192 * 64 + 2 * (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 128 + 2 * 64 + (64 + 32 + 32 + 64)) + 64)
    code, out, err = _cli(capsys, ["plan", "--model", ref, *CLUSTER, "--top", "1", "--emit", "emitted"])
    assert code == 0, err
    emitted = yaml.safe_load((model_dir.parent / "emitted" / "train_config.yaml").read_text())
    assert get_model(emitted["model"]["source"]).ref == str((model_dir / "config.json").resolve())


def test_train_passes_the_path_to_its_workers(model_dir, capsys):
    code, out, err = _cli(capsys, ["train", "--model", "mine/config.json", "--nproc", "1", "--steps", "4",
                                   "--global-batch", "2", "--micro-batch", "2", "--seq-len", "64", "--objective",
                                   "causal", "--output", "run", "--print-launch"])
    assert code == 0, err
    written = yaml.safe_load((model_dir.parent / "run" / "train_config.yaml").read_text())
    assert Path(written["model"]["source"]) == (model_dir / "config.json").resolve()


def test_tune_trials_get_the_path_not_the_name(model_dir):
    from scalestudy.plan.tuner import trial_run_config
    from scalestudy.specs.strategy import Strategy, Workload

    spec = get_model("mine")
    assert spec.name == "my-llama" and spec.ref == str((model_dir / "config.json").resolve())
    run = trial_run_config(spec, Strategy(engine="ddp", zero=0, micro_batch=2, precision="fp32"),
                           Workload(global_batch=2, seq_len=64, target_len=0), 1)
    assert run.model.source == spec.ref and run.model_spec() == spec


def test_study_and_search_specs_take_a_config(model_dir):
    from scalestudy.search.hyperparams import load_search
    from scalestudy.study.spec import load_spec

    study = model_dir.parent / "study.yaml"
    study.write_text("name: own\nmodel: mine/config.json\nengine: ddp\nnproc: 1\nmicro_batch: 2\nglobal_batch: 2\n"
                     "seq_len: 64\nobjective: causal\nsteps: 4\n")
    (trial,) = load_spec(study).trials
    assert get_model(trial.model) == get_model("mine")
    search = model_dir.parent / "search.yaml"
    search.write_text("name: own\nmodel: [mine, t5-tiny]\nengine: ddp\nnproc: 1\nmicro_batch: 2\nseq_len: 32\n"
                      "search: {target_model: mine/config.json, trials_per_model: 1, budget_tokens: 256,\n"
                      "  space: {lr: {low: 1.0e-4, high: 1.0e-3, log: true}, global_batch: [2]}}\n")
    spec = load_search(search)
    assert get_model(spec.config.target_model) == get_model("mine")
