"""Strategy.gradient_sync: FSDP2 reduce-scatters every micro-batch ("every" / "engine", train's) or, under
set_requires_gradient_sync(False) on all but the last micro-batch ("last": KempnerForge's maybe_no_sync), keeps the
unsharded gradients in the reduce dtype between micro-batches and reduce-scatters once per step."""

import pytest

from scalestudy.costmodel.estimate import estimate
from scalestudy.costmodel.memory import fsdp_unsynced_grad_bytes
from scalestudy.costmodel.published import load
from scalestudy.errors import ScalestudyError
from scalestudy.specs.hardware import ClusterSpec, get_device
from scalestudy.specs.model import from_shape
from scalestudy.specs.run import check_cost_model_only
from scalestudy.specs.strategy import Strategy, Workload

MODEL = from_shape("llama-2048x8", {"family": "llama", "d_model": 2048, "layers": 8, "heads": 16, "kv_heads": 8,
                                    "d_ff": 5632, "vocab": 32000, "seq": 2048}, "test")
CLUSTER = ClusterSpec(device=get_device("h100-80gb"), nodes=2, gpus_per_node=8, name="h100-80gb")


def _est(ga: int = 4, **kw):
    st = Strategy(**{**dict(engine="fsdp", zero=3, micro_batch=2, recompute="full"), **kw})
    return estimate(MODEL, CLUSTER, st, Workload(global_batch=2 * 16 * ga, seq_len=2048))


def test_unsynced_gradients_by_hand():
    psi = 1.5e9
    assert fsdp_unsynced_grad_bytes(psi, "bf16", "engine", "last", 4) == 4 * psi  # fp32 reduce_dtype
    assert fsdp_unsynced_grad_bytes(psi, "bf16", "compute", "last", 4) == 2 * psi  # reduce dtype = bf16 params
    assert fsdp_unsynced_grad_bytes(psi, "fp32", "compute", "last", 4) == 4 * psi
    assert fsdp_unsynced_grad_bytes(psi, "bf16", "engine", "last", 1) == 0.0  # one micro-batch: nothing deferred
    assert fsdp_unsynced_grad_bytes(psi, "bf16", "engine", "every", 4) == 0.0
    assert fsdp_unsynced_grad_bytes(psi, "bf16", "engine", "engine", 4) == 0.0


def test_memory_holds_the_rank_s_unsharded_gradients_in_place_of_the_sharded_ones():
    every, last = _est(gradient_sync="every").memory, _est(gradient_sync="last").memory
    psi = _est().params_per_device
    assert every == _est().memory  # engine = every
    assert last.grads == every.grads  # the paper's term unchanged; the deferral is a buffer
    assert last.buffers - every.buffers == pytest.approx(4 * psi - every.grads)  # 4 B x psi, sharded ones not yet
    assert _est(ga=1, gradient_sync="last").memory == _est(ga=1).memory


def test_one_reduce_scatter_per_step():
    every, last = _est(gradient_sync="every"), _est(gradient_sync="last")
    assert last.dp_comm_total_s < every.dp_comm_total_s and last.step_s <= every.step_s
    one_every, one_last = _est(ga=1, gradient_sync="every"), _est(ga=1, gradient_sync="last")
    assert one_last.step_s == one_every.step_s and one_last.dp_comm_total_s == one_every.dp_comm_total_s
    # the gathers stay per micro-batch: what goes is (ga - 1) of the step's reduce-scatters, fp32 = 2 x a gather
    gathers = every.dp_comm_total_s * 2 / (2 + 2)  # zero 3: forward + backward gathers (2 B) and a reduce (4 B)
    assert every.dp_comm_total_s - last.dp_comm_total_s == pytest.approx(3 / 4 * (every.dp_comm_total_s - gathers),
                                                                         rel=0.05)


def test_bad_values_and_engines_refused_in_one_line():
    with pytest.raises(ScalestudyError, match="unknown gradient_sync 'sometimes'"):
        Strategy(engine="fsdp", zero=3, gradient_sync="sometimes")
    with pytest.raises(ScalestudyError, match="gradient_sync last describes FSDP2") as exc:
        Strategy(engine="deepspeed", zero=3, gradient_sync="last")
    assert "\n" not in str(exc.value)


def test_train_refuses_it():
    with pytest.raises(ScalestudyError, match="cost-model option"):
        check_cost_model_only(Strategy(engine="fsdp", zero=3, gradient_sync="last"))
    check_cost_model_only(Strategy(engine="fsdp", zero=3))  # train's own: every micro-batch


def test_estimate_flag(capsys):
    from scalestudy.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["estimate", "--model", "t5-small", "--engine", "deepspeed", "--gradient-sync", "last"])
    assert exc.value.code != 0
    err = capsys.readouterr().err.strip()
    assert "--gradient-sync last describes FSDP2" in err and "Traceback" not in err


def test_kempnerforge_memory_rows_state_it():
    rows = [r for r in load()["memory"] if r["source"].startswith("kempnerforge")]
    assert rows and all(r["software"]["gradient_sync"] == "last" for r in rows)


def test_gloo_ranks_reduce_scatter_once_per_step():
    from scalestudy.costmodel.cpu_collectives import fsdp_calls_per_step

    assert fsdp_calls_per_step(3, 5, 4) == {"all_gather": 40, "reduce_scatter": 20}  # train's FSDP
    assert fsdp_calls_per_step(3, 5, 4, sync_last=True) == {"all_gather": 40, "reduce_scatter": 5}


def test_pipeline_stages_keep_their_parameters_gathered_too():
    from scalestudy.costmodel.memory import fsdp_pipeline_unsharded_param_bytes

    psi = 2.0e9
    assert fsdp_pipeline_unsharded_param_bytes(psi, "bf16", "last", 2, 4) == 2 * psi  # the compute dtype
    assert fsdp_pipeline_unsharded_param_bytes(psi, "bf16", "last", 1, 4) == 0.0  # maybe_no_sync: grads only
    assert fsdp_pipeline_unsharded_param_bytes(psi, "bf16", "every", 2, 4) == 0.0
    assert fsdp_pipeline_unsharded_param_bytes(psi, "bf16", "last", 2, 1) == 0.0
    every, last = _est(pp=2, gradient_sync="every"), _est(pp=2, gradient_sync="last")
    psi = every.params_per_device
    assert last.memory.buffers - every.memory.buffers == pytest.approx(4 * psi - every.memory.grads + 2 * psi)


def test_pipeline_rows_read_rank_0():
    from scalestudy.costmodel.published import _setup, _stage_tensor_peak, memory_row

    data = load()
    rows = [r for r in data["memory"] if r.get("measured_stage") is not None]
    assert {r["id"] for r in rows} == {"kforge-pp-13b-h200-32g-tp4-pp2-fsdp4-memory",
                                       "kforge-pp-29b-h200-32g-tp4-pp2-fsdp4-memory",
                                       "kforge-pp-70b-h200-32g-tp4-pp4-fsdp2-memory"}
    for r in rows:
        model, cluster, st, wl = _setup(r)
        est = estimate(model, cluster, st, wl)
        first = _stage_tensor_peak(model, cluster, st, wl, est, 0)
        assert memory_row(r, data["sources"]).predicted == pytest.approx(first / 1e9)
        assert first <= est.memory.tensor_peak  # the estimate's figure is the busiest stage's
