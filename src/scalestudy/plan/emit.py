"""Emit the planner's winner as files a user runs: engine config and launch commands for `scalestudy train`.

Written to DIR:
- ds_config.json        DeepSpeed config (engine deepspeed): batch sizes, ZeRO stage and offload, precision,
                        gradient clipping, activation checkpointing, AdamW optimizer;
  fsdp_config.json      FSDP2 settings (engine fsdp), or ddp_config.json (engine ddp);
- train_config.yaml     the `scalestudy train --config` file (every option of the run, one source of truth);
- launch_single_node.sh `scalestudy train --config train_config.yaml` (torchrun's launcher on one node);
- launch_multi_node.sh  torchrun on every node (c10d rendezvous) running `scalestudy train`'s workers;
- launch_slurm.sbatch   Slurm batch script (one torchrun per node through srun);
- plan.json             the strategy, layout and estimate the files were made from.
All files are written to a temporary name first and renamed, so DIR never holds half-written files.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import yaml

from scalestudy.specs.model import ModelSpec
from scalestudy.specs.strategy import Strategy, Workload
from scalestudy.atomicfile import write_text_atomic

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
    """The `scalestudy train` options of this run (TrainConfig field names, so `--config` reads them)."""
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


def trainable(opts: dict, *, cuda: bool) -> str | None:
    """None when `scalestudy train` accepts these options, else its one-line reason (e.g. no tensor parallelism)."""
    from scalestudy.engine.config import TrainConfig
    from scalestudy.errors import ScalestudyError

    try:
        TrainConfig.from_dict(opts).validate(cuda=cuda)
    except ScalestudyError as exc:
        return str(exc)
    return None


def launch_scripts(opts: dict, *, gpus_per_node: int, nnodes: int, env: dict[str, str] | None = None
                   ) -> dict[str, str]:
    """Shell scripts, each running `scalestudy train` on `train_config.yaml` (next to the script):

    - single node: `scalestudy train --config` (it starts torchrun's launcher itself, --nproc ranks);
    - multi-node: one torchrun per node with a c10d rendezvous at $MASTER_ADDR, running the workers of
      `scalestudy train` (`python -m scalestudy.engine.train --config`);
    - Slurm: the same torchrun through `srun`, one task per node.
    Extra arguments of the single-node script go to `scalestudy train` (e.g. `--steps 10 --output DIR`).
    """
    from scalestudy.engine.launch import WORKER_MODULE

    env_lines = "".join(f"export {k}=${{{k}:-{shlex.quote(v)}}}\n" for k, v in (env or {}).items())
    here = 'HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"\n'
    head = "#!/usr/bin/env bash\n# Generated by `scalestudy plan --emit`.\nset -euo pipefail\n" + here + env_lines
    torchrun = (f"torchrun --nnodes {nnodes} --nproc-per-node {gpus_per_node} --rdzv-backend c10d "
                "--rdzv-endpoint \"$MASTER_ADDR:${MASTER_PORT:-29500}\" --rdzv-id \"$RUN_ID\" "
                f"-m {WORKER_MODULE} --config \"$HERE/train_config.yaml\"")
    flags = " ".join(f"--{k.replace('_', '-')} {shlex.quote(str(v))}" for k, v in opts.items()
                     if k not in ("nnodes", "output"))
    return {
        "launch_single_node.sh": head + f"# One node, {gpus_per_node} ranks through torchrun's launcher.\n"
        f"# Same as: scalestudy train {flags}\n" + (
            f"# The plan is for {nnodes} nodes: on one node the same strategy keeps the global batch with {nnodes}x "
            "the accumulation (and ZeRO shards over fewer ranks, so it needs more memory per device).\n"
            if nnodes > 1 else "") +
            'exec scalestudy train --config "$HERE/train_config.yaml"' + (" --nnodes 1" if nnodes > 1 else "") +
            ' "$@"\n',
        "launch_multi_node.sh": head + (
            f"# Run on each of the {nnodes} nodes with the same MASTER_ADDR (node 0's address) and RUN_ID.\n"
            "# train_config.yaml and its output directory must be on a filesystem every node sees.\n"
            ': "${MASTER_ADDR:?set MASTER_ADDR to node 0\'s address}"\nRUN_ID=${RUN_ID:-scalestudy}\n'
            f"exec {torchrun}\n"),
        "launch_slurm.sbatch": (
            "#!/usr/bin/env bash\n# Generated by `scalestudy plan --emit`. Submit: sbatch launch_slurm.sbatch\n"
            f"#SBATCH --job-name=scalestudy-train\n#SBATCH --nodes={nnodes}\n"
            "#SBATCH --ntasks-per-node=1  # one torchrun per node; it starts the per-device workers\n"
            f"#SBATCH --gpus-per-node={gpus_per_node}\n#SBATCH --exclusive\n#SBATCH --output=%x-%j.out\n"
            "set -euo pipefail\n" + env_lines +
            'HERE="${SLURM_SUBMIT_DIR:-$(pwd)}"\n'
            'export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)\n'
            "export RUN_ID=$SLURM_JOB_ID\n"
            f"srun {torchrun}\n"),
    }


def write_atomic(path: Path, text: str, *, executable: bool = False) -> None:
    write_text_atomic(path, text, executable=executable)


def emit(out_dir: str | Path, model: ModelSpec, strategy: Strategy, workload: Workload, *, dp: int, grad_accum: int,
         gpus_per_node: int, nnodes: int, cpu: bool = False, steps: int = 1000, output: str | None = None,
         plan_record: dict | None = None) -> dict[str, Path]:
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
    output = output or f"runs/{model.name}-{strategy.label.replace(' ', '-')}"
    opts = train_options(model, strategy, workload, nproc=gpus_per_node, nnodes=nnodes, steps=steps, output=output)
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
