"""DeepSpeed ZeRO-3 on one GPU: no bytes to move, but the module hooks still run on the host thread."""

from scalestudy.costmodel.engines import engine_comm
from scalestudy.costmodel.estimate import estimate
from scalestudy.costmodel.params import params_per_device
from scalestudy.costmodel.zero3 import hook_host_s, zero3_gathers
from scalestudy.specs.hardware import make_cluster
from scalestudy.specs.presets import get_model
from scalestudy.specs.strategy import Strategy, Workload

# scalestudy train's t5-large on one H200 (benchmarks/data/h200-2026-12-04.json: ZeRO-3 ran ~1.28 s a step, ZeRO-0
# 0.33 s): 1022 module calls per forward, each running the hook chain
MODEL = get_model("t5-large")


def _one_gpu(zero: int, micro_batch: int = 16):
    work = Workload(global_batch=micro_batch, seq_len=512, target_len=114)
    return estimate(MODEL, make_cluster("h200", 1, 1), Strategy(zero=zero, micro_batch=micro_batch), work)


def test_one_rank_zero3_pays_its_hooks():
    # stage 3 has no world-size-1 path in DeepSpeed: each pass lasts at least its hooks' host time, so the step is
    # at least forward + backward hooks (~0.7 s), far above ZeRO-2's, which hooks no modules
    z = zero3_gathers(MODEL, 1, 1, MODEL.num_layers + MODEL.num_decoder_layers, params_per_device(MODEL, 1, 1))
    hooks = hook_host_s(z, engine_comm("deepspeed").fetch_host_s, 2)
    z3, z2 = _one_gpu(3), _one_gpu(2)
    assert z3.step_s >= hooks + z3.optimizer_s
    assert z3.step_s > 2 * z2.step_s
    assert z2.dp_comm_s == 0.0  # ZeRO-2 at one rank: nothing to reduce, no hooks


def test_one_rank_zero3_hooks_hide_behind_long_passes():
    # the hooks are host time beside the GPU's: once a pass's device time exceeds them, one rank moves nothing and
    # waits on nothing -- the step is about ZeRO-2's. In the backward the decoder's hooks run before the encoder's
    # device work (zero3.launch_order_s), so they hide only behind the decoder's own: at micro-batch 256 the step
    # is still 1.2% over ZeRO-2's, at 512 not
    z3, z2 = _one_gpu(3, 512), _one_gpu(2, 512)
    assert z3.dp_comm_s == 0.0
    assert z3.step_s < 1.01 * z2.step_s
