"""Where the NeMo launcher CI's T5 3B step goes as data parallelism grows (nemoci2208t5 / nemoci2209t5: NeMo 1.11 /
1.12, bf16 O2, conf/training/t5/3b.yaml, global batch 1920, micro-batch 24).

At a fixed global batch the micro-batches per step m fall as 1/dp, so any per-step residual shows as an error that
grows with the node count, while a cost linear in dp (ring latency, a per-rank straggler) grows with dp itself.
The tp-2 series (1 / 4 / 5 / 20 nodes: dp 4 / 16 / 20 / 80, four data-parallel ranks per node, m 20 / 5 / 4 / 1)
separates the two: its published-minus-predicted step (seconds) is a + b m with no dp term left, so the model's
all-reduce (engine megatron zero 0: the fp32 main-gradient buffer over the data-parallel group) carries the growth.

The tp-8 pair (1 and 4 nodes: dp 1 and 4, ONE data-parallel rank per node) does not: the 4-node step exceeds 20 of
the 1-node row's micro-batch slots by 2.5x the all-reduce the model prices there, in both containers. That is the
open gap (the mT5 rows' per-step premium is a separate one: test_mt5_t5_same_container.py); a rule that prices it
moves the bound below. Seconds per optimizer step throughout; published step = global batch x 512 / tokens per s."""

import pytest

from scalestudy.costmodel.estimate import estimate
from scalestudy.costmodel.published import _setup, load

ROWS = {r["id"]: r for r in load()["throughput"]}
CONTAINERS = ("nemoci2208", "nemoci2209")


def _published_step_s(row: dict) -> float:
    return row["global_batch"] * row["model"]["seq"] / float(row["published"])


def _estimate(row_id: str):
    return estimate(*_setup(ROWS[row_id]))


def _residual_s(row_id: str) -> tuple[int, int, float]:
    """(dp, micro-batches per step, published step - predicted step) of one row."""
    est = _estimate(row_id)
    return est.layout.dp, est.layout.grad_accum, _published_step_s(ROWS[row_id]) - est.step_s


def _line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares (intercept, slope) of y over x."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    slope = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)
    return my - slope * mx, slope


@pytest.mark.parametrize("container", CONTAINERS)
def test_tp2_residual_is_per_micro_batch_not_per_rank(container):
    series = [_residual_s(f"{container}-t5-3b-tp2pp1-{n}n") for n in (1, 4, 5, 20)]
    assert [dp for dp, _, _ in series] == [4, 16, 20, 80] and [m for _, m, _ in series] == [20, 5, 4, 1]
    intercept, slope = _line([(m, r) for _, m, r in series])
    # reached: intercept +0.004 / -0.014 s, slope -0.2 / +1.0 ms per micro-batch (5.6 / 6.9 before e69068a priced
    # the eager attention cores at their score traffic); within ~2% of the 0.50 s slot either way
    assert abs(intercept) < 0.03 and abs(slope) < 0.012, (intercept, slope)
    left = [r - (intercept + slope * m) for _, m, r in series]
    # reached: 0.019 / 0.022 s at most. A missing k s per data-parallel rank would leave 76 k between dp 4 and 80
    # beside the line, so k < ~0.5 ms.
    assert max(abs(x) for x in left) < 0.03, left


@pytest.mark.parametrize("container", CONTAINERS)
def test_one_rank_per_node_all_reduce_is_the_open_gap(container):
    one, four = f"{container}-t5-3b-tp8pp1-1n", f"{container}-t5-3b-tp8pp1-4n"
    est1, est4 = _estimate(one), _estimate(four)
    assert (est1.layout.dp, est4.layout.dp, est1.layout.grad_accum, est4.layout.grad_accum) == (1, 4, 80, 20)
    assert est1.dp_comm_s == 0.0  # one node, tp 8: no data-parallel traffic at all
    slot = (_published_step_s(ROWS[one]) - est1.optimizer_s) / est1.layout.grad_accum
    beyond_slots = _published_step_s(ROWS[four]) - est4.optimizer_s - est4.layout.grad_accum * slot
    # reached: 0.243 / 0.244 s published beside the model's 0.096 s fp32 all-reduce of 0.35e9 gradients over 4
    # nodes (one NIC each); at tp 2 (four ranks per node, test above) the same measure is 0.09-0.12 s vs 0.122 s
    assert 0.2 < beyond_slots < 0.3, beyond_slots
    assert est4.dp_comm_total_s < 0.45 * beyond_slots, (est4.dp_comm_total_s, beyond_slots)
