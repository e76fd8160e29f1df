"""DeepSpeed ZeRO stages 0-3, optional optimizer offload (stage >= 1) and parameter offload (stage 3).

The model arrives fully built on the host (not under `deepspeed.zero.Init`, which would draw different weights), so
every engine starts from the same weights. ZeRO-3 partitions it from there before `deepspeed.initialize` sees it
(`partition_on_host`): no rank ever holds the whole model on its device, as the cost model's memory assumes and every
published ZeRO-3 run built it. ZeRO 0-2 keep whole parameters on every rank anyway; `deepspeed.initialize` moves
the model there. Without offload the optimizer is the same torch AdamW as elsewhere; ZeRO-Offload runs DeepSpeed's
CPU Adam (its optimizer is built from the config, as DeepSpeed requires).
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from scalestudy.engine.backends.common import (Backend, MemoryParts, lr_multiplier, make_adamw, make_scheduler,
                                               param_storage_bytes)
from scalestudy.engine.settings import adamw_params
from scalestudy.engine.memory import StorageCounter, optimizer_state_tensors, tensors_in

CHECKPOINT_TAG = "engine"
HALF_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}  # the config sections that make DeepSpeed cast


def partition_on_host(model: torch.nn.Module, config: dict, device: torch.device) -> None:
    """ZeRO-3: cut the host-built model into this rank's partitions before `deepspeed.initialize`, which would
    otherwise move it whole to the device first (runtime/engine.py `_configure_distributed_model`: `module.to`
    unless the parameters are already ZeRO parameters). `deepspeed.zero.Init(module=...)` takes one parameter at
    a time to the device, keeps this rank's slice (on the device, or the host under offload_param) and frees the
    rest; it is the call ZeRO-3's optimizer makes itself, with the same config, just after that move.
    What `initialize` does not repeat for a model partitioned so is done here first, as it would: the parameters
    cast to the config's 16-bit dtype (`_cast_module_mixed_precision`), the buffers moved to the device.
    """
    import deepspeed

    dtype = next((d for key, d in HALF_DTYPES.items() if config.get(key, {}).get("enabled")), None)
    with torch.no_grad():
        for p in model.parameters():
            if dtype is not None and p.is_floating_point() and p.dtype != dtype:
                p.data = p.data.to(dtype)
    for module in model.modules():
        for name, buffer in module._buffers.items():
            if buffer is not None:
                module._buffers[name] = buffer.to(device)
    deepspeed.init_distributed(dist_init_required=False)  # wraps torch's process group, as initialize does first
    deepspeed.zero.Init(module=model, config_dict_or_path=config)


class DeepSpeedBackend(Backend):
    name = "deepspeed"

    def __init__(self, model, cfg, strategy, layout, device) -> None:
        super().__init__(model, cfg, strategy, layout, device)
        import deepspeed
        from deepspeed.utils import logger as ds_logger

        ds_logger.setLevel(logging.WARNING)  # its INFO lines would bury the step log
        config = self.settings  # engine/settings.py deepspeed_config, also written to DIR/ds_config.json
        if strategy.zero == 3:  # partitioned from the host: never whole on the device
            partition_on_host(model, config, device)
            self.setup_param_bytes = param_storage_bytes(model)
        if "optimizer" in config:  # ZeRO-Offload: DeepSpeed builds its CPU Adam; we attach our schedule to it
            optimizer = None
            scheduler = lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_multiplier(s, cfg))  # noqa: E731
        else:
            optimizer = make_adamw(model.parameters(), adamw_params(cfg))
            scheduler = make_scheduler(optimizer, cfg)
        self.engine, self.optimizer, _, self.scheduler = deepspeed.initialize(
            model=model, model_parameters=None if optimizer else model.parameters(), optimizer=optimizer,
            lr_scheduler=scheduler, config=config, dist_init_required=False)
        self.module = self.engine.module

    def micro_step(self, inputs: dict, last: bool) -> torch.Tensor:
        loss = self.engine(**inputs).loss
        self.engine.backward(loss)  # DeepSpeed divides by gradient_accumulation_steps itself
        if not last:
            self.engine.step()  # not a boundary: DeepSpeed only accumulates
        return loss.detach()

    def optimizer_step(self) -> float:
        grads_counter = StorageCounter()
        params = self._param_bytes(grads_counter)
        grads = grads_counter.add(self._grad_tensors())
        self.engine.step()  # boundary: reduce, clip, update, advance the schedule
        optim = StorageCounter().add(optimizer_state_tensors(self._inner_optimizer()))
        self.memory = MemoryParts(params, grads, optim)
        norm = self.engine.get_global_grad_norm()
        return float(norm) if norm is not None else float("nan")

    # ---- memory census -----------------------------------------------------------------------------------
    def _inner_optimizer(self) -> torch.optim.Optimizer:
        opt = self.engine.optimizer
        return getattr(opt, "optimizer", opt)  # ZeRO wraps the torch optimizer; stage 0 fp32 does not

    def _param_bytes(self, counter: StorageCounter) -> int:
        # ZeRO-3 keeps the local partition in `ds_tensor` (the parameter itself is an empty placeholder);
        # the optimizer's own parameters are the fp32 master partitions (a separate copy under ZeRO 1-3).
        module = [getattr(p, "ds_tensor", p) for p in self.module.parameters()]
        master = [p for group in self._inner_optimizer().param_groups for p in group["params"]]
        return counter.add(module) + counter.add(master)

    def _grad_tensors(self):
        yield from (p.grad for p in self.module.parameters())
        opt = self.engine.optimizer
        if opt is not self._inner_optimizer():  # ZeRO: reduction buckets and gradient partitions
            for name, value in vars(opt).items():
                if "grad" in name or "ipg" in name:
                    yield from tensors_in(value, depth=3)

    # ---- checkpoints -------------------------------------------------------------------------------------
    def save(self, path: Path) -> None:
        self.engine.save_checkpoint(str(path), tag=CHECKPOINT_TAG, save_latest=False)

    def load(self, path: Path) -> None:
        load_path, _ = self.engine.load_checkpoint(str(path), tag=CHECKPOINT_TAG, load_optimizer_states=True,
                                                   load_lr_scheduler_states=True)
        if load_path is None:
            raise RuntimeError(f"DeepSpeed found no checkpoint in {path}")

    def close(self) -> None:
        self.engine.destroy()
        del self.engine, self.optimizer, self.scheduler, self.module
