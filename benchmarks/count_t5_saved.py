"""What autograd saves for the backward of `train`'s Hugging Face T5, counted, per block, against the cost model.

Builds the model as `train` does (engine/models.build_model: fp32 weights, SDPA attention, dropout 0, no KV cache)
at a preset's widths with fewer blocks, runs one forward of a packed micro-batch (no padding: span corruption at
seq 512 / target 114) under the precision path of an engine, and records every tensor the autograd graph saves
(torch.autograd.graph.saved_tensors_hooks), deduplicated by storage. Each storage is charged to the block whose
forward saved it first (or "outside": embeddings, final norms, head and loss) and sorted into parameters (model
states), autocast's cached weight casts (alive until the autocast region exits) and activations.

    .venv/bin/python benchmarks/count_t5_saved.py [--model t5-large] [--layers 2] [--micro-batch 1]
        [--seq-len 512] [--target-len 114] [--path autocast|bf16-weights|fp32] [--device cpu|cuda] [--ops]

Paths: autocast -- torch.autocast(bf16) over fp32 weights (train's ddp and its recompute runs; FSDP2's
MixedPrecisionPolicy instead casts the weights themselves to bf16 with no autocast, which is the bf16-weights path
as far as activations go); bf16-weights -- the module in bf16, no autocast (DeepSpeed bf16); fp32.
On a CPU the SDPA call takes the math backend whenever the mask requires grad, so the attention core's saved tensors
are CPU-specific: --ops lists them by autograd node, and the script reports the attention core apart (the CUDA
memory-efficient kernel saves q, k, v, the bias, its output and the logsumexp instead). --device cuda runs the
same count on a GPU (its autocast lists and SDPA backends), and prints torch.cuda.max_memory_allocated beside it.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections import defaultdict

import torch

from scalestudy.engine.models import build_model
from scalestudy.specs.presets import get_model

CORE_NODES = ("ScaledDotProduct", "SafeSoftmax", "Softmax", "Bmm", "Baddbmm", "Where")  # SDPA and its CPU math decomposition


def _block_names(model) -> dict:
    """Module -> 'enc i' / 'dec i' for every module inside a block."""
    out = {}
    stacks = ((model.encoder, "enc"), (model.decoder, "dec")) if hasattr(model, "encoder") else ()
    for i, block in enumerate(model.transformer.h if not stacks else ()):  # GPT-2: decoder blocks only
        for m in block.modules():
            out[m] = f"dec {i}"
    for stack, tag in stacks:
        for i, block in enumerate(stack.block):
            for m in block.modules():
                out[m] = f"{tag} {i}"
    return out


def count(model, inputs: dict, ctx) -> tuple[dict, dict]:
    """({storage ptr: (block, module, dtype, shape, bytes)}, {storage ptr: {autograd node names}}) of one forward."""
    names = _block_names(model)
    qualified = {m: n for n, m in model.named_modules()}
    stack: list = []
    saved: dict = {}

    def pre(m, *_):
        stack.append(m)

    def post(m, *_):
        stack.pop()

    handles = [m.register_forward_pre_hook(pre) for m in model.modules()]
    handles += [m.register_forward_hook(post) for m in model.modules()]

    def pack(t):
        if t.device.type != "meta":
            ptr = t.untyped_storage().data_ptr()
            if ptr not in saved:
                inner = stack[-1] if stack else None
                block = names.get(inner, "outside")
                saved[ptr] = (block, qualified.get(inner, ""), t.dtype, tuple(t.shape),
                              t.untyped_storage().nbytes())
        return t

    try:
        with ctx, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = model(**inputs).loss
    finally:
        for h in handles:
            h.remove()
    return saved, _nodes(loss)


def _nodes(loss) -> dict:
    """Storage ptr -> names of the autograd nodes that saved a tensor on it (the graph walked from the loss)."""
    out: dict = defaultdict(set)
    seen, todo = set(), [loss.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for attr in dir(node):
            if attr.startswith("_saved_"):
                try:
                    val = getattr(node, attr)
                except RuntimeError:
                    continue
                for t in val if isinstance(val, (tuple, list)) else (val,):
                    if isinstance(t, torch.Tensor) and t.device.type != "meta":
                        out[t.untyped_storage().data_ptr()].add(type(node).__name__)
        todo.extend(fn for fn, _ in node.next_functions)
    return out


def classify(model, saved: dict, nodes: dict) -> dict:
    """Storage ptr -> kind: param (a parameter itself), weight-cast (a 16-bit copy of a parameter: autocast's cache),
    core (saved by the attention core only), act (every other activation)."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    sizes = {p.numel() for p in model.parameters() if p.dim() == 2}
    kinds = {}
    for ptr, (_, _, dtype, shape, nbytes) in saved.items():
        by = nodes.get(ptr, set())
        if ptr in params:
            kinds[ptr] = "param"
        elif len(shape) == 2 and dtype in (torch.bfloat16, torch.float16) and nbytes // 2 in sizes \
                and shape[0] * shape[1] == nbytes // 2 and by <= {"MmBackward0", "AddmmBackward0", "TBackward0"}:
            kinds[ptr] = "weight-cast"
        elif by and all(n.startswith(CORE_NODES) for n in by):
            kinds[ptr] = "core"
        else:
            kinds[ptr] = "act"
    return kinds


def _path(path: str, model, device: str):
    if path == "autocast":
        return torch.autocast(device, dtype=torch.bfloat16)
    if path == "bf16-weights":
        model.to(torch.bfloat16)
    import contextlib

    return contextlib.nullcontext()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="t5-large")
    p.add_argument("--layers", type=int, default=2, help="encoder and decoder blocks each")
    p.add_argument("--micro-batch", type=int, default=1)
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--target-len", type=int, default=114)
    p.add_argument("--path", choices=("autocast", "bf16-weights", "fp32"), default="autocast")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--ops", action="store_true", help="list every saved storage of the first blocks")
    a = p.parse_args()
    spec = dataclasses.replace(get_model(a.model), num_layers=a.layers, num_decoder_layers=a.layers)
    model = build_model(spec, seed=0, dropout=0.0).to(a.device)
    ctx = _path(a.path, model, a.device)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, spec.vocab_size, (a.micro_batch, a.seq_len), generator=g).to(a.device)
    labels = torch.randint(3, spec.vocab_size, (a.micro_batch, a.target_len), generator=g).to(a.device)
    if not spec.is_encoder_decoder:  # causal LM: the labels are the inputs, no decoder stream
        labels, a.target_len = ids, a.seq_len
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
    saved, nodes = count(model, inputs, ctx)
    kinds = classify(model, saved, nodes)
    report(a, spec, saved, nodes, kinds)
    if a.device == "cuda":
        print(f"  max_memory_allocated {torch.cuda.max_memory_allocated() / 1e6:.1f} MB (weights included)")


