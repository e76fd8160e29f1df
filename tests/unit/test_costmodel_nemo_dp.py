"""NeMo O2 data parallelism (published.yaml nemo2022 T5/mT5, nemo2022jun GPT-5B): a contiguous fp32 main-gradient
buffer all-reduced over the whole data-parallel group, not hidden behind the backward (NeMo 1.9 all-reduces after
the forward-backward; NeMo 1.11's async chunks run under the launcher's CUDA_DEVICE_MAX_CONNECTIONS=1). What the
rows show of it is the shape over node counts: a flat error from 1 to 20 nodes."""

import copy

from scalestudy.costmodel.estimate import estimate
from scalestudy.costmodel.published import _setup, load, predict

SERIES = ("nemo-t5-3b-", "nemo-mt5-3b-", "nemo2206-gpt-5b-")


def _series(prefix):
    return [r for r in load()["throughput"] if r["id"].startswith(prefix)]


def _spread(rows):
    errs = [(predict(r) - r["published"]) / r["published"] for r in rows]
    return max(errs) - min(errs)


def test_nemo_o2_all_reduce_is_exposed_at_node_rate_and_the_error_is_flat_over_nodes():
    for prefix in SERIES:
        rows = _series(prefix)
        assert len(rows) >= 6 and {(r["engine"], r["zero"]) for r in rows} == {("megatron", 0)}
        for r in rows:
            est = estimate(*_setup(r))
            assert est.dp_comm_s == est.dp_comm_total_s  # nothing of it hidden
        assert _spread(rows) < 0.08, prefix  # reached: 0.048 (T5), 0.070 (mT5), 0.020 (GPT-5B)
        if prefix != "nemo2206-gpt-5b-":  # (its 9+ micro-batches per step leave little to hide behind: 0.05)
            hidden = copy.deepcopy(rows)
            for r in hidden:
                r["software"]["overlap_grad_comm"] = True
            assert _spread(hidden) > 0.2, prefix  # reached: 0.255 -- hidden, the error would trend with nodes
