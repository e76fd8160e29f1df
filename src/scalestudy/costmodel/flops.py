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


def attention_backward_factor(flash: bool) -> float:
    """Backward FLOPs of the attention core (scores and attention-over-values) over its forward FLOPs.

    Eager attention keeps the softmax probabilities P: its backward is 4 matmuls of the forward's size (dV = P^T dO,
    dP = dO V^T, dQ = dS K, dK = dS^T Q) against the forward's 2 (S = Q K^T, O = P V): 2x, the convention above.
    A flash kernel keeps only the log-sum-exp and recomputes S = Q K^T tile by tile in its backward: 5 matmuls,
    2.5x -- flash-attn's own benchmark counts it so (Dao-AILab/flash-attention benchmarks/benchmark_flash_attention.py
    flops(): bwd = 2.5 x fwd, fwd_bwd = 3.5 x fwd; Dao 2023, FlashAttention-2, arXiv 2307.08691: the backward
    recomputes S and P from the saved log-sum-exp), and the Triton kernel MPT
    ran (llm-foundry v0.3.0 llmfoundry/models/layers/flash_attn_triton.py: two tl.dot per tile in _fwd_kernel,
    five in _bwd_kernel_one_col_block) does the same. Time only: the FLOP conventions above (MFU, HFU) stay 3x."""
    return 2.5 if flash else 2.0


def step_flops_per_sequence(model: ModelSpec, seq_len: int, target_len: int = 0, recompute: str = "none",
                            early_stop: bool = False) -> float:
    """Training FLOPs (forward + backward [+ recomputation]) of one sequence; `early_stop`: a full recompute stops
    before each block's FFN output projection (costmodel/op_checkpoint.py, checkpoint early stop)."""
    f = forward_flops(model, seq_len, target_len)
    flops = 3.0 * f.total
    if recompute == "full":
        flops += f.layers
        if early_stop:
            from scalestudy.costmodel.op_checkpoint import early_stop_tail

            flops -= sum(g[0] for g in early_stop_tail(model, 1, seq_len, target_len, 1))
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
    if not model.is_encoder_decoder:
        return 0
    if workload.target_len:  # given: resolve_target_len returns it as it is (hot path: no import)
        return workload.target_len
    from scalestudy.specs.run import resolve_target_len

    return resolve_target_len("span", workload.seq_len, workload.target_len)


def six_n_flops(model: ModelSpec, tokens: float) -> float:
    """The 6*N*D approximation (Kaplan et al. 2020), for comparison; N excludes embeddings as Kaplan does."""
    p = param_breakdown(model)
    return 6.0 * p.layers_total * tokens


# ---------------------------------------------------------------------------------------------- vocabulary
# What grows with the vocabulary V beside the logit GEMMs (ForwardFlops.head): memory-bound passes over the logits
# and over the V x d weights. Counted per micro-batch on one tensor-parallel rank, which holds V/tp rows of the head
# and of the embedding (Megatron's VocabParallelEmbedding and vocab_parallel_cross_entropy: no rank ever sees all
# V logits of a token; three all-reduces of one float per token -- max, target logit, sum of exponentials -- join
# them, latency-sized and not counted). step.compute_times prices the bytes at the device's memory bandwidth.

def logit_elements(model: ModelSpec, micro_batch: int, seq_len: int, target_len: int, tp: int) -> float:
    """Logits of one micro-batch on one tensor-parallel rank: every output token (the decoder's target tokens of an
    encoder-decoder model) times V/tp."""
    tokens = micro_batch * (target_len if model.is_encoder_decoder else seq_len)
    return float(tokens) * model.vocab_size / tp


