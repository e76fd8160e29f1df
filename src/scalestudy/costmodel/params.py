"""Parameter counts, exactly as Transformers builds each family (tests compare against a meta-device model).

Layouts (Hugging Face module names):
- T5/mT5: shared embedding V*d; per encoder block self-attention q,k,v,o (4*d*inner) + FFN + 2 RMSNorms;
  per decoder block self- and cross-attention (8*d*inner) + FFN + 3 RMSNorms; relative position bias
  (buckets*heads) in the first block of each stack; final norms; lm_head V*d when untied.
- GPT-2: wte V*d, wpe P*d; per block c_attn (d*3d + 3d), c_proj (d*d + d), c_fc (d*f + f), mlp c_proj (f*d + d),
  two LayerNorms (2*2d); ln_f 2d; head tied.
- Llama (and Mistral, Qwen2): embed V*d; per block q (d*h*dk), k and v (d*kv*dk each), o (h*dk*d), gate/up/down
  (3*d*f), 2 RMSNorms, biases when the config has them (Llama attention_bias: q,k,v,o; Qwen2: q,k,v; Llama
  mlp_bias: gate, up, down); final norm d; lm_head V*d when untied.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from scalestudy.specs.model import ModelSpec


@dataclass(frozen=True)
class ParamCounts:
    """Parameters by part. `encoder_layer`/`decoder_layer` are one block (matmul weights + norms + biases)."""

    embedding: int  # input embedding(s) incl. learned positions
    lm_head: int  # 0 when tied to the embedding
    encoder_layer: int  # 0 for decoder-only models
    decoder_layer: int
    encoder_layers: int
    decoder_layers: int
    other: int  # final norms, relative-position biases
    encoder_layer_matmul: int  # weights of the block's matrix multiplies (sharded by tensor parallelism)
    decoder_layer_matmul: int

    @property
    def layers_total(self) -> int:
        return self.encoder_layer * self.encoder_layers + self.decoder_layer * self.decoder_layers

    @property
    def layers_matmul(self) -> int:
        """The blocks' matmul weights, every block of both stacks (what FP8 linears cast and hold)."""
        return self.encoder_layer_matmul * self.encoder_layers + self.decoder_layer_matmul * self.decoder_layers

    @property
    def total(self) -> int:
        return self.embedding + self.lm_head + self.layers_total + self.other


def _ffn_weights(m: ModelSpec) -> int:
    return (3 if m.gated_ffn else 2) * m.d_model * m.d_ff


@lru_cache(maxsize=None)
def param_breakdown(m: ModelSpec) -> ParamCounts:
    d, v, i = m.d_model, m.vocab_size, m.inner_dim
    head = 0 if m.tie_word_embeddings else v * d
    if m.is_encoder_decoder:
        enc_mm = 4 * d * i + _ffn_weights(m)
        dec_mm = 8 * d * i + _ffn_weights(m)
        bias = m.relative_attention_num_buckets * m.num_heads
        return ParamCounts(
            embedding=v * d, lm_head=head, encoder_layer=enc_mm + 2 * d, decoder_layer=dec_mm + 3 * d,
            encoder_layers=m.num_layers, decoder_layers=m.num_decoder_layers, other=2 * d + 2 * bias,
            encoder_layer_matmul=enc_mm, decoder_layer_matmul=dec_mm,
        )
    if m.family == "gpt2":
        f = m.d_ff
        mm = 3 * d * d + d * d + 2 * d * f
        layer = mm + 3 * d + d + f + d + 4 * d  # biases of c_attn, c_proj, c_fc, mlp c_proj; two LayerNorms
        return ParamCounts(
            embedding=v * d + m.max_position_embeddings * d, lm_head=head, encoder_layer=0, decoder_layer=layer,
            encoder_layers=0, decoder_layers=m.num_layers, other=2 * d, encoder_layer_matmul=0,
            decoder_layer_matmul=mm,
        )
    kv = m.kv_heads * m.d_kv
    mm = 2 * d * i + 2 * d * kv + _ffn_weights(m)  # gate, up, down (a non-gated ffn, Nemotron's relu2: up, down)
    bias = {"none": 0, "qkv": i + 2 * kv, "all": i + 2 * kv + d}[m.attention_bias]
    bias += ((2 if m.gated_ffn else 1) * m.d_ff + d) if m.mlp_bias else 0
    return ParamCounts(
        embedding=v * d, lm_head=head, encoder_layer=0, decoder_layer=mm + 2 * d + bias, encoder_layers=0,
        decoder_layers=m.num_layers, other=d, encoder_layer_matmul=0, decoder_layer_matmul=mm,
    )


@lru_cache(maxsize=None)
def param_count(model: ModelSpec) -> int:
    """Total parameters, tied tensors counted once (equals `sum(p.numel() for p in hf_model.parameters())`)."""
    return param_breakdown(model).total


@lru_cache(maxsize=None)
def params_per_device(model: ModelSpec, tp: int, pp: int, vocab_tp: int = 0, embed_tp: int = 0) -> int:
    """Parameters held by the busiest model-parallel rank before any ZeRO sharding.

    Tensor parallelism splits matmul weights and the (vocabulary-parallel) embedding and head; norms and biases
    are replicated. Pipeline parallelism splits blocks evenly; the first stage adds the embedding and the last
    the head (a tied head is a second copy on the last stage, as in Megatron), so the busiest stage takes the
    larger of the two. `vocab_tp`: the ranks the embedding and head are split over (strategy.vocab_shards: 1 when
    every tp rank holds them whole, Strategy.lm_head replicated; 0 = tp); `embed_tp`: the input embedding's when it
    differs (strategy.logit_shards: whole under lm_head gathered; 0 = vocab_tp).
    """
    vocab_tp = vocab_tp or tp
    p = param_breakdown(model)
    enc_rep = p.encoder_layer - p.encoder_layer_matmul
    dec_rep = p.decoder_layer - p.decoder_layer_matmul
    layers = (p.encoder_layer_matmul // tp + enc_rep) * p.encoder_layers + \
        (p.decoder_layer_matmul // tp + dec_rep) * p.decoder_layers
    embed = p.embedding // (embed_tp or vocab_tp)
    head = (p.lm_head or (p.embedding if pp > 1 else 0)) // vocab_tp
    if pp == 1:
        return layers + embed + head + p.other
    return -(-layers // pp) + max(embed, head) + p.other
