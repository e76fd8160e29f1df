"""Tensor x pipeline x data parallelism on one (pp, dp, tp) DeviceMesh, in the spirit of torchtitan.

Order of composition (each wraps the previous): the model is cut into pipeline chunks (parallel/stages.py), each
chunk's blocks are tensor-parallel over "tp" (parallel/tensor_parallel.py), then the chunk is FSDP2-sharded over
"dp" (engine fsdp: zero 3 reshards parameters after forward, zero 2 keeps them) or replicated over "dp" (engine
ddp zero 0: one flat gradient all-reduce after the step's backward). The pipeline schedule (parallel/pipeline.py)
runs the step's micro-batches; without pipeline parallelism they run one after another (gradient accumulation).
The optimizer is the same torch AdamW + schedule as every engine; clipping uses the norm over the whole mesh.
`scalestudy train` hands this backend a model built on the meta device: the cutting and sharding happen on shapes,
then each rank gives its own pieces storage and the 1-rank run's initial values (parallel/meta_init.py).
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule

from scalestudy.engine.backends.common import (Backend, MemoryParts, autocast, checkpoint_early_stop, make_adamw,
                                               make_scheduler, param_storage_bytes, restore_lr)
from scalestudy.engine.memory import StorageCounter, optimizer_state_tensors
from scalestudy.engine.parallel import grads, meta_init
from scalestudy.engine.parallel.mesh import build_mesh
from scalestudy.engine.parallel.stages import loss_function, split_model
from scalestudy.specs.parallel_layout import chunk_layer_counts


def model_family(model: torch.nn.Module) -> str:
    return model.config.model_type


def total_layers(model: torch.nn.Module, family: str) -> int:
    if family in ("t5", "mt5"):
        return len(model.encoder.block) + len(model.decoder.block)
    return model.config.num_hidden_layers


class HybridBackend(Backend):
    name = "hybrid"

    def __init__(self, model, cfg, strategy, layout, device) -> None:
        super().__init__(model, cfg, strategy, layout, device)
        # engine/settings.py: the fsdp/ddp settings + "parallel" (mesh, schedule, ...), written to DIR/*_config.json
        self.parallel = self.settings["parallel"]
        self.mesh = build_mesh(device, layout.pp, layout.dp, layout.tp)
        self.family = model_family(model)
        # Built on the meta device (engine/train.py): shapes only until this rank's pieces get storage and values.
        self.meta = any(p.is_meta for p in model.parameters())
        built = meta_init.Built(model) if self.meta else None
        counts = chunk_layer_counts(strategy, total_layers(model, self.family))
        chunks = split_model(model, self.family, counts)
        pp_rank = self.mesh.pp_rank
        self.chunks = [(s, c) for s, c in enumerate(chunks) if s % layout.pp == pp_rank]
        self.tied = self._tie_groups(chunks)
        del chunks
        for _, chunk in self.chunks:
            self._parallelize(chunk)
        self.fused = self._fused_layouts()
        if self.meta:  # storage for this rank's pieces, filled with the 1-rank run's initial values
            meta_init.materialise(built, [c for _, c in self.chunks], self.fused, device, cfg.optimizer.seed)
            self.setup_param_bytes = param_storage_bytes(*(c for _, c in self.chunks))  # the most it ever held
        self.params = [p for _, c in self.chunks for p in c.parameters()]
        self.tie_count = {id(p): n for name, n, _ in self.tied for p in self._copies(name)}
        self.optimizer = make_adamw(self.params, self.settings["optimizer"]["params"])
        self.scheduler = make_scheduler(self.optimizer, cfg)
        self.loss_fn = loss_function(self.family)
        self.pipeline = None
        if layout.pp > 1:
            from scalestudy.engine.parallel.pipeline import Pipeline

            self.pipeline = Pipeline(self.chunks, len(counts), device, self.mesh.group("pp"), layout.grad_accum,
                                     self.loss_fn, self.parallel["pp_schedule"])

    @property
    def dp_rank(self) -> int:
        return self.mesh.dp_rank

    # ---- construction ------------------------------------------------------------------------------------
    def _parallelize(self, chunk: torch.nn.Module) -> None:
        if not self.meta:
            chunk.to(self.device)
        if self.settings.get("autocast_dtype"):  # ddp's bf16: autocast forward, fp32 weights and gradients
            chunk.forward = autocast(self.device, self.settings["autocast_dtype"])(chunk.forward)
        if self.layout.tp > 1:
            from scalestudy.engine.parallel.tensor_parallel import apply_tensor_parallel

            apply_tensor_parallel(chunk, self.family, self.mesh.sub("tp"), self.parallel["sequence_parallel"],
                                  src_data_rank=None if self.meta else 0)  # meta: shapes, nothing to send
        if self.strategy.engine == "fsdp":
            from scalestudy.engine.backends.fsdp import shard_units

            blocks = [block for layers in chunk.layer_lists() for block in layers]
            shard_units(blocks, chunk, self.settings, self.mesh.sub("dp"), self.device)

    def _fused_layouts(self) -> dict:
        """Canonical name -> FusedColumns of the parameters tensor parallelism re-laid out (GPT-2's c_attn)."""
        if self.layout.tp == 1:
            return {}
        from scalestudy.engine.parallel.tensor_parallel import fused_layouts

        return {c.canonical[n]: f for _, c in self.chunks for n, f in fused_layouts(c).items()}

    def _copies(self, canonical: str) -> list[torch.nn.Parameter]:
        return [p for _, c in self.chunks for n, p in c.named_parameters() if c.canonical[n] == canonical]

    def _tie_groups(self, chunks) -> list[tuple[str, int, object]]:
        """(canonical name, copies in all chunks, process group over the pp ranks holding one) per tied parameter.

        Every rank creates every group (new_group is collective), in the same order.
        """
        holders: dict[str, list[int]] = {}
        for s, chunk in enumerate(chunks):
            for name in chunk.canonical.values():
                holders.setdefault(name, []).append(s % self.layout.pp)
        tied = []
        ranks = self.mesh.mesh.mesh  # (pp, dp, tp) tensor of global ranks
        me = dist.get_rank()
        for name in sorted(n for n, h in holders.items() if len(h) > 1):
            pp_ranks = sorted(set(holders[name]))
            mine = None
            if len(pp_ranks) > 1:
                for d in range(self.layout.dp):
                    for t in range(self.layout.tp):
                        members = [int(ranks[p, d, t]) for p in pp_ranks]
                        group = dist.new_group(members)
                        if me in members:
                            mine = group
            if self.mesh.pp_rank in pp_ranks:
                tied.append((name, len(holders[name]), mine))
        return tied

    # ---- training ----------------------------------------------------------------------------------------
    def forward_backward(self, micro_batches: list[dict]) -> torch.Tensor:
        with checkpoint_early_stop(self.strategy):
            return self._forward_backward(micro_batches)

    def _forward_backward(self, micro_batches: list[dict]) -> torch.Tensor:
        if self.pipeline is not None:
            batch = {k: torch.cat([mb[k] for mb in micro_batches]) for k in micro_batches[0]}
            return self.pipeline.step(batch)
        (_, chunk), = self.chunks
        total = 0.0
        for i, mb in enumerate(micro_batches):
            if isinstance(chunk, FSDPModule):  # reduce-scatter per micro-batch, as fsdp.py (settings "gradient_sync")
                chunk.set_requires_gradient_sync(i == len(micro_batches) - 1
                                                 or self.settings["gradient_sync"] == "every_micro_batch")
            logits = chunk(mb["input_ids"], attention_mask=mb["attention_mask"], labels=mb["labels"])
            loss = self.loss_fn(logits, mb["labels"])
            (loss / len(micro_batches)).backward()
            total = total + loss.detach()
        return total / len(micro_batches)

    def optimizer_step(self) -> float:
        grads.reduce_partial(self.params)
        if self.strategy.engine != "fsdp":  # replication over dp: FSDP reduce-scatters its own gradients
            grads.mean_over(self.params, self.mesh.group("dp"), self.layout.dp)
        for name, _, group in self.tied:
            grads.sum_tied(self._copies(name), group)
        stage_ranks = self.layout.dp * self.layout.tp
        norm = grads.global_norm(self.params, stage_ranks, self.tie_count)
        if self.settings["gradient_clipping"] > 0:
            grads.clip_(self.params, norm, self.settings["gradient_clipping"])
        counter = StorageCounter()
        params_bytes = counter.add(grads.local(p) for p in self.params)
        grads_bytes = counter.add(grads.local(p.grad) for p in self.params if p.grad is not None)
        self.optimizer.step()
        self.scheduler.step()
        self.memory = MemoryParts(params_bytes, grads_bytes, counter.add(optimizer_state_tensors(self.optimizer)))
        self.optimizer.zero_grad(set_to_none=True)
        return float(norm)

    # ---- checkpoints -------------------------------------------------------------------------------------
    reshardable = True  # its checkpoints load under any other layout (engine/parallel/checkpoint.py)

    def named_parameters(self) -> list[tuple[str, torch.nn.Parameter]]:
        """(full-model name, parameter) of every parameter this rank holds, tied copies included."""
        return [(c.canonical[n], p) for _, c in self.chunks for n, p in c.named_parameters()]

    def save(self, path: Path) -> None:
        from scalestudy.engine.parallel import checkpoint

        checkpoint.save(path, self.named_parameters(), self.optimizer, self.scheduler, self.fused)

    def load(self, path: Path) -> None:
        from scalestudy.engine.parallel import checkpoint

        checkpoint.load(path, self.named_parameters(), self.optimizer, self.scheduler, self.fused)
        restore_lr(self.optimizer, self.scheduler)

    def close(self) -> None:
        del self.pipeline, self.chunks, self.optimizer, self.scheduler, self.params
