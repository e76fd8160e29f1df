"""Resource-aware pipeline partitioning: faster devices get more layers; the slowest stage is predicted."""

from __future__ import annotations

import dataclasses

import pytest

from scalestudy.errors import ScalestudyError
from scalestudy.plan.partition import balanced_split, layer_costs, plan_stages, stage_seconds
from scalestudy.specs.presets import get_model


@pytest.mark.parametrize("costs, head, speeds, expected", [
    ([1.0] * 8, 0.0, [1, 1], (4, 4)),
    ([1.0] * 8, 0.0, [3, 1], (6, 2)),  # a device 3x faster holds 3x the layers
    ([1.0] * 8, 0.0, [1, 1, 2], (2, 2, 4)),
    ([1.0] * 8, 2.0, [1, 1], (5, 3)),  # the LM head weighs on the last stage
    ([1.0, 1.0, 3.0, 3.0], 0.0, [1, 1], (3, 1)),  # heavier (decoder) layers at the end
])
def test_balanced_split(costs, head, speeds, expected):
    assert balanced_split(costs, head, speeds) == expected


def test_the_split_minimises_the_slowest_stage_over_all_contiguous_splits():
    costs, head, speeds = [1.0, 2.0, 1.5, 0.5, 2.5, 1.0, 1.0], 1.2, [1.0, 2.5, 0.7]
    best = balanced_split(costs, head, speeds)
    every = [(a, b, len(costs) - a - b) for a in range(1, 6) for b in range(1, 7 - a) if len(costs) - a - b >= 1]
    slowest = {s: max(stage_seconds(costs, head, s, speeds)) for s in every}
    assert slowest[best] == pytest.approx(min(slowest.values()))


def test_t5_layers_cost_encoder_then_decoder_and_the_plan_predicts_the_slowest_stage():
    spec = get_model("t5-small")  # 6 encoder + 6 decoder layers
    costs, head = layer_costs(spec, 512, 114)
    assert len(costs) == 12 and costs[0] == costs[5] and costs[6] == costs[11] and head > 0
    plan = plan_stages(spec, 512, 114, [2e12, 1e12], micro_batch=4)
    assert sum(plan.stage_layers) == 12 and plan.stage_layers[0] > plan.stage_layers[1]
    by_hand = 3 * 4 * (sum(costs[plan.stage_layers[0]:]) + head) / 1e12  # second stage: its layers + the head
    assert plan.stage_seconds[1] == pytest.approx(by_hand)
    assert plan.slowest_s == max(plan.stage_seconds)
    assert plan.step_seconds(8) == pytest.approx(sum(plan.stage_seconds) + 7 * plan.slowest_s)
    even = stage_seconds(costs, head, (6, 6), [2e12, 1e12], 4)
    assert plan.slowest_s < max(even)  # better than the even split on these devices


def test_more_stages_than_layers_is_a_one_line_error():
    with pytest.raises(ScalestudyError, match="3 pipeline stages cannot each hold a layer of a 2-layer model"):
        balanced_split([1.0, 1.0], 0.0, [1, 1, 1])


def test_train_stage_layers_auto_writes_the_balanced_split(tmp_path, capsys):
    import yaml

    from scalestudy.cli import main

    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exc:
        main(["train", "--model", "t5-small", "--nproc", "2", "--pp", "2", "--engine", "fsdp", "--zero", "3",
              "--global-batch", "4", "--micro-batch", "1", "--seq-len", "512", "--target-len", "114",
              "--stage-layers", "auto", "--stage-speeds", "2,1", "--print-launch", "-o", str(out)])
    assert exc.value.code == 0
    printed = capsys.readouterr().out
    expected = plan_stages(get_model("t5-small"), 512, 114, [2.0, 1.0]).stage_layers
    assert yaml.safe_load((out / "train_config.yaml").read_text())["strategy"]["stage_layers"] == list(expected)
    assert f"stage layers {expected[0]},{expected[1]} for stage speeds 2,1" in printed


def test_train_auto_split_on_cpu_ranks_respects_memory(capsys, monkeypatch):
    """A run here on CPU ranks: the planner's split (cost model time and memory per stage, the node's RAM shared by
    its ranks) -- the fastest split whose every stage fits, checked against all splits; where no figures exist, the
    FLOP split, said so."""
    from scalestudy.cli import train as train_cli
    from scalestudy.costmodel.estimate import estimate
    from scalestudy.plan.partition import auto_stage_layers
    from scalestudy.specs.hardware import ClusterSpec, get_device, with_stage_speeds
    from scalestudy.specs.run import RunConfig

    run = RunConfig().replace(model="t5-small", nproc=2, pp=2, engine="ddp", zero=0, global_batch=8, micro_batch=2,
                              seq_len=512, target_len=114)
    ram = 3.85e9  # 1.79 GiB per rank: the compute-only split's last stage (LM head + 10 blocks) does not fit
    got = auto_stage_layers(run, [0.25, 1.0], ram)
    device = dataclasses.replace(get_device("local-cpu"), memory_bytes=int(ram), host_memory_bytes=int(ram))
    cluster = with_stage_speeds(ClusterSpec(device=device, nodes=1, gpus_per_node=2), [0.25, 1.0])
    w = run.to_workload()
    ests = {(n, 12 - n): estimate(get_model("t5-small"), cluster, run.strategy.replace(stage_layers=(n, 12 - n)), w)
            for n in range(1, 12)}
    best = min((s for s, e in ests.items() if e.fits), key=lambda s: max(x.slot_s for x in ests[s].stages))
    fastest = min(ests, key=lambda s: max(x.slot_s for x in ests[s].stages))
    assert got.layers == best != fastest == got.compute_only and not ests[fastest].fits
    assert got.run.strategy.stage_layers == best and all(used <= cap for used, cap in got.memory)
    assert "would not fit a stage's memory" in got.describe("1,4")
    # through train's CLI helper: this machine's RAM (here: stubbed) and the line it prints
    monkeypatch.setattr(train_cli, "_machine_memory_bytes", lambda: int(ram))
    cfg = train_cli._balanced_stages(run, "1,4", cuda=False, local=True)
    assert cfg.strategy.stage_layers == best
    assert "memory per rank (GiB, 2^30 bytes) by stage" in capsys.readouterr().out
    # a run on this machine's GPUs: the same split, on the GPUs' device entry with the memory they report
    small_gpu = 2.4 * 2**30  # per GPU: the compute-only split (3, 9) needs 2.55 GiB on its last stage
    monkeypatch.setattr(train_cli, "_local_gpus", lambda: [("NVIDIA A100-SXM4-80GB", 80 * 2**30),
                                                           ("NVIDIA A100-SXM4-80GB", int(small_gpu))])
    on_gpus = auto_stage_layers(run, [0.25, 1.0], gpu=dataclasses.replace(get_device("a100-80gb"),
                                                                          memory_bytes=int(small_gpu)))
    assert on_gpus.layers != on_gpus.compute_only and all(used <= cap for used, cap in on_gpus.memory)
    cfg = train_cli._balanced_stages(run, "1,4", cuda=True, local=True)
    assert cfg.strategy.stage_layers == on_gpus.layers
    assert "within the 2.4 GiB each GPU reports" in capsys.readouterr().out
    # a GPU the cost model has no figures for: refused (it cannot know whether a stage fits), not a FLOP split
    monkeypatch.setattr(train_cli, "_local_gpus", lambda: [("Radeon X", 2**34)] * 2)
    with pytest.raises(ScalestudyError, match="no figures for them"):
        train_cli._balanced_stages(run, "1,4", cuda=True, local=True)
