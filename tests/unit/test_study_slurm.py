"""Slurm executor without Slurm: generated job-array scripts pass `bash -n` and shellcheck, ask for GPUs only for a
GPU study, and carry the torchrun rendezvous."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from scalestudy.errors import ScalestudyError
from scalestudy.specs.run import RunConfig
from scalestudy.study.runner import run_study
from scalestudy.study.slurm import collect, write_scripts
from scalestudy.study.spec import parse_spec
from scalestudy.study.store import Store

SPEC = {"name": "mt5", "executor": "slurm", "device": "a100-40gb", "model": ["mt5-base", "mt5-large"],
        "engine": "deepspeed", "zero": [2, 3], "nodes": [1, 4], "nproc": 8, "micro_batch": 1, "global_batch": 64,
        "precision": "bf16", "seq_len": 512, "target_len": 114, "steps": 20, "warmup": 5, "timeout_s": 1800,
        "slurm": {"partition": "gpu", "account": "proj42", "setup": ["module load cuda"]}}


def test_scripts_pass_bash_n_and_carry_the_rendezvous(tmp_path):
    spec = parse_spec(SPEC)
    scripts = write_scripts(spec, tmp_path, list(spec.trials))
    assert sorted(p.name for p, _ in scripts) == ["array-1n-8g.sbatch", "array-4n-8g.sbatch"]
    for path, members in scripts:
        text = path.read_text()
        subprocess.run(["bash", "-n", str(path)], check=True)
        checked = subprocess.run(["shellcheck", "--shell=bash", str(path)], capture_output=True, text=True)
        assert checked.returncode == 0, checked.stdout
        assert "#SBATCH --gpus-per-node=8" in text
        assert f"#SBATCH --array=0-{len(members) - 1}" in text and len(members) == 4
        nodes = members[0].nodes
        assert f"#SBATCH --nodes={nodes}" in text and "#SBATCH --ntasks-per-node=1" in text
        assert "#SBATCH --partition=gpu" in text and "#SBATCH --account=proj42" in text
        srun = re.search(r"srun .*?torchrun (.*?) -m scalestudy\.engine\.train", text.replace("\\\n", " "))
        assert srun, text
        flags = " ".join(srun.group(1).split())
        assert flags == ('--nnodes "$SLURM_NNODES" --nproc-per-node 8 --rdzv-backend c10d '
                         '--rdzv-endpoint "$MASTER_ADDR:$MASTER_PORT" --rdzv-id "$RUN_ID"')
        assert 'MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"' in text
        assert 'export RUN_ID="$SLURM_JOB_ID"' in text
        for t in members:  # each task finds its trial's worker config on shared storage
            assert t.trial_id in text
            cfg = RunConfig.from_yaml(tmp_path / "trials" / t.trial_id / "train_config.yaml")
            assert (cfg.workload.nnodes, cfg.workload.nproc, cfg.strategy.precision) == (t.nodes, 8, "bf16")


def test_cpu_study_asks_for_cpus_not_gpus(tmp_path):
    spec = parse_spec({**SPEC, "device": "local-cpu", "precision": "fp32", "nproc": 2, "model": "t5-tiny",
                       "slurm": {}, "zero": 2, "nodes": 1, "seq_len": 64, "target_len": 16})
    (path, _), = write_scripts(spec, tmp_path, list(spec.trials))
    text = path.read_text()
    assert "--gpus-per-node" not in text and "#SBATCH --cpus-per-task=2" in text
    assert subprocess.run(["shellcheck", "--shell=bash", str(path)]).returncode == 0


def test_array_task_runs_under_bash_and_is_collected(tmp_path):
    """Run one array task's script with fake srun/scontrol: the trial's exit code lands where collect finds it."""
    spec = parse_spec({**SPEC, "model": "mt5-base", "zero": 2, "nodes": 1})
    (path, members), = write_scripts(spec, tmp_path, list(spec.trials))
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "scontrol").write_text("#!/bin/sh\necho node001\n")
    # fake srun: behaves like a trial that ran out of GPU memory
    (fake / "srun").write_text("#!/bin/sh\necho \"$@\"\necho 'torch.OutOfMemoryError: CUDA out of memory.'\nexit 1\n")
    for f in fake.iterdir():
        f.chmod(0o755)
    # a job's own environment: no MASTER_ADDR / MASTER_PORT (the script honours a user's; an in-process single-rank
    # test earlier in the session may have left them in os.environ: engine/single_rank.py)
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT")}
    env.update({"PATH": f"{fake}:{os.environ['PATH']}", "SLURM_ARRAY_TASK_ID": "0", "SLURM_JOB_ID": "777",
                "SLURM_JOB_NODELIST": "node001", "SLURM_NNODES": "1"})
    res = subprocess.run(["bash", str(path)], env=env, capture_output=True, text=True)
    assert res.returncode == 1
    tdir = tmp_path / "trials" / members[0].trial_id
    log = (tdir / "train.log").read_text()
    assert "--rdzv-endpoint node001:20777 --rdzv-id 777" in log
    with Store(tmp_path) as store:
        store.set_meta("spec", SPEC)
        assert collect(tmp_path, store, spec) == 1
        row = store.trials()[0]
        assert row["status"] == "OOM" and row["returncode"] == 1
        assert collect(tmp_path, store, spec) == 0  # never twice


def test_without_sbatch_only_dry_run_works(tmp_path, monkeypatch, capsys):
    import scalestudy.study.slurm as slurm

    monkeypatch.setattr(slurm.shutil, "which", lambda name: None)  # a machine without Slurm (CI installs one)
    spec = parse_spec(SPEC)
    with pytest.raises(ScalestudyError, match="sbatch not found.*--dry-run"):
        run_study(spec, tmp_path / "s", progress=False)
    monkeypatch.undo()
    monkeypatch.setenv("COLUMNS", "200")  # through the CLI in this process (cli.main), as the user types it
    from scalestudy.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["study", "run", str(Path(__file__).parents[2] / "examples" / "study-cluster-mt5.yaml"), "-o",
              str(tmp_path / "d"), "--dry-run"])
    out, err = capsys.readouterr()
    assert exc.value.code == 0, err
    assert out.count("#SBATCH --array=") == 4 and "srun --kill-on-bad-exit=1 torchrun" in out
    assert "filtered (cost model: does not fit) mt5-xxl" in out


def test_multi_node_trials_need_slurm(tmp_path):
    with pytest.raises(ScalestudyError, match="need 4 nodes: the local executor runs on one machine"):
        run_study(parse_spec(SPEC), tmp_path, executor="local", progress=False)
