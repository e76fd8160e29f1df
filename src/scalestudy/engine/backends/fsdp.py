"""PyTorch FSDP2 (`fully_shard`): zero 3 reshards parameters after forward, zero 2 keeps them until backward.

Each Transformer layer is its own FSDP unit (gathered just before use), the root holds embeddings and head.
Built sharded: `scalestudy train` hands over a model built on the meta device; it is sharded on shapes, then each
rank gives storage to its own shards only, filled with the 1-rank run's initial values (parallel/meta_init.py), so no
rank ever holds the whole model (the cost model's memory assumes so, as every published FSDP run built it).
Checkpoints use torch.distributed.checkpoint: every rank writes its own shard.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

from scalestudy.engine.backends.common import Backend, make_adamw, make_scheduler, param_storage_bytes, restore_lr
from scalestudy.engine.parallel import meta_init

# Attribute names of the layer lists in T5 (encoder.block / decoder.block), GPT-2 (transformer.h), Llama (layers).
LAYER_LISTS = ("block", "h", "layers")


def transformer_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    layers = []
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and name.rsplit(".", 1)[-1] in LAYER_LISTS:
            layers.extend(module)
    return layers


def fully_shard_kwargs(settings: dict, mesh, device: torch.device) -> dict:
    """`fully_shard` arguments from engine/settings.py fsdp_settings (shared with the tp/pp hybrid backend)."""
    kwargs = {"mesh": mesh, "reshard_after_forward": settings["reshard_after_forward"]}
    if settings["mixed_precision"]:
        mp = settings["mixed_precision"]
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=getattr(torch, mp["param_dtype"]),
                                                   reduce_dtype=getattr(torch, mp["reduce_dtype"]))
    if settings["cpu_offload"]:  # parameters, gradients and the optimizer step on the host
        kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=device.type == "cuda")
    return kwargs


def shard_units(blocks: list[torch.nn.Module], root: torch.nn.Module, settings: dict, mesh,
                device: torch.device) -> None:
    """Each transformer block its own FSDP2 unit, then the root (embeddings, head, final norms), as
    engine/settings.py fsdp_settings says: the root's resharding and the prefetch depth are set explicitly
    (torch's defaults for them changed between versions; the cost model prices these values)."""
    # T5 blocks return their position bias, a view; nothing modifies block outputs in place (checked in
    # transformers' T5Stack), so FSDP2's per-call warning about in-place ops on views is noise here. Here, not in
    # the tp/pp backend only: a plain `train --engine fsdp` of a T5 printed it once per rank.
    warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* returned a view tensor")
    kwargs = fully_shard_kwargs(settings, mesh, device)
    for block in blocks:
        fully_shard(block, **kwargs)
    fully_shard(root, **{**kwargs, "reshard_after_forward": settings["root_reshard_after_forward"]})
    depth = settings["prefetch_layers"]
    if depth < 1 or len(blocks) < 2:
        return  # (an empty backward list would mean torch's default of one block, not none)
    for i, block in enumerate(blocks):
        block.set_modules_to_forward_prefetch(blocks[i + 1:i + 1 + depth])
        if i:
            block.set_modules_to_backward_prefetch(blocks[max(0, i - depth):i][::-1])


class FSDPBackend(Backend):
    name = "fsdp"

    def __init__(self, model, cfg, strategy, layout, device) -> None:
        super().__init__(model, cfg, strategy, layout, device)
        # Built on the meta device (engine/train.py): sharded on shapes, then this rank's shards get storage and the
        # 1-rank run's initial values; a model built on the host (cpu_profile) is moved whole, then sharded.
        meta = any(p.is_meta for p in model.parameters())
        built = meta_init.Built(model) if meta else None
        if not meta:
            model.to(device)
        mesh = init_device_mesh(device.type, (dist.get_world_size(),))
        s = self.settings  # engine/settings.py fsdp_settings, also written to DIR/fsdp_config.json
        shard_units(transformer_layers(model), model, s, mesh, device)
        if meta:
            meta_init.materialise(built, [model], {}, device, cfg.optimizer.seed, targets=meta_init.model_targets)
            self.setup_param_bytes = param_storage_bytes(model)  # this rank's shards: the most it ever held
        self.model = model
        self.params = list(model.parameters())
        self.optimizer = make_adamw(self.params, s["optimizer"]["params"])
        self.scheduler = make_scheduler(self.optimizer, cfg)

    def micro_step(self, inputs: dict, last: bool) -> torch.Tensor:
        # Every micro-batch's backward reduce-scatters (engine/settings.py fsdp_settings "gradient_sync"): the
        # gradients accumulate in their sharded .grad, never a whole model's unsharded ones per rank
        self.model.set_requires_gradient_sync(last or self.settings["gradient_sync"] == "every_micro_batch")
        loss = self.model(**inputs).loss
        (loss / self.layout.grad_accum).backward()
        return loss.detach()

    def optimizer_step(self) -> float:
        return self._torch_optimizer_step(self.params, self.optimizer)

    reshardable = True  # full-model names in a DCP checkpoint: loads under tp/pp layouts too

    def save(self, path: Path) -> None:
        from scalestudy.engine.parallel import checkpoint

        checkpoint.save(path, list(self.model.named_parameters()), self.optimizer, self.scheduler)

    def load(self, path: Path) -> None:
        from scalestudy.engine.parallel import checkpoint

        checkpoint.load(path, list(self.model.named_parameters()), self.optimizer, self.scheduler)
        restore_lr(self.optimizer, self.scheduler)

    def close(self) -> None:
        del self.model, self.optimizer, self.scheduler, self.params
