"""The fill and drain of a 1F1B pipeline whose slowest stage is not the last one.

Narayanan et al. 2021 (SC21, Sec. 2.2) price a 1F1B (PipeDream-flush) step as (m - 1) x the slowest stage's slot +
every stage's slot once: the first micro-batch's forward reaches the slowest stage through the stages before it, the
last micro-batch's backward leaves it through them again. The stages AFTER the slowest one are not on that path in
full: while their forward and backward of micro-batch j run, the slowest stage k is busy with its own warm-up
forwards (w = pp - 1 - k of them before its first backward) or, at the end, with its cool-down backwards (w again).
It waits only for what they do not cover:

    step = sum_{i<k} slot_i + m x slot_k + max(0, R - w F_k) + max(0, R - w B_k),   R = sum_{i>k} slot_i

(F_k, B_k: the slowest stage's forward and backward of one micro-batch, F_k + B_k = slot_k). With equal stages the
last one is the slowest (k = pp - 1, R = 0) and this is Narayanan's formula; with equal stages and k = 0 the two
waits add up to (pp - 1) x slot, the same. It departs from it where the stages after the slowest are lighter: an
encoder-decoder split encoder-first (NeMo / Megatron-LM T5: `pipeline_model_parallel_split_rank` = the first stages
hold the encoder, whose blocks run over the 512-token input while the decoder's run over 128 targets, so every
encoder stage is the slowest and the lighter decoder stages hide in its warm-up and cool-down), or a slower device
first on a mixed cluster. GPipe runs all forwards then all backwards: the last forward and the first backward pass
through every stage after the slowest in series, the full R (not priced here).
"""

from __future__ import annotations


def hidden_after_slowest_s(after: float, slot: float, forward_share: float, later_stages: int) -> float:
    """Seconds the slowest stage of a 1F1B pipeline waits on the `later_stages` stages after it (their slots summing
    to `after` seconds per micro-batch), its own `slot` split into forward (`forward_share` of it) and backward:
    once in the warm-up (its first backward needs their forward + backward of the first micro-batch, while it runs
    `later_stages` forwards of its own) and once in the cool-down (its last backward waits for theirs of the last
    micro-batch, while it runs `later_stages` backwards). At most `after` each; 0 where they hide in full."""
    if later_stages <= 0 or after <= 0.0:
        return 0.0
    forward = forward_share * slot
    backward = slot - forward
    return max(0.0, after - later_stages * forward) + max(0.0, after - later_stages * backward)


def fill_drain_s(slots: list[float] | tuple[float, ...], forward_share: float | None, micro_batches: int) -> float:
    """Seconds of a pipeline step beyond micro_batches x the slowest slot, from every stage's slot: the stages
    before the slowest once, those after it as hidden_after_slowest_s leaves them (1F1B: `forward_share` given,
    at least as many micro-batches as stages), else all of them once (GPipe, or a schedule not known here).
    The slowest is the last stage of the highest slot (equal stages: the last, R = 0)."""
    top = max(slots)
    if forward_share is None or micro_batches < len(slots):
        return sum(slots) - top
    k = max(i for i, x in enumerate(slots) if x >= top)
    after = sum(slots[k + 1:])
    before = sum(slots[:k])
    return before + hidden_after_slowest_s(after, top, forward_share, len(slots) - 1 - k)
