"""PyTorch DDP (zero 0) and DDP + ZeroRedundancyOptimizer (zero 1: optimizer states sharded across ranks)."""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel

from scalestudy.engine.backends.common import (Backend, adamw_kwargs, autocast, make_adamw, make_scheduler, restore_lr)


class DDPBackend(Backend):
    name = "ddp"

    def __init__(self, model, cfg, strategy, layout, device) -> None:
        super().__init__(model, cfg, strategy, layout, device)
        model.to(device)
        s = self.settings  # engine/settings.py ddp_settings, also written to DIR/ddp_config.json
        self.model = DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None,
                                             gradient_as_bucket_view=s["gradient_as_bucket_view"],
                                             bucket_cap_mb=s["bucket_cap_mb"])
        self.params = list(model.parameters())
        adamw = s["optimizer"]["params"]
        if s["zero_redundancy_optimizer"]:
            self.optimizer = ZeroRedundancyOptimizer(self.params, optimizer_class=torch.optim.AdamW,
                                                     **adamw_kwargs(adamw))
            self._local_optimizer = self.optimizer.optim
        else:
            self.optimizer = make_adamw(self.params, adamw)
            self._local_optimizer = self.optimizer
        self.scheduler = make_scheduler(self.optimizer, cfg)

    def micro_step(self, inputs: dict, last: bool) -> torch.Tensor:
        every = self.settings["gradient_sync"] == "every_micro_batch"  # engine/settings.py: last_micro_batch
        sync = nullcontext() if last or every else self.model.no_sync()
        with sync, autocast(self.device, self.settings["autocast_dtype"]):
            loss = self.model(**inputs).loss
            (loss / self.layout.grad_accum).backward()
        return loss.detach()

    def optimizer_step(self) -> float:
        return self._torch_optimizer_step(self.params, self._local_optimizer)

    def save(self, path: Path) -> None:
        # Each rank saves the optimizer state it owns (its ZeRO shard; rank 0 alone when nothing is sharded).
        rank = dist.get_rank()
        if rank == 0:
            torch.save({"model": self.model.module.state_dict(), "scheduler": self.scheduler.state_dict()},
                       path / "ddp_state.pt")
        if rank == 0 or self.strategy.zero == 1:
            torch.save(self._local_optimizer.state_dict(), path / f"optim-rank{rank if self.strategy.zero else 0}.pt")

    def load(self, path: Path) -> None:
        rank = dist.get_rank()
        state = torch.load(path / "ddp_state.pt", map_location=self.device, weights_only=False)
        self.model.module.load_state_dict(state["model"])
        optim = torch.load(path / f"optim-rank{rank if self.strategy.zero else 0}.pt", map_location=self.device,
                           weights_only=False)
        self._local_optimizer.load_state_dict(optim)
        self.scheduler.load_state_dict(state["scheduler"])
        restore_lr(self.optimizer, self.scheduler)

    def close(self) -> None:
        del self.model, self.optimizer, self.scheduler, self.params, self._local_optimizer
