"""What every engine backend shares: the optimizer, the learning-rate schedule and the step interface.

All engines use the same torch AdamW and the same LambdaLR schedule, so equal seeds give equal losses across
engines; only DeepSpeed with optimizer offload uses DeepSpeed's CPU Adam (ZeRO-Offload requires it).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from scalestudy.specs.run import RunConfig
from scalestudy.specs.strategy import Layout, Strategy


def lr_multiplier(step: int, cfg: RunConfig) -> float:
    """Linear warm-up over `warmup_steps`, then cosine/linear decay to `min_lr_ratio` at the last step.

    `step` counts optimizer steps already taken (LambdaLR convention): step 0 is the first update.
    """
    o = cfg.optimizer
    if o.warmup_steps and step < o.warmup_steps:
        return (step + 1) / o.warmup_steps
    if o.decay == "constant":
        return 1.0
    span = max(1, cfg.workload.steps - o.warmup_steps)
    progress = min(1.0, (step - o.warmup_steps) / span)
    if o.decay == "linear":
        shape = 1.0 - progress
    else:
        shape = 0.5 * (1.0 + math.cos(math.pi * progress))
    return o.min_lr_ratio + (1.0 - o.min_lr_ratio) * shape


def resume_schedule(backend, cfg: RunConfig, step: int) -> None:
    """The resume rule: the learning-rate schedule is a function of THIS run's configuration (--lr, --warmup-steps,
    --decay and the total --steps), applied from the resumed step. Resuming a 8-step run with --steps 16 continues
    exactly as an uninterrupted 16-step run would from its step 9 (cosine stretched over 16 steps), rather than
    mixing the old schedule's rate (which the checkpointed scheduler state holds) with the new one."""
    scheduler = getattr(backend, "scheduler", None)
    if scheduler is None:
        return
    lr = cfg.optimizer.lr * lr_multiplier(step, cfg)
    groups = scheduler.optimizer.param_groups
    for group in groups:
        group["initial_lr"], group["lr"] = cfg.optimizer.lr, lr
    scheduler.base_lrs = [cfg.optimizer.lr] * len(groups)
    scheduler.last_epoch = step
    scheduler._last_lr = [lr] * len(groups)  # what get_last_lr() (the logged rate) reports


def make_scheduler(optimizer, cfg: RunConfig) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_multiplier(step, cfg))


def autocast(device: torch.device, dtype: str | None):
    """Mixed precision for DDP (`dtype` "bfloat16": fp32 master weights and gradients); a no-op for None."""
    if dtype:
        return torch.autocast(device_type=device.type, dtype=getattr(torch, dtype))
    return contextlib.nullcontext()


def checkpoint_early_stop(strategy: Strategy):
    """Whether a full recompute stops re-running a block after its last op that saves a tensor, as
    engine/settings.py activation_checkpointing sets it (not left to torch's default): torch's non-reentrant
    checkpoint reads the flag when each checkpointed block runs its forward."""
    from torch.utils.checkpoint import set_checkpoint_early_stop

    from scalestudy.engine.settings import activation_checkpointing

    ac = activation_checkpointing(strategy)
    return set_checkpoint_early_stop(ac["early_stop"]) if ac["recompute"] == "full" else contextlib.nullcontext()


def restore_lr(optimizer, scheduler) -> None:
    """Put the schedule's current rate into the optimizer (loading a scheduler's state does not)."""
    for group, lr in zip(optimizer.param_groups, scheduler.get_last_lr()):
        group["lr"] = lr


def make_adamw(params, adamw: dict) -> torch.optim.AdamW:
    """torch AdamW from engine/settings.py `adamw_params` (lr, betas, eps, weight_decay)."""
    return torch.optim.AdamW(params, **adamw_kwargs(adamw))


def adamw_kwargs(adamw: dict) -> dict:
    return {**adamw, "betas": tuple(adamw["betas"])}


def record_settings(cfg: RunConfig, cuda: bool) -> dict:
    """The engine's settings for this run; rank 0 writes them to DIR/<ds|fsdp|ddp>_config.json (what was used)."""
    import json

    import torch.distributed as dist

    from scalestudy.atomicfile import write_text_atomic
    from scalestudy.engine.settings import engine_settings

    name, settings = engine_settings(cfg, cuda=cuda)
    if not dist.is_initialized() or dist.get_rank() == 0:
        write_text_atomic(Path(cfg.output.dir) / name, json.dumps(settings, indent=2) + "\n")
    return settings


