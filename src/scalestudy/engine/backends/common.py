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

from scalestudy.engine.config import TrainConfig
from scalestudy.specs.strategy import Layout, Strategy


def lr_multiplier(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up over `warmup_steps`, then cosine/linear decay to `min_lr_ratio` at the last step.

    `step` counts optimizer steps already taken (LambdaLR convention): step 0 is the first update.
    """
    if cfg.warmup_steps and step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    if cfg.decay == "constant":
        return 1.0
    span = max(1, cfg.steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    if cfg.decay == "linear":
        shape = 1.0 - progress
    else:
        shape = 0.5 * (1.0 + math.cos(math.pi * progress))
    return cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * shape


def make_scheduler(optimizer, cfg: TrainConfig) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_multiplier(step, cfg))


def autocast(device: torch.device, precision: str):
    """bf16 mixed precision for DDP (fp32 master weights and gradients); a no-op for fp32."""
    if precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def restore_lr(optimizer, scheduler) -> None:
    """Put the schedule's current rate into the optimizer (loading a scheduler's state does not)."""
    for group, lr in zip(optimizer.param_groups, scheduler.get_last_lr()):
        group["lr"] = lr


def adamw_kwargs(cfg: TrainConfig) -> dict:
    return {"lr": cfg.lr, "betas": (cfg.beta1, cfg.beta2), "eps": 1e-8, "weight_decay": cfg.weight_decay}


def make_adamw(params, cfg: TrainConfig) -> torch.optim.AdamW:
    return torch.optim.AdamW(params, **adamw_kwargs(cfg))


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

    def __init__(self, model: torch.nn.Module, cfg: TrainConfig, strategy: Strategy, layout: Layout,
                 device: torch.device) -> None:
        self.cfg = cfg
        self.strategy = strategy
        self.layout = layout
        self.device = device
        self.memory = MemoryParts()

    @property
    def lr(self) -> float:
        return float(self.scheduler.get_last_lr()[0])

    def micro_step(self, inputs: dict, last: bool) -> torch.Tensor:
        raise NotImplementedError

    def optimizer_step(self) -> float:
        raise NotImplementedError

    def _torch_optimizer_step(self, params: list, local_optimizer) -> float:
        """Clip, step a torch optimizer and the schedule, count this rank's bytes; the global grad norm.

        `local_optimizer` is the one whose state this rank holds (ZeroRedundancyOptimizer's shard, or the
        optimizer itself); memory is counted here, while gradients and optimizer states both exist.
        """
        from scalestudy.engine.memory import StorageCounter, optimizer_state_tensors

        max_norm = self.cfg.grad_clip if self.cfg.grad_clip > 0 else float("inf")
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
