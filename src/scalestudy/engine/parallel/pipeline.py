"""Pipeline stages and schedules from torch.distributed.pipelining.

Chunk s runs on pp rank s % pp (one chunk per rank for gpipe/1f1b; `virtual_stages` looped chunks per rank for the
interleaved 1F1B of Narayanan et al. 2021). A step's micro-batches are the pipeline's micro-batches, and the
schedule divides gradients by their number: the same mean over micro-batches as gradient accumulation.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}


class Pipeline:
    def __init__(self, chunks: list[tuple[int, torch.nn.Module]], num_stages: int, device: torch.device, group,
                 n_microbatches: int, loss_fn, kind: str) -> None:
        self.stages = [PipelineStage(m, s, num_stages, device, group=group) for s, m in chunks]
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