def cross_entropy_bytes_per_logit(precision: str, kernel: str = "engine", causal: bool = True) -> float:
    """Bytes moved per logit by the softmax cross-entropy, forward and backward, by the loss kernel the run used
    (Strategy.cross_entropy; `a` = bytes of the 16-bit logits, 4 in fp32 training):

    - engine / inplace / torch: Megatron's vocab_parallel_cross_entropy on `logits.float()` (Megatron-LM/apex
      tensor_parallel/cross_entropy.py; NeMo 1.11 nemo/collections/nlp/modules/common/megatron/
      vocab_parallel_cross_entropy.py, read at tag v1.11.0). Forward: the fp32 upcast of 16-bit logits (read 2,
      write 4), the max over the vocabulary (read 4), logits minus max (read 4, write 4), exp in place (read 4,
      write 4), the sum (read 4), division in place giving the softmax saved for backward (read 4, write 4).
      Backward: the target's -1 touches one element per token (not counted), the product with the incoming gradient
      in place (read 4, write 4), the cast back to the logits' dtype (read 4, write 2). 52 bytes in 16-bit training;
      in fp32 the two casts vanish: 40. Megatron-Core's in-place variant (9634c0e4) subtracts the max in place:
      the same passes, one buffer fewer (memory.logits_bytes). PyTorch's cross_entropy under autocast -- fp32
      upcast, log_softmax, nll_loss, their backward and the downcast -- moves about the same.
    - fused: the xentropy kernel of apex (contrib/xentropy) and flash-attn (csrc/xentropy/xentropy_kernel.cu,
      flash_attn.losses.cross_entropy; llm-foundry's fused_crossentropy): one block per token reads its row of
      logits in their own dtype twice in the forward (cunn_SoftMaxXEntropyForward: max and sum, then the sum of
      exponentials) and keeps one fp32 log-sum-exp per token; the backward (cunn_SoftMaxXEntropyBackward) reads
      the row once more and writes the gradient, in place with inplace_backward: 4a.
    - fused-metrics: that loss under Composer 0.13-0.16 (composer/trainer/trainer.py _train_microbatch, read at
      v0.15.0: after every micro-batch's backward, _eval_train_metrics updates each training metric on the cached
      logits, under no_grad but inside the bf16 autocast context) with llm-foundry's MPT, whose training metrics are
      LanguageCrossEntropy and LanguagePerplexity (composer/metrics/nlp.py: each runs
      torch.nn.CrossEntropyLoss(reduction='sum') over the logits; autocast computes cross_entropy in fp32): per
      metric the upcast (read a, write 4) and log_softmax's forward (PyTorch cunn_SoftMaxForward on rows wider than
      it caches: max read 4, sum of exponentials read 4, output read 4 write 4), no backward: 4a + 2 (a + 20).
    - fused-linear: Liger's fused linear cross-entropy (liger_kernel/ops/fused_linear_cross_entropy.py with
      ops/cross_entropy.py liger_cross_entropy_kernel) runs the loss on each chunk of logits right after its GEMM:
      one online max / sum pass (read a), then the gradient written over the logits (read a, write a): 3a. What
      the chunking costs beyond that is `fused_linear_chunk_bytes`.
    - hf / hf-autocast: a Hugging Face transformers 4.x model's own loss (read at v4.12.0 / v4.30.2:
      GPT2LMHeadModel.forward `shift_logits = lm_logits[..., :-1, :].contiguous()` then CrossEntropyLoss();
      T5ForConditionalGeneration / MT5 / nanoT5's MyT5 CrossEntropyLoss(ignore_index=-100) on `lm_logits.view`, no
      shift; neither upcasts) = torch's log_softmax + nll_loss in `c` bytes: the logits' dtype (`hf`: DeepSpeed's
      16-bit model, no autocast) or fp32 (`hf-autocast`, memory.loss_kernel: engine ddp in 16 bits, torch.autocast
      runs cross_entropy in fp32: the cast a + 4 forward, 4 + a back). log_softmax forward (cunn_SoftMaxForward on
      rows wider than its shared-memory cache: max read c, sum of exponentials read c, output read c write c) 4c;
      backward nll_loss_backward's zero-filled gradient (write c), log_softmax_backward (sum read c, then read the
      gradient and the output, write c) 4c; a causal model's shifted copy 2a and, back, SliceBackward's zero-filled
      full-size gradient plus the copy into it 3a. GPT-2 fp16: 28 B (DeepSpeed), 58 (DDP + AMP); T5 bf16: 18 / 48.
      transformers >= 4.46 (loss_utils ForCausalLMLoss: `logits.float()`, labels padded instead of the logits
      shifted) is the engine count on fsdp / ddp (memory.loss_kernel "torch"), within 4 B of Megatron's 52.
    - torch-16bit: F.cross_entropy on the 16-bit logits (KempnerForge's loss): log_softmax's forward and backward and
      nll_loss's zero-filled gradient in the logits' dtype, as hf without the shifted copy: 8a (16 B in bf16).
    - torch-compiled: torch's loss on `logits.float()` under torch.compile (torchtitan since bbb1b616): Inductor fuses
      the upcast, log-softmax and nll into a forward reduction over each row (its max, then its sum of
      exponentials: two reads of the 16-bit logits) and one backward kernel (read, write the 16-bit gradient): the
      fused kernel's 4a."""
    a = 4 if precision == "fp32" else 2
    if kernel in ("hf", "hf-autocast"):
        c = 4 if kernel == "hf-autocast" else a
        casts = (a + 4) + (4 + a) if c > a else 0
        shift = 2 * a + 3 * a if causal else 0
        return float(4 * c + c + 4 * c + casts + shift)
    if kernel == "torch-16bit":  # the hf passes on the logits' own dtype, no shifted copy, no casts
        return 8.0 * a
    if kernel in ("fused", "torch-compiled"):
        return 4.0 * a
    if kernel == "fused-metrics":
        upcast = a + 4 if precision != "fp32" else 0
        return 4.0 * a + 2.0 * (upcast + 16.0)
    if kernel == "fused-linear":
        return 3.0 * a
    half = precision != "fp32"
    upcast = 2 + 4 if half else 0
    forward = 4 + (4 + 4) + (4 + 4) + 4 + (4 + 4)
    backward = (4 + 4) + ((4 + 2) if half else 0)
    return float(upcast + forward + backward)


