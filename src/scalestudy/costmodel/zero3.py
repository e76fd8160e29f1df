"""What DeepSpeed ZeRO-3 actually gathers: parameters at or under `stage3_param_persistence_threshold` elements stay
whole on every rank (never partitioned, never all-gathered).

DeepSpeed (runtime/zero/parameter_offload.py, `mark_persistent_parameters`): every parameter tensor with
`ds_numel <= param_persistence_threshold` (default 100,000; engine/settings.py does not set it, so training runs
with the default) is marked `ds_persist` and kept unpartitioned; the module hooks fetch only the others. A module
whose parameters are all persistent is not fetched at all. On a small model (gpt2-tiny: d 128, every block tensor
<= 65,536 elements) only the embedding is gathered; on a large one only the norms and biases stay whole.
FSDP has no such threshold: it gathers every flat parameter.

Tensor sizes per block follow costmodel/params.py's layouts (Hugging Face module names); the matrix weights are
split by tensor parallelism (their elements / tp), vectors are not.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from scalestudy.costmodel.params import param_breakdown
from scalestudy.specs.model import ModelSpec

# DeepSpeed's default stage3_param_persistence_threshold (DeepSpeedZeroConfig.param_persistence_threshold);
# engine/settings.deepspeed_config leaves it at the default.
PARAM_PERSISTENCE_THRESHOLD = 100_000


@dataclass(frozen=True)
class Zero3Gathers:
    """Per model-parallel rank: the elements ZeRO-3 gathers per pass and how many fetches (collectives) that takes."""

    gathered_elems: float  # elements of partitioned (non-persistent) tensors on the busiest stage
    layer_fetches: float  # blocks on that stage holding at least one partitioned tensor
    other_fetches: int  # embedding / positions / untied head tensors that are partitioned (pp 1 only)
    tensors: int = 0  # parameter tensors on the busiest stage (ZeroRedundancyOptimizer broadcasts each one)


def _block_tensors(m: ModelSpec, decoder: bool, tp: int) -> list[float]:
    """Element counts of one block's parameter tensors on a tensor-parallel rank."""
    d, i, f = m.d_model, m.inner_dim, m.d_ff
    if m.is_encoder_decoder:
        attn = [d * i / tp] * 4  # q, k, v, o
        ffn = [d * f / tp] * (3 if m.gated_ffn else 2)  # wi(_0, _1), wo
        norms = [d] * (3 if decoder else 2)
        return attn * (2 if decoder else 1) + ffn + norms
    if m.family == "gpt2":
        return [3 * d * d / tp, 3 * d / tp, d * d / tp, d, d * f / tp, f / tp, f * d / tp, d, d, d, d, d]
    kv = m.kv_heads * m.d_kv
    out = [d * i / tp, d * kv / tp, d * kv / tp, i * d / tp] + [d * f / tp] * 3 + [d, d]
    bias = {"none": [], "qkv": [i / tp, kv / tp, kv / tp], "all": [i / tp, kv / tp, kv / tp, d]}[m.attention_bias]
    return out + bias + ([f / tp, f / tp, d] if m.mlp_bias else [])


@lru_cache(maxsize=None)
def zero3_gathers(m: ModelSpec, tp: int, pp: int, stage_layers: int, psi: int,
                  threshold: int = PARAM_PERSISTENCE_THRESHOLD) -> Zero3Gathers:
    """DeepSpeed ZeRO-3's gathered elements and fetches per pass on the busiest stage (`stage_layers` blocks, `psi`
    parameters on the rank before partitioning): psi less the persistent tensors' elements."""
    blocks = [(_block_tensors(m, False, tp), m.num_layers if m.is_encoder_decoder else 0),
              (_block_tensors(m, True, tp), m.num_decoder_layers if m.is_encoder_decoder else m.num_layers)]
    total = sum(n for _, n in blocks) or 1
    share = stage_layers / total  # the stage's blocks, in the model's encoder/decoder mix
    persistent = sum(n * sum(x for x in ts if x <= threshold) for ts, n in blocks) * share
    fetched = sum(n for ts, n in blocks if any(x > threshold for x in ts)) * share
    others = 0
    tensors = sum(n * len(ts) for ts, n in blocks) * share
    if pp == 1:
        pc = param_breakdown(m)
        tables = [m.vocab_size * m.d_model / tp]  # input embedding (a tied head is the same tensor)
        if m.family == "gpt2":
            tables.append(pc.embedding - m.vocab_size * m.d_model)  # learned positions
        if pc.lm_head:
            tables.append(pc.lm_head / tp)
        persistent += sum(x for x in tables if x <= threshold) + pc.other  # final norms, position biases: small
        others = sum(1 for x in tables if x > threshold)
        tensors += len(tables) + (4 if m.is_encoder_decoder else 1 if m.family != "gpt2" else 2)  # final norms(+biases)
    return Zero3Gathers(max(0.0, psi - persistent), fetched, others, round(tensors))
