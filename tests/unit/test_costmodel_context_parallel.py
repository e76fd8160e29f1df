"""Context parallelism (Strategy.cp, costmodel/context_parallel.py): a rank's share of each sequence, the attention
ring's further blocks and K/V sends, the gradient sharding over dp x cp, and the one-line refusals."""

from __future__ import annotations

import json

import pytest

from scalestudy.cli import main
from scalestudy.costmodel.constants import stored
from scalestudy.costmodel.context_parallel import block_attention_s, ring_send_bytes, ring_terms
from scalestudy.costmodel.estimate import estimate
from scalestudy.costmodel.flops import attention_backward_factor
from scalestudy.errors import ScalestudyError
from scalestudy.specs.hardware import ClusterSpec, get_device
from scalestudy.specs.model import from_shape
from scalestudy.specs.run import check_cost_model_only
from scalestudy.specs.strategy import Strategy, Workload, resolve_layout

# a Llama 3 8B-shaped decoder (grouped-query attention: 8 K/V heads of 128)
LLAMA = {"family": "llama", "d_model": 4096, "layers": 32, "heads": 32, "kv_heads": 8, "d_ff": 14336,
         "vocab": 128256}


def _model():
    return from_shape("llama-8b-shape", {**LLAMA, "seq": 16384}, "test")


def _cluster(nodes=2):
    return ClusterSpec(device=get_device("h100-80gb"), nodes=nodes, gpus_per_node=8)


def _estimate(cp, seq=16384, batch=16, tp=2, recompute="none", nodes=2):
    st = Strategy(engine="megatron", zero=1, tp=tp, cp=cp, recompute=recompute)
    return estimate(_model(), _cluster(nodes), st, Workload(global_batch=batch, seq_len=seq))


def test_a_rank_holds_seq_over_cp_tokens_of_activations():
    """Activations are per token under fused attention: at cp 2 a rank stores half of what it stores at cp 1."""
    one, two = _estimate(1), _estimate(2)
    assert two.memory.activations == pytest.approx(one.memory.activations / 2, rel=1e-9)


def test_states_are_sharded_over_dp_x_cp():
    """The distributed optimizer shards over dp x cp ranks: cp 2 at dp 4 holds what cp 1 at dp 8 holds."""
    cp2 = _estimate(2)
    assert (cp2.layout.dp, cp2.layout.cp, cp2.layout.tp) == (4, 2, 2)
    # the same ranks as dp 8 x tp 2 at half the sequence and twice the sequences: the same tokens per rank
    dp8 = estimate(_model(), _cluster(), Strategy(engine="megatron", zero=1, tp=2),
                   Workload(global_batch=32, seq_len=8192))
    assert cp2.memory.optimizer == dp8.memory.optimizer and cp2.memory.grads == dp8.memory.grads
    assert cp2.dp_comm_total_s == pytest.approx(dp8.dp_comm_total_s, rel=1e-12)


