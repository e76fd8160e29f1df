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
def params_per_device(model: ModelSpec, tp: int, pp: int, vocab_tp: int = 0, embed_tp: int = 0,
                      chunks: tuple[int, ...] = (), tied_copy: bool = False) -> int:
    """Parameters held by the busiest model-parallel rank before any ZeRO sharding.

    Tensor parallelism splits matmul weights and the (vocabulary-parallel) embedding and head; norms and biases
    are replicated. Pipeline parallelism splits blocks evenly (a bound: the blocks' total / pp); the vocabulary
    tensors follow the model chunks each rank holds (rank_vocab_params over `chunks`, layers per chunk in stage
    order, chunk c on rank c % pp: specs.parallel_layout.chunk_layer_counts; () = one chunk per rank, the even
    split): the embedding on rank 0, the head on rank pp - 1 (a tied head is a second copy there, as in Megatron),
    an encoder-decoder's decoder embedding copy on the rank of decoder block 0 -- under the interleaved schedule
    rank 0 when the decoder starts on one of its chunks (t5-base at pp 2 x 4 chunks: two tables on rank 0) -- and
    the busiest rank takes the most of them. `vocab_tp`: the ranks the embedding and head are split over
    (strategy.vocab_shards: 1 when every tp rank holds them whole, Strategy.lm_head replicated; 0 = tp); `embed_tp`:
    the input embedding's when it differs (strategy.logit_shards: whole under lm_head gathered; 0 = vocab_tp);
    `tied_copy`: chunk_vocab_params.
    """
    vocab_tp = vocab_tp or tp
    p = param_breakdown(model)
    enc_rep = p.encoder_layer - p.encoder_layer_matmul
    dec_rep = p.decoder_layer - p.decoder_layer_matmul
    layers = (p.encoder_layer_matmul // tp + enc_rep) * p.encoder_layers + \
        (p.decoder_layer_matmul // tp + dec_rep) * p.decoder_layers
    if pp == 1:
        return layers + chunk_vocab_params(model, 1, 0, 0, model.total_layers, vocab_tp, embed_tp) + p.other
    chunks = chunks or _even_split(model.total_layers, pp)
    vocab = max(rank_vocab_params(model, pp, chunks, k, vocab_tp, embed_tp, tied_copy) for k in range(pp))
    return -(-layers // pp) + vocab + p.other


def _even_split(layers: int, pp: int) -> tuple[int, ...]:
    """Strategy.stage_split's default: the remainder on the first stages."""
    base, extra = divmod(layers, pp)
    return (base + 1,) * extra + (base,) * (pp - extra)


def _encoder_blocks(model: ModelSpec, start: int, n: int) -> int:
    """How many of blocks [start, start + n) are encoder blocks (T5: the encoder stack comes first)."""
    enc = model.num_layers if model.is_encoder_decoder else 0
    return max(0, min(start + n, enc) - start)


def chunk_block_params(model: ModelSpec, tp: int, start: int, n: int) -> int:
    """Blocks [start, start + n) on one rank: matmul weights / tp, norms and biases replicated."""
    p = param_breakdown(model)
    enc = p.encoder_layer_matmul // tp + (p.encoder_layer - p.encoder_layer_matmul)
    dec = p.decoder_layer_matmul // tp + (p.decoder_layer - p.decoder_layer_matmul)
    n_enc = _encoder_blocks(model, start, n)
    return n_enc * enc + (n - n_enc) * dec


def chunk_vocab_params(model: ModelSpec, chunks: int, c: int, start: int, n: int, vocab_tp: int, embed_tp: int = 0,
                       tied_copy: bool = False) -> int:
    """The vocabulary tensors model chunk c of `chunks` (blocks [start, start + n)) holds on one rank.

    - the input embedding (GPT-2: with its learned positions) on chunk 0;
    - encoder-decoder, chunks > 1: a copy of the shared embedding on the chunk holding decoder block 0 -- Megatron's
      T5 builds word embeddings on the decoder's first pipeline stage and all-reduces their gradient with the first
      stage's (megatron/core/parallel_state.py: the embedding group adds pipeline_model_parallel_split_rank; NeMo
      MegatronTokenLevelEncoderDecoderModule), scalestudy's engine ties a copy (engine/parallel/stages.py T5Chunk);
    - the LM head on the last chunk: untied its own weight; tied a copy of the embedding (Megatron: a second copy on
      the last stage), unless the chunk holds an embedding the head reuses (Megatron shared_embedding_or_output_weight
      on a pre_process stage). `tied_copy`: the engine copies every tied module per chunk even then (scalestudy's
      engine/parallel/stages._Tier: engines.copies_tied_modules).
    One chunk (no pipeline): the model's own tensors, a tied head counted once.
    """
    p = param_breakdown(model)
    embed_tp = embed_tp or vocab_tp
    if chunks == 1:
        return p.embedding // embed_tp + p.lm_head // vocab_tp
    embeds = int(c == 0) + int(model.is_encoder_decoder and start <= model.num_layers < start + n)
    total = embeds * (p.embedding // embed_tp)
    if c == chunks - 1:
        total += p.lm_head // vocab_tp if p.lm_head else \
            (p.embedding // vocab_tp if tied_copy or not embeds else 0)
    return total


def rank_vocab_params(model: ModelSpec, pp: int, chunks: tuple[int, ...], k: int, vocab_tp: int,
                      embed_tp: int = 0, tied_copy: bool = False) -> int:
    """The vocabulary tensors pipeline rank k holds: those of its chunks c = k, k + pp, ... of `chunks` (layers per
    chunk in stage order: one per rank, or virtual_stages per rank under the interleaved schedule, as
    engine/parallel/stages.py split_model and specs.parallel_layout.chunk_layer_counts place them).

    Interleaved t5-base at pp 2 x 4 chunks of 3 blocks: rank 0 holds chunks 0, 2, 4, 6 -- the encoder's embedding
    (chunk 0) and the decoder's copy (chunk 4, decoder blocks 0-2): two 32,128 x 768 tables; rank 1 the head's."""
    total, start = 0, 0
    for c, n in enumerate(chunks):
        if c % pp == k:
            total += chunk_vocab_params(model, len(chunks), c, start, n, vocab_tp, embed_tp, tied_copy)
        start += n
    return total
