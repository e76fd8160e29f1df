"""pipeline_fill: the 1F1B fill and drain in closed form equals an event-by-event run of the schedule (each stage
runs Megatron's non-interleaved order: pp - 1 - k warm-up forwards, then one forward / one backward, then the
cool-down backwards; an op starts when its stage is free and its input has arrived), whatever stage is slowest."""

import pytest

from scalestudy.costmodel.pipeline_fill import fill_drain_s


def _run_1f1b(forward: list[float], backward: list[float], m: int) -> float:
    p = len(forward)
    orders = []
    for k in range(p):
        warm = min(p - k - 1, m)
        ops, f, b = [("F", j) for j in range(warm)], warm, 0
        while f < m:
            ops += [("F", f), ("B", b)]
            f, b = f + 1, b + 1
        ops += [("B", j) for j in range(b, m)]
        orders.append(ops)
    end = {}
    free, nxt = [0.0] * p, [0] * p
    while any(nxt[k] < len(orders[k]) for k in range(p)):
        for k in range(p):
            while nxt[k] < len(orders[k]):
                kind, j = orders[k][nxt[k]]
                ready = (0.0 if k == 0 else end.get(("F", k - 1, j))) if kind == "F" else \
                    end.get(("F", k, j) if k == p - 1 else ("B", k + 1, j))
                if ready is None:
                    break
                free[k] = max(free[k], ready) + (forward[k] if kind == "F" else backward[k])
                end[(kind, k, j)] = free[k]
                nxt[k] += 1
    return max(free)


@pytest.mark.parametrize("forward, backward", [
    ([1, 1, 1, 1], [2, 2, 2, 2]),  # equal stages: Narayanan's (m + pp - 1) x slot
    ([1, 1, 1, 1.5], [2, 2, 2, 3]),  # the LM head's last stage slowest
    ([107, 55], [214, 109]),  # a T5 split encoder-first (NeMo pp 2): the decoder stage hides in the encoder's
    ([53, 53, 27, 30], [107, 107, 55, 60]),  # the same at pp 4, the head on the last decoder stage
    ([3, 1, 1, 1], [6, 2, 2, 2]),  # the slowest first, light stages after it
    ([1, 2, 1, 1], [2, 4, 2, 2]),  # the slowest in the middle
    ([1.1, 1, 1, 1], [2.2, 2, 2, 2]),  # barely slower first stage
])
@pytest.mark.parametrize("m", [4, 8, 48])
def test_closed_form_is_the_schedule(forward, backward, m):
    slots = [f + b for f, b in zip(forward, backward)]
    k = max(i for i, x in enumerate(slots) if x >= max(slots))
    step = m * max(slots) + fill_drain_s(slots, forward[k] / slots[k], m)
    assert step == pytest.approx(_run_1f1b(forward, backward, m), rel=1e-12)


def test_gpipe_or_unknown_schedule_charges_every_other_stage_once():
    slots = [321.0, 164.0]
    assert fill_drain_s(slots, None, 10) == 164.0
    assert fill_drain_s(slots, 1 / 3, 1) == 164.0  # fewer micro-batches than stages: not the steady schedule
    assert fill_drain_s(slots, 1 / 3, 10) < 164.0  # 1F1B: the decoder stage waits in the encoder's warm-up only


@pytest.mark.parametrize("pp", [2, 4])
def test_t5_encoder_first_split_both_paths(pp):
    """A T5 over pp stages, encoder-first (its encoder stages the slowest): estimate() on one device type and the
    per-stage path (a device group of the same ranks) charge the same lighter fill and drain; GPipe still charges
    every decoder stage in full."""
    from scalestudy.costmodel.estimate import estimate
    from scalestudy.specs.hardware import ClusterSpec, DeviceGroup, get_device
    from scalestudy.specs.presets import get_model
    from scalestudy.specs.strategy import Strategy, Workload

    dev = get_device("a100-80gb")
    one = ClusterSpec(device=dev, nodes=2, gpus_per_node=8, name="one")
    grouped = ClusterSpec(device=dev, nodes=2, gpus_per_node=8, name="grouped", groups=(DeviceGroup(dev, 16, 1.0, 2),))
    st = Strategy(engine="megatron", zero=0, tp=2, pp=pp, micro_batch=8, recompute="none", precision="bf16",
                  attention="eager", sequence_parallel=False)
    work = Workload(global_batch=128, seq_len=512, target_len=128)
    a, b = estimate(get_model("t5-3b"), one, st, work), estimate(get_model("t5-3b"), grouped, st, work)
    assert a.step_s == pytest.approx(b.step_s, rel=5e-3)  # the per-stage path's own T5 stage terms differ ~0.25%
    assert a.bubble_s == pytest.approx(b.bubble_s, rel=2e-2)
    gpipe = estimate(get_model("t5-3b"), one, st.replace(pp_schedule="gpipe"), work)
    assert a.bubble_s < gpipe.bubble_s
    # by hand, on the per-stage path: GPipe charges every stage but the slowest in full; 1F1B saves L x the last
    # encoder stage's slot s minus the L decoder stages' slots after it -- its warm-up runs L forwards (f s each)
    # while they run the first micro-batch, its cool-down L backwards ((1 - f) s), and each wait is what is left
    # (pipeline_fill.hidden_after_slowest_s, both waits > 0: a decoder stage's slot is ~0.75 of an encoder stage's
    # with the blocks shared by seconds, block_seconds -- 0.45 by FLOPs, where the cool-down hid them whole)
    slots = [x.slot_s for x in b.stages]
    later = slots[pp // 2:]
    b_gpipe = estimate(get_model("t5-3b"), grouped, st.replace(pp_schedule="gpipe"), work)
    assert b_gpipe.bubble_s == pytest.approx(sum(slots) - max(slots), rel=1e-9)
    assert b_gpipe.bubble_s - b.bubble_s == pytest.approx(len(later) * slots[pp // 2 - 1] - sum(later), rel=1e-6)
