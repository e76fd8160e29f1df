"""Strategy.pipeline_scatter_gather: how a tp-replicated pipeline stage boundary is sent (comm.stage_boundary_time).
Megatron-LM main before its April 2021 release (8aa4619f, 152aab30) isends the whole (seq, micro-batch, hidden)
tensor from every tensor-parallel rank; since then (and DeepSpeed's pipeline) each rank sends 1/tp of it."""

import pytest

from scalestudy.costmodel.estimate import estimate
from scalestudy.costmodel.published import load
from scalestudy.errors import ScalestudyError
from scalestudy.specs.hardware import ClusterSpec, get_device
from scalestudy.specs.model import from_shape
from scalestudy.specs.run import check_cost_model_only
from scalestudy.specs.strategy import Strategy, Workload

MODEL = from_shape("gpt-2304x24", {"d_model": 2304, "layers": 24, "heads": 24, "vocab": 51200, "seq": 2048},
                   "test")
CLUSTER = ClusterSpec(device=get_device("v100-16gb"), nodes=4, gpus_per_node=8, name="v100-16gb",
                      inter_node_bytes_per_s=1.5e9)
WORK = Workload(global_batch=512, seq_len=2048)


def _step(**kw) -> float:
    base = dict(engine="megatron", zero=0, tp=8, pp=4, micro_batch=16, recompute="full", precision="fp16",
                attention="eager", sequence_parallel=False, overlap_grad_comm=False)
    return estimate(MODEL, CLUSTER, Strategy(**{**base, **kw}), WORK).step_s


def test_whole_tensor_sends_cost_more_across_nodes():
    on, off, engine = (_step(pipeline_scatter_gather=v) for v in ("on", "off", "engine"))
    assert engine == on  # engines.yaml: megatron scatters
    assert off > on * 1.2  # tp 8 ranks each send the whole boundary over one NIC per node


def test_no_effect_without_tp_or_under_sequence_parallelism():
    assert _step(tp=1, pipeline_scatter_gather="off") == _step(tp=1)
    assert _step(sequence_parallel=True, pipeline_scatter_gather="off") == _step(sequence_parallel=True)


def test_yaml_booleans_and_bad_values():
    assert Strategy(pipeline_scatter_gather=False).pipeline_scatter_gather == "off"  # YAML reads off as false
    with pytest.raises(ScalestudyError, match="pipeline_scatter_gather"):
        Strategy(pipeline_scatter_gather="sometimes")


def test_train_refuses_it():
    with pytest.raises(ScalestudyError, match="cost-model option"):
        check_cost_model_only(Strategy(engine="deepspeed", pipeline_scatter_gather="on"))


def test_rows_that_state_pre_april_2021_megatron():
    rows = {r["id"]: r for r in load()["throughput"]}
    for rid in ("megatron21-gpt3-175b-jan", "dlperf-megatron-gpt2304x24-v100-16gb-4n8g-dp1tp8pp4"):
        assert rows[rid]["software"]["pipeline_scatter_gather"] == "off"
