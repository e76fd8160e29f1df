"""GPT-2's fused [q | k | v] projection under tensor parallelism, in one process (no process group needed):
the re-laid-out columns give each rank exactly its heads, and checkpoints keep the Hugging Face layout."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.distributed.checkpoint as dcp

from scalestudy.engine.models import build_model
from scalestudy.engine.parallel.checkpoint import CanonicalSlices
from scalestudy.engine.parallel.tensor_parallel import FusedColumns, _localise_heads
from scalestudy.specs.presets import get_model


@pytest.mark.parametrize("groups, dim", [(2, 0), (4, 1)])
def test_blocked_order_round_trips_and_every_range_maps_back(groups, dim):
    canonical = torch.randn(3 * 8 * groups, 5).movedim(0, dim)  # width 8 per part and group
    fused = FusedColumns(3, groups, dim)
    blocked = fused.to_blocks(canonical)
    assert torch.equal(fused.to_canonical(blocked), canonical) and not torch.equal(blocked, canonical)
    size = canonical.shape[dim]
    for start, length in [(0, size), (0, size // groups), (size // groups, size // groups), (5, 27), (size - 3, 3)]:
        pieces = fused.canonical_pieces(size, start, length)
        assert sum(run for _, _, run in pieces) == length
        for at, canon, run in pieces:
            assert torch.equal(blocked.narrow(dim, start + at, run), canonical.narrow(dim, canon, run))


def test_each_rank_computes_its_own_heads_of_the_fused_projection():
    """Rank r's slice of the blocked c_attn (q, k, v of heads 2r, 2r+1) with its rows of c_proj: summed over ranks
    (the row-parallel all-reduce), the attention output of the whole block."""
    tp = 2
    model = build_model(get_model("gpt2-tiny"), seed=3)
    block = model.transformer.h[0]
    x = torch.randn(2, 16, model.config.n_embd)
    full = block.attn(x)[0]
    fused_w, fused_b = FusedColumns(3, tp, 1), FusedColumns(3, tp, 0)
    weight, bias = fused_w.to_blocks(block.attn.c_attn.weight.detach()), fused_b.to_blocks(block.attn.c_attn.bias)
    cols, rows = weight.shape[1] // tp, block.attn.c_proj.weight.shape[0] // tp
    total = torch.zeros_like(full)
    for r in range(tp):
        local = copy.deepcopy(block)
        _localise_heads(local, tp)
        attn = local.attn
        with torch.no_grad():
            attn.c_attn.weight = torch.nn.Parameter(weight[:, r * cols:(r + 1) * cols].clone())
            attn.c_attn.bias = torch.nn.Parameter(bias[r * cols:(r + 1) * cols].clone())
            attn.c_attn.nf = cols  # (under DTensor the module keeps global shapes; here plain local tensors)
            attn.c_proj.weight = torch.nn.Parameter(attn.c_proj.weight[r * rows:(r + 1) * rows].clone())
            if r:  # the replicated bias is added once
                attn.c_proj.bias.zero_()
        total += attn(x)[0]
    torch.testing.assert_close(total, full, rtol=1e-5, atol=1e-6)


def test_checkpoint_holds_the_canonical_layout_and_loads_back_into_the_blocked_one(tmp_path):
    fused = FusedColumns(3, 2, 1)
    canonical = torch.randn(4, 3 * 2 * 5)
    blocked = fused.to_blocks(canonical)
    dcp.save({"w": CanonicalSlices(blocked, fused, for_save=True)}, checkpoint_id=str(tmp_path / "a"), no_dist=True)
    plain = torch.zeros_like(canonical)
    dcp.load({"w": plain}, checkpoint_id=str(tmp_path / "a"), no_dist=True)
    assert torch.equal(plain, canonical)  # what a dp or 1-rank layout reads
    dcp.save({"w": canonical}, checkpoint_id=str(tmp_path / "b"), no_dist=True)
    into = torch.zeros_like(blocked)
    dcp.load({"w": CanonicalSlices(into, fused, for_save=False)}, checkpoint_id=str(tmp_path / "b"), no_dist=True)
    assert torch.equal(into, blocked)  # read straight into the re-laid-out tensor