def param_storage_bytes(*modules: torch.nn.Module) -> int:
    """Bytes of distinct storage behind the modules' parameters on this rank: a DTensor's local shard, a ZeRO-3
    parameter's partition (`ds_tensor`; the parameter itself is then an empty placeholder), none for a meta tensor."""
    from scalestudy.engine.memory import StorageCounter

    return StorageCounter().add(getattr(p, "ds_tensor", p) for m in modules for p in m.parameters())


@dataclass
class MemoryParts:
    """Bytes this rank holds, by kind (counted storages, see engine/memory.py)."""

    params_bytes: int = 0
    grads_bytes: int = 0
    optim_bytes: int = 0

    @property
    def total(self) -> int:
        return self.params_bytes + self.grads_bytes + self.optim_bytes


class Backend:
    """One engine wrapped behind four calls: micro_step, optimizer_step, save, load.

    `micro_step` runs forward and backward on one micro-batch and returns the (unscaled) mean loss;
    `optimizer_step` clips, updates, advances the schedule and returns the global gradient norm (before
    clipping). `memory` is filled during `optimizer_step`, when gradients and optimizer states both exist.
    """

    name = "base"

    def __init__(self, model: torch.nn.Module, cfg: RunConfig, strategy: Strategy, layout: Layout,
                 device: torch.device) -> None:
        self.cfg = cfg
        self.strategy = strategy
        self.layout = layout
        self.device = device
        self.memory = MemoryParts()
        self.settings = record_settings(cfg, device.type == "cuda")  # the one source of this engine's arguments
        # Parameter bytes this rank held when the engine placed the model on its device: the model as handed over
        # (DDP, ZeRO 0-2: whole), or what a sharded construction left on the rank (FSDP, tp/pp, ZeRO-3 set it).
        self.setup_param_bytes = param_storage_bytes(model)

    @property
    def lr(self) -> float:
        return float(self.scheduler.get_last_lr()[0])

    def micro_step(self, inputs: dict, last: bool) -> torch.Tensor:
        raise NotImplementedError

    def forward_backward(self, micro_batches: list[dict]) -> torch.Tensor:
        """Forward and backward over one optimizer step's micro-batches; their mean loss (a pipeline runs them
        as its micro-batches, the other engines accumulate them one by one)."""
        total = 0.0  # stays a device tensor: one host sync per step (in gather_stats), not one per micro-batch
        with checkpoint_early_stop(self.strategy):
            for i, inputs in enumerate(micro_batches):
                total = total + self.micro_step(inputs, last=i == len(micro_batches) - 1).float()
        return total / len(micro_batches)

    def optimizer_step(self) -> float:
        raise NotImplementedError

    def _torch_optimizer_step(self, params: list, local_optimizer) -> float:
        """Clip, step a torch optimizer and the schedule, count this rank's bytes; the global grad norm.

        `local_optimizer` is the one whose state this rank holds (ZeroRedundancyOptimizer's shard, or the
        optimizer itself); memory is counted here, while gradients and optimizer states both exist.
        """
        from scalestudy.engine.memory import StorageCounter, optimizer_state_tensors

        clip = self.settings["gradient_clipping"]
        max_norm = clip if clip > 0 else float("inf")
        norm = grad_norm_value(torch.nn.utils.clip_grad_norm_(params, max_norm))
        counter = StorageCounter()
        params_bytes = counter.add(params)
        grads_bytes = counter.add(p.grad for p in params)
        self.optimizer.step()
        self.scheduler.step()
        self.memory = MemoryParts(params_bytes, grads_bytes, counter.add(optimizer_state_tensors(local_optimizer)))
        self.optimizer.zero_grad(set_to_none=True)
        return norm

    def save(self, path: Path) -> None:
        raise NotImplementedError

    def load(self, path: Path) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Drop references so a following run in the same process starts clean."""


def grad_norm_value(norm) -> float:
    """A clip_grad_norm_ result (tensor or DTensor) as a float."""
    full = getattr(norm, "full_tensor", None)
    return float(full() if callable(full) else norm)
