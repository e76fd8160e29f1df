"""Emit the planner's winner as files a user runs: engine config and launch commands for `scalestudy train`.

Written to DIR:
- ds_config.json        DeepSpeed config (engine deepspeed): batch sizes, ZeRO stage and offload, precision,
                        gradient clipping, activation checkpointing, AdamW optimizer;
  fsdp_config.json      FSDP2 settings (engine fsdp), or ddp_config.json (engine ddp);
- train_config.yaml     the `scalestudy train --config` file (every option of the run, one source of truth);
- launch_single_node.sh torchrun on one node;  launch_multi_node.sh torchrun on every node (rendezvous);
- launch_slurm.sbatch   Slurm batch script (one torchrun per node through srun);
- plan.json             the strategy, layout and estimate the files were made from.
All files are written to a temporary name first and renamed, so DIR never holds half-written files.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import yaml

from scalestudy.specs.model import ModelSpec
from scalestudy.specs.strategy import Strategy, Workload

DEFAULT_OPTIM = {"lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}


def deepspeed_config(strategy: Strategy, workload: Workload, dp: int, grad_accum: int, *, cpu: bool = False,
                     grad_clip: float = 1.0, optim: dict | None = None) -> dict:
    """DeepSpeed JSON for the strategy (keys as in DeepSpeed's config docs)."""
    zero: dict = {"stage": strategy.zero}
    if strategy.zero >= 1:
        zero.update({"overlap_comm": not cpu, "contiguous_gradients": True, "reduce_bucket_size": 5e8})
    if strategy.zero >= 2:
        zero["allgather_bucket_size"] = 5e8
    if strategy.offload_optimizer != "none":
        zero["offload_optimizer"] = {"device": strategy.offload_optimizer, "pin_memory": not cpu}
    if strategy.offload_params != "none":
        zero["offload_param"] = {"device": strategy.offload_params, "pin_memory": not cpu}
    if strategy.zero == 3:
        zero.update({"stage3_prefetch_bucket_size": 5e7, "stage3_param_persistence_threshold": 1e5})
    params = dict(optim or DEFAULT_OPTIM)
    # On CPU without offload, torch's AdamW avoids JIT-building DeepSpeed's fused Adam (~70 s, FACTS.md).
    if cpu and strategy.offload_optimizer == "none":
        params["torch_adam"] = True
    config = {
        "train_batch_size": workload.global_batch,
        "train_micro_batch_size_per_gpu": strategy.micro_batch,
        "gradient_accumulation_steps": grad_accum,
        "gradient_clipping": grad_clip,
        "zero_optimization": zero,
        "bf16": {"enabled": strategy.precision == "bf16"},
        "fp16": {"enabled": strategy.precision == "fp16", "loss_scale": 0, "initial_scale_power": 16},
        "optimizer": {"type": "AdamW", "params": params},
        "activation_checkpointing": {
            # The model checkpoints its own blocks (recompute); these keys shape DeepSpeed's checkpointing API.
            "partition_activations": strategy.recompute != "none" and strategy.tp > 1,
            "contiguous_memory_optimization": False,
            "cpu_checkpointing": False,
            "number_checkpoints": None,
            "synchronize_checkpoint_boundary": False,
            "profile": False,
        },
        "steps_per_print": 100,
        "wall_clock_breakdown": False,
    }
    if strategy.offload_optimizer != "none" and cpu:
        config["zero_force_ds_cpu_optimizer"] = True
    assert workload.global_batch == strategy.micro_batch * grad_accum * dp, "layout does not keep the global batch"
    return config


def fsdp_config(strategy: Strategy, workload: Workload, dp: int, grad_accum: int) -> dict:
    """FSDP2 (`torch.distributed.fsdp.fully_shard`) settings for the strategy."""
    dtype = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}[strategy.precision]
    return {
        "engine": "fsdp", "api": "torch.distributed.fsdp.fully_shard (FSDP2)",
        "reshard_after_forward": strategy.zero == 3,  # ZeRO-3-like; False keeps params gathered (ZeRO-2-like)
        "wrap": "each transformer block, then the root module",
        "mixed_precision": {"param_dtype": dtype, "reduce_dtype": "float32"},
        "activation_checkpointing": strategy.recompute,
        "global_batch": workload.global_batch, "micro_batch_per_rank": strategy.micro_batch,
        "gradient_accumulation_steps": grad_accum, "data_parallel_size": dp, "gradient_clipping": 1.0,
    }


def ddp_config(strategy: Strategy, workload: Workload, dp: int, grad_accum: int) -> dict:
    return {
        "engine": "ddp", "api": "torch.nn.parallel.DistributedDataParallel",
        "zero_redundancy_optimizer": strategy.zero == 1, "gradient_as_bucket_view": True,
        "activation_checkpointing": strategy.recompute, "precision": strategy.precision,
        "global_batch": workload.global_batch, "micro_batch_per_rank": strategy.micro_batch,
        "gradient_accumulation_steps": grad_accum, "data_parallel_size": dp, "gradient_clipping": 1.0,
    }


