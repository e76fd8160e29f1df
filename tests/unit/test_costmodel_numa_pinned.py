"""A DeepSpeed rank's pinned offload buffers sit on one NUMA node of the host (terms.numa_pinned_slowdown, device YAML
host_numa_nodes): with fewer ranks than nodes, the pinned share of the host step (CPU Adam's fp32 parameter and
gradient, 12 of its ~30 B, and the host passes beside it) runs at one node's bandwidth, not the host's."""

from dataclasses import replace

import pytest

from scalestudy.costmodel.engines import engine_comm
from scalestudy.costmodel.terms import HOST_PASSES_SHARE_OF_CPU_ADAM, numa_pinned_slowdown, optimizer_offload
from scalestudy.errors import ScalestudyError
from scalestudy.specs.hardware import _numbers, get_device
from scalestudy.specs.strategy import Strategy

ZERO2 = Strategy(engine="deepspeed", zero=2, micro_batch=1, offload_optimizer="cpu")
ZERO3 = Strategy(engine="deepspeed", zero=3, micro_batch=1, offload_optimizer="cpu", offload_params="cpu")
FSDP = Strategy(engine="fsdp", zero=3, micro_batch=1, offload_optimizer="cpu", offload_params="cpu")


def _host_s(st: Strategy, dev, gpus: int) -> float:
    return optimizer_offload(st, engine_comm(st.engine), 1.0e10, gpus, 1, dev, gpus)[0]


def test_two_ranks_on_a_dgx_a100_step_at_two_of_its_eight_nodes():
    dev = get_device("a100-40gb")
    assert dev.host_numa_nodes == 8 and get_device("a100-80gb").host_numa_nodes == 8
    flat = replace(dev, host_numa_nodes=1)
    pinned = (12.0 / 30.0 + HOST_PASSES_SHARE_OF_CPU_ADAM) / (1.0 + HOST_PASSES_SHARE_OF_CPU_ADAM)  # 26 of 44 B
    assert _host_s(ZERO2, dev, 2) / _host_s(ZERO2, flat, 2) == pytest.approx(pinned * 8 / 2)
    assert _host_s(ZERO2, dev, 4) / _host_s(ZERO2, flat, 4) == pytest.approx(pinned * 8 / 4)


@pytest.mark.parametrize("device,gpus", [("a100-40gb", 8), ("h200", 8), ("v100-32gb", 2)])
def test_a_node_per_rank_or_more_keeps_the_hosts_rate(device, gpus):
    dev = get_device(device)
    for st in (ZERO2, ZERO3):
        assert _host_s(st, dev, gpus) == pytest.approx(_host_s(st, replace(dev, host_numa_nodes=1), gpus))


def test_one_gpu_on_a_two_socket_host_and_the_zero3_share():
    dev = get_device("v100-32gb")
    assert dev.host_numa_nodes == 2
    assert numa_pinned_slowdown(dev, 1, HOST_PASSES_SHARE_OF_CPU_ADAM) == pytest.approx(26.0 / 44.0 * 2)
    # ZeRO-3 without the parameters on the host: unscale only beside CPU Adam (20 of 38 B pinned)
    assert numa_pinned_slowdown(dev, 1, 8.0 / 30.0) == pytest.approx(20.0 / 38.0 * 2)
    assert numa_pinned_slowdown(get_device("local-cpu"), 1, 0.5) == 1.0  # default: one node


def test_fsdp_host_step_is_not_priced_through_deepspeeds_buffers():
    dev = get_device("a100-80gb")
    assert _host_s(FSDP, dev, 2) == pytest.approx(_host_s(FSDP, replace(dev, host_numa_nodes=1), 2))


@pytest.mark.parametrize("bad", [0, 1.5, -2, "two", True, 65])
def test_host_numa_nodes_must_be_a_whole_number_from_one(bad):
    with pytest.raises(ScalestudyError, match="host_numa_nodes"):
        _numbers({"host_numa_nodes": bad}, "dev.yaml")
    assert _numbers({"host_numa_nodes": 4}, "dev.yaml")["host_numa_nodes"] == 4
