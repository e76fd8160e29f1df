"""What torch.autocast over fp32 weights adds to the bytes a backward holds: engine ddp in 16 bits running eager
torch modules (kernels eager: HF Trainer / Accelerate --bf16 / --fp16, nanoT5, `scalestudy train`'s ddp --
engine/settings.ddp_settings autocast_dtype), whose weights stay fp32 while matmuls run in bf16 / fp16
(eager_kernels.autocast_param_s prices the same casts' time). Not XLA (T5X, Pax), Megatron / NeMo's own mixed
precision or torch.compile (kernels fused / engine), which the published ddp rows also run.

Counted with torch.autograd.graph.saved_tensors_hooks, storages deduplicated (benchmarks/count_t5_saved.py; torch
2.13, transformers 5.25 and 5.17, t5-large widths, RESULTS 2026-12-04 t5act):
- the weight casts: autocast caches the bf16 copy of every fp32 leaf weight it casts until the outermost autocast
  region exits (aten/src/ATen/autocast_mode.cpp cached_cast; torch.autocast.__exit__ clears it), and every matmul
  saves that copy for its backward, so all of them are alive when the backward starts: 2 B per cast parameter
  (an untied input embedding is looked up in fp32: torch's embedding is not on autocast's list);
- Hugging Face T5 (modeling_t5.py): its embedding output is fp32, so the residual stream is fp32 (fp32 + bf16
  sublayer output -> fp32): a checkpointed block keeps a 4-byte input, not the compute dtype's;
  T5LayerNorm returns fp32 (weight * fp32 normed), and autocast's F.linear casts its input afresh for every
  projection -- self-attention's q, k and v each save their own bf16 copy (2 beyond the one counted), and every
  decoder block's cross-attention k and v cast the fp32 encoder output again (2 copies per encoder token per
  decoder block; with 16-bit weights the encoder output is one 16-bit tensor all blocks share).
- HF's gelu_new (GPT-2; T5 v1.1 / mT5's gated-gelu), `0.5 * x * (1 + tanh(c * (x + 0.044715 * pow(x, 3))))`, read
  in transformers activations.py: on CUDA `pow` is on autocast's fp32 list (autocast_mode.cpp KERNEL_CUDA(pow,
  fp32); CPU's lists lack it, so the CPU count cannot show it), so pow saves an fp32 copy of x (4 B), tanh its fp32
  output (4), the final product its operands 0.5 * x (2) and the fp32 1 + tanh (4), and the next matmul a bf16 cast
  of the fp32 product (2): 16 B per d_ff element where activation_parts counts 5 tensors of 2 (10); gated, the
  gate product also saves the fp32 GELU output and the bf16 linear half (6), wo its cast (2): 22 against 14.
The rest of the block matches memory.activation_parts' count: the norms' fp32 input and normed output (8 B, as
_eager_t5_norm_bytes + the input), the FFN's activation output and wo's re-cast of its `.to(wo.weight.dtype)`
copy (the 2 tensors of width d_ff).
"""

from __future__ import annotations

from scalestudy.specs.model import ModelSpec

CAST_BYTES = 2  # bf16 / fp16 copies


def autocast_weights(engine: str, precision: str, kernels: str) -> bool:
    """Whether the run's eager modules keep fp32 weights under torch.autocast (module docstring)."""
    return engine == "ddp" and precision in ("bf16", "fp16") and kernels == "eager"


def weight_cast_bytes(model: ModelSpec, engine: str, precision: str, kernels: str, params: float, tp: int) -> float:
    """Autocast's cached 16-bit copies of the `params` weights a rank holds (module docstring): all of them are
    alive at the start of the backward. One autocast region over the whole forward (pp 1; a pipeline's chunks
    each cast again per micro-batch -- not priced here)."""
    if not autocast_weights(engine, precision, kernels):
        return 0.0
    uncast = 0.0 if model.tie_word_embeddings else model.vocab_size * model.d_model / tp
    return CAST_BYTES * max(0.0, params - uncast)


def t5_cast_bytes(model: ModelSpec, engine: str, precision: str, kernels: str, micro_batch: int, seq_len: int,
                  target_len: int, recompute: str, blocks: tuple[int, int] | None = None) -> float:
    """Bytes HF T5's own casts under autocast add to memory.activation_parts' count for one micro-batch of the
    (encoder, decoder) `blocks` (all by default), module docstring: per encoder block the k and v copies of the
    normed input (2 x 2 B x d_model per token), per decoder block the same at the target length plus
    cross-attention's k and v copies of the encoder output; under full recompute only the block inputs stay, at
    4 B instead of the compute dtype's, plus one re-run block's copies. 0 for other models and precision paths."""
    if not (model.is_encoder_decoder and autocast_weights(engine, precision, kernels)):
        return 0.0
    le, ld = blocks or (model.num_layers, model.num_decoder_layers)
    h, s, t = model.d_model, micro_batch * seq_len, micro_batch * target_len
    enc = 2 * CAST_BYTES * h * s
    dec = 2 * CAST_BYTES * h * (t + s)
    if recompute == "full":
        wider = 4 - CAST_BYTES  # fp32 residual stream vs the 16-bit input activation_parts keeps
        return wider * h * (le * s + ld * t) + max(enc if le else 0.0, dec if ld else 0.0)
    return le * enc + ld * dec


GELU_NEW_EXTRA = {False: 16 - 10, True: 22 - 14}  # B per d_ff element and token, by gated (module docstring)


def gelu_cast_bytes(model: ModelSpec, engine: str, precision: str, kernels: str, micro_batch: int, seq_len: int,
                    target_len: int, tp: int, recompute: str, blocks: tuple[int, int] | None = None) -> float:
    """Bytes gelu_new's fp32 chain under CUDA autocast adds to activation_parts' count for one micro-batch of the
    (encoder, decoder) `blocks` (all by default; a decoder-only model's blocks are its decoder), d_ff split over
    `tp` (module docstring). 0 under full recompute (a block's inputs only) and for other activations. Priced
    without pipeline parallelism only (terms._whole_extras, stages.stage_activations at pp 1)."""
    act = "gelu_new" if model.ffn == "gated-gelu" else model.ffn.removeprefix("gated-")  # T5Config's mapping
    if act != "gelu_new" or recompute == "full" or not autocast_weights(engine, precision, kernels):
        return 0.0
    if model.is_encoder_decoder:
        le, ld = blocks or (model.num_layers, model.num_decoder_layers)
        tokens = micro_batch * (le * seq_len + ld * target_len)
    else:
        tokens = micro_batch * seq_len * (blocks[1] if blocks else model.num_layers)
    return GELU_NEW_EXTRA[model.gated_ffn] * tokens * model.d_ff / tp


def autocast_rank_bytes(model: ModelSpec, engine: str, precision: str, kernels: str, micro_batch: int, seq_len: int,
                        target_len: int, tp: int, recompute: str, params: float) -> float:
    """All autocast adds on a rank without pipeline parallelism (all blocks, one micro-batch in flight) holding
    `params` weights: their cached 16-bit copies, HF T5's casts and gelu_new's fp32 chain (terms._whole_extras and
    stages.stage_activations at pp 1 alike)."""
    return (weight_cast_bytes(model, engine, precision, kernels, params, tp)
            + t5_cast_bytes(model, engine, precision, kernels, micro_batch, seq_len, target_len, recompute)
            + gelu_cast_bytes(model, engine, precision, kernels, micro_batch, seq_len, target_len, tp, recompute))
