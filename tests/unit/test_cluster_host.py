"""A cluster YAML can state its nodes' host where it is not the DGX its device YAML describes (a cloud instance's
CPUs): cpu_adam_params_per_s and host_numa_nodes reach the device the cost model prices the offloaded step on, and
a bad value is one line naming the file (flant5ds2023 runs on AWS p4d / p3 hosts)."""

from __future__ import annotations

import pytest

from scalestudy.costmodel.estimate import estimate
from scalestudy.errors import ScalestudyError
from scalestudy.specs.hardware import ClusterSpec, get_device, load_cluster
from scalestudy.specs.presets import get_model
from scalestudy.specs.strategy import Strategy, Workload


def _cluster_file(tmp_path, extra: str, device: str = "a100-40gb"):
    path = tmp_path / "cluster.yaml"
    path.write_text(f"device: {device}\nnodes: 1\ngpus_per_node: 8\n" + extra)
    return path


def test_host_keys_reach_the_offloaded_step(tmp_path):
    dgx = get_device("a100-40gb")
    p4d = load_cluster(_cluster_file(tmp_path, "cpu_adam_params_per_s: 4.5e9\nhost_numa_nodes: 2\n"))
    assert p4d.device.name == dgx.name and p4d.device.cpu_adam_params_per_s == 4.5e9
    assert p4d.device.host_numa_nodes == 2 and isinstance(p4d.device.host_numa_nodes, int)
    assert get_device("a100-40gb").cpu_adam_params_per_s == dgx.cpu_adam_params_per_s  # the YAML's own untouched
    st = Strategy(engine="deepspeed", zero=3, micro_batch=8, offload_optimizer="cpu")
    spec, work = get_model("gpt2-xl"), Workload(64, 1024)
    on_dgx = estimate(spec, ClusterSpec(device=dgx, nodes=1, gpus_per_node=8), st, work)
    on_p4d = estimate(spec, p4d, st, work)
    # CPU Adam is priced at the host's rate: 8 ranks over 8 or 2 NUMA nodes leave numa_pinned_slowdown at 1 on both
    assert on_p4d.optimizer_s == pytest.approx(on_dgx.optimizer_s * dgx.cpu_adam_params_per_s / 4.5e9)
    assert on_p4d.offload_s == pytest.approx(on_dgx.offload_s)


@pytest.mark.parametrize("extra, needle", [("host_numa_nodes: 2.5\n", "whole number"),
                                           ("host_numa_nodes: 0\n", "whole number"),
                                           ("cpu_adam_params_per_s: 0\n", ">= 1"),
                                           ("cpu_adam_params_per_s: lots\n", "must be a number")])
def test_bad_host_values_are_one_line_naming_the_file(tmp_path, extra, needle):
    path = _cluster_file(tmp_path, extra)
    with pytest.raises(ScalestudyError) as err:
        load_cluster(path)
    assert needle in str(err.value) and str(path) in str(err.value) and "\n" not in str(err.value)


def test_host_keys_of_a_mixed_cluster_are_refused(tmp_path):
    path = tmp_path / "mixed.yaml"
    path.write_text("gpus_per_node: 8\ncpu_adam_params_per_s: 4.5e9\ngroups:\n  - {device: a100-40gb, nodes: 1}\n"
                    "  - {device: v100-16gb, nodes: 1}\n")
    with pytest.raises(ScalestudyError, match="each group's device YAML"):
        load_cluster(path)


@pytest.mark.parametrize("extra", ["cpu_adam_params_per_s: 4.5e9\nhost_numa_nodes: 2\n", "power_limit_w: 500\n"])
def test_stage_speeds_keep_a_cluster_files_host_and_power_limit(tmp_path, extra):
    """`--stage-speeds 2,1` on a cluster YAML stating its host or power limit (no groups written): the stages run
    on that host / limit. It was refused as '... of a cluster with groups: state them in each group's device YAML'
    -- groups the user never wrote (with_stage_speeds builds them)."""
    from scalestudy.specs.hardware import with_stage_speeds

    base = load_cluster(_cluster_file(tmp_path, extra, "h100-80gb"))  # a100-40gb has no power-clock curve
    even, split = with_stage_speeds(base, (1, 1)), with_stage_speeds(base, (2, 1))
    assert even.device is base.device and not even.groups  # equal speeds: the cluster as the file describes it
    assert [g.device for g in split.groups] == [base.device, base.device] and split.groups[1].speed == 0.5
    st, spec, work = Strategy(engine="deepspeed", zero=1, pp=2, offload_optimizer="cpu"), get_model("gpt2"), \
        Workload(16, 1024)
    assert estimate(spec, even, st, work).step_s == estimate(spec, base, st, work).step_s