def train_options(model: ModelSpec, strategy: Strategy, workload: Workload, *, nproc: int, nnodes: int,
                  steps: int = 1000, output: str = "runs/train", objective: str | None = None) -> dict:
    """The `scalestudy train` options of this run (TrainConfig field names)."""
    objective = objective or ("span" if model.is_encoder_decoder else "causal")
    opts = {"model": model.name, "objective": objective, "seq_len": workload.seq_len}
    if model.is_encoder_decoder:
        opts["target_len"] = workload.target_len
    opts.update({"engine": strategy.engine, "zero": strategy.zero, "offload_optimizer": strategy.offload_optimizer,
                 "offload_params": strategy.offload_params, "tp": strategy.tp, "pp": strategy.pp,
                 "precision": strategy.precision, "recompute": strategy.recompute, "nproc": nproc,
                 "nnodes": nnodes, "micro_batch": strategy.micro_batch, "global_batch": workload.global_batch,
                 "steps": steps, "output": output})
    return opts


def train_flags(opts: dict, skip: tuple[str, ...] = ()) -> list[str]:
    """`--flag value` list for `scalestudy train` from train options."""
    out: list[str] = []
    for key, value in opts.items():
        if key in skip:
            continue
        out += [f"--{key.replace('_', '-')}", str(value)]
    return out


def _q(args: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in args)


def launch_scripts(opts: dict, *, gpus_per_node: int, nnodes: int, env: dict[str, str] | None = None
                   ) -> dict[str, str]:
    """Shell scripts: torchrun single node, torchrun multi-node, Slurm sbatch; each runs `scalestudy train`.

    `scalestudy train` launches torchrun itself from --nproc/--nnodes; the multi-node forms pass the rendezvous
    (--node-rank, --master-addr, --master-port) so every node joins the same job.
    """
    env_lines = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in (env or {}).items())
    head = "#!/usr/bin/env bash\n# Generated by `scalestudy plan --emit`.\nset -euo pipefail\n" + env_lines
    single = dict(opts, nproc=gpus_per_node, nnodes=1)
    flags_single = _q(["scalestudy", "train", *train_flags(single)])
    multi = dict(opts, nproc=gpus_per_node, nnodes=nnodes)
    flags_multi = _q(["scalestudy", "train", *train_flags(multi)])
    scripts = {
        "launch_single_node.sh": head + f"# One node, {gpus_per_node} processes (torchrun --standalone).\n"
                                        f"{flags_single}\n",
        "launch_multi_node.sh": head + (
            f"# Run on each of the {nnodes} nodes: NODE_RANK=0..{nnodes - 1}, MASTER_ADDR = node 0's address.\n"
            ": \"${NODE_RANK:?set NODE_RANK}\" \"${MASTER_ADDR:?set MASTER_ADDR}\"\n"
            "MASTER_PORT=${MASTER_PORT:-29500}\n"
            f"{flags_multi} --node-rank \"$NODE_RANK\" --master-addr \"$MASTER_ADDR\" --master-port \"$MASTER_PORT\"\n"),
        "launch_slurm.sbatch": (
            "#!/usr/bin/env bash\n# Generated by `scalestudy plan --emit`. Submit with: sbatch launch_slurm.sbatch\n"
            f"#SBATCH --job-name=scalestudy-train\n#SBATCH --nodes={nnodes}\n#SBATCH --ntasks-per-node=1\n"
            f"#SBATCH --gpus-per-node={gpus_per_node}\n#SBATCH --exclusive\n#SBATCH --output=%x-%j.out\n"
            "set -euo pipefail\n" + env_lines +
            "export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\n"
            "export MASTER_PORT=${MASTER_PORT:-29500}\n"
            f"srun bash -c '{flags_multi} --node-rank \"$SLURM_NODEID\" --master-addr \"$MASTER_ADDR\" "
            "--master-port \"$MASTER_PORT\"'\n"),
    }
    return scripts


def write_atomic(path: Path, text: str, *, executable: bool = False) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    if executable:
        tmp.chmod(0o755)
    os.replace(tmp, path)


def emit(out_dir: str | Path, model: ModelSpec, strategy: Strategy, workload: Workload, *, dp: int, grad_accum: int,
         gpus_per_node: int, nnodes: int, cpu: bool = False, steps: int = 1000, plan_record: dict | None = None
         ) -> dict[str, Path]:
    """Write the engine config, train config and launch scripts for one strategy; return {name: path}."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, str] = {}
    if strategy.engine == "deepspeed":
        cfg = deepspeed_config(strategy, workload, dp, grad_accum, cpu=cpu)
        files["ds_config.json"] = json.dumps(cfg, indent=2) + "\n"
    elif strategy.engine == "fsdp":
        files["fsdp_config.json"] = json.dumps(fsdp_config(strategy, workload, dp, grad_accum), indent=2) + "\n"
    else:
        files["ddp_config.json"] = json.dumps(ddp_config(strategy, workload, dp, grad_accum), indent=2) + "\n"
    opts = train_options(model, strategy, workload, nproc=gpus_per_node, nnodes=nnodes, steps=steps)
    files["train_config.yaml"] = yaml.safe_dump(opts, sort_keys=False)
    env = {"OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu"} if cpu else {}
    files.update(launch_scripts(opts, gpus_per_node=gpus_per_node, nnodes=nnodes, env=env))
    if plan_record is not None:
        files["plan.json"] = json.dumps(plan_record, indent=2) + "\n"
    paths = {}
    for name, text in files.items():
        paths[name] = out / name
        write_atomic(out / name, text, executable=name.endswith((".sh", ".sbatch")))
    return paths
