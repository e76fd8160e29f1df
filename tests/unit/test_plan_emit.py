"""Emitted files: the run's config, its engine settings (the builder training uses) and launch scripts that pass
`bash -n` and shellcheck, for CPU and GPU plans, one or many nodes, and `train --print-launch`."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from scalestudy.cli import main
from scalestudy.engine.settings import deepspeed_config
from scalestudy.plan.emit import emit, trainable
from scalestudy.specs.run import RunConfig
from scalestudy.specs.strategy import Strategy, Workload

SCRIPTS = ("launch_single_node.sh", "launch_multi_node.sh", "launch_slurm.sbatch")


def check_scripts(paths) -> None:
    """Every script parses (bash -n) and is shellcheck clean (shellcheck is a CI dependency, .ci/run)."""
    assert shutil.which("shellcheck"), "shellcheck missing: apt-get install shellcheck"
    for path in paths:
        parsed = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
        assert parsed.returncode == 0, (path, parsed.stderr)
        checked = subprocess.run(["shellcheck", "--shell=bash", str(path)], capture_output=True, text=True)
        assert checked.returncode == 0, (path, checked.stdout)


def test_deepspeed_json_follows_the_run():
    run = RunConfig.build("mt5-xxl", Strategy(zero=3, offload_optimizer="cpu", offload_params="cpu", micro_batch=4,
                                             precision="fp16"), Workload(256, 512, 128), nproc=8, nnodes=4,
                          lr=2e-4, grad_clip=0.5)
    cfg = deepspeed_config(run, cuda=True)
    assert (cfg["train_batch_size"], cfg["train_micro_batch_size_per_gpu"], cfg["gradient_accumulation_steps"]) == \
        (256, 4, 2)
    z = cfg["zero_optimization"]
    assert z["stage"] == 3 and z["offload_optimizer"] == {"device": "cpu", "pin_memory": True}
    assert z["overlap_comm"] is True and cfg["fp16"]["enabled"] and "bf16" not in cfg
    assert cfg["optimizer"] == {"type": "AdamW", "params": {"lr": 2e-4, "betas": [0.9, 0.999], "eps": 1e-8,
                                                             "weight_decay": 0.01}}
    assert cfg["gradient_clipping"] == 0.5
    cpu = deepspeed_config(run.replace(offload_optimizer="none", offload_params="none", zero=2), cuda=False)
    assert cpu["zero_optimization"]["overlap_comm"] is False and "offload_optimizer" not in cpu["zero_optimization"]
    assert "optimizer" not in cpu  # (every other knob: tests/unit/test_engine_settings_parity.py)


@pytest.mark.parametrize("engine, zero, cuda, nnodes", [("fsdp", 3, False, 1), ("deepspeed", 2, True, 4),
                                                         ("ddp", 1, False, 2)])
def test_emit_writes_what_train_reads_and_clean_scripts(tmp_path, engine, zero, cuda, nnodes):
    s = Strategy(engine=engine, zero=zero, micro_batch=2, precision="bf16" if cuda else "fp32", recompute="full")
    run = RunConfig.build("t5-tiny", s, Workload(8 * nnodes, 64, 16), nproc=2, nnodes=nnodes, steps=5)
    paths = emit(tmp_path, run, cuda=cuda)
    settings_file = {"fsdp": "fsdp_config.json", "deepspeed": "ds_config.json", "ddp": "ddp_config.json"}[engine]
    assert set(paths) == {settings_file, "train_config.yaml", *SCRIPTS}
    cfg = RunConfig.from_yaml(paths["train_config.yaml"])
    spec, strategy, workload, layout = cfg.validate()
    # ... with the software train runs written in (specs/run.as_trained): checkpoint early stop, HF T5's eager
    # element-wise kernels and its own CrossEntropyLoss, torch AdamW's foreach step, SDPA's memory-efficient kernel
    # for T5's float position-bias mask, the vocabulary whole on every tp rank (lm_head replicated), DeepSpeed's
    # gradients accumulated in the compute dtype (grad_accum_dtype compute, its data_types.grad_accum_dtype)
    accum = {"grad_accum_dtype": "compute"} if engine == "deepspeed" else {}
    if engine == "ddp":  # DDP's gradients as views into its buckets (gradient_as_bucket_view)
        accum["grad_buckets"] = "view"
    assert strategy == s.replace(recompute_early_stop="on", kernels="eager", cross_entropy="hf",
                                 optimizer_loop="foreach", attention_kernel="mem-efficient", lm_head="replicated",
                                 **accum)
    assert workload.global_batch == 8 * nnodes
    assert (layout.dp, layout.grad_accum) == (2 * nnodes, 2)
    assert json.loads(paths[settings_file].read_text())["gradient_accumulation_steps"] == 2
    sbatch = paths["launch_slurm.sbatch"].read_text()
    assert ("--gpus-per-node=2" in sbatch) == cuda and ("--cpus-per-task=2" in sbatch) != cuda
    assert str(paths["train_config.yaml"].resolve()) in sbatch  # absolute: submit from any directory
    single = paths["launch_single_node.sh"].read_text()
    assert ('OMP_NUM_THREADS:-1}' in single) != cuda and paths["launch_single_node.sh"].stat().st_mode & 0o111
    assert ("$(nproc) / 2" in single) == cuda  # GPU ranks split the node's cores, CPU ranks one thread each
    check_scripts(paths[name] for name in SCRIPTS)
    assert not list(tmp_path.glob(".*.tmp"))


def test_trainable_names_what_train_cannot_run():
    w = Workload(256, 512, 128)

    def run(**strategy):
        return RunConfig.build("mt5-xxl", Strategy(micro_batch=4, **strategy), w, nproc=8, nnodes=4)

    assert trainable(run(zero=2)) is None
    assert "tp/pp" in trainable(run(tp=2))
    assert "selective" in trainable(run(recompute="selective"))
    assert trainable(run(engine="fsdp", zero=3, tp=2)) is None  # 4D parallelism runs on FSDP2
    assert trainable(run(recompute="full", recompute_early_stop="on")) is None  # what train runs
    assert "leave it engine or on" in trainable(run(recompute="full", recompute_early_stop="off"))
    # the software train runs is accepted; what it does not run is refused in one line
    assert trainable(run(zero=2, kernels="eager", cross_entropy="hf")) is None
    assert "leave it engine or eager" in trainable(run(zero=2, kernels="fused"))
    assert "hf: T5 / mT5" in trainable(run(zero=2, cross_entropy="fused"))
    assert trainable(run(zero=0, optimizer_loop="deepspeed-unfused")) is None  # FP16_UnfusedOptimizer
    assert "deepspeed-unfused" in trainable(run(zero=0, optimizer_loop="foreach"))


def test_plan_prices_the_early_stop_train_runs_and_emits_it(tmp_path, capsys):
    """plan = reality: `train` early-stops every engine's full recompute (engine/settings.activation_checkpointing),
    so plan prices a DeepSpeed candidate with early stop on (as the cost model's "engine" does for a Hugging Face
    Llama on DeepSpeed: transformers 5.x checkpoints non-reentrantly), writes `recompute_early_stop: on` into the
    emitted config, and `estimate` with the emitted config's values prints plan's step time -- less than the same run
    priced with reentrant checkpoints (off: whole blocks re-run, transformers 4.x / DeepSpeed's own checkpointing)."""
    common = ["--model", "llama-7b", "--gpu", "h100-80gb", "--gpus-per-node", "8", "--global-batch", "64",
              "--seq-len", "2048"]
    with pytest.raises(SystemExit) as exc:
        main(["plan", *common, "--engine", "deepspeed", "--zero", "3", "--recompute", "full", "--tp", "1", "--pp",
              "1", "--micro-batch", "4", "--offload-optimizer", "none", "--emit", str(tmp_path / "out")])
    assert exc.value.code in (0, None)
    capsys.readouterr()
    planned = json.loads((tmp_path / "out" / "plan.json").read_text())["estimate"]["time"]["step_s"]
    raw = yaml.safe_load((tmp_path / "out" / "train_config.yaml").read_text())["strategy"]
    assert raw["recompute_early_stop"] == "on" and (raw["engine"], raw["recompute"]) == ("deepspeed", "full")
    s = RunConfig.from_yaml(tmp_path / "out" / "train_config.yaml").strategy
    assert (raw["kernels"], raw["cross_entropy"], raw["optimizer_loop"]) == ("eager", "torch", "foreach")
    flags = [*common, "--engine", s.engine, "--zero", str(s.zero), "--micro-batch", str(s.micro_batch),
             "--recompute", s.recompute, "--precision", s.precision, "--offload-optimizer", s.offload_optimizer,
             "--offload-params", s.offload_params, "--kernels", s.kernels, "--cross-entropy", s.cross_entropy,
             "--optimizer-loop", s.optimizer_loop, "--json"]
    steps = {}
    for value in (s.recompute_early_stop, "engine", "off"):
        with pytest.raises(SystemExit) as exc:
            main(["estimate", *flags, "--recompute-early-stop", value])
        assert exc.value.code in (0, None)
        steps[value] = json.loads(capsys.readouterr().out)["time"]["step_s"]
    assert steps["on"] == pytest.approx(planned, rel=1e-12) == steps["engine"] and steps["off"] > 1.02 * planned
    # naming the early stop train runs changes nothing: the other options stay what train runs (kernels, loss, loop)
    with pytest.raises(SystemExit) as exc:
        main(["plan", *common, "--engine", "deepspeed", "--zero", "3", "--recompute", "full", "--tp", "1", "--pp",
              "1", "--micro-batch", "4", "--offload-optimizer", "none", "--recompute-early-stop", "on", "--emit",
              str(tmp_path / "named")])
    assert exc.value.code in (0, None)
    capsys.readouterr()
    assert yaml.safe_load((tmp_path / "named" / "train_config.yaml").read_text())["strategy"] == raw


def test_train_print_launch_writes_the_same_files(tmp_path, capsys):
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exc:
        main(["train", "--model", "t5-tiny", "--seq-len", "64", "--nnodes", "2", "--nproc", "8", "--micro-batch", "4",
              "--precision", "bf16", "--output", str(out), "--print-launch", "--device", "gpu", "--set",
              "weight_decay=0.1"])
    assert exc.value.code in (0, None)
    printed = capsys.readouterr().out
    assert "torchrun --nnodes 2 --nproc-per-node 8" in printed and "#SBATCH --nodes=2" in printed
    cfg = RunConfig.from_yaml(out / "train_config.yaml")
    assert cfg.workload.target_len == 14 and cfg.output.dir == str(out)  # resolved: span need of 64 tokens
    assert cfg.optimizer.weight_decay == 0.1  # --set reaches every run option
    assert json.loads((out / "ds_config.json").read_text()) == deepspeed_config(cfg, cuda=True)
    check_scripts(out / name for name in SCRIPTS)
    assert yaml.safe_load((out / "train_config.yaml").read_text())["workload"]["global_batch"] == 64
    # GPU ranks split the node's cores (torchrun's default of one thread would starve DeepSpeed's CPU Adam)
    assert all("$(nproc) / 8" in (out / name).read_text() for name in SCRIPTS)


@pytest.mark.parametrize("device", ["cpu", "gpu"])
def test_train_print_launch_renders_for_the_run_device(tmp_path, capsys, device):
    """A CPU run's scripts ask Slurm for CPUs (one per rank), not GPUs, and run gloo ranks; a GPU run's the reverse
    (the default is this machine's device, as a run here)."""
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exc:
        main(["train", "--model", "t5-tiny", "--engine", "deepspeed", "--zero", "2", "--nnodes", "2", "--nproc", "3",
              "--micro-batch", "2", "--seq-len", "64", "--output", str(out), "--print-launch", "--device", device])
    assert exc.value.code in (0, None)
    capsys.readouterr()
    sbatch = (out / "launch_slurm.sbatch").read_text()
    cuda = device == "gpu"
    assert ("#SBATCH --gpus-per-node=3" in sbatch) == cuda and ("#SBATCH --cpus-per-task=3" in sbatch) != cuda
    assert "--nproc-per-node 3" in sbatch and ("NCCL" in sbatch) == cuda and ("gloo" in sbatch) != cuda
    single = (out / "launch_single_node.sh").read_text()
    assert ('DS_ACCELERATOR="${DS_ACCELERATOR:-cpu}"' in single) != cuda
    cfg = RunConfig.from_yaml(out / "train_config.yaml")
    assert json.loads((out / "ds_config.json").read_text()) == deepspeed_config(cfg, cuda=cuda)
    check_scripts(out / name for name in SCRIPTS)


def test_plan_emit_carries_a_config_json_model_and_the_data_options(tmp_path, capsys, monkeypatch):
    from scalestudy.specs.hf_config import to_hf_config
    from scalestudy.specs.presets import PRESETS

    folder = tmp_path / "models" / "my-t5"
    folder.mkdir(parents=True)
    hf = {k: v for k, v in to_hf_config(PRESETS["t5-tiny"]).items() if k != "_name_or_path"}
    (folder / "config.json").write_text(json.dumps(hf))
    (tmp_path / "corpus.jsonl").write_text('{"body": "some text"}\n')  # records: --text-field picks their field
    from scalestudy.engine.data.bundled import corpus_path
    from scalestudy.engine.data.corpora import read_corpus
    from scalestudy.engine.data.tokenizer import save_tokenizer, train_tokenizer

    # emit checks the named inputs exist and read as train reads them: a real (small) tokenizer
    docs = read_corpus(str(corpus_path()), max_docs=2000)
    save_tokenizer(train_tokenizer(docs, vocab_size=512), tmp_path / "tok.json")
    monkeypatch.chdir(tmp_path)  # relative paths on the command line, absolute ones in the emitted config
    with pytest.raises(SystemExit) as exc:
        main(["plan", "--model", "models/my-t5/config.json", "--gpu", "a100-80gb", "--gpus-per-node", "8",
              "--global-batch", "64", "--seq-len", "128", "--engine", "fsdp", "--data", "corpus.jsonl",
              "--tokenizer", "tok.json", "--text-field", "body", "--emit", "out"])
    assert exc.value.code in (0, None)
    capsys.readouterr()
    cfg = RunConfig.from_yaml(tmp_path / "out" / "train_config.yaml")
    # The model's path is carried; its display name is the config's folder, never "config".
    assert cfg.model.source == str(folder / "config.json") and cfg.display_name == "my-t5"
    assert cfg.data.files == (str(tmp_path / "corpus.jsonl"),) and cfg.data.tokenizer == str(tmp_path / "tok.json")
    assert cfg.data.text_field == "body" and cfg.workload.target_len == 29  # span need of 128 tokens
    assert json.loads((tmp_path / "out" / "plan.json").read_text())["model"] == "my-t5"
    assert cfg.output.dir.startswith("runs/my-t5-fsdp")


def test_emitted_sbatch_runs_from_any_submit_directory(tmp_path):
    """The batch script under bash with stand-ins for srun/scontrol, from another directory (as Slurm would: it
    runs a copy of the script in the submit directory): srun gets the absolute config and the rendezvous."""
    run = RunConfig.build("t5-tiny", Strategy(micro_batch=2, precision="fp32"), Workload(8, 64, 16), nproc=2,
                          nnodes=2, steps=5)
    paths = emit(tmp_path / "emit", run, cuda=False)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "srun").write_text('#!/bin/sh\necho "$@"\n')
    (fake / "scontrol").write_text("#!/bin/sh\necho node007\n")
    for f in fake.iterdir():
        f.chmod(0o755)
    elsewhere = tmp_path / "submit-dir"
    elsewhere.mkdir()
    copy = elsewhere / "job.sbatch"  # Slurm runs a spooled copy: nothing may depend on the script's own path
    copy.write_text(paths["launch_slurm.sbatch"].read_text())
    env = {"PATH": f"{fake}:/usr/bin:/bin", "SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "node[007-008]",
           "SLURM_NNODES": "2"}
    res = subprocess.run(["bash", str(copy)], cwd=elsewhere, env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    args = res.stdout.split()
    assert args[args.index("--config") + 1] == str(paths["train_config.yaml"].resolve())
    assert "--nnodes 2 --nproc-per-node 2" in res.stdout and "--rdzv-endpoint node007:24242" in res.stdout


def test_a_users_own_files_in_the_emit_dir_are_refused_in_one_line(tmp_path):
    """plan --emit / train --output over a user's own train_config.yaml: refused, worded for one file or several."""
    from scalestudy.errors import ScalestudyError
    from scalestudy.plan.emit import EMITTED_NAMES
    from scalestudy.specs.run import check_not_users_files

    (tmp_path / "train_config.yaml").write_text("model: {source: t5-tiny}\n")
    with pytest.raises(ScalestudyError, match=r"holds train_config.yaml that .* would replace it; choose"):
        check_not_users_files(tmp_path, "--emit", EMITTED_NAMES)
    (tmp_path / "plan.json").write_text("{}")
    with pytest.raises(ScalestudyError, match=r"holds train_config.yaml, plan.json that .* would replace them;"):
        check_not_users_files(tmp_path, "--emit", EMITTED_NAMES)


def test_a_script_run_outside_scalestudys_environment_says_what_to_activate(tmp_path):
    """README's `.venv/bin/scalestudy plan --emit DIR`, then `DIR/launch_single_node.sh` in a shell without the venv
    on PATH gave bash's bare 'scalestudy: command not found': the scripts now name the environment to activate."""
    import sys

    run = RunConfig.build("t5-tiny", Strategy(micro_batch=2, precision="fp32"), Workload(8, 64, 16), nproc=2,
                          nnodes=2, steps=5)
    paths = emit(tmp_path / "emit", run, cuda=False)
    env = {"PATH": "/usr/bin:/bin", "MASTER_ADDR": "127.0.0.1"}
    for name, command in (("launch_single_node.sh", "scalestudy"), ("launch_multi_node.sh", "torchrun")):
        res = subprocess.run(["bash", str(paths[name])], env=env, capture_output=True, text=True)
        assert res.returncode == 127 and res.stdout == ""
        activate = Path(sys.prefix) / "bin" / "activate"  # named where this environment has one (a venv)
        assert res.stderr.startswith(f"{command} is not on PATH") and (str(activate) in res.stderr) == activate.is_file()
