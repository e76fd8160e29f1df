"""Study spec: grid expansion, filtering of invalid combinations, validation errors, stable trial identity."""

from __future__ import annotations

import pytest

from scalestudy.errors import ScalestudyError
from scalestudy.study.spec import Trial, load_spec, parse_spec


def test_grid_is_the_product_of_lists_and_strategies():
    spec = parse_spec({"model": ["t5-tiny", "t5-mini"], "nproc": [1, 2], "lr": [1e-3, "3e-3"],
                       "strategies": [{"engine": "deepspeed", "zero": [0, 1, 2, 3]}, {"engine": "fsdp", "zero": 3}]})
    assert len(spec.trials) == 2 * 2 * 2 * 5
    assert {t.lr for t in spec.trials} == {1e-3, 3e-3}  # YAML's "3e-3" string read as a number
    assert {(t.engine, t.zero) for t in spec.trials} == {("deepspeed", z) for z in range(4)} | {("fsdp", 3)}
    assert len({t.trial_id for t in spec.trials}) == len(spec.trials)


def test_invalid_combinations_are_filtered_with_reasons():
    spec = parse_spec({"model": "t5-tiny", "engine": "fsdp", "zero": [1, 2, 3], "nproc": [1, 3],
                       "global_batch": 4, "micro_batch": 2})
    # fsdp has no zero 1; 4 sequences do not split into micro-batch 2 x dp 3
    assert {(t.zero, t.nproc) for t in spec.trials} == {(2, 1), (3, 1)}
    assert len(spec.skipped) == 4
    assert any("engine fsdp supports zero stage 2, 3, not 1" in s for s in spec.skipped)
    assert any("global_batch 4 is not divisible by micro_batch 2 x dp 3" in s for s in spec.skipped)


def test_include_adds_trials_that_inherit_the_grid():
    spec = parse_spec({"model": "t5-tiny", "nproc": [1, 2], "zero": 0, "steps": 5,
                       "include": [{"engine": "ddp", "zero": 1, "memory_limit_bytes": 10**9, "timeout_s": 2}]})
    extra = [t for t in spec.trials if t.engine == "ddp"]
    assert len(spec.trials) == 3 and len(extra) == 1
    assert extra[0].nproc == 1 and extra[0].steps == 5 and extra[0].memory_limit_bytes == 10**9


def test_identity_is_stable_and_ignores_run_control():
    a = parse_spec({"model": "t5-tiny", "zero": 2, "timeout_s": 10}).trials[0]
    b = parse_spec({"zero": 2, "model": "t5-tiny", "timeout_s": 999, "memory_limit_bytes": 5 * 10**8}).trials[0]
    c = parse_spec({"model": "t5-tiny", "zero": 2, "lr": 2e-3}).trials[0]
    assert a.trial_id == b.trial_id != c.trial_id
    assert len(a.trial_id) == 16
    # the same hash across processes and versions of Python: it is sha256 of sorted JSON, not hash()
    assert Trial.from_dict(a.to_dict()).trial_id == a.trial_id
    assert parse_spec({"model": "t5-tiny"}).trials[0].trial_id == "137d72a8990d9e74"  # pinned: a change would orphan existing stores


@pytest.mark.parametrize("raw, message", [
    ({"model": "t5-tiny", "zero": "two"}, "zero must be an integer"),
    ({"model": "t5-tiny", "bogus": 1}, "unknown key(s) bogus"),
    ({"model": "t5-tiny", "strategies": [{"engine": "deepspeed", "nproc": 2}]}, "unknown key 'nproc'"),
    ({"model": "t5-tiny", "engine": "fsdp", "zero": 1}, "no valid trial in the grid"),
    ({"model": "no-such-model"}, "unknown model"),
    ({"model": "t5-tiny", "executor": "k8s"}, "executor must be one of local, slurm"),
    ({"model": "t5-tiny", "nproc": []}, "nproc is an empty list"),
    ({"model": "t5-tiny", "train_options": {"lr": 1}}, "train_options may not set lr"),
    ({"model": "t5-tiny", "steps": 3, "warmup": 3}, "no valid trial"),
    ([1, 2], "must be a YAML mapping"),
])
def test_bad_specs_raise_one_line_errors(raw, message):
    with pytest.raises(ScalestudyError, match=None) as info:
        parse_spec(raw)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_load_spec_errors(tmp_path):
    with pytest.raises(ScalestudyError, match="study spec not found"):
        load_spec(tmp_path / "none.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [t5-tiny\n")
    with pytest.raises(ScalestudyError, match="invalid YAML at line"):
        load_spec(bad)


