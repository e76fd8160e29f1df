"""Clusters mixing device types: cluster YAML groups, per-stage estimate bound by the slowest stage, the planner's
resource-aware stage layers (speed and memory), measured stage speeds."""

from __future__ import annotations

import json

import pytest

from scalestudy.costmodel.estimate import estimate
from scalestudy.costmodel.stages import pipeline_seconds, stage_devices
from scalestudy.errors import ScalestudyError
from scalestudy.plan.partition import resource_split
from scalestudy.plan.planner import default_precision, plan
from scalestudy.plan.space import Constraints
from scalestudy.specs.hardware import get_device, load_cluster, make_cluster, with_stage_speeds
from scalestudy.specs.presets import get_model
from scalestudy.specs.strategy import Strategy, Workload

MIXED = """\
name: a100-v100
gpus_per_node: 8
groups:
  - {device: a100-80gb, nodes: 2}
  - {device: v100-32gb, nodes: 2}
"""


@pytest.fixture
def mixed(tmp_path):
    path = tmp_path / "mixed.yaml"
    path.write_text(MIXED)
    return load_cluster(path)


def test_cluster_yaml_groups_place_stages_in_rank_order(mixed):
    assert mixed.heterogeneous and mixed.world_size == 32 and mixed.nodes == 4 and mixed.gpus_per_node == 8
    assert mixed.label == "16 x a100-80gb + 16 x v100-32gb"
    assert default_precision(mixed) == "fp16"  # the V100 has no bf16
    assert [s.devices for s in stage_devices(mixed, 2, "fp16")] == [("a100-80gb",), ("v100-32gb",)]
    # pp 1: every stage spans both types -> bound by the slower device and the smaller memory
    (whole,) = stage_devices(mixed, 1, "fp16")
    assert whole.device.name == "v100-32gb" and whole.capacity_bytes == get_device("v100-32gb").memory_bytes
    assert mixed.with_nodes(2).heterogeneous is False  # the first two nodes are the A100s
    assert mixed.with_nodes(3).label == "16 x a100-80gb + 8 x v100-32gb"
    assert json.loads(json.dumps(mixed.to_dict()))["groups"][1]["device"] == "v100-32gb"


def test_group_devices_by_yaml_next_to_the_cluster_file_or_inline(tmp_path, monkeypatch):
    from dataclasses import asdict

    (tmp_path / "hw").mkdir()
    slow = {**asdict(get_device("a100-40gb")), "name": "a100-slow", "peak_flops": {"bf16": 100e12}}
    import yaml

    (tmp_path / "hw" / "slow.yaml").write_text(yaml.safe_dump(slow))
    (tmp_path / "hw" / "cluster.yaml").write_text(
        "gpus_per_node: 2\ngroups:\n  - {device: slow.yaml, nodes: 1}\n"
        f"  - device: {json.dumps({**slow, 'name': 'inline'})}\n    nodes: 1\n")
    monkeypatch.chdir(tmp_path)  # the device file is found beside the cluster file, not in the cwd
    c = load_cluster("hw/cluster.yaml")
    assert [g.device.name for g in c.groups] == ["a100-slow", "inline"]


def test_groups_of_one_device_are_a_plain_cluster(tmp_path):
    path = tmp_path / "same.yaml"
    path.write_text("gpus_per_node: 4\ngroups:\n  - {device: a100-40gb, nodes: 1}\n  - {device: a100-40gb, nodes: 2}\n")
    c = load_cluster(path)
    assert not c.heterogeneous and c.nodes == 3 and c.world_size == 12 and c.device.name == "a100-40gb"


