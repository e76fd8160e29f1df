"""Strategy.distribute_saved_activations: under a full recomputation at tp > 1 without sequence parallelism, each
checkpointed block input is kept 1/tp per tensor-parallel rank and all-gathered back before the block's re-run
(Megatron-LM --distribute-saved-activations, metaseq --distribute-checkpointed-activations of OPT-175B)."""

import pytest

from scalestudy.costmodel.comm import collective, links, tp_ranks_per_node
from scalestudy.costmodel.estimate import estimate
from scalestudy.costmodel.memory import ACT_BYTES, layer_activation_bytes
from scalestudy.errors import ScalestudyError
from scalestudy.specs.hardware import ClusterSpec, get_device
from scalestudy.specs.model import from_shape
from scalestudy.specs.strategy import Strategy, Workload

LAYERS, D, MB, SEQ, TP = 8, 4096, 2, 2048, 8
MODEL = from_shape("gpt-4096x8", {"d_model": D, "layers": LAYERS, "heads": 32, "vocab": 51200, "seq": SEQ}, "test")
CLUSTER = ClusterSpec(device=get_device("a100-80gb"), nodes=1, gpus_per_node=8, name="a100-80gb")


def _est(**kw):
    st = Strategy(**{**dict(engine="megatron", zero=1, tp=TP, micro_batch=MB, recompute="full", precision="fp16",
                            sequence_parallel=False), **kw})
    return estimate(MODEL, CLUSTER, st, Workload(global_batch=4 * MB * (8 // st.tp), seq_len=SEQ))


def test_the_stored_input_is_split_over_the_tensor_parallel_ranks():
    part = (10.0, 20.0, 30.0, 8.0)  # (replicated, sharded, softmax, input) bytes of one block
    assert layer_activation_bytes(part, 8, False, "full", True) == 1.0
    assert layer_activation_bytes(part, 8, False, "full") == 8.0
    assert layer_activation_bytes(part, 8, True, "full", True) == 1.0  # sequence parallelism splits it already
    assert layer_activation_bytes(part, 8, False, "none", True) == layer_activation_bytes(part, 8, False, "none")


def test_memory_drops_by_the_inputs_other_ranks_keep():
    whole, split = _est(), _est(distribute_saved_activations=True)
    inp = MB * SEQ * D * ACT_BYTES["fp16"]  # one block input: b s h x 2 B
    # every stored input shrinks by (1 - 1/tp); the re-run block gathers its whole input back (its working set, the
    # peak here: larger than this model's logits), so one block's worth returns
    assert whole.memory.activations - split.memory.activations == pytest.approx((LAYERS - 1) * inp * (1 - 1 / TP))
    assert split.memory.model_states == whole.memory.model_states


def test_one_exposed_all_gather_of_each_block_input_before_its_rerun():
    whole, split = _est(), _est(distribute_saved_activations=True)
    lk = links(CLUSTER)
    per_op = collective(2.0, MB * SEQ * D * ACT_BYTES["fp16"], TP, tp_ranks_per_node(TP, CLUSTER), lk)
    micro_batches = 4  # global 4 x MB at dp 1
    assert split.tp_comm_s - whole.tp_comm_s == pytest.approx(micro_batches * LAYERS * per_op / 2.0, rel=1e-9)
    assert split.step_s > whole.step_s


def test_no_effect_without_checkpointed_inputs_to_split():
    for kw in (dict(tp=1), dict(sequence_parallel=True), dict(recompute="selective"), dict(recompute="none")):
        a, b = _est(**kw), _est(distribute_saved_activations=True, **kw)
        assert (a.step_s, a.memory) == (b.step_s, b.memory), kw
        assert "distributed-saves" not in b.strategy.label


def test_label_and_one_line_refusal_of_a_non_bool():
    assert "distributed-saves" in _est(distribute_saved_activations=True).strategy.label
    with pytest.raises(ScalestudyError, match="distribute_saved_activations must be true or false"):
        Strategy(engine="megatron", tp=2, recompute="full", distribute_saved_activations="yes")