def test_attention_per_rank_is_the_sequence_attention_over_cp():
    """Each rank runs cp causal blocks at seq / cp per layer and pass: beyond a run at seq / cp (one block), cp - 1
    more forward and backward (flash: backward 2.5 x forward), per micro-batch; the FLOPs counted are the whole
    sequences'."""
    cp = 4
    est = _estimate(cp)
    model, cl, cal = _model(), _cluster(), stored()
    local = estimate(model, cl, Strategy(engine="megatron", zero=1, tp=2),
                     Workload(global_batch=16 * cp, seq_len=16384 // cp))
    block = block_attention_s(model, cl.device, est.strategy, 2, 1, 16384 // cp, est.peak_flops, cal)
    extra = (cp - 1) * (1 + attention_backward_factor(True)) * block
    assert ring_terms(model, cl, est.strategy, 2, 1, 16384, est.peak_flops, cal)[0] == pytest.approx(extra)
    assert est.compute_s == pytest.approx(local.compute_s + est.layout.grad_accum * extra, rel=1e-12)
    assert est.compute_s > local.compute_s
    whole = _estimate(1)
    assert est.model_flops == pytest.approx(whole.model_flops, rel=1e-12)
    assert est.tokens_per_step == whole.tokens_per_step == 16 * 16384


def test_a_ring_block_runs_the_kernel_the_step_prices():
    """The ring's blocks are priced by the step's own attention-core rule (step.flash_core_s): the Triton kernel at
    FA2's rate on its head dimension padded to a power of two -- head dim 96 runs 128 columns, 4/3 of fa2's time --
    and 128 as it is."""
    cl, cal = _cluster(), stored()
    for d_model, heads, factor in ((3072, 32, 4 / 3), (4096, 32, 1.0)):  # head dim 96, 128
        model = from_shape("llama-shape", {**LLAMA, "d_model": d_model, "heads": heads, "kv_heads": heads,
                                           "seq": 16384}, "test")
        peak = cl.device.peak("bf16")
        fa2, triton = (block_attention_s(model, cl.device, Strategy(engine="megatron", zero=1, cp=2,
                                                                    attention_kernel=k), 1, 1, 8192, peak, cal)
                       for k in ("fa2", "triton"))
        assert triton == pytest.approx(factor * fa2, rel=1e-12)


def test_ring_send_bytes_formula():
    """One forward step's send, one layer: K and V of the local tokens, the K/V heads a tp rank holds (8 / tp 2 = 4
    of d_kv 128), bf16: 2 x mb x seq/cp x 4 x 128 x 2 bytes; at tp 16 the 8 heads are replicated, one per rank."""
    model = _model()
    assert ring_send_bytes(model, 1, 16384, 4, 2, "bf16") == 2 * 1 * 4096 * 4 * 128 * 2
    assert ring_send_bytes(model, 2, 16384, 4, 16, "bf16") == 2 * 2 * 4096 * 1 * 128 * 2


def test_ring_sends_over_the_nics_are_exposed_where_they_outlast_the_block():
    """Intra-node the sends hide behind their blocks; over a slow network they show, and only the excess counts."""
    model, cal = _model(), stored()
    st = Strategy(engine="megatron", zero=1, tp=8, cp=4)
    fast = ClusterSpec(device=get_device("h100-80gb"), nodes=4, gpus_per_node=8)
    slow = ClusterSpec(device=get_device("h100-80gb"), nodes=4, gpus_per_node=8, inter_node_bytes_per_s=1e8)
    peak = fast.device.peak("bf16")
    assert ring_terms(model, fast, st, 8, 1, 8192, peak, cal)[1] < ring_terms(model, slow, st, 8, 1, 8192, peak,
                                                                               cal)[1]
    assert ring_terms(model, slow, st, 8, 1, 8192, peak, cal)[1] > 0


@pytest.mark.parametrize("kwargs,needle", [
    (dict(engine="deepspeed", cp=2), "engine megatron"),
    (dict(engine="ddp", cp=2), "not ddp"),
    (dict(engine="megatron", zero=1, cp=2, attention="eager"), "fused attention"),
    (dict(engine="megatron", zero=1, cp=0), "cp must be an integer >= 1"),
])
def test_strategy_refuses_cp_where_the_software_has_none(kwargs, needle):
    with pytest.raises(ScalestudyError) as exc:
        Strategy(**kwargs)
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_sequence_and_world_must_split():
    with pytest.raises(ScalestudyError, match=r"not divisible by 2 x cp = 8"):
        _estimate(4, seq=16388)
    with pytest.raises(ScalestudyError, match=r"tp 2 x cp 3 x pp 1"):
        resolve_layout(Strategy(engine="megatron", zero=1, tp=2, cp=3), 16, 16)
    with pytest.raises(ScalestudyError, match=r"tp 2 x cp 3 x pp 1"):  # estimate says it too, not its inner run's
        _estimate(3, seq=16386)
    # the global batch the user gave over the user's dp (16 / (2 x 2) = 4), not the inner run's 12 over dp 8
    with pytest.raises(ScalestudyError, match=r"global_batch 6 is not divisible by micro_batch 1 x dp 4"):
        _estimate(2, batch=6)


def test_train_refuses_cp():
    with pytest.raises(ScalestudyError, match="cost-model option"):
        check_cost_model_only(Strategy(engine="fsdp", zero=3, cp=2))


def test_a_strategy_without_cp_records_as_before():
    """to_dict names cp only where set: records, plan JSON and checkpoints of cp-1 runs are unchanged."""
    assert "cp" not in Strategy().to_dict()
    assert Strategy.from_dict(Strategy(engine="fsdp", zero=3, cp=2).to_dict()).cp == 2
    assert "cp2" in Strategy(engine="fsdp", zero=3, cp=2).label


def _config(tmp_path):
    path = tmp_path / "llama.json"
    path.write_text(json.dumps({"model_type": "llama", "vocab_size": 128256, "hidden_size": 4096,
                                "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
                                "num_key_value_heads": 8, "max_position_embeddings": 16384}))
    return str(path)


def test_estimate_and_plan_take_cp(capsys, tmp_path):
    args = ["--model", _config(tmp_path), "--gpu", "h100-80gb", "--nodes", "2", "--engine", "megatron", "--zero", "1",
            "--tp", "2", "--seq-len", "16384", "--global-batch", "16", "--cp", "2", "--json"]
    with pytest.raises(SystemExit) as exc:
        main(["estimate", *args])
    assert exc.value.code == 0
    est = json.loads(capsys.readouterr().out)
    assert est["layout"]["cp"] == 2 and est["layout"]["dp"] == 4 and est["strategy"]["cp"] == 2
    with pytest.raises(SystemExit) as exc:
        main(["plan", *args, "--micro-batch", "1", "--recompute", "none", "--top", "1"])
    assert exc.value.code == 0
    best = json.loads(capsys.readouterr().out)["candidates"][0]
    assert " cp2 " in best["label"] and best["estimate"]["layout"]["cp"] == 2  # held fixed, not searched
    # the 16 devices a candidate occupies (device-hours count them): dp 4 x tp 2 x cp 2, not dp x tp
    assert best["layout"]["world_size"] == 16 and best["layout"]["cp"] == 2
    assert best["device_hours"] == pytest.approx(16 * best["time_to_train_s"] / 3600)


def test_estimate_refuses_cp_on_deepspeed_in_one_line(capsys, tmp_path):
    with pytest.raises(SystemExit) as exc:
        main(["estimate", "--model", _config(tmp_path), "--gpu", "h100-80gb", "--engine", "deepspeed", "--cp", "2",
              "--seq-len", "4096"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "--cp" in err and len(err.strip().splitlines()) == 1, err


def test_the_layout_memo_tells_cp_apart():
    """terms.model_layout's memo is keyed by the strategy fields its layout reads: cp 2 halves dp on the same
    model, cluster and workload objects (a cp 1 layout for a cp 2 strategy was returned from the memo)."""
    from scalestudy.costmodel.terms import model_layout

    model, cluster, work = _model(), _cluster(), Workload(global_batch=16, seq_len=16384)
    one = model_layout(model, cluster, Strategy(engine="megatron", zero=1, tp=2), work)
    two = model_layout(model, cluster, Strategy(engine="megatron", zero=1, tp=2, cp=2), work)
    assert (one.dp, two.dp) == (8, 4)
