"""Shared by the multi-process tests (the bundled corpus's tokenizer: tests/conftest.py): the one torchrun launch
that trains every 2-rank engine strategy (start-up, imports and the DDP baseline paid once)."""

from __future__ import annotations

import pytest

from _torchrun import run_worker

# Read by tests/multiproc/test_engine_equivalence.py (losses, counted memory, the settings each engine was handed)
# and test_engine_resume.py (+resume: killed after step 4, resumed from its checkpoint at 3, against the strategy's own
# losses).
# DDP first: the baseline every other strategy must reproduce. The offload runs last: on a fresh machine they
# JIT-compile DeepSpeed's CPU Adam first.
TWO_RANK_STRATEGIES = ["ddp:0", "ddp:1+resume", "fsdp:2", "fsdp:3+resume", "deepspeed:0", "deepspeed:1",
                       "deepspeed:2+resume", "deepspeed:3+resume", "deepspeed:3:full", "deepspeed:2:offload",
                       "deepspeed:3:offload:params"]


@pytest.fixture(scope="session")
def two_rank_runs(tmp_path_factory, bundled_tokenizer):
    """(run folder, {strategy: results}) of TWO_RANK_STRATEGIES, trained one after the other in one launch."""
    out = tmp_path_factory.mktemp("two-rank-strategies")
    return out, run_worker(out, TWO_RANK_STRATEGIES, tokenizer=bundled_tokenizer)
