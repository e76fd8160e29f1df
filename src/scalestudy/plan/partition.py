"""Resource-aware pipeline partitioning: contiguous layer counts per stage for devices of different speed.

ERNIE 3.0 Titan and heterogeneous-cluster pipelines give faster devices more layers. Each pipeline layer costs its
forward FLOPs (costmodel/flops.py: T5 encoder layers over the source length, decoder layers over the target length
with cross-attention), the last stage also runs the LM head; a stage's time is its FLOPs / its device's speed. The
split minimises the slowest stage (dynamic programme over contiguous splits, every stage >= 1 layer), which sets a
pipeline's steady-state rate. Torch-free.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from scalestudy.costmodel.flops import forward_flops
from scalestudy.errors import ScalestudyError
from scalestudy.specs.model import ModelSpec


def layer_costs(spec: ModelSpec, seq_len: int, target_len: int = 0) -> tuple[list[float], float]:
    """Forward FLOPs per sequence of each pipeline layer in stage order, and of the LM head (last stage)."""
    whole = forward_flops(spec, seq_len, target_len)
    if not spec.is_encoder_decoder:
        return [whole.layers / spec.num_layers] * spec.num_layers, whole.head
    # FLOPs are linear in the decoder layer count: one more decoder layer costs `decoder`
    more = forward_flops(dataclasses.replace(spec, num_decoder_layers=spec.num_decoder_layers + 1), seq_len,
                         target_len).layers
    decoder = more - whole.layers
    encoder = whole.layers - decoder * spec.num_decoder_layers
    return [encoder / spec.num_layers] * spec.num_layers + [decoder] * spec.num_decoder_layers, whole.head


@dataclass(frozen=True)
class StagePlan:
    stage_layers: tuple[int, ...]
    stage_seconds: tuple[float, ...]  # forward + backward (3 x forward FLOPs) of one micro-batch, per stage

    @property
    def slowest_s(self) -> float:
        return max(self.stage_seconds)

    def step_seconds(self, micro_batches: int) -> float:
        """1F1B/GPipe step of `micro_batches`: fill and drain through every stage, then one micro-batch per
        slowest-stage interval (compute only; point-to-point sends are not counted)."""
        return sum(self.stage_seconds) + (micro_batches - 1) * self.slowest_s


def stage_seconds(costs: list[float], head: float, split: tuple[int, ...], flops_per_s: list[float],
                  micro_batch: int = 1) -> tuple[float, ...]:
    """Seconds per micro-batch of each stage: 3 x forward FLOPs (forward + backward) / its device's FLOP/s."""
    out, start = [], 0
    for k, n in enumerate(split):
        work = sum(costs[start:start + n]) + (head if k == len(split) - 1 else 0.0)
        out.append(3 * work * micro_batch / flops_per_s[k])
        start += n
    return tuple(out)


def balanced_split(costs: list[float], head: float, speeds: list[float]) -> tuple[int, ...]:
    """Contiguous layers per stage (each >= 1) minimising max over stages of work / speed."""
    n, pp = len(costs), len(speeds)
    if pp > n:
        raise ScalestudyError(f"{pp} pipeline stages cannot each hold a layer of a {n}-layer model")
    if any(v <= 0 for v in speeds):
        raise ScalestudyError(f"stage speeds must be > 0, got {','.join(map(str, speeds))}")
    prefix = [0.0]
    for c in costs:
        prefix.append(prefix[-1] + c)
    inf = float("inf")
    # best[k][j]: slowest time when the first k stages hold the first j layers; cut[k][j]: where stage k starts
    best = [[inf] * (n + 1) for _ in range(pp + 1)]
    cut = [[0] * (n + 1) for _ in range(pp + 1)]
    best[0][0] = 0.0
    for k in range(1, pp + 1):
        for j in range(k, n - (pp - k) + 1):
            extra = head if k == pp else 0.0
            for i in range(k - 1, j):
                t = max(best[k - 1][i], (prefix[j] - prefix[i] + extra) / speeds[k - 1])
                if t < best[k][j]:
                    best[k][j], cut[k][j] = t, i
    split, j = [], n
    for k in range(pp, 0, -1):
        i = cut[k][j]
        split.append(j - i)
        j = i
    return tuple(reversed(split))


def plan_stages(spec: ModelSpec, seq_len: int, target_len: int, flops_per_s: list[float],
                micro_batch: int = 1) -> StagePlan:
    """The resource-aware split for pipeline devices of the given speeds (FLOP/s, or any common unit) and the
    predicted seconds per micro-batch of every stage."""
    costs, head = layer_costs(spec, seq_len, target_len)
    split = balanced_split(costs, head, flops_per_s)
    return StagePlan(split, stage_seconds(costs, head, split, flops_per_s, micro_batch))


def auto_stage_layers(run, speeds: list[float]):
    """`run` (a RunConfig) with stage_layers chosen for pipeline devices of relative `speeds`; and the plan and
    the even split's plan (same units) for comparison."""
    strategy = run.strategy
    if strategy.pp < 2 or len(speeds) != strategy.pp:
        raise ScalestudyError(f"--stage-layers auto needs --pp >= 2 and one --stage-speeds value per pipeline rank "
                              f"(pp {strategy.pp}, {len(speeds)} speed(s) given)")
    if strategy.virtual_stages != 1:
        raise ScalestudyError("--stage-layers auto splits contiguous stages: not with the interleaved schedule")
    spec, workload = run.model_spec(), run.to_workload()
    plan = plan_stages(spec, workload.seq_len, workload.target_len, speeds, strategy.micro_batch)
    costs, head = layer_costs(spec, workload.seq_len, workload.target_len)
    even = strategy.replace(stage_layers=()).stage_split(len(costs))
    baseline = StagePlan(even, stage_seconds(costs, head, even, speeds, strategy.micro_batch))
    return run.replace(stage_layers=list(plan.stage_layers)), plan, baseline