def report(a, spec, saved: dict, nodes: dict, kinds: dict) -> None:
    tokens = {"enc": a.micro_batch * a.seq_len, "dec": a.micro_batch * a.target_len}
    by: dict = defaultdict(float)
    for ptr, (block, _, _, _, nbytes) in saved.items():
        by[(block.split()[0], kinds[ptr])] += nbytes
    print(f"{a.model} widths, {a.layers}+{a.layers} blocks, mb {a.micro_batch}, seq {a.seq_len}/{a.target_len}, "
          f"path {a.path}, torch {torch.__version__}")
    for (stack, kind), nbytes in sorted(by.items()):
        per = nbytes / a.layers if stack in ("enc", "dec") else nbytes
        note = f"  = {per / tokens[stack] / spec.d_model:.2f} B per token x d_model" if stack in tokens else ""
        print(f"  {stack:8s} {kind:12s} {nbytes / 1e6:10.2f} MB  per block {per / 1e6:9.2f} MB{note}")
    if a.ops:
        for ptr, (block, mod, dtype, shape, nbytes) in saved.items():
            if block in ("enc 0", "dec 0", "outside"):
                print(f"    {block:7s} {kinds[ptr]:11s} {mod:45s} {str(dtype)[6:]:9s} {str(shape):22s} "
                      f"{nbytes / 1e6:8.2f} MB  {','.join(sorted(nodes.get(ptr, ())))}")


if __name__ == "__main__":
    main()
