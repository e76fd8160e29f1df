"""mT5 vs T5 of one shape (issue 11's named vocabulary gap): the one-node gap is in the README's T5 table, not in the
vocabulary (docs/costmodel-validation.md, 'mT5 vs T5, the vocabulary gap' section, mt5 2026-12-03).

The NeMo launcher's 22.08 README (nemo2022) and its release CI on the 22.08.11 container (nemoci2208) ran the same
yamls (conf/training/{t5,mt5}/3b.yaml, tp 2, micro-batch 24, global batch 1920) under the same NeMo 1.11. Their mT5
cells agree; their T5 cells do not, and the CI's T5/mT5 step ratio is the one the model prices."""
import pytest

from scalestudy.costmodel import published

ROWS = {r["id"]: r for r in published.load()["throughput"]}


def _step_ratio_t5_over_mt5(t5_id: str, mt5_id: str, rate) -> float:
    """T5 step / mT5 step of two rows with the same global batch and sequence = mT5 tokens/s over T5 tokens/s."""
    return rate(ROWS[mt5_id]) / rate(ROWS[t5_id])


def _published_rate(row) -> float:
    """The row's published tokens per second (source tokens = global batch x encoder 512 for both sources)."""
    return float(row["published"])


def test_one_node_ci_ratio_is_the_models_and_the_readme_t5_cell_is_the_outlier():
    ci_pair = ("nemoci2208-t5-3b-tp2pp1-1n", "nemoci2208-mt5-3b-tp2pp1-1n")
    readme_pair = ("nemo-t5-3b-1n", "nemo-mt5-3b-1n")
    ci = _step_ratio_t5_over_mt5(*ci_pair, _published_rate)
    readme = _step_ratio_t5_over_mt5(*readme_pair, _published_rate)
    model = _step_ratio_t5_over_mt5(*ci_pair, published.predict)
    assert ci == pytest.approx(0.928, abs=0.002) and readme == pytest.approx(0.823, abs=0.002)
    assert abs(model - ci) < 0.02, (model, ci)  # the model's vocabulary terms account for the CI's one-node gap
    # Same configuration, two measurements: mT5 within 1%, T5 12% apart -- the README's 0.82 is its T5 cell.
    mt5_readme_over_ci = ROWS["nemo-mt5-3b-1n"]["published"] / ROWS["nemoci2208-mt5-3b-tp2pp1-1n"]["published"]
    t5_readme_over_ci = ROWS["nemo-t5-3b-1n"]["published"] / ROWS["nemoci2208-t5-3b-tp2pp1-1n"]["published"]
    assert abs(mt5_readme_over_ci - 1) < 0.015 and t5_readme_over_ci > 1.1, (mt5_readme_over_ci, t5_readme_over_ci)


def test_twenty_node_gap_is_the_open_per_step_premium():
    """At 20 nodes (one micro-batch per step) both sources publish ~0.79-0.80 and the model ~0.92: the flat per-step
    mT5 premium of the 22.08 / 22.09 CI runs (t5family, mt5 sections), not priced. A mechanism that closes it moves
    this bound."""
    model = _step_ratio_t5_over_mt5("nemoci2208-t5-3b-tp2pp1-20n", "nemoci2208-mt5-3b-tp2pp1-20n", published.predict)
    for t5_id, mt5_id in (("nemoci2208-t5-3b-tp2pp1-20n", "nemoci2208-mt5-3b-tp2pp1-20n"),
                          ("nemo-t5-3b-20n", "nemo-mt5-3b-20n")):
        ratio = _step_ratio_t5_over_mt5(t5_id, mt5_id, _published_rate)
        assert 0.78 < ratio < 0.81 and model > ratio + 0.1, (t5_id, ratio, model)


def _premium_s(container: str, layout: str) -> float:
    """Seconds per step the model misses on the mT5 row beyond what it misses on the T5 row of the same yaml shape,
    layout and nodes (published minus predicted step, mT5 less T5; step = global batch x 512 / tokens per s)."""
    def missed(row_id):
        row = ROWS[row_id]
        tokens = row["global_batch"] * row["model"]["seq"]
        return tokens / float(row["published"]) - tokens / published.predict(row)
    return missed(f"{container}-mt5-3b-{layout}") - missed(f"{container}-t5-3b-{layout}")


@pytest.mark.parametrize("container", ["nemoci2208", "nemoci2209"])
def test_premium_is_not_a_cost_on_the_ranks_vocabulary_shard_or_the_data_parallel_group(container):
    """The 3B premium is as large with a quarter of tp 2's V/tp x d shard per rank (tp 8: 64M elements) and with no
    data-parallel group at all (dp 1: tp 8 on one node, tp 8 pp 4 on four), so no cost on the shard or on the
    gradient all-reduce closes it (docs/costmodel-validation.md, mt5nodes section). A mechanism that does moves this."""
    tp2 = _premium_s(container, "tp2pp1-1n")
    for layout in ("tp8pp1-1n", "tp8pp4-4n"):  # dp 1
        premium = _premium_s(container, layout)
        assert premium > 0.1 and premium > tp2, (layout, premium, tp2)