def test_estimate_is_bound_by_the_slowest_stage(mixed):
    spec, work = get_model("gpt2-xl"), Workload(global_batch=64, seq_len=1024)
    even = estimate(spec, mixed, Strategy(zero=1, pp=2, precision="fp16"), work)
    m = even.layout.grad_accum
    assert [x.layers for x in even.stages] == [24, 24] and [x.device for x in even.stages] == ["a100-80gb",
                                                                                            "v100-32gb"]
    slots = [x.slot_s for x in even.stages]
    assert slots[1] > slots[0]  # same layers on the slower device
    # the predicted step is the slowest stage's formula: fill/drain + (m - 1) x slowest slot + slowest tail
    assert even.step_s == pytest.approx(sum(slots) + (m - 1) * max(slots) + max(x.tail_s for x in even.stages))
    assert even.step_s == pytest.approx(pipeline_seconds(even.stages, m))
    parts = sum(even.time_parts().values())
    assert parts == pytest.approx(even.step_s)
    # gpt2-xl ties its embedding: the first and the last stage all-reduce its gradient after the drain, as estimate()
    tied = [x.tied_sync_s for x in even.stages]
    assert tied[0] == tied[1] > 0 and all(x.tail_s > x.dp_comm_s + x.optimizer_s for x in even.stages)
    d = even.to_dict()
    assert d["stages"]["slowest_stage"] == 1 and len(d["stages"]["per_stage"]) == 2
    assert d["stages"]["per_stage"][1]["capacity_bytes"] == get_device("v100-32gb").memory_bytes
    # each stage's memory is on its own device: the estimate's memory is the stage with the least free memory
    free = [x.capacity_bytes - x.memory.total for x in even.stages]
    assert even.capacity_bytes - even.per_device_bytes == pytest.approx(min(free))


def test_planner_chooses_uneven_stage_layers_that_beat_the_even_split(mixed):
    spec, work = get_model("gpt2-xl"), Workload(global_batch=64, seq_len=1024)
    result = plan(spec, mixed, work, Constraints(pp=(2,), engines=("deepspeed",), zero=(1,), precision="fp16",
                                                 recompute=("none",), offload_optimizer=("none",),
                                                 offload_params=("none",)))
    best = result.best
    layers = best.strategy.stage_layers
    assert sum(layers) == 48 and layers[0] > layers[1]  # the A100 stage holds more blocks
    even = estimate(spec, mixed.with_nodes(best.nodes), best.strategy.replace(stage_layers=()), work)
    assert best.estimate.step_s < 0.9 * even.step_s
    slots = [x.slot_s for x in best.estimate.stages]
    assert max(slots) < max(x.slot_s for x in even.stages)
    assert max(slots) / min(slots) < 1.2  # balanced: within one block of equal time
    assert "stages" in result.to_json(1)["candidates"][0]["estimate"]


def test_split_moves_blocks_off_a_fast_stage_whose_memory_is_full(tmp_path):
    # a fast device with little memory: the speed-only split overfills it, the chosen split fits every stage
    path = tmp_path / "fast-small.yaml"
    path.write_text("gpus_per_node: 8\ngroups:\n  - {device: v100-32gb, nodes: 1, speed: 6}\n"
                    "  - {device: a100-80gb, nodes: 1}\n")
    c = load_cluster(path)
    spec, work = get_model("llama-13b"), Workload(global_batch=16, seq_len=2048)
    st = Strategy(engine="deepspeed", zero=1, pp=2, precision="fp16", recompute="full")
    from scalestudy.costmodel.stages import layer_costs, slot_terms
    from scalestudy.plan.partition import min_max_split

    costs, _ = layer_costs(spec, 2048)
    prefix = [0.0]
    for x in costs:
        prefix.append(prefix[-1] + x / sum(costs))
    terms = slot_terms(spec, c, st, work, 8)
    fastest = min_max_split(prefix, [r for r, _, _ in terms], [terms[0][1], terms[1][1] + terms[1][2]])
    assert not estimate(spec, c, st.replace(stage_layers=fastest), work).fits
    split = resource_split(spec, c, st, work, 8, 2)
    est = estimate(spec, c, st.replace(stage_layers=split), work)
    assert est.fits and split[0] < fastest[0]
    # the most blocks the small stage holds: one more does not fit
    more = (split[0] + 1, split[1] - 1)
    assert not estimate(spec, c, st.replace(stage_layers=more), work).stages[0].fits