def test_examples_are_valid():
    from pathlib import Path

    root = Path(__file__).parents[2] / "examples"
    cpu = load_spec(root / "study-cpu.yaml")
    cluster = load_spec(root / "study-cluster-mt5.yaml")
    assert cpu.executor == "local" and len(cpu.trials) == 2 * 7 * 2
    assert cluster.executor == "slurm" and cluster.device == "a100-40gb"
    assert {t.model for t in cluster.trials} == {"mt5-base", "mt5-large", "mt5-xl", "mt5-xxl"}
    assert {t.nodes for t in cluster.trials} == {1, 2, 4, 8} and {t.zero for t in cluster.trials} == {1, 2, 3}


def test_paths_in_a_spec_resolve_against_its_directory_not_the_cwd(tmp_path, monkeypatch):
    """Trials run in their own directory: every file a spec names must reach them as an absolute path, taken
    against the spec's directory (as a reader of the YAML expects), whatever the runner's cwd."""
    import json
    from pathlib import Path

    from scalestudy.search.hyperparams import load_search
    from scalestudy.specs.hardware import get_device
    from scalestudy.specs.hf_config import to_hf_config
    from scalestudy.specs.presets import get_model

    project = tmp_path / "project"
    (project / "models").mkdir(parents=True)
    (project / "models" / "config.json").write_text(json.dumps(to_hf_config(get_model("t5-tiny"))))
    profile = Path(__file__).parents[2] / "src/scalestudy/specs/hardware/local-cpu.yaml"
    (project / "cpu.yaml").write_text(profile.read_text())
    (project / "specs").mkdir()
    spec = project / "specs" / "spec.yaml"
    spec.write_text("model: [t5-tiny, ../models/config.json]\nobjective: knowledge\ndevice: ../cpu.yaml\n"
                    "data: [../corpus.txt, hf:wiki]\n"
                    "train_options: {lexicon: lex.txt, tokenizer: /abs/tok.json}\n"
                    "include: [{model: ../models}]\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    study = load_spec(Path("../project/specs/spec.yaml"))
    config = str(project / "models" / "config.json")
    assert {t.model for t in study.trials} == {"t5-tiny", config, str(project / "models")}
    assert study.device == str(project / "cpu.yaml") and get_device(study.device).name
    assert study.data == (str(project / "corpus.txt"), "hf:wiki")
    options = study.trials[0].options()
    assert options == {"lexicon": str(project / "specs" / "lex.txt"), "tokenizer": "/abs/tok.json"}
    assert parse_spec(study.source).trials == study.trials  # the stored (resolved) spec re-parses anywhere

    search = project / "specs" / "search.yaml"
    search.write_text("model: ../models/config.json\ndata: ../corpus.txt\n"
                      "search: {budget_tokens: 4000, target_model: ../models/config.json}\n")
    found = load_search(Path("../project/specs/search.yaml"))
    assert found.models == [config] and found.config.target_model == config
    assert found.study.data == (str(project / "corpus.txt"),)
    # a misspelt preset stays as typed in the error, not turned into a path
    with pytest.raises(ScalestudyError, match="'t5-tiyn'"):
        parse_spec({"model": "t5-tiyn"})


def test_tp_pp_axes_keep_the_layouts_train_runs_and_filter_the_rest_with_a_reason():
    spec = parse_spec({"model": "llama-tiny", "objective": "causal", "target_len": 0, "nproc": 2,
                       "engine": ["deepspeed", "fsdp"], "zero": [0, 3], "tp": [1, 2]})
    labels = [t.strategy.label for t in spec.trials]
    assert "fsdp-z3 tp2 pp1 mb1 fp32" in labels and "ds-z0 tp1 pp1 mb1 fp32" in labels
    assert not any(label.startswith("ds-") and " tp2 " in label for label in labels)
    assert any("tp/pp > 1 run on FSDP2" in s for s in spec.skipped)


LLAMA_2RANKS = {"model": "llama-tiny", "objective": "causal", "target_len": 0, "nproc": 2, "engine": "ddp",
                "global_batch": 8}


def test_specs_without_execution_keys_keep_their_trial_ids():
    """Pinned before the strategy execution keys became axes: stores of existing studies must not be orphaned."""
    grid = parse_spec({"model": "llama-tiny", "objective": "causal", "nproc": 2, "engine": "ddp", "zero": 0,
                       "tp": [1, 2], "pp": [1, 2], "global_batch": 8, "micro_batch": 1})
    assert [t.trial_id for t in grid.trials] == ["5e508f2add68e650", "c668e18eb383fb6b", "a28b082fa3cca736"]
    mixed = parse_spec({"model": "t5-tiny", "nproc": [1, 2], "train_options": {"weight_decay": 0.1},
                        "strategies": [{"engine": "deepspeed", "zero": [0, 3]}, {"engine": "fsdp", "zero": 2}]})
    assert [t.trial_id for t in mixed.trials] == ["3ceb1ca010af9435", "b3f08b0129cf794f", "ed619a0abcc46801",
                                                  "f95fe2e37a1f4ad1", "7b1aaa5a7fc9f16b", "fb623bc6f04ae988"]
    # the keys at their defaults, written out, are the same trials
    explicit = parse_spec({**grid.source, "attention": "flash", "stage_layers": "",
                           "sequence_parallel": True, "overlap_grad_comm": True, "pp_schedule": "1f1b",
                           "virtual_stages": 1})
    assert [t.trial_id for t in explicit.trials] == [t.trial_id for t in grid.trials]


def test_execution_keys_are_axes_that_reach_the_run_config():
    spec = parse_spec({**LLAMA_2RANKS, "micro_batch": 1, "strategies": [
        {"tp": 2, "sequence_parallel": [True, False], "overlap_grad_comm": False},
        {"pp": 2, "pp_schedule": ["1f1b", "gpipe", "interleaved"], "virtual_stages": [1, 2], "attention": "eager"},
        {"pp": 2, "stage_layers": [[1, 1], "2,0"]},
        {"tp": 1, "sequence_parallel": False}]})
    got = {t.strategy.label: t for t in spec.trials}
    assert sorted(got) == ["ddp tp1 pp2 mb1 fp32 attn-eager", "ddp tp1 pp2 mb1 fp32 attn-eager gpipe",
                           "ddp tp1 pp2 mb1 fp32 stages 1/1", "ddp tp2 pp1 mb1 fp32 no-sp sync-grad",
                           "ddp tp2 pp1 mb1 fp32 sync-grad"]
    assert len({t.trial_id for t in spec.trials}) == len({t.label for t in spec.trials}) == 5
    assert got["ddp tp2 pp1 mb1 fp32 no-sp sync-grad"].label == "llama-tiny ddp tp2 no-sp sync-grad ws2 mb1 gb8 lr0.001"
    run = got["ddp tp2 pp1 mb1 fp32 no-sp sync-grad"].run_config(output="out").strategy
    assert (run.tp, run.sequence_parallel, run.overlap_grad_comm) == (2, False, False)
    assert got["ddp tp1 pp2 mb1 fp32 stages 1/1"].run_config(output="out").strategy.stage_layers == (1, 1)
    reasons = "\n".join(spec.skipped)
    for reason in ("virtual_stages 2 needs pp_schedule interleaved", "interleaved pipeline schedule needs "
                   "virtual_stages >= 2", "2 layers cannot fill pp 2 x virtual_stages 2",
                   "stage_layers 2,0", "sequence_parallel only applies with tp > 1"):
        assert reason in reasons
    # sequence parallelism splits the sequence over tp: a length it does not divide is filtered, as train refuses
    odd = parse_spec({**LLAMA_2RANKS, "tp": 2, "seq_len": [64, 63]})
    assert [t.seq_len for t in odd.trials] == [64] and "not divisible" in odd.skipped[0]


@pytest.mark.parametrize("raw, message", [
    ({"sequence_parallel": "yes"}, "sequence_parallel must be true or false"),
    ({"attention": "fast"}, "unknown attention 'fast' (choose from flash, eager)"),
    ({"pp_schedule": ["1f1b", "zb"]}, "unknown pp_schedule 'zb'"),
    ({"virtual_stages": True}, "virtual_stages must be an integer"),
    ({"stage_layers": "a,b"}, "stage_layers must be layers per pipeline stage"),
    ({"train_options": {"pp_schedule": "gpipe"}}, "train_options may not set pp_schedule"),
])
def test_bad_execution_keys_raise_one_line_errors(raw, message):
    with pytest.raises(ScalestudyError) as info:
        parse_spec({**LLAMA_2RANKS, **raw})
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_trial_with_execution_keys_is_recorded_and_read_back(tmp_path):
    """The store keeps its columns: the keys travel in trial_json and the strategy label, and come back."""
    import json
    from pathlib import Path

    from scalestudy.launch.process import TrialResult
    from scalestudy.study.store import Store
    from scalestudy.study.trials import trial_command, trial_row

    spec = parse_spec({**LLAMA_2RANKS, "tp": 2, "sequence_parallel": False,
                       "command_template": "echo {sequence_parallel} {pp_schedule}"})
    trial = spec.trials[0]
    assert trial_command(spec, trial, tmp_path)[1:] == ["False", "1f1b"]
    result = TrialResult(trial.trial_id, Path(tmp_path), "OK", "", "", 0, False, False, 0.0, 1.0, ["x"],
                         {"median_step_s": 0.5})
    row, _ = trial_row(spec, trial, result, {})
    with Store(tmp_path / "study.sqlite", create=True) as store:
        store.record_trial(row)
        (back,) = store.trials("OK")
    stored = json.loads(back["trial_json"]) if isinstance(back["trial_json"], str) else back["trial_json"]
    assert Trial.from_dict(stored) == trial and "no-sp" in back["strategy"]


def test_trials_carry_the_checkpoint_early_stop_train_runs():
    """A trial's strategy (what study/predict.py prices and its run config carries) has recompute_early_stop on,
    as `train` runs it on every engine (specs/run.as_trained); a spec may say on (YAML's unquoted on: true), not off."""
    spec = parse_spec({"model": "t5-tiny", "nproc": 2, "recompute": "full",
                       "strategies": [{"engine": "deepspeed", "zero": 3, "recompute_early_stop": True},
                                      {"engine": "ddp", "zero": 0}]})
    assert {t.strategy.recompute_early_stop for t in spec.trials} == {"on"}
    # and the eager HF kernels and T5's own loss train runs (specs/run.TRAIN_SOFTWARE), not fused kernels
    assert {(t.strategy.kernels, t.strategy.cross_entropy, t.strategy.optimizer_loop) for t in spec.trials} == {
        ("eager", "hf", "foreach")}
    assert spec.trials[0].run_config(output="out").strategy.recompute_early_stop == "on"
    with pytest.raises(ScalestudyError, match="leave it engine or on"):
        parse_spec({"model": "t5-tiny", "strategies": [{"engine": "ddp", "recompute_early_stop": "off"}]})
