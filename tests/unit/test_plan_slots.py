"""The planner keeps one Point per strategy and one Candidate per feasible one: both are slotted (no per-instance
__dict__: fewer bytes and page faults on a plan's first call), and the planner's fast builders (space._point,
planner._candidate) give exactly what the dataclasses' own constructors give, frozen where the dataclass is."""

import dataclasses

import pytest

from scalestudy.plan.planner import Candidate, plan
from scalestudy.plan.space import Constraints, Point
from scalestudy.specs.hardware import make_cluster
from scalestudy.specs.presets import get_model
from scalestudy.specs.strategy import Workload


@pytest.fixture(scope="module")
def result():
    return plan(get_model("gpt2"), make_cluster("a100-40gb", 1, 8), Workload(global_batch=64, seq_len=1024),
                Constraints(micro_batch=(1, 2), tp=(1, 2), pp=(1, 2)))


def test_points_and_candidates_hold_no_instance_dict(result):
    assert len(result.candidates) > 10
    for c in result.candidates:
        assert not hasattr(c, "__dict__")
        assert not hasattr(c.point, "__dict__")


def test_fast_builders_equal_the_constructors(result):
    for c in result.candidates:
        p = c.point
        assert p == Point(p.strategy, p.nodes, p.dp, p.grad_accum)
        again = Candidate(p, c.estimate, c.device_memory_bytes, c.train_tokens)
        assert again == c
        # the fields the constructor derives, each as its formula reads
        assert c.headroom_bytes == int(c.device_memory_bytes - c.estimate.per_device_bytes)
        assert c.tokens_per_s == c.estimate.tokens_per_s
        assert c.world_size == p.dp * p.strategy.tp * p.strategy.pp


def test_point_stays_frozen(result):
    p = result.candidates[0].point
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.dp = 3
    assert dataclasses.replace(p, dp=p.dp).dp == p.dp