def test_measured_stage_speeds_split_like_train_auto():
    from scalestudy.plan.partition import plan_stages

    c = with_stage_speeds(make_cluster("a100-80gb", 1, 2), (2.0, 1.0))
    assert [g.speed for g in c.groups] == [1.0, 0.5] and c.label == "1 x a100-80gb + 1 x a100-80gb@0.5x"
    spec, work = get_model("gpt2-medium"), Workload(global_batch=8, seq_len=1024)
    result = plan(spec, c, work, Constraints(pp=(2,), precision="bf16"))
    layers = result.best.strategy.stage_layers
    assert layers[0] > layers[1]
    # with the same FLOP costs train's `--stage-layers auto --stage-speeds 2,1` gives (within a block: the cost
    # model adds per-layer overheads and the head's softmax traffic)
    auto = plan_stages(spec, 1024, 0, [2.0, 1.0]).stage_layers
    assert abs(layers[0] - auto[0]) <= 1
    with pytest.raises(ScalestudyError, match="do not split into 3 equal stages"):
        with_stage_speeds(make_cluster("a100-80gb", 1, 2), (1.0, 2.0, 3.0))


def test_min_max_split_matches_the_exhaustive_programme_and_respects_memory():
    import random

    from scalestudy.plan.partition import balanced_split, min_max_split, stage_seconds

    rng = random.Random(7)
    for _ in range(200):
        n = rng.randint(2, 12)
        pp = rng.randint(1, min(n, 5))
        costs, head = [rng.uniform(0.5, 3) for _ in range(n)], rng.uniform(0, 2)
        speeds = [rng.uniform(0.3, 3) for _ in range(pp)]
        prefix = [0.0]
        for c in costs:
            prefix.append(prefix[-1] + c)
        got = min_max_split(prefix, [1 / v for v in speeds], [0.0] * (pp - 1) + [head / speeds[-1]])
        exact = balanced_split(costs, head, speeds)
        assert max(stage_seconds(costs, head, got, speeds)) == pytest.approx(
            max(stage_seconds(costs, head, exact, speeds)), rel=1e-6)
    # memory: stage 0 holds at most 2 blocks, whatever its speed
    split = min_max_split([0, 1, 2, 3, 4, 5, 6], [0.1, 1.0], [0.0, 0.0],
                          lambda k: [min(i + 2, 6) if k == 0 else 6 for i in range(6)])
    assert split == (2, 4)
    assert min_max_split([0, 1, 2, 3], [1.0, 1.0], [0.0, 0.0], lambda k: [0, 1, 2]) is None  # nothing fits


def test_interleaved_schedule_on_mixed_clusters(mixed):
    """Decoder-only models: each device runs its v chunks, the fill and drain shrink by v, the boundary sends grow
    by v (stages.pipeline_seconds); an encoder-decoder's chunks would mix encoder and decoder blocks: refused."""
    work, base = Workload(global_batch=64, seq_len=1024), Strategy(zero=1, pp=2, precision="fp16")
    flat = estimate(get_model("gpt2-xl"), mixed, base, work)
    inter = estimate(get_model("gpt2-xl"), mixed, base.replace(pp_schedule="interleaved", virtual_stages=2), work)
    assert inter.bubble_s == pytest.approx(flat.bubble_s / 2, rel=0.05) and inter.pp_comm_s > flat.pp_comm_s
    assert inter.step_s == pytest.approx(pipeline_seconds(inter.stages, inter.layout.grad_accum, 2))
    with pytest.raises(ScalestudyError, match="decoder-only"):
        estimate(get_model("t5-small"), mixed, base.replace(pp_schedule="interleaved", virtual_stages=2),
                 Workload(global_batch=64, seq_len=512))


