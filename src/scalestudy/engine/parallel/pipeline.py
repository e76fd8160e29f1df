"""Pipeline stages and schedules from torch.distributed.pipelining.

Chunk s runs on pp rank s % pp (one chunk per rank for gpipe/1f1b; `virtual_stages` looped chunks per rank for the
interleaved 1F1B of Narayanan et al. 2021). A step's micro-batches are the pipeline's micro-batches, and the
schedule divides gradients by their number: the same mean over micro-batches as gradient accumulation.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}
# what torch's stage switches off on an FSDP2 chunk for every micro-batch but the last (stage.py
# backward_maybe_with_nosync), deferring the reduce-scatter to perform_reduce_grad after the last one
FSDP_DEFERRAL = ("set_requires_gradient_sync", "set_reshard_after_backward", "set_is_last_backward")


@contextmanager
def fsdp_sync_kept(module: torch.nn.Module):
    """Within: the FSDP_DEFERRAL setters of `module` do nothing, so its backward reduce-scatters and reshards as
    without a pipeline (engine/settings.py gradient_sync every_micro_batch)."""
    for name in FSDP_DEFERRAL:
        setattr(module, name, lambda *args, **kwargs: None)
    try:
        yield
    finally:
        for name in FSDP_DEFERRAL:
            delattr(module, name)


class Stage(PipelineStage):
    """torch's PipelineStage, but an FSDP2 chunk reduce-scatters its gradients in every micro-batch's backward and
    reshards after it, as train's FSDP does without a pipeline (the cost model's terms and memory price that: sharded
    gradients, not a whole stage's unsharded ones held to the last micro-batch). perform_reduce_grad after the last
    one then finds no unsharded gradient left and only scales the sharded ones by the micro-batch count."""

    def backward_maybe_with_nosync(self, backward_type, bwd_kwargs: dict, last_backward: bool = False):
        if not isinstance(self.submod, FSDPModule):
            return super().backward_maybe_with_nosync(backward_type, bwd_kwargs, last_backward)
        with fsdp_sync_kept(self.submod):
            return super().backward_maybe_with_nosync(backward_type, bwd_kwargs, last_backward)


class Pipeline:
    def __init__(self, chunks: list[tuple[int, torch.nn.Module]], num_stages: int, device: torch.device, group,
                 n_microbatches: int, loss_fn, kind: str) -> None:
        self.stages = [Stage(m, s, num_stages, device, group=group) for s, m in chunks]
        self.has_first = any(st.is_first for st in self.stages)
        self.has_last = any(st.is_last for st in self.stages)
        self.group = group
        if kind == "interleaved":
            self.schedule = ScheduleInterleaved1F1B(self.stages, n_microbatches=n_microbatches, loss_fn=loss_fn)
        else:
            self.schedule = SCHEDULES[kind](self.stages[0], n_microbatches=n_microbatches, loss_fn=loss_fn)

    def step(self, batch: dict) -> torch.Tensor:
        """Forward and backward over the whole step's batch; the mean micro-batch loss, on every pp rank."""
        losses: list[torch.Tensor] = []
        args = (batch["input_ids"],) if self.has_first else ()
        target = batch["labels"] if self.has_last else None
        self.schedule.step(*args, target=target, losses=losses, return_outputs=False,
                           attention_mask=batch["attention_mask"], labels=batch["labels"])
        if self.has_last:
            mean = torch.stack([x.detach().float() for x in losses]).mean()
        else:
            mean = torch.zeros((), device=batch["input_ids"].device)
        dist.all_reduce(mean, group=self.group)  # only the last stage's rank contributes
        return mean
