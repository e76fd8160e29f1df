"""Strategy.lm_head: the vocabulary (embedding, LM head GEMMs, logits, cross-entropy) sharded over tp -- Megatron's
vocabulary-parallel head, torchtitan's loss_parallel, the "engine" default -- or replicated on every tp rank, as
scalestudy's `train` runs it (engine/parallel/tensor_parallel.py shards the blocks only; engine/parallel/grads.py
syncs the replicated tables over dp only)."""

from __future__ import annotations

import json

import pytest

from scalestudy.cli import main
from scalestudy.costmodel.constants import stored
from scalestudy.costmodel.estimate import estimate
from scalestudy.costmodel.flops import logit_elements, vocab_grad_bytes
from scalestudy.costmodel.memory import logits_bytes
from scalestudy.costmodel.params import param_breakdown, params_per_device
from scalestudy.costmodel.step import _head_s, compute_times
from scalestudy.errors import ScalestudyError
from scalestudy.specs.hardware import get_device, make_cluster
from scalestudy.specs.presets import get_model
from scalestudy.specs.run import as_trained, check_cost_model_only, train_runs, train_software
from scalestudy.specs.strategy import Strategy, Workload, software_assumed, vocab_shards

HEADS = ("engine", "sharded", "replicated")


def _est(lm_head: str, tp: int = 4, pp: int = 1, engine: str = "fsdp", zero: int = 3, mb: int = 1):
    return estimate(get_model("llama-7b"), make_cluster("a100-80gb", 1, 8),
                    Strategy(engine=engine, zero=zero, tp=tp, pp=pp, micro_batch=mb, lm_head=lm_head),
                    Workload(8 * mb * 8 // (tp * pp), 2048))


def test_vocab_shards_engine_means_sharded():
    assert [vocab_shards(Strategy(engine="fsdp", zero=3, tp=4, lm_head=h)) for h in HEADS] == [4, 4, 1]
    assert vocab_shards(Strategy(engine="ddp", tp=1, lm_head="replicated")) == 1
    assert vocab_shards(Strategy(engine="ddp", lm_head="sharded"), 8) == 8  # a tp given overrides the strategy's


def test_replicated_head_is_the_whole_head_on_every_tp_rank():
    """Per micro-batch, the replicated head's FLOPs, cross-entropy bytes and vocabulary-gradient bytes are the
    sharded head's x tp (the whole V on each rank), i.e. exactly the tp-1 head; the GEMM time is the tp-1 head's."""
    model, dev, cal = get_model("llama-7b"), get_device("a100-80gb"), stored()
    tp, mb, s = 4, 2, 2048
    whole_t, whole_f = _head_s(model, dev, "bf16", 1, mb, s, 0, cal, "torch")
    part_t, part_f = _head_s(model, dev, "bf16", tp, mb, s, 0, cal, "torch")
    assert whole_f == pytest.approx(tp * part_f, rel=1e-12)
    assert logit_elements(model, mb, s, 0, 1) == tp * logit_elements(model, mb, s, 0, tp)
    assert vocab_grad_bytes(model, "bf16", 1) == pytest.approx(tp * vocab_grad_bytes(model, "bf16", tp), rel=1e-12)
    assert logits_bytes(model, mb, s, 0, "bf16", 1, "inplace") == pytest.approx(
        tp * logits_bytes(model, mb, s, 0, "bf16", tp, "inplace"), rel=1e-12)
    # torch's loss on sharded logits is torch's DTensor loss_parallel, 16 B per logit where the whole-V loss keeps 12
    assert logits_bytes(model, mb, s, 0, "bf16", 1, "torch") * 16 / 12 == pytest.approx(
        tp * logits_bytes(model, mb, s, 0, "bf16", tp, "torch"), rel=1e-12)
    assert part_t < whole_t < tp * part_t * 1.2  # the wider GEMM runs at least as efficiently
    args = (model, dev, "bf16", tp, mb, s, 0, "full", True, True, cal, "eager", "fa2", True, "torch", False)
    replicated, sharded = compute_times(*args, head_tp=1), compute_times(*args)
    assert replicated.head == whole_t and sharded.head == part_t
    assert replicated.forward == sharded.forward and replicated.backward == sharded.backward  # blocks unchanged
    assert replicated.flops_hw - sharded.flops_hw == pytest.approx(3 * (whole_f - part_f), rel=1e-12)


def test_replicated_parameters_hold_the_whole_embedding_and_head():
    model = get_model("llama-7b")  # untied: embedding and head both V x d
    p, tp = param_breakdown(model), 4
    extra = p.embedding - p.embedding // tp + p.lm_head - p.lm_head // tp
    assert params_per_device(model, tp, 1, 1) - params_per_device(model, tp, 1) == extra
    assert params_per_device(model, 1, 1, 1) == params_per_device(model, 1, 1)
    sharded, replicated = _est("sharded"), _est("replicated")
    assert replicated.params_per_device - sharded.params_per_device == extra
    assert _est("engine").params_per_device == sharded.params_per_device


@pytest.mark.parametrize("pp", [1, 2])
def test_replicated_head_costs_time_and_memory_at_tp_above_1(pp):
    engine, sharded, replicated = (_est(h, tp=4, pp=pp) for h in HEADS)
    assert engine.step_s == sharded.step_s and engine.memory.total == sharded.memory.total
    assert replicated.step_s > sharded.step_s
    assert replicated.memory.total > sharded.memory.total
    if pp == 1:  # the logits and the loss's fp32 copies (at pp 2 the first stage, more in flight, is the busiest)
        assert replicated.memory.activations > sharded.memory.activations


def test_tp_1_prices_every_value_alike():
    a, b, c = (_est(h, tp=1) for h in HEADS)
    assert a.step_s == b.step_s == c.step_s
    assert a.memory.total == b.memory.total == c.memory.total
    assert a.params_per_device == b.params_per_device == c.params_per_device


def test_train_runs_the_replicated_head():
    model = get_model("llama-7b")
    fields = vars(Strategy(engine="fsdp", zero=3, tp=2))
    assert train_software(fields, model)["lm_head"] == "replicated"
    assert as_trained(Strategy(engine="fsdp", zero=3, tp=2), model).lm_head == "replicated"
    assert as_trained(Strategy(engine="fsdp", zero=3, tp=2, lm_head="sharded"), model).lm_head == "sharded"  # named
    assert as_trained(Strategy(engine="megatron", zero=1, tp=2), model).lm_head == "engine"  # not train's engine
    check_cost_model_only(Strategy(engine="fsdp", zero=3, tp=2, lm_head="replicated"), model)
    check_cost_model_only(Strategy(engine="fsdp", zero=3, tp=2), model)
    with pytest.raises(ScalestudyError, match="lm_head .* or replicated"):  # no tp: no effect, refused as a study
        check_cost_model_only(Strategy(engine="ddp", tp=1, lm_head="sharded"), model)  # spec refuses it (one rule)
    with pytest.raises(ScalestudyError, match="lm_head .* or replicated"):
        check_cost_model_only(Strategy(engine="fsdp", zero=3, tp=2, lm_head="sharded"), model)
    assert train_runs("lm_head", "replicated") and not train_runs("lm_head", "sharded")


def test_label_names_the_head_only_off_the_default_and_train():
    base = Strategy(engine="fsdp", zero=3, tp=4).label
    assert Strategy(engine="fsdp", zero=3, tp=4, lm_head="replicated").label == base
    assert Strategy(engine="fsdp", zero=3, tp=4, lm_head="sharded").label == base + " head-sharded"
    assert Strategy(engine="fsdp", zero=3, tp=1, lm_head="sharded").label == Strategy(engine="fsdp", zero=3).label
    mega = Strategy(engine="megatron", zero=1, tp=4)
    assert mega.replace(lm_head="replicated").label == mega.label + " head-replicated"
    with pytest.raises(ScalestudyError, match="unknown lm_head 'shared'"):
        Strategy(engine="fsdp", zero=3, tp=4, lm_head="shared")
    assert Strategy.from_dict({"engine": "ddp", "tp": 2, "lm_head": "replicated"}).lm_head == "replicated"


def test_software_assumed_states_the_head_under_tp():
    line = software_assumed(Strategy(engine="fsdp", zero=3, tp=4), {"lm_head": "sharded"})
    assert "lm_head engine (sharded)" in line
    assert "lm_head" not in software_assumed(Strategy(engine="fsdp", zero=3))


def _json(capsys, *argv) -> dict:
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    out = capsys.readouterr()
    assert exc.value.code == 0, out.err
    return json.loads(out.out)


def test_cli_lm_head_on_estimate_and_plan(capsys):
    common = ["--model", "llama-7b", "--gpu", "a100-80gb", "--engine", "fsdp", "--zero", "3", "--tp", "4",
              "--micro-batch", "1", "--recompute", "full", "--global-batch", "16", "--seq-len", "2048"]
    est = {h: _json(capsys, "estimate", *common, "--lm-head", h, "--json") for h in HEADS}
    step = {h: out["time"]["step_s"] for h, out in est.items()}
    assert step["engine"] == step["sharded"] < step["replicated"]
    assert est["replicated"]["params_per_device"] > est["sharded"]["params_per_device"]
    plan = ["plan", *common, "--offload", "none", "--top", "1", "--json"]
    trained = _json(capsys, *plan)["candidates"][0]
    named = _json(capsys, *plan, "--lm-head", "sharded")["candidates"][0]
    assert trained["strategy"]["lm_head"] == "replicated" and "head-" not in trained["label"]  # plan's default: train
    assert named["strategy"]["lm_head"] == "sharded" and named["label"].endswith("head-sharded")
    # plan prices train's eager kernels / torch loss / foreach step too: the head is the difference between the two
    assert trained["estimate"]["time"]["step_s"] > named["estimate"]["time"]["step_s"]
    assert trained["estimate"]["params_per_device"] == est["replicated"]["params_per_device"]
    assert named["estimate"]["params_per_device"] == est["sharded"]["params_per_device"]
