"""optimizer_loop "engine" on the torch-native engines is torch AdamW(fused=True): step.optimizer_loop_s prices it as
the fused update, and memory prices the same loop -- torch._fused_adamw_ steps in place, with no temporary of the
parameters' size (torch/optim/adam.py _fused_adam), where the foreach loop's _foreach_sqrt allocates one fp32 copy
(_multi_tensor_adam). costmodel/memory.py FOREACH_LOOPS, step_temporary_bytes."""

import pytest

from scalestudy.costmodel.estimate import estimate
from scalestudy.costmodel.memory import step_temporary_bytes
from scalestudy.specs.hardware import make_cluster
from scalestudy.specs.presets import get_model
from scalestudy.specs.strategy import Strategy, Workload

# gpt2-xl at one short sequence per rank with full recomputation: little activation memory, so the optimizer step's
# moment (states + its temporaries) is the rank's peak and the temporary shows in estimate's transient
WORK = Workload(global_batch=2, seq_len=128)
CASES = [Strategy(engine="fsdp", zero=3, micro_batch=1, recompute="full"),
         Strategy(engine="ddp", zero=0, micro_batch=1, recompute="full", grad_buckets="view")]


@pytest.mark.parametrize("st", CASES, ids=lambda s: s.engine)
def test_engine_default_prices_the_fused_step_it_times(st):
    model, cluster = get_model("gpt2-xl"), make_cluster("a100-80gb", 1, 2)
    engine = estimate(model, cluster, st, WORK)
    fused = estimate(model, cluster, st.replace(optimizer_loop="fused"), WORK)
    foreach = estimate(model, cluster, st.replace(optimizer_loop="foreach"), WORK)
    assert engine.memory == fused.memory  # no foreach temporary (fails where "engine" counts one)
    assert engine.step_s == fused.step_s  # and the same update in time
    # the foreach temporary: 4 B per parameter the rank steps, half its AdamW moments' 8 B (the same shard), is what
    # the step's moment holds beyond the fused one's
    temporary = foreach.memory.optimizer / 2
    assert foreach.memory.transient > 0
    assert engine.memory.transient == pytest.approx(max(0.0, foreach.memory.transient - temporary))


def test_step_temporaries_by_loop():
    psi, dp = 1e9, 8
    for engine, zero in (("fsdp", 3), ("ddp", 0), ("ddp", 1)):
        assert step_temporary_bytes(psi, dp, engine, zero, "bf16", False, "engine", 1, "view") == 0
        assert step_temporary_bytes(psi, dp, engine, zero, "bf16", True, "foreach", 1, "view") == \
            4 * psi / (dp if engine == "fsdp" or zero else 1)
