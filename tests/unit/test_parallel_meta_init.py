"""Meta-device initialisation replays the 1-rank initialiser exactly into pipeline chunks, one layer's temporaries at
a time (one process; sharded tensors on real ranks: every layout of tests/multiproc/test_hybrid_equivalence.py)."""

from __future__ import annotations

import pytest
import torch

from scalestudy.engine.models import build_model
from scalestudy.engine.parallel.meta_init import Built, layer_of, materialise
from scalestudy.engine.parallel.stages import split_model
from scalestudy.specs.presets import get_model


@pytest.mark.parametrize("name, counts", [
    ("gpt2-tiny", [1, 1]),  # tied embedding and head: the head's chunk holds a copy
    ("llama-tiny", [2]),  # rotary tables (buffers)
    ("t5-tiny", [1, 1, 1, 1]),  # untied head's extra draw; mid-stack chunks get a copy of the position bias
])
def test_meta_built_chunks_get_the_one_rank_values(name, counts):
    spec = get_model(name)
    reference = build_model(spec, seed=3)
    expected = dict(list(reference.named_parameters()) + list(reference.named_buffers()))
    model = build_model(spec, seed=3, device="meta")
    assert all(p.is_meta for p in model.parameters())
    built = Built(model)
    chunks = split_model(model, spec.family, counts)
    materialiser = materialise(built, chunks, {}, torch.device("cpu"), seed=3)
    seen = set()
    for chunk in chunks:
        for n, p in chunk.named_parameters():
            assert torch.equal(p, expected[chunk.canonical[n]]), n
            seen.add(chunk.canonical[n])
        for n, b in chunk.named_buffers():
            assert torch.equal(b, expected[n]), n
    assert seen == {n for n, _ in reference.named_parameters()}
    layers = [m for m in model.modules() if layer_of(model).get(id(m)) == id(m)]
    in_layers = {id(p) for m in layers for p in m.parameters()}
    outside = sum(p.numel() for p in model.parameters() if id(p) not in in_layers)
    outside += sum(b.numel() for b in model.buffers())
    largest = max(sum(p.numel() for p in m.parameters()) for m in layers)
    assert len(layers) >= 2 and materialiser.peak <= outside + largest  # never the whole model at once