def test_estimate_cli_shows_per_stage_time_and_memory(mixed, tmp_path, capsys):
    from scalestudy.cli import main

    path = tmp_path / "mixed.yaml"
    path.write_text(MIXED)
    with pytest.raises(SystemExit) as exc:
        main(["estimate", "--model", "gpt2-xl", "--cluster", str(path), "--pp", "2", "--zero", "1",
              "--global-batch", "64", "--seq-len", "1024", "--stage-layers", "auto", "--json"])
    assert exc.value.code == 0
    d = json.loads(capsys.readouterr().out)
    per = d["stages"]["per_stage"]
    assert d["strategy"]["stage_layers"][0] > d["strategy"]["stage_layers"][1]
    assert [p["device"] for p in per] == ["a100-80gb", "v100-32gb"] and d["strategy"]["precision"] == "fp16"
    assert all(p["memory_bytes"] < p["capacity_bytes"] for p in per)


@pytest.mark.parametrize("model, work, strategy", [
    ("gpt2-xl", Workload(64, 1024), Strategy(zero=1, precision="fp16")),
    ("gpt2-xl", Workload(64, 1024), Strategy(engine="fsdp", zero=3, precision="fp16", micro_batch=2,
                                             recompute="full")),
    ("t5-large", Workload(64, 512, 114), Strategy(engine="ddp", precision="fp16", tp=2)),
])
def test_one_stage_over_both_device_types_is_the_slower_devices_cluster(mixed, model, work, strategy):
    # pp 1: every rank in lock-step, bound by the V100 (slower, smaller): the per-stage model reproduces estimate()
    spec = get_model(model)
    ours = estimate(spec, mixed, strategy, work)
    v100 = estimate(spec, make_cluster("v100-32gb", 4, 8), strategy, work)
    assert ours.step_s == pytest.approx(v100.step_s, rel=1e-9)
    assert ours.per_device_bytes == pytest.approx(v100.per_device_bytes, rel=1e-9)
    assert ours.stages[0].devices == ("a100-80gb", "v100-32gb") and ours.stages[0].device == "v100-32gb"


def test_emitted_output_folder_is_one_folder_for_uneven_stages():
    from scalestudy.plan.emit import default_output
    from scalestudy.specs.run import RunConfig

    run = RunConfig.build("gpt2-tiny", Strategy(engine="fsdp", zero=3, pp=2, stage_layers=(1, 1)),
                          Workload(global_batch=4, seq_len=32), nproc=1, nnodes=2)
    out = default_output(run)
    assert out.startswith("runs/") and "/" not in out[len("runs/"):] and out.endswith("stages-1-1")


def test_resource_split_of_a_strategy_does_not_depend_on_what_was_split_before(mixed):
    """The planner splits every engine's candidates in one process: a stage's time depends on the engine (DeepSpeed
    scatters and gathers the pipeline sends over tp, Megatron pads the vocabulary), so a cached split of another
    engine must not be reused (the cache once keyed on the layout only and returned the other engine's split)."""
    from scalestudy.plan import partition

    spec, work = get_model("gpt2-xl"), Workload(global_batch=64, seq_len=1024)
    st = {e: Strategy(engine=e, zero=1, tp=4, pp=4, micro_batch=1, precision="fp16", kernels="fused")
          for e in ("megatron", "deepspeed")}
    partition._SPLITS.clear()
    fresh = resource_split(spec, mixed, st["deepspeed"], work, 2, 32)
    partition._SPLITS.clear()
    other = resource_split(spec, mixed, st["megatron"], work, 2, 32)
    assert other != fresh and sum(fresh) == spec.num_layers  # the engines split differently (else nothing to catch)
    assert resource_split(spec, mixed, st["deepspeed"], work, 2, 32) == fresh
