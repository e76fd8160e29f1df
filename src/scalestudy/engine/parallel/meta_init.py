"""Meta-device initialisation: each rank builds the model's shapes only, cuts, shards and materialises just its own
pieces, then fills them with exactly the values the 1-rank run draws.

The 1-rank run (engine/models.py `build_model`) draws every initial value in `initialise_weights`: Hugging Face's
initialiser module by module (children before parents), then the untied T5 head. Here that same routine runs, in
the same order, on the meta-built model, each rank consuming the whole random stream: just before a module's
initialiser runs, its parameters and buffers get full-size temporaries (a tied parameter shares one); when a layer
(an element of a layer list: a GPT-2/Llama/T5 block) has been initialised, its values are sliced into this rank's
shards and its temporaries dropped; the other modules (embeddings, heads, final norms, rotary tables) are sliced at
the end. Peak memory: one layer plus the non-layer parameters, instead of the whole model on every rank.

A value reaches every tensor of this rank with its canonical name: the module's own parameter (a tensor-parallel
DTensor, possibly FSDP-sharded on top, or a plain replicated tensor) and the copies other pipeline chunks hold
(tied embeddings, T5's position bias). A DTensor gets the region DCP would save for it (the same local shape and
global offset), after the tensor-parallel re-layout of fused projections (GPT-2's [q | k | v]).
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn
from torch.distributed.tensor import DTensor
from torch.distributed.tensor._utils import compute_local_shape_and_global_offset


TABLES = ("_parameters", "_buffers", "_modules")


class Built:
    """The meta-built model as it was built, taken before it is cut and sharded: each module's tensor slots by
    canonical name (a tied tensor's first name, as `named_parameters` gives it), its attributes and class. Cutting
    may change shared modules (T5: the first block of a mid-stack chunk gets a copy of the position-bias table) and
    sharding replaces tensors and classes; the initialiser must see the model as built, so it runs inside
    `restored()`."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        first: dict[int, str] = {}
        self.names: dict[tuple[int, str], str] = {}  # (id(module), slot) -> canonical name
        for prefix, module in model.named_modules(remove_duplicate=False):
            for table in (module._parameters, module._buffers):
                for slot, t in table.items():
                    if t is not None:
                        name = first.setdefault(id(t), f"{prefix}.{slot}" if prefix else slot)
                        self.names[(id(module), slot)] = name
        self.attributes = [(m, self._copy(m)) for m in model.modules()]
        # FSDP2 gives each sharded module a subclass; Hugging Face reads the class (is_custom_code), so it is restored
        self.classes = [(m, type(m)) for m in model.modules()]

    @staticmethod
    def _copy(module: nn.Module) -> dict:
        return {k: dict(v) if k in TABLES else v for k, v in module.__dict__.items()}

    @contextmanager
    def restored(self):
        """Every module's attributes and class as built (tensors still meta) for the duration, then as they are now."""
        now = [(m, self._copy(m)) for m, _ in self.attributes]
        now_classes = [(m, type(m)) for m, _ in self.classes]
        try:
            for m, built in self.attributes:
                m.__dict__.clear()
                m.__dict__.update(built)
            for m, cls in self.classes:
                m.__class__ = cls
            yield
        finally:
            for m, attributes in now:
                m.__dict__.clear()
                m.__dict__.update(attributes)
            for m, cls in now_classes:
                m.__class__ = cls


def layer_of(model: nn.Module) -> dict[int, int]:
    """id(module) -> id(its layer) for every module inside a layer: the outermost elements of module lists (the
    blocks), whose values are placed as soon as each has been initialised."""
    owner: dict[int, int] = {}

    def walk(module: nn.Module) -> None:
        if isinstance(module, nn.ModuleList):
            for layer in module:
                owner.update((id(m), id(layer)) for m in layer.modules())
            return
        for child in module.children():
            walk(child)

    walk(model)
    return owner


@torch.no_grad()
def _place(value: torch.Tensor, target: torch.Tensor, fused) -> None:
    if isinstance(target, DTensor):
        if fused is not None:
            value = fused.to_blocks(value)
        shape, offset = compute_local_shape_and_global_offset(target.shape, target.device_mesh, target.placements)
        region = value[tuple(slice(o, o + n) for o, n in zip(offset, shape))]
        target._local_tensor.copy_(region)
    else:
        target.copy_(value)


class Materialiser:
    """`on_module` for engine/models.py `initialise_weights`, and a context that places what is left at exit.

    built:   the model as built on the meta device (run the initialiser inside `built.restored()`);
    targets: canonical name -> this rank's tensors holding it (already given storage, e.g. by `to_empty`);
    fused:   canonical name -> FusedColumns of tensors stored re-laid out.
    """

    def __init__(self, built: Built, targets: dict[str, list[torch.Tensor]], fused: dict,
                 device: torch.device) -> None:
        self.names, self.targets, self.fused, self.device = built.names, targets, fused, device
        self.layer_of = layer_of(built.model)
        self.values: dict[str, torch.Tensor] = {}  # canonical name -> full-size temporary
        self.swapped: dict[str, list[tuple[dict, str, torch.Tensor]]] = {}  # canonical -> (table, slot, original)
        self.owner: dict[str, int | None] = {}  # canonical -> the layer it was first staged in (None: outside)
        self.placed: set[str] = set()
        self.staged = self.peak = 0  # elements in temporaries: now, and the most at once

    def _stage(self, module: nn.Module) -> None:
        layer = self.layer_of.get(id(module))
        for table in (module._parameters, module._buffers):
            for slot, t in list(table.items()):
                name = self.names.get((id(module), slot))
                if t is None or name is None:
                    continue
                if name in self.placed:
                    raise RuntimeError(f"initialising {name} again after its layer was placed")
                if name not in self.values:
                    self.values[name] = torch.empty(t.shape, dtype=t.dtype, device=self.device)
                    self.owner[name] = layer
                    self.staged += t.numel()
                    self.peak = max(self.peak, self.staged)
                self.swapped.setdefault(name, []).append((table, slot, t))
                table[slot] = self.values[name]

    def _place(self, names: list[str]) -> None:
        for name in names:
            value = self.values.pop(name)
            self.staged -= value.numel()
            for target in self.targets.get(name, ()):
                _place(value, target, self.fused.get(name))
            for table, slot, original in self.swapped.pop(name):
                table[slot] = original
            self.placed.add(name)

    def __call__(self, module: nn.Module, init) -> None:
        """Run `init(module)` with full-size temporaries in the module's own tensor slots."""
        self._stage(module)
        init(module)
        if self.layer_of.get(id(module)) == id(module):  # a layer runs after its children: its values are final
            self._place([n for n, layer in self.owner.items() if layer == id(module) and n in self.values])

    def __enter__(self) -> "Materialiser":
        return self

    def __exit__(self, exc_type, *_) -> None:
        if exc_type is None:
            self._place(list(self.values))


def to_empty(modules: list[nn.Module], device: torch.device) -> None:
    """Storage (uninitialised) for every meta tensor of `modules`, ties kept: `Module.to_empty` gives each module's
    plain parameter its own new tensor, so a parameter shared by several modules (GPT-2's embedding and head, T5's
    shared embedding) is pointed back to one."""
    groups: dict[int, list[tuple[dict, str]]] = {}
    seen: set[int] = set()
    for root in modules:
        for module in root.modules():
            if id(module) in seen:
                continue
            seen.add(id(module))
            for slot, p in module._parameters.items():
                if p is not None:
                    groups.setdefault(id(p), []).append((module._parameters, slot))
    for root in modules:
        root.to_empty(device=device)
    for group in groups.values():
        (table, slot), *rest = group
        for other, other_slot in rest:
            other[other_slot] = table[slot]


def chunk_targets(chunks) -> dict[str, list[torch.Tensor]]:
    """canonical name -> the tensors this rank's chunks hold under it (parameters by `chunk.canonical`, buffers by
    their path, which chunks keep from the full model)."""
    targets: dict[str, list[torch.Tensor]] = {}
    seen: set[int] = set()
    for chunk in chunks:
        pairs = [(chunk.canonical[n], p) for n, p in chunk.named_parameters()] + list(chunk.named_buffers())
        for name, t in pairs:
            if id(t) not in seen:
                seen.add(id(t))
                targets.setdefault(name, []).append(t)
    return targets


def model_targets(models: list[nn.Module]) -> dict[str, list[torch.Tensor]]:
    """canonical name -> this rank's tensor, for a whole model sharded in place (the FSDP backend: one model, no
    chunks): its own parameter and buffer names (`named_parameters` gives a tied parameter once, under its first
    name, as `Built` names it)."""
    (model,) = models
    return {name: [t] for name, t in [*model.named_parameters(), *model.named_buffers()]}


def materialise(built: Built, chunks: list[nn.Module], fused: dict, device: torch.device, seed: int,
                targets=chunk_targets) -> Materialiser:
    """Give this rank's `chunks` storage on `device` and the values `build_model(seed=seed)` gives the 1-rank run
    (`targets`: chunk_targets for pipeline chunks, model_targets for one whole model)."""
    from scalestudy.engine.models import initialise_weights

    to_empty(chunks, device)
    targets = targets(chunks)
    torch.manual_seed(seed)  # where engine/models.py build_model starts drawing
    with built.restored(), Materialiser(built, targets, fused, torch.device("cpu")) as materialiser:
        initialise_weights(built.model, on_module=materialiser)
    return materialiser
