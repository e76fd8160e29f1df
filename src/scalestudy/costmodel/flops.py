"""Training FLOPs, counted from the matrix multiplies (2*m*n*k each), encoder and decoder with their own lengths.

Conventions (as Megatron-LM, Narayanan et al. 2021, eq. 3, and Korthikanti et al. 2022, Sec. 6):
- Forward = every weight matmul (QKV/O projections, FFN, LM head) plus the attention score and
  attention-over-values products (4 * len_q * len_k * inner per layer), counted over the full square even for
  causal masks; norms, softmax and element-wise ops are not counted; embedding lookups cost nothing.
- Backward = 2x forward, so a training step is 3x forward ("model FLOPs", used for MFU; for a decoder-only
  model this is 6*N*tokens + attention).
- "Hardware FLOPs" add recomputation: full recompute runs every layer's forward again (not the LM head);
  selective recompute (Korthikanti et al.) re-runs only the attention score/value products.
- T5 decoder blocks add cross-attention: Q and O projections on the target tokens, K and V projections of the
  encoder output (source tokens, in every decoder block), and target x source score/value products.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from scalestudy.costmodel.params import param_breakdown
from scalestudy.specs.model import ModelSpec


@dataclass(frozen=True)
class ForwardFlops:
    """Forward FLOPs of one sequence (source length s, target length t), split by kind."""

    dense: float  # weight matmuls inside the blocks
    attention: float  # score and attention-over-values products
    head: float  # LM head (output projection to the vocabulary)

    @property
    def layers(self) -> float:
        return self.dense + self.attention

    @property
    def total(self) -> float:
        return self.dense + self.attention + self.head


def _ffn_weights(m: ModelSpec) -> int:
    return (3 if m.gated_ffn else 2) * m.d_model * m.d_ff


@lru_cache(maxsize=4096)
def forward_flops(model: ModelSpec, seq_len: int, target_len: int = 0) -> ForwardFlops:
    """Forward FLOPs of one sequence: encoder over `seq_len`, decoder over `target_len` (enc-dec models),
    or the decoder over `seq_len` (decoder-only models; `target_len` is ignored)."""
    m, d, i = model, model.d_model, model.inner_dim
    ffn = _ffn_weights(m)
    if m.is_encoder_decoder:
        s, t = seq_len, target_len
        enc_dense = 2 * s * (4 * d * i + ffn) * m.num_layers
        # decoder block: self-attn QKVO and cross Q,O on target tokens; cross K,V on source tokens
        dec_dense = (2 * t * (6 * d * i + ffn) + 2 * s * (2 * d * i)) * m.num_decoder_layers
        attn = 4 * i * (s * s * m.num_layers + (t * t + t * s) * m.num_decoder_layers)
        head = 2 * t * d * m.vocab_size
        return ForwardFlops(float(enc_dense + dec_dense), float(attn), float(head))
    s = seq_len
    kv = m.kv_heads * m.d_kv
    dense = 2 * s * (2 * d * i + 2 * d * kv + ffn) * m.num_layers
    attn = 4 * i * s * s * m.num_layers
    head = 2 * s * d * m.vocab_size
    return ForwardFlops(float(dense), float(attn), float(head))


def step_flops_per_sequence(model: ModelSpec, seq_len: int, target_len: int = 0, recompute: str = "none") -> float:
    """Training FLOPs (forward + backward [+ recomputation]) of one sequence."""
    f = forward_flops(model, seq_len, target_len)
    flops = 3.0 * f.total
    if recompute == "full":
        flops += f.layers
    elif recompute == "selective":
        flops += f.attention
    elif recompute == "op":  # the projections torchtitan's op-level policy does not save (costmodel/op_checkpoint.py)
        from scalestudy.costmodel.op_checkpoint import recomputed_gemms

        flops += model.total_layers * sum(g[0] for g in recomputed_gemms(model, seq_len, 1))
    return flops


def training_flops(model: ModelSpec, workload, recompute: str = "none") -> float:
    """FLOPs of one optimizer step over the whole global batch.

    recompute="none" gives model FLOPs (the MFU numerator); "selective"/"full" give hardware FLOPs (HFU).
    For an encoder-decoder model a `target_len` of 0 means what T5 span corruption of `seq_len` needs (as everywhere:
    scalestudy.specs.run.resolve_target_len).
    """
    return workload.global_batch * step_flops_per_sequence(model, workload.seq_len, target_length(model, workload),
                                                           recompute)


def target_length(model: ModelSpec, workload) -> int:
    """Decoder length used for `workload`: its target_len (enc-dec; 0 -> the span-corruption need of seq_len, 512 ->
    114), 0 for decoder-only models."""
    from scalestudy.specs.run import resolve_target_len

    if not model.is_encoder_decoder:
        return 0
    return resolve_target_len("span", workload.seq_len, workload.target_len)


def six_n_flops(model: ModelSpec, tokens: float) -> float:
    """The 6*N*D approximation (Kaplan et al. 2020), for comparison; N excludes embeddings as Kaplan does."""
    p = param_breakdown(model)
    return 6.0 * p.layers_total * tokens
