"""Host time FSDP2 (`fully_shard`, what `train --engine fsdp` runs) adds to a forward + backward, measured on this
host with the installed torch: per unit and per parameter, on one gloo rank (world size 1).

Why: the cost model prices no host time for FSDP on GPUs (engines.yaml fetch_host_s is 0 for fsdp, its per-unit hooks
'priced inside its gathers'), yet FSDP2's hooks run Python per unit and per parameter in every pass. At world size 1
FSDP2 does not skip them: _fsdp_param_group.py unshard() records an event instead of the all-gather, then
wait_for_unshard() loops over the unit's parameters (all_gather_inputs -- the cast to param_dtype --,
init_all_gather_outputs, alloc_storage, copy_), init_unsharded_param and the module attribute swaps; reshard frees
and swaps back; post_backward runs foreach_reduce (copy-in, a copy instead of the reduce-scatter) and builds each
parameter's sharded DTensor gradient. Where a pass's host time exceeds its device time the step is host-bound.

The model is `units` blocks of `per_unit` bias-free 16 x 16 Linears (tiny: the CPU's arithmetic is negligible, what is
timed is Python and dispatch), each block fully_shard'ed, then the root (reshard_after_forward True for the blocks,
False for the root, as engine/settings.py fsdp_settings on GPUs), with and without train's MixedPrecisionPolicy
(bf16 params, fp32 reduce). The same model without fully_shard is the baseline. Prints the calling thread's CPU
seconds (time.thread_time: the host work, not the machine's load) per forward + backward, medians, and the least-
squares split of the FSDP2 excess t = units x per_unit_s + parameters x per_param_s over the shapes.
CPU tensors: on a CUDA device the copies and casts are kernel launches instead (not counted beyond their dispatch),
and the all-gather / reduce-scatter streams add event records; a DGX host's cores run Python at another speed.

    .venv/bin/python benchmarks/bench_fsdp2_host.py [--repeat 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist

SHAPES = ((24, 2), (24, 10), (48, 10), (48, 14))  # (units, parameters per unit): T5 blocks hold 8 (encoder) / 13


def _model(units: int, per_unit: int) -> torch.nn.Module:
    return torch.nn.Sequential(*[torch.nn.Sequential(*[torch.nn.Linear(16, 16, bias=False)
                                                       for _ in range(per_unit)]) for _ in range(units)])


def _sharded(units: int, per_unit: int, mixed: bool) -> torch.nn.Module:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    model = _model(units, per_unit)
    kwargs = {"mesh": init_device_mesh("cpu", (1,)), "reshard_after_forward": True}
    if mixed:
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model:
        fully_shard(block, **kwargs)
    fully_shard(model, **{**kwargs, "reshard_after_forward": False})
    return model


def _step_s(model: torch.nn.Module, repeat: int) -> float:
    x = torch.randn(4, 16)
    runs = []
    for i in range(repeat + 2):  # the first two warm the dispatcher and FSDP's lazy init
        t0 = time.thread_time()
        model(x).float().sum().backward()
        if i >= 2:
            runs.append(time.thread_time() - t0)
    return statistics.median(runs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MASTER_PORT", "29617"), RANK="0",
                      WORLD_SIZE="1")
    dist.init_process_group("gloo")
    print(f"torch {torch.__version__}; forward + backward, calling thread's CPU seconds (median of {args.repeat}), "
          "one gloo rank")
    for mixed in (False, True):
        rows = []
        for units, per_unit in SHAPES:
            plain = _step_s(_model(units, per_unit), args.repeat)
            fsdp = _step_s(_sharded(units, per_unit, mixed), args.repeat)
            rows.append((units, units * per_unit, fsdp - plain))
            per_param = (fsdp - plain) / (units * per_unit)
            print(f"  mp {'bf16' if mixed else 'none'}  units {units:3d}  params {units * per_unit:4d}  plain "
                  f"{1e3 * plain:7.2f} ms  fsdp2 {1e3 * fsdp:7.2f} ms  excess {1e6 * per_param:6.1f} us per parameter")
        # excess = units x a + params x b, least squares
        suu = sum(u * u for u, _, _ in rows)
        sup = sum(u * p for u, p, _ in rows)
        spp = sum(p * p for _, p, _ in rows)
        bu = sum(u * t for u, _, t in rows)
        bp = sum(p * t for _, p, t in rows)
        det = suu * spp - sup * sup
        a = (bu * spp - bp * sup) / det
        b = (suu * bp - sup * bu) / det
        print(f"fit, mp {'bf16' if mixed else 'none'}: {1e6 * a:.1f} us per unit + {1e6 * b:.1f} us per parameter, "
              "per forward + backward")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
