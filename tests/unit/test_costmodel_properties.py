"""Property tests over random valid configurations (hypothesis): invariants the cost model must keep."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scalestudy.costmodel.estimate import estimate
from scalestudy.errors import ScalestudyError
from scalestudy.specs.hardware import make_cluster
from scalestudy.specs.presets import PRESETS
from scalestudy.specs.strategy import Strategy, Workload

MODELS = [n for n in PRESETS if not n.endswith("70b")]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=st.sampled_from(MODELS), gpu=st.sampled_from(["a100-40gb", "h100-80gb", "v100-32gb"]),
       nodes=st.sampled_from([1, 2, 4]), tp=st.sampled_from([1, 2, 4]), pp=st.sampled_from([1, 2]),
       mb=st.sampled_from([1, 2, 4]), accum=st.sampled_from([1, 2, 8]), seq=st.sampled_from([128, 512, 1024]),
       recompute=st.sampled_from(["none", "selective", "full"]), engine_zero=st.sampled_from(
           [("deepspeed", 0), ("deepspeed", 1), ("deepspeed", 2), ("deepspeed", 3), ("ddp", 0), ("ddp", 1),
            ("fsdp", 2), ("fsdp", 3)]))
def test_invariants(model, gpu, nodes, tp, pp, mb, accum, seq, recompute, engine_zero):
    engine, zero = engine_zero
    precision = "fp16" if gpu == "v100-32gb" else "bf16"
    cluster = make_cluster(gpu, nodes, 8)
    dp = cluster.world_size // (tp * pp)
    try:
        s = Strategy(engine=engine, zero=zero, tp=tp, pp=pp, micro_batch=mb, recompute=recompute,
                     precision=precision)
        e = estimate(PRESETS[model], cluster, s, Workload(mb * dp * accum, seq, seq // 4))
    except ScalestudyError:
        return  # invalid combinations must raise our error, never anything else
    assert e.step_s > 0 and 0 < e.mfu < 1 and e.hfu >= e.mfu * (1 - 1e-12)
    assert all(v >= 0 for v in e.memory.parts().values())
    assert abs(e.step_s - sum(e.time_parts().values())) < 1e-9 * e.step_s
    assert e.dp_comm_s <= e.dp_comm_total_s + 1e-12
    if engine == "deepspeed" and zero < 3 and pp == 1:
        lower = estimate(PRESETS[model], cluster, s.replace(zero=zero + 1), e.workload)
        assert lower.per_device_bytes <= e.per_device_bytes
