"""RunConfig: one nested YAML round-trip, flat flags and legacy flat YAML, one set of defaults, derived values
resolved in one place, one-line validation errors, and the learning-rate schedule it drives."""

from __future__ import annotations

import math

import pytest
import yaml

from scalestudy.engine.backends.common import lr_multiplier
from scalestudy.errors import ScalestudyError
from scalestudy.specs.run import RunConfig, resolve_target_len
from scalestudy.specs.strategy import Strategy


def test_nested_yaml_round_trip_keeps_every_field(tmp_path):
    cfg = RunConfig().replace(model="gpt2-tiny", objective="causal", engine="fsdp", zero=3, attention="eager",
                              data=["a.txt", "b.jsonl"], lr=3e-4, warmup=0, output="x", nproc=2, global_batch=8)
    path = cfg.write_yaml(tmp_path / "run.yaml")
    text = path.read_text()
    assert set(yaml.safe_load(text)) == {"model", "strategy", "workload", "optimizer", "data", "output"}
    assert RunConfig.from_yaml(path) == cfg
    assert cfg.strategy == Strategy(engine="fsdp", zero=3, attention="eager", precision="fp32")
    assert (cfg.data.files, cfg.output.dir, cfg.output.timing_warmup) == (("a.txt", "b.jsonl"), "x", 0)


