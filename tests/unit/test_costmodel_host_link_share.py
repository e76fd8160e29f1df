"""Offload copies share a GPU pair's host link (device YAML gpus_per_host_link; terms.optimizer_offload): on a DGX-1 /
DGX A100 two GPUs sit behind one PCIe switch with one x16 link to the host, so while every GPU of the node offloads
at once each copies at half of pcie_bytes_per_s; one GPU alone, or a device whose GPUs have links of their own,
keeps the whole link."""

import pytest

from scalestudy.costmodel.engines import engine_comm
from scalestudy.costmodel.terms import optimizer_offload
from scalestudy.errors import ScalestudyError
from scalestudy.specs.hardware import _numbers, get_device
from scalestudy.specs.strategy import Strategy

FSDP = Strategy(engine="fsdp", zero=3, micro_batch=1, offload_optimizer="cpu", offload_params="cpu")
ZERO2 = Strategy(engine="deepspeed", zero=2, micro_batch=1, offload_optimizer="cpu")
ZERO3 = Strategy(engine="deepspeed", zero=3, micro_batch=1, offload_optimizer="cpu", offload_params="cpu")


def _copies_s(st: Strategy, device: str, gpus: int) -> float:
    return optimizer_offload(st, engine_comm(st.engine), 1.0e10, gpus, 1, get_device(device), gpus)[1]


@pytest.mark.parametrize("st", [FSDP, ZERO2, ZERO3], ids=["fsdp", "zero2", "zero3-params"])
def test_pairs_behind_one_switch_halve_each_gpus_copy_rate(st):
    for device in ("a100-80gb", "a100-40gb", "v100-32gb", "v100-16gb"):
        assert get_device(device).gpus_per_host_link == 2
        one, eight = _copies_s(st, device, 1), _copies_s(st, device, 8)
        # an eighth of the parameters per GPU, copied at half the rate: a quarter of the lone GPU's time
        assert eight == pytest.approx(one / 8 * 2)


def test_a_link_of_its_own_and_a_lone_gpu_keep_the_whole_link():
    dev = get_device("h100-80gb")
    assert dev.gpus_per_host_link == 1 and dev.host_link_bytes_per_s(8) == dev.pcie_bytes_per_s
    a100 = get_device("a100-80gb")
    assert a100.host_link_bytes_per_s(1) == a100.pcie_bytes_per_s
    assert a100.host_link_bytes_per_s(8) == a100.pcie_bytes_per_s / 2
    assert _copies_s(FSDP, "h100-80gb", 8) == pytest.approx(_copies_s(FSDP, "h100-80gb", 1) / 8)


@pytest.mark.parametrize("bad", [0, 1.5, -2, "two", True])
def test_gpus_per_host_link_must_be_a_whole_number_from_one(bad):
    with pytest.raises(ScalestudyError, match="gpus_per_host_link"):
        _numbers({"gpus_per_host_link": bad}, "dev.yaml")
    assert _numbers({"gpus_per_host_link": 4}, "dev.yaml")["gpus_per_host_link"] == 4
