"""tune's candidates include the tp/pp layouts train runs (FSDP/DDP with tp or pp) and only those."""

from scalestudy.cli.plan import build_constraints
from scalestudy.plan import tuner
from scalestudy.specs.hardware import get_device
from scalestudy.specs.presets import get_model
from scalestudy.specs.strategy import Workload


def test_tune_candidates_take_tp_and_pp_axes_that_train_can_run():
    cons = build_constraints(engine=None, zero=None, tp="1,2", pp="1,2", micro_batch=None, recompute="none",
                             offload="none", offload_params="none", precision="fp32", max_nodes=None)
    cands = tuner.local_candidates(get_model("llama-tiny"), get_device("local-cpu"), 2, Workload(8, 64, 0), cons)
    layouts = {(c.strategy.engine, c.strategy.tp, c.strategy.pp) for c in cands}
    assert {("fsdp", 2, 1), ("fsdp", 1, 2), ("ddp", 2, 1), ("ddp", 1, 2), ("deepspeed", 1, 1)} <= layouts
    assert not any(e == "deepspeed" and (tp, pp) != (1, 1) for e, tp, pp in layouts)  # train refuses these
    assert all(c.strategy.tp * c.strategy.pp <= 2 for c in cands)  # one node of 2 ranks
