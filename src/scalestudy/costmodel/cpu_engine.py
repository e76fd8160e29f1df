"""A CPU profile's engine overheads as the cost model adds them, less what the measured collective rates now price
explicitly: one definition for estimate() and the per-stage model (costmodel/stages.py).

The CPU profile's "<engine>-<zero>@multi" overhead (engine/cpu_profile.multi_rank_overheads) is what the engine cost
on several ranks beyond the model with the all_reduce fit's collective rates, at one configuration
(cpu_collectives.PROFILE_MULTI): it already holds the collectives' excess there. The cost model now prices each
collective at its measured rate (cpu_collectives.rate) and, for DeepSpeed and FSDP, their code paths' collectives
and buffer copies (cpu_collectives.gloo_dp_comm), so `multi_overhead` takes that excess out again: the step at
the profile's own configuration is the one measured, elsewhere the excess scales with the collectives. The
reference is the data-parallel communication of terms.py at the profile's configuration (what estimate() costs
there), computed here without estimate() itself, so stages.py can use it without an import circle.
"""

from __future__ import annotations

from dataclasses import replace

from scalestudy.costmodel.comm import links
from scalestudy.costmodel.constants import stored
from scalestudy.costmodel.cpu_collectives import PROFILE_MULTI, measured
from scalestudy.costmodel.engines import engine_comm
from scalestudy.costmodel.flops import target_length
from scalestudy.costmodel.terms import _dp_comm, _shape, model_layout
from scalestudy.specs.hardware import ClusterSpec
from scalestudy.specs.strategy import Strategy, Workload

_EXCESS: dict = {}


def _probe_comm_total(device, engine: str, zero: int) -> float:
    """Total data-parallel communication seconds per step of the profile's multi-rank configuration on `device`."""
    from scalestudy.specs.model import get_model

    p = PROFILE_MULTI
    tiny = get_model(p["model"])
    st = Strategy(engine=engine, zero=zero, precision="fp32", micro_batch=p["micro_batch"])
    w = Workload(p["micro_batch"] * p["accum"] * p["nproc"], p["seq"], p["target"])
    cluster = ClusterSpec(device=device, nodes=1, gpus_per_node=p["nproc"])
    layout = model_layout(tiny, cluster, st, w)
    cal = stored()
    flash = st.attention == "flash"
    shape = _shape(tiny, device, st, 1, 1, w.seq_len, target_length(tiny, w), flash, False, 1.0,
                   (tiny.total_layers,), cal)
    ct = shape.compute
    return _dp_comm(st, engine_comm(engine), shape, cluster, links(cluster), layout.dp, 1, layout.grad_accum,
                    ct.forward, ct.backward, cal.overlap_interference)[1]


def profile_comm_excess(device, engine: str, zero: int) -> float:
    """Seconds per sublayer per micro-step of the engine's "@multi" overhead that are its collectives running at
    their measured rather than the all_reduce fit's rate, at the profile's configuration (0 without ratios;
    negative where the measured rates at its message sizes beat the fit: then the overhead holds less comm than
    the fit said and gets that back)."""
    if not measured(device):
        return 0.0
    key = (id(device), engine, zero)
    hit = _EXCESS.get(key)
    if hit is not None and hit[0] is device:
        return hit[1]
    from scalestudy.specs.model import get_model

    p = PROFILE_MULTI
    tiny = get_model(p["model"])
    rated = _probe_comm_total(device, engine, zero)
    plain = _probe_comm_total(replace(device, collective_time_ratio={}), engine, zero)
    sublayers = 2 * tiny.num_layers + 3 * tiny.num_decoder_layers
    excess = (rated - plain) / (p["accum"] * sublayers)  # < 0: the measured rates are faster than the fit
    _EXCESS[key] = (device, excess)
    return excess


def multi_overhead(device, engine: str, zero: int) -> float:
    """The profile's "<engine>-<zero>@multi" overhead per sublayer per micro-step, less what the collectives at
    their measured rates now cost explicitly (`profile_comm_excess`)."""
    per = device.engine_overhead_s.get(f"{engine}-{zero}@multi", 0.0)
    if per <= 0.0:
        return 0.0
    return max(0.0, per - profile_comm_excess(device, engine, zero))



def engine_overhead(device, engine: str, zero: int, world_size: int) -> float:
    """The profile's engine overhead (seconds per sublayer per micro-step) as the cost model adds it: the one-rank
    term, and on several ranks the "@multi" term less its collectives' excess (`multi_overhead`)."""
    per = device.engine_overhead_s.get(f"{engine}-{zero}", 0.0)
    return per + multi_overhead(device, engine, zero) if world_size > 1 else per
