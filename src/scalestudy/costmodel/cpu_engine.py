"""A CPU profile's engine overheads as the cost model adds them, less what the measured collective rates now price
explicitly: one definition for estimate() and the per-stage model (costmodel/stages.py).

The CPU profile's "<engine>-<zero>@multi" overhead (engine/cpu_profile.multi_rank_overheads) is what the engine cost
on several ranks beyond the model with the all_reduce fit's collective rates, at one configuration
(cpu_collectives.PROFILE_MULTI): it already holds the collectives' excess there. The cost model now prices each
collective at its measured rate (cpu_collectives.rate) and, for DeepSpeed and FSDP, their code paths' collectives
and buffer copies (cpu_collectives.gloo_dp_comm), so `multi_overhead` takes that excess out again: the step at
the profile's own configuration is the one measured, elsewhere the excess scales with the collectives. What the
engine does once per optimizer step (its step()) is timed apart and charged once per step (`engine_step_overhead`),
the rest per micro-step: a profile timed at accumulation 2 otherwise charges step() work ga/2 times. The
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
from scalestudy.specs.strategy import Strategy, Workload, resolve_software

_EXCESS: dict = {}
PER_STEP = "/step"  # engine_overhead_s key suffix: seconds per sublayer per optimizer step (`engine_step_overhead`)


def _probe_comm_total(device, engine: str, zero: int, accum: int) -> float:
    """Total data-parallel communication seconds per step of the profile's multi-rank configuration on `device`,
    at `accum` micro-batches."""
    from scalestudy.specs.presets import get_model

    p = PROFILE_MULTI
    tiny = get_model(p["model"])
    # the software estimate() resolves (eager HF T5 kernels), as _shape below is priced without it
    st = resolve_software(Strategy(engine=engine, zero=zero, precision="fp32", micro_batch=p["micro_batch"]), tiny)
    w = Workload(p["micro_batch"] * accum * p["nproc"], p["seq"], p["target"])
    cluster = ClusterSpec(device=device, nodes=1, gpus_per_node=p["nproc"])
    layout = model_layout(tiny, cluster, st, w)
    cal = stored()
    flash = st.attention == "flash"
    shape = _shape(tiny, device, st, 1, 1, w.seq_len, target_length(tiny, w), flash, False, 1.0,
                   (tiny.total_layers,), cal)
    ct = shape.compute
    return _dp_comm(st, engine_comm(engine), shape, cluster, links(cluster), layout.dp, 1, layout.grad_accum,
                    ct.forward, ct.backward, cal.overlap_interference)[1]


def profile_comm_excess(device, engine: str, zero: int) -> tuple[float, float]:
    """(seconds per sublayer per micro-step, seconds per sublayer per optimizer step) of the engine's "@multi"
    overhead that are its collectives running at their measured rather than the all_reduce fit's rate, at the
    profile's configuration ((0, 0) without ratios; negative where the measured rates at its message sizes beat
    the fit: then the overhead holds less comm than the fit said and gets that back). The model's communication
    is linear in the accumulation count: the per-micro-step part is its growth from 1 to the profile's 2."""
    if not measured(device):
        return 0.0, 0.0
    key = (id(device), engine, zero)
    hit = _EXCESS.get(key)
    if hit is not None and hit[0] is device:
        return hit[1]
    from scalestudy.specs.presets import get_model

    p = PROFILE_MULTI
    tiny = get_model(p["model"])
    plain_device = replace(device, collective_time_ratio={})
    one, two = ((_probe_comm_total(device, engine, zero, acc) - _probe_comm_total(plain_device, engine, zero, acc))
                for acc in (1, p["accum"]))
    sublayers = 2 * tiny.num_layers + 3 * tiny.num_decoder_layers
    micro = (two - one) / (p["accum"] - 1)
    excess = (micro / sublayers, (one - micro) / sublayers)  # < 0: the measured rates are faster than the fit
    _EXCESS[key] = (device, excess)
    return excess


def multi_overhead(device, engine: str, zero: int) -> float:
    """The profile's "<engine>-<zero>@multi" overhead per sublayer per micro-step, less what the collectives at
    their measured rates now cost explicitly (`profile_comm_excess`): per micro-step where the profile timed the
    step apart ("@multi/step", format 9), else all of it spread over the profile's micro-steps."""
    table = device.engine_overhead_s
    per = table.get(f"{engine}-{zero}@multi", 0.0)
    if per <= 0.0:
        return 0.0
    micro, step = profile_comm_excess(device, engine, zero)
    if f"{engine}-{zero}@multi{PER_STEP}" not in table:
        micro += step / PROFILE_MULTI["accum"]
    return max(0.0, per - micro)


def engine_overhead(device, engine: str, zero: int, world_size: int) -> float:
    """The profile's engine overhead (seconds per sublayer per micro-step) as the cost model adds it: the one-rank
    term, and on several ranks the "@multi" term less its collectives' excess (`multi_overhead`)."""
    per = device.engine_overhead_s.get(f"{engine}-{zero}", 0.0)
    return per + multi_overhead(device, engine, zero) if world_size > 1 else per


def engine_step_overhead(device, engine: str, zero: int, world_size: int) -> float:
    """The profile's engine overhead per sublayer per optimizer step (the "/step" keys, format 9): what the
    engine's step() costs beyond plain PyTorch's clip + AdamW, once per step whatever the accumulation count --
    DeepSpeed's boundary bookkeeping (flattening, norm, overflow check, copying the partition back), torch's
    ZeroRedundancyOptimizer (its per-tensor broadcasts), AdamW over FSDP's DTensor shards -- plus on several ranks
    the "@multi/step" part. 0 on a profile without them (older formats charged all of it per micro-step)."""
    table = device.engine_overhead_s
    per = table.get(f"{engine}-{zero}{PER_STEP}", 0.0)
    multi = table.get(f"{engine}-{zero}@multi{PER_STEP}", 0.0)
    if world_size <= 1 or multi <= 0.0:
        return per
    return per + max(0.0, multi - profile_comm_excess(device, engine, zero)[1])


def engine_hooks_s(device, engine: str, zero: int, world_size: int, accum: int, sublayers: float) -> float:
    """Seconds per optimizer step of the engine's own hooks and bookkeeping on `sublayers` sublayers (a CPU
    profile's engine overheads): every micro-step's (`engine_overhead`) and once more in step()
    (`engine_step_overhead`)."""
    return accum * sublayers * engine_overhead(device, engine, zero, world_size) \
        + sublayers * engine_step_overhead(device, engine, zero, world_size)
