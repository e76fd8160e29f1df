"""Unit-tier fixtures."""

import pytest


@pytest.fixture(scope="session")
def deepspeed_probe(deepspeed_rank_env) -> dict:
    """The real DeepSpeed launch both probes read (tests/unit/_deepspeed_probe.py), run once per session: the first
    slow test that asks for it pays it, the other reads the same results."""
    from _deepspeed_probe import run_probe

    return run_probe(deepspeed_rank_env)