def test_flags_override_yaml_and_legacy_flat_yaml_is_read(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("engine: deepspeed\nzero: 2\nlr: 1e-3\nmicro-batch: 4\nsteps: 50\n")
    cfg = RunConfig.merged(str(path), {"steps": 7, "seed": None})
    assert (cfg.strategy.engine, cfg.strategy.zero, cfg.strategy.micro_batch) == ("deepspeed", 2, 4)
    assert (cfg.workload.steps, cfg.optimizer.seed) == (7, 1234)
    assert cfg.optimizer.lr == pytest.approx(1e-3)  # YAML 1.1 reads 1e-3 as a string; accepted as a number


def test_one_set_of_defaults_is_strategys_own_in_fp32():
    assert RunConfig().strategy == Strategy(precision="fp32")


@pytest.mark.parametrize("text, message", [
    ("stepz: 3\n", "unknown training option(s): stepz (did you mean steps.); every option: docs/run-options.md$"),
    ("files: [a.txt]\n", "unknown training option(s): files; every option: docs/run-options.md$"),
    ("a1: 1\na2: 1\na3: 1\na4: 1\na5: 1\n", "option(s): a1, a2, a3, and 2 more; every option: "),
    ("steps: many\n", "steps must be an integer"),
    ("- a\n- b\n", "must hold a mapping"),
    ("workload: {stepz: 3}\n", "unknown key 'stepz' in run-config section workload"),
    ("trainer: {steps: 3}\nmodel: {source: t5-tiny}\n", "unknown run-config section(s): trainer"),
    ("optimizer: 3\nmodel: {source: t5-tiny}\n", "section optimizer must be a mapping"),
])
def test_bad_yaml_is_one_clear_error(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ScalestudyError, match=message.replace("(", r"\(").replace(")", r"\)")):
        RunConfig.merged(str(path), {})


@pytest.mark.parametrize("changes, message", [
    ({"model": "t5-nano"}, "unknown model 't5-nano'"),
    ({"engine": "fsdp", "zero": 1}, "engine fsdp supports zero stage 2, 3, not 1"),
    ({"nproc": 3, "micro_batch": 2, "global_batch": 8}, "global_batch 8 is not divisible by micro_batch 2 x dp 3"),
    ({"tp": 2, "nproc": 2}, "tp/pp > 1 run on FSDP2"),
    ({"objective": "causal"}, "encoder-decoder: use --objective span"),
    ({"model": "gpt2-tiny"}, "decoder-only: use --objective causal"),
    ({"recompute": "selective"}, "use none or full"),
    ({"engine": "ddp", "offload_optimizer": "cpu"}, "optimizer offload needs DeepSpeed"),
    ({"steps": 0}, "steps must be >= 1"),
    ({"warmup": -1}, "warmup must be >= 0"),
    ({"data": 5}, "data must be a list of paths, got 5"),  # the key written, not the field (files)
    ({"output": 3}, "output must be a string, got 3"),
    ({"lr": 2.0}, "lr must be in (0, 1], got 2"),
    ({"min_lr_ratio": -1.0}, "min_lr_ratio must be within .0, 1., got -1"),
])
def test_validation_errors(changes, message):
    with pytest.raises(ScalestudyError, match=message.replace("(", r"\(")):
        RunConfig().replace(**changes).validate()


def test_derived_values_resolve_in_one_place():
    _, _, workload, layout = RunConfig().replace(nproc=2, micro_batch=2, global_batch=16).validate()
    assert (layout.dp, layout.grad_accum, workload.global_batch) == (2, 4, 16)
    assert RunConfig().replace(nproc=2, micro_batch=3).to_workload().global_batch == 6  # 0 -> micro x dp
    # target_len 0 = what span corruption of seq_len needs (T5's published 512 -> 114); causal: none.
    assert resolve_target_len("span", 512) == 114 and resolve_target_len("knowledge", 512, 64) == 64
    assert resolve_target_len("causal", 512, 64) == 0
    assert RunConfig().replace(seq_len=512).to_workload().target_len == 114
    gpt = RunConfig().replace(model="gpt2-tiny", objective="causal", target_len=32).resolved()
    assert gpt.workload.target_len == 0


def test_absolute_paths_keep_presets_and_resolve_files(tmp_path):
    cfg = RunConfig().replace(data=["c.txt"], tokenizer="tok.json").with_absolute_paths(tmp_path)
    assert cfg.model.source == "t5-tiny"
    assert cfg.data.files == (str(tmp_path / "c.txt"),) and cfg.data.tokenizer == str(tmp_path / "tok.json")


def test_schedule_warmup_then_cosine_to_floor():
    cfg = RunConfig().replace(steps=110, warmup_steps=10, min_lr_ratio=0.1, decay="cosine")
    ramp = [lr_multiplier(s, cfg) for s in range(10)]
    assert ramp == pytest.approx([(s + 1) / 10 for s in range(10)])
    assert lr_multiplier(10, cfg) == pytest.approx(1.0)
    assert lr_multiplier(60, cfg) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert lr_multiplier(110, cfg) == pytest.approx(0.1)
    assert lr_multiplier(60, cfg.replace(decay="linear")) == pytest.approx(0.1 + 0.9 * 0.5)


def test_run_config_settings_launcher_and_emit_import_without_torch():
    import subprocess
    import sys

    code = ("import sys; import scalestudy.specs.run, scalestudy.engine.settings, scalestudy.launch.commands, "
            "scalestudy.plan.emit; assert 'torch' not in sys.modules, 'torch imported'")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_a_cluster_file_names_a_training_option_without_reading_the_run_config(tmp_path):
    """run.py imports the cluster reader (its world-size limit): the reader's hint for `learning_rate` comes from
    the option table (run_options.py), so run.py is never imported back -- an import circle otherwise."""
    import subprocess
    import sys

    path = tmp_path / "cluster.yaml"
    path.write_text("device: a100-80gb\nnodes: 1\ngpus_per_node: 8\nlearning_rate: 3.0e-4\n")
    code = ("import sys; from scalestudy.specs.hardware import load_cluster\n"
            f"try:\n    load_cluster({str(path)!r})\nexcept Exception as e:\n    print(e)\n"
            "assert 'scalestudy.specs.run' not in sys.modules, 'the cluster reader imported the run config'")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "(learning_rate as lr: a training option of a run config" in res.stdout


def test_paths_in_a_config_file_are_taken_from_its_folder_flags_from_the_cwd(tmp_path, monkeypatch):
    (tmp_path / "cfg").mkdir()
    path = tmp_path / "cfg" / "run.yaml"
    path.write_text("data:\n  files: [corpus.txt, 'hf:wikitext:wikitext-2-raw-v1']\n  lexicon: ../lex.txt\n")
    cfg = RunConfig.merged(str(path), {"tokenizer": None})
    assert cfg.data.files == (str(tmp_path / "cfg" / "corpus.txt"), "hf:wikitext:wikitext-2-raw-v1")
    assert cfg.data.lexicon == str(tmp_path / "lex.txt")
    monkeypatch.chdir(tmp_path)
    flagged = RunConfig.merged(str(path), {"tokenizer": "tok.json"}).with_absolute_paths()
    assert flagged.data.tokenizer == str(tmp_path / "tok.json")


@pytest.mark.parametrize("model, strategy, kernels, loss, loop", [
    # HF T5 through model(**inputs).loss (its CrossEntropyLoss), torch AdamW's foreach step
    ("t5-tiny", Strategy(engine="ddp"), "eager", "hf", "foreach"),
    ("t5-tiny", Strategy(engine="fsdp", zero=3), "eager", "hf", "foreach"),
    # the hybrid backend's seq2seq_loss / causal models' ForCausalLMLoss upcast the logits: torch's loss
    ("t5-tiny", Strategy(engine="ddp", tp=2), "eager", "torch", "foreach"),
    ("gpt2-tiny", Strategy(engine="deepspeed", zero=2), "eager", "torch", "foreach"),
    # DeepSpeed ZeRO-0 in 16 bits wraps torch AdamW in FP16_UnfusedOptimizer; offloaded: DeepSpeed's CPU Adam
    ("gpt2-tiny", Strategy(engine="deepspeed", zero=0, precision="bf16"), "eager", "torch", "deepspeed-unfused"),
    ("gpt2-tiny", Strategy(engine="deepspeed", zero=0, precision="fp32"), "eager", "torch", "foreach"),
    ("gpt2-tiny", Strategy(engine="deepspeed", zero=2, offload_optimizer="cpu"), "eager", "torch", "engine"),
    # cost-model engines and values given are kept
    ("gpt2-tiny", Strategy(engine="megatron", zero=1), "engine", "engine", "engine"),
    ("t5-tiny", Strategy(engine="ddp", kernels="fused"), "fused", "hf", "foreach"),
])
def test_as_trained_writes_the_software_train_runs(model, strategy, kernels, loss, loop):
    """specs/run.TRAIN_SOFTWARE / train_software: what plan, tune and study price and plan --emit writes for a run of
    `train` (engine/models.py, backends/common.make_adamw, DeepSpeed's optimizer wrapping); train accepts it."""
    from scalestudy.specs.presets import get_model
    from scalestudy.specs.run import as_trained, check_cost_model_only

    spec = get_model(model)
    got = as_trained(strategy, spec)
    assert (got.kernels, got.cross_entropy, got.optimizer_loop) == (kernels, loss, loop)
    assert got.recompute_early_stop == ("engine" if strategy.engine == "megatron" else "on")
    if strategy.engine != "megatron" and strategy.kernels != "fused":
        check_cost_model_only(got, spec)  # no refusal of its own software


def test_run_options_doc_lists_every_flat_key_outside_strategy_with_its_place_and_default():
    """The page the unknown-option error points to: one row per flat key outside the strategy (whose fields are
    estimate's flags), with its YAML place and its default."""
    from pathlib import Path

    from scalestudy.specs.run import FLAT_KEYS, RUN_OPTIONS_DOC

    text = (Path(__file__).parents[2] / RUN_OPTIONS_DOC).read_text(encoding="utf-8")
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:4]]
            for line in text.splitlines() if line.startswith("| ") and not line.startswith("| key ")}
    defaults = RunConfig()
    expected = {}
    for key, (section, name) in FLAT_KEYS.items():
        if section == "strategy":
            continue
        value = getattr(getattr(defaults, section), name)
        shown = ("[]" if value == () else "null" if value is None else str(value).lower() if isinstance(value, bool)
                 else str(value))
        expected[key] = [f"{section}.{name}", shown]
    assert rows == expected