def head_bias_bytes_per_logit(model: ModelSpec, precision: str, megatron_head: bool) -> float:
    """Bytes moved per logit by the LM head's bias, forward and backward: 3a where the head has one, else 0.
    Megatron-family T5 heads add a V/tp bias to the logits -- NeMo 1.7-1.11 MegatronTokenLevelHead (`tokens_head`,
    token_level_encoder_decoder.py: parallel_lm_logits(..., bias=self.bias)) and Megatron-LM's T5LMHead
    (megatron/model/t5_model.py, 2022); GPT heads and Hugging Face's lm_head have none. The forward writes the
    broadcast bias into the output and the GEMM reads it back (torch addmm: copy_ then beta = 1; PyTorch <= 1.12
    F.linear on 3-D input: matmul then add_; apex 2022 LinearWithGradAccumulationAndAsyncCommunication, NeMo 1.11:
    `output + bias`): read a, write a; the backward reduces the logits' gradient over the tokens for the bias
    gradient (`grad_output.sum(dim=0)`): read a. `megatron_head`: the engine is Megatron-LM / NeMo
    (alignment.pads_vocab)."""
    if not (megatron_head and model.is_encoder_decoder):
        return 0.0
    return 3.0 * (4 if precision == "fp32" else 2)


def fused_linear_chunk_tokens(out_tokens: int, vocab: int, d_model: int) -> int:
    """Tokens per chunk of Liger's fused linear cross-entropy: next_power_of_2(ceil(tokens / ceil(V / h))), at most
    the tokens -- transient logits of about tokens x h elements (fused_linear_cross_entropy_forward)."""
    inc_factor = -(-vocab // d_model)
    per_chunk = -(-out_tokens // inc_factor)
    return min(out_tokens, 1 << max(0, per_chunk - 1).bit_length())


def fused_linear_chunk_bytes(model: ModelSpec, out_tokens: int, precision: str, tp: int) -> float:
    """Bytes of the head weight and its gradient that Liger's fused linear cross-entropy moves per micro-batch:
    every chunk's three GEMMs are separate calls (liger_kernel/ops/fused_linear_cross_entropy.py): the logits GEMM
    and the input-gradient GEMM (grad_logits_chunk @ weight) each read the whole V x h weight, and the
    weight-gradient GEMM accumulates into the whole V x h grad_weight (addmm: read and write). Counted once per
    chunk in the weight's dtype (grad_weight = zeros_like(weight)): 4a per weight element per chunk. The GEMMs'
    FLOPs are the head's as usual; with short chunks these bytes, not the FLOPs, set their pace (step._head_s)."""
    a = 4 if precision == "fp32" else 2
    v, h = model.vocab_size / tp, model.d_model
    chunks = -(-out_tokens // fused_linear_chunk_tokens(out_tokens, model.vocab_size, h))
    return chunks * v * h * 4.0 * a


def embedding_lookups(model: ModelSpec) -> int:
    """Embedding lookups per micro-batch: the encoder and the decoder input of an encoder-decoder model share one
    table (T5/mT5 `shared`, NeMo share_token_embeddings), a decoder-only model looks up once."""
    return 2 if model.is_encoder_decoder else 1


def vocab_grad_bytes(model: ModelSpec, precision: str, tp: int) -> float:
    """Bytes moved per micro-batch, on one tensor-parallel rank, to form the gradients of the V/tp x d vocabulary
    weights beyond the head's weight-gradient GEMM (counted as FLOPs).

    - each lookup's backward is a dense table: torch's embedding_dense_backward zero-fills V/tp x d in the gradient
      dtype and scatter-adds the tokens' rows (the rows scale with tokens, not V: not counted): g bytes/element;
    - autograd sums the contributions to one weight before its accumulator runs: the lookups plus, when tied, the
      head's weight gradient; each sum reads two and writes one: 3 g per extra contribution;
    - the gradient is accumulated into an fp32 main gradient once per micro-batch (NeMo O2's grad-accumulator
      hook `main_grad.add_(param.grad)`, Megatron's without gradient-accumulation fusion; DDP under autocast adds
      into the fp32 .grad): read g, read and write 4; an untied head's weight pays the same accumulation.
    g = 2 for 16-bit gradients, 4 in fp32 (where the fp32 add is the accumulation itself)."""
    g = 4 if precision == "fp32" else 2
    lookups = embedding_lookups(model)
    contributions = lookups + (1 if model.tie_word_embeddings else 0)
    accumulate = g + 8
    per_element = lookups * g + 3 * g * (contributions - 1) + accumulate
    if not model.tie_word_embeddings:
        per_element += accumulate  # the head's own V x d weight
    return per_element * (model.vocab_size / tp) * model.d_model
