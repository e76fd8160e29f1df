"""The current DeepSpeed ZeRO-3's per-rank Python loops (costmodel/zero3.reduce_scatter_rank_items and the all-gather
waits in terms.sharded_dp_setup): reduce_scatter_coalesced slices every gradient of a bucket once per rank and
interleaves them unless the bucket is one tensor the ranks divide; AllGatherCoalescedHandle.wait narrows every
gathered parameter once per rank. Both grow with ranks x tensors."""

from scalestudy.costmodel.zero3 import _block_tensors, reduce_scatter_rank_items
from scalestudy.specs.model import from_shape

_LLAMA = from_shape("llama-like", {"d_model": 1024, "layers": 4, "heads": 8, "vocab": 1000, "seq": 128,
                                   "family": "llama", "d_ff": 2816}, "test")


def test_one_bucket_interleaves_every_tensor_once_per_rank():
    """A bucket larger than the model: one reduce-scatter over all gradients, dp x tensors interleaved items."""
    tensors = 4 * len(_block_tensors(_LLAMA, True, 1)) + 2  # the blocks, the untied head and the input embedding
    for dp in (2, 64, 1536):
        assert reduce_scatter_rank_items(_LLAMA, 1, 1, 4, 1e12, dp) == (dp * tensors, 0.0)


def test_a_tensor_alone_in_its_bucket_takes_the_fast_path_only_when_the_ranks_divide_it():
    """Bucket of one element: every gradient alone; 1024 x 1024 (q, o) and 1024 x 2816 divide by 64 ranks, the
    1024-element norms too; at 3 ranks only the ones whose element count 3 divides."""
    items = [x for x in _block_tensors(_LLAMA, True, 1)] * 4 + [1000 * 1024, 1000 * 1024]
    for dp in (64, 3):
        div = sum(1 for x in items if round(x) % dp == 0)
        assert reduce_scatter_rank_items(_LLAMA, 1, 1, 4, 1.0, dp) == (dp * (len(items) - div), dp * div)


def test_no_items_on_one_rank():
    assert reduce_scatter_rank_items(_LLAMA, 1, 1, 4, 5e8, 1) == (0.0, 0.0)
