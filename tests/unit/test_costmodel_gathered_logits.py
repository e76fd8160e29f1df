"""KempnerForge's loss under tensor parallelism: Strategy.lm_head "gathered" (the embedding whole on every tp rank, the
head's GEMM split V/tp, its logits all-gathered for a loss over all V) and cross_entropy "torch-16bit" (torch's loss on
the bf16 logits, no upcast, the caller's logits alive through the backward)."""

import pytest

from scalestudy.costmodel.estimate import estimate
from scalestudy.costmodel.flops import cross_entropy_bytes_per_logit
from scalestudy.costmodel.memory import logits_bytes
from scalestudy.costmodel.params import param_breakdown, params_per_device
from scalestudy.costmodel.published import load
from scalestudy.errors import ScalestudyError
from scalestudy.specs.hardware import ClusterSpec, get_device
from scalestudy.specs.model import from_shape
from scalestudy.specs.run import check_cost_model_only
from scalestudy.specs.strategy import Strategy, Workload, logit_shards, vocab_shards

MODEL = from_shape("llama-2048x8", {"family": "llama", "d_model": 2048, "layers": 8, "heads": 16, "kv_heads": 8,
                                    "d_ff": 5632, "vocab": 128256, "seq": 2048}, "test")
CLUSTER = ClusterSpec(device=get_device("h100-80gb"), nodes=1, gpus_per_node=8, name="h100-80gb")


def _est(**kw):
    st = Strategy(**{**dict(engine="fsdp", zero=3, tp=4, micro_batch=2, recompute="full"), **kw})
    return estimate(MODEL, CLUSTER, st, Workload(global_batch=2 * 8 // st.tp, seq_len=2048))


def test_torch_16bit_loss_by_hand():
    tokens, v = 2 * 2048, MODEL.vocab_size
    # backward: the logits, the saved log-softmax, nll_loss's gradient and log_softmax_backward's output, 2 B each
    assert logits_bytes(MODEL, 2, 2048, 0, "bf16", 1, "torch-16bit") == tokens * v * 8
    assert logits_bytes(MODEL, 2, 2048, 0, "bf16", 4, "torch-16bit") == tokens * v * 8 / 4
    assert logits_bytes(MODEL, 2, 2048, 0, "bf16", 1, "torch") == tokens * v * 12  # the upcast loss, for scale
    assert cross_entropy_bytes_per_logit("bf16", "torch-16bit") == 16.0  # log_softmax + nll in bf16, no casts


def test_gathered_head_shards():
    st = Strategy(engine="fsdp", zero=3, tp=4, lm_head="gathered")
    assert (vocab_shards(st), logit_shards(st)) == (4, 1)
    assert (vocab_shards(Strategy(engine="fsdp", zero=3, tp=4)), logit_shards(Strategy(engine="fsdp", zero=3, tp=4))
            ) == (4, 4)
    pc = param_breakdown(MODEL)
    assert params_per_device(MODEL, 4, 1, 4, 1) - params_per_device(MODEL, 4, 1, 4) == pc.embedding - pc.embedding // 4
    assert _est(lm_head="gathered").params_per_device == params_per_device(MODEL, 4, 1, 4, 1)


def test_gathered_logits_memory():
    sharded = _est(cross_entropy="torch-16bit").memory
    gathered = _est(cross_entropy="torch-16bit", lm_head="gathered").memory
    tokens, v = 2 * 2048, MODEL.vocab_size
    # the logits and the loss over all V on every tp rank (they outweigh a recomputed block's working set here)
    assert gathered.activations - sharded.activations == pytest.approx(tokens * v * 8 * (1 - 1 / 4))
    assert gathered.params > sharded.params  # the embedding whole on every tp rank
    assert _est(tp=1, lm_head="gathered").memory == _est(tp=1).memory  # no effect at tp 1


def test_refusals_in_one_line():
    with pytest.raises(ScalestudyError, match="cross_entropy torch-16bit describes") as exc:
        Strategy(engine="ddp", cross_entropy="torch-16bit")
    assert "\n" not in str(exc.value)
    with pytest.raises(ScalestudyError, match="cross_entropy torch-16bit describes"):
        Strategy(engine="fsdp", zero=3, precision="fp32", cross_entropy="torch-16bit")
    with pytest.raises(ScalestudyError, match="unknown lm_head 'gatherd'"):
        Strategy(engine="fsdp", zero=3, tp=2, lm_head="gatherd")


def test_train_refuses_them():
    for kw in (dict(lm_head="gathered"), dict(cross_entropy="torch-16bit")):
        with pytest.raises(ScalestudyError, match="cost-model option"):
            check_cost_model_only(Strategy(engine="fsdp", zero=3, tp=2, **kw))


def test_estimate_flag_refused_on_ddp(capsys):
    from scalestudy.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["estimate", "--model", "gpt2", "--engine", "ddp", "--cross-entropy", "torch-16bit"])
    assert exc.value.code != 0
    err = capsys.readouterr().err.strip()
    assert "--cross-entropy torch-16bit describes" in err and "Traceback" not in err


def test_kempnerforge_memory_rows_state_their_loss():
    rows = [r for r in load()["memory"] if r["source"].startswith("kempnerforge")]
    assert all(r["software"]["cross_entropy"] == "torch-16bit" for r in rows)
    assert all(r["software"].get("lm_head") == ("gathered" if "tp" in r and "pp" not in r else
                                                 "replicated" if "pp" in r else None) for r in rows)


def test_plan_refuses_the_16bit_loss_where_ddp_is_searched():
    from scalestudy.plan.space import Constraints

    with pytest.raises(ScalestudyError, match="--cross-entropy torch-16bit .* needs --engine fsdp"):
        Constraints(cross_entropy="torch-16bit")
    Constraints(cross_entropy="torch-16bit", engines=("fsdp",))


def test_gathered_loss_passes_over_all_v():
    from scalestudy.costmodel.constants import stored
    from scalestudy.costmodel.step import compute_times

    dev, cal = get_device("h100-80gb"), stored()

    def head(logit_tp: int) -> float:
        return compute_times(MODEL, dev, "bf16", 4, 2, 2048, 0, "full", True, True, cal, loss="torch-16bit",
                             head_tp=4, logit_tp=logit_tp).head

    extra = 2 * 2048 * MODEL.vocab_size * (1 - 1 / 4) * 16 / dev.hbm_bytes_per_s  # 8a per logit, 3/4 more logits
    assert head(1) - head(4) == pytest.approx(extra)
    assert head(4) == head(0)  # the sharded head: one memo entry
    assert _est(lm_head="gathered").step_s > _est().step_s
