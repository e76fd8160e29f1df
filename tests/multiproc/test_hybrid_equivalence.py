"""tp x pp x dp layouts give the 1-rank run's first five losses (fp32, same data order and seed), on real gloo ranks.

Each torchrun launch trains several layouts (start-up paid once per world size): Llama (a 4-layer llama-tiny with
grouped-query attention), T5 (t5-tiny: pipeline stages over the encoder, then the decoder) and GPT-2 (gpt2-tiny: its
fused q/k/v projection re-laid out per tp rank, checkpoints still in the Hugging Face layout). Pipeline schedules
gpipe, 1f1b and interleaved (2 virtual stages); data parallelism by replication or FSDP2 (ZeRO-2/3 style);
sequence parallelism on by default. Sharded checkpoints written under one layout resume under another.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from _torchrun import copy_session_data

WORKER = Path(__file__).with_name("hybrid_worker.py")
REL = 1e-4

pytestmark = [pytest.mark.dist, pytest.mark.slow]


def launch(out: Path, nproc: int, layouts: list[str]) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
           str(WORKER), str(out), *layouts]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return json.loads((out / "results.json").read_text())


@pytest.fixture(scope="module")
def reference(tmp_path_factory, bundled_tokenizer) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("hybrid")
    copy_session_data(bundled_tokenizer, out)  # the session's; hybrid_worker.py trains one otherwise
    results = launch(out, 1, ["llama:single", "t5:single", "gpt2:single"])
    for name, r in results.items():
        assert len(r["losses"]) == 5 and r["losses"][-1] < r["losses"][0], name  # it trains
    return out, {name.split(":")[0]: r for name, r in results.items()}


def assert_same_losses(results: dict, reference: dict, key: str = "losses") -> None:
    for name, r in results.items():
        assert r[key] == pytest.approx(reference[name.split(":")[0]]["losses"], rel=REL), name


def assert_same_grad_norms(results: dict, reference: dict) -> None:
    """The first step's global gradient norm (before clipping, from identical weights) over the whole mesh.

    Against the 1-rank run within 1e-4 (its norm is torch's fp32 clip_grad_norm_, ~2e-5 off the float64 value),
    and within 2e-6 between the layouts of one model in this launch (sharded, replicated, partial and tied
    gradients all counted once): the losses alone would not show a wrong norm, Adam cancels a uniform scale.
    """
    firsts: dict[str, list[float]] = {}
    for name, r in results.items():
        model = name.split(":")[0]
        assert r["grad_norms"][0] == pytest.approx(reference[model]["grad_norms"][0], rel=REL), name
        firsts.setdefault(model, []).append(r["grad_norms"][0])
    for model, norms in firsts.items():
        assert max(norms) - min(norms) <= 2e-6 * max(norms), (model, norms)


# FSDP2 units (fully_shard groups) on rank 0 (pp rank 0): its blocks, each its own unit, + one root per chunk
RANK0_FSDP_UNITS = {"llama:dp2xpp2:fsdp2:gpipe": 2 + 1, "t5:dp2xtp2:fsdp3": 4 + 1,
                    "t5:dp2xpp2:fsdp3:interleaved": 2 * (1 + 1), "gpt2:dp2xtp2:fsdp3": 2 + 1}


def assert_fsdp_reduce_scatters_every_micro_batch(results: dict) -> None:
    """train's FSDP2 reduce-scatters every unit in every micro-batch's backward (2 micro-batches a step at dp 2),
    pipelined or not (engine/parallel/pipeline.Stage keeps torch's stage from deferring it to the last one): the
    count the cost model prices (cpu_collectives.fsdp_calls_per_step; terms per micro-batch alike)."""
    from scalestudy.costmodel.cpu_collectives import fsdp_calls_per_step

    for name, units in RANK0_FSDP_UNITS.items():
        steps = len(results[name]["losses"])
        per_step = fsdp_calls_per_step(3 if "fsdp3" in name else 2, units, 2)["reduce_scatter"]
        assert results[name]["calls"]["reduce_scatter_single"] == steps * per_step, name


def test_two_rank_layouts_match_one_rank(reference):
    out, ref = reference
    layouts = [f"{m}:{dims}" for m in ("llama", "t5")
               for dims in ("tp2", "tp2:nosp", "pp2:gpipe", "pp2:1f1b", "pp2:interleaved")]
    # + activation checkpointing; T5 split after the first decoder layer (a chunk with encoder and decoder
    # layers); GPT-2's tied embedding and head on different stages
    layouts += ["llama:tp2:rc", "t5:pp2:stages=3,1:rc", "gpt2:pp2:1f1b", "gpt2:tp2", "gpt2:tp2:nosp"]
    moved = ["gpt2:dp2:fsdp3:from=tp2"]  # the re-laid-out c_attn saved canonically: FSDP2 (no tp) reads it
    results = launch(out, 2, layouts + moved)
    assert_same_losses({k: results[k] for k in layouts}, ref)
    assert_same_grad_norms({k: results[k] for k in layouts}, ref)
    assert results[moved[0]]["resumed_from"] == 3
    assert_same_losses({k: results[k] for k in moved}, ref, key="resumed")


def test_four_rank_layouts_match_one_rank_and_resume_across_layouts(reference):
    out, ref = reference
    layouts = ["llama:dp2xtp2", "llama:dp2xpp2:fsdp2:gpipe", "llama:tp2xpp2:interleaved", "t5:dp2xtp2:fsdp3",
               "t5:dp2xpp2:fsdp3:interleaved",
               "t5:tp2xpp2:stages=3,1",  # 1f1b; sequence parallel inside a chunk holding encoder and decoder layers
               "gpt2:dp2xtp2:fsdp3", "gpt2:tp2xpp2"]  # FSDP2 over the re-laid-out c_attn; tp in both stages
    moved = ["llama:dp4:fsdp3:from=tp2xpp2", "t5:tp2xpp2:from=dp4+fsdp2",  # killed after step 3, resumed
             "gpt2:dp2xtp2:fsdp2:from=dp4+fsdp3"]  # a canonical c_attn read into the re-laid-out, FSDP-sharded one
    results = launch(out, 4, layouts + moved)
    assert_same_losses({k: results[k] for k in layouts}, ref)
    assert_same_grad_norms({k: results[k] for k in layouts}, ref)
    assert_fsdp_reduce_scatters_every_micro_batch(results)
    for name in moved:
        assert results[name]["resumed_from"] == 3, name
    assert_same_losses({k: results[k] for k in moved}, ref, key="resumed")


def test_eight_rank_layouts_match_one_rank(reference):
    out, ref = reference
    results = launch(out, 8, ["llama:dp2xtp2xpp2:fsdp3:1f1b", "t5:dp2xtp2xpp2:gpipe"])
    assert_same_losses(results, ref)
    assert_same_grad_norms(results, ref)
