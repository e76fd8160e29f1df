"""T5's relative position bias as a float attention mask: what PyTorch SDPA runs for a Hugging Face T5 under
attention flash (attention_kernel "mem-efficient"), and the bias tensors it adds in time and memory.

Read in transformers 5.x (5.24 installed; T5 joined the attention-function interface with SDPA in the 5.x line,
older 4.x T5 -- the seed study's era, nanoT5 -- ran its eager matmul-softmax attention only) and torch 2.x:
- models/t5/modeling_t5.py: the first block of each stack computes `position_bias` [1, heads, q, k]
  (T5Attention.compute_bias: an embedding lookup over relative-position buckets, so it requires grad) and T5Stack
  hands the same tensor to every later block; the decoder's own bias likewise; cross-attention has no bias table:
  its first block makes torch.zeros((1, heads, t, s)), which requires grad only under HF gradient checkpointing
  (`self.gradient_checkpointing and self.training`: what `train`'s full recompute turns on, engine/models.py), and
  the decoder's blocks share it;
- integrations/sdpa_attention.py: every call turns the bias into SDPA's attn_mask (create_position_bias_mask:
  `.contiguous()` of it -- compute_bias returns a permuted view --, through torch.where with the causal pattern in
  the decoder, or with a padding mask) and passes is_causal False: a fresh [1, heads, q, k] float mask per call
  (batch-sized only where a batch has padding: an all-ones mask is dropped, and `train`'s packed batches have none);
- aten/.../transformers/cuda/sdp_utils.cpp: can_use_flash_attention refuses any attn_mask (check_for_attn_mask), so
  the dispatcher takes the memory-efficient backend (the CUTLASS kernel xFormers contributed), which takes the mask
  as an additive bias broadcast over the batch; its backward recomputes the scores, so it reads the bias again,
  and for a bias that requires grad writes the bias gradient at the bias's EXPANDED size [batch, heads, q, k]
  (attention_backward.cu _efficient_attention_backward: grad_bias allocated from bias->sizes()); autograd sums it
  over the batch into [1, heads, q, k], and the blocks' gradients accumulate into the one shared bias's.
Per call with a bias of E = heads x q x k elements (B = micro_batch x E as the kernel sees it), in the kernel's
dtype (2 bytes: autocast casts the mask with the other SDPA inputs; a fp32 compute_bias output is cast once more,
not counted): forward -- the mask built (read + write E) and read by the kernel (B); backward -- the kernel re-reads
B and writes the B gradient, autograd reads B and writes E (the batch sum), the shared gradient is read and written
with it (3 E). The zeros of cross-attention need no copy (already contiguous, in the activation dtype).
Memory: each self-attention call's mask is saved for its backward (E per call; under full or selective recompute
only the shared biases, which every checkpointed block or core takes as an input, stay: E once per stack); a call's
backward holds its [batch, heads, q, k] bias gradient beside the accumulated one (the transient, largest call).
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

from scalestudy.specs.model import ModelSpec

BIAS_KERNELS = ("mem-efficient",)  # attention kernels that take T5's position bias as an additive mask
BIAS_ELEMENT_BYTES = 2  # the kernel's dtype: bf16 / fp16 (autocast casts the mask with q, k, v)
MASK_ALIGN = 8  # SDPA pads a mask whose rows are not 8-element aligned (attention.cu preprocess_mask)
GRAD_ALIGN = 16  # the bias gradient's last dimension is allocated padded to 16 (_efficient_attention_backward)


class _Bias(NamedTuple):
    """One kind of attention call with a position-bias mask, per pass of a micro-batch."""
    calls: int  # per pass
    heads: int  # on this rank
    q: int
    k: int
    trained: bool  # the bias requires grad: the backward writes its gradient
    copied: bool  # each call builds a fresh mask from the shared bias (the cross-attention zeros are used as they are)

    @property
    def elems(self) -> int:  # E: the [1, heads, q, k] mask
        return self.heads * self.q * self.k


def _calls(model: ModelSpec, seq_len: int, target_len: int, tp: int, recompute: str,
           blocks: tuple[int, int] | None = None) -> tuple[_Bias, ...]:
    """Encoder self-, decoder self- and cross-attention of the (encoder, decoder) `blocks` a rank runs (all by
    default); heads split by tensor parallelism (engine/parallel/tensor_parallel.py splits the bias table by head)."""
    heads = -(-model.num_heads // tp)
    le, ld = blocks or (model.num_layers, model.num_decoder_layers)
    return (_Bias(le, heads, seq_len, seq_len, True, True), _Bias(ld, heads, target_len, target_len, True, True),
            _Bias(ld, heads, target_len, seq_len, recompute == "full", False))


def bias_pass_bytes(model: ModelSpec, micro_batch: int, seq_len: int, target_len: int, tp: int,
                    recompute: str) -> tuple[float, float]:
    """(forward, backward) HBM bytes of the position-bias masks of one micro-batch's pass (module docstring);
    (0, 0) for a model without a position bias in its attention (decoder-only families). A key length that is not
    a multiple of 8 adds a padded copy of the mask (SDPA's preprocess_mask: pad_bias, attention.cu)."""
    if not model.is_encoder_decoder:
        return 0.0, 0.0
    fwd = bwd = 0.0
    for c in _calls(model, seq_len, target_len, tp, recompute):
        e, b = c.elems, micro_batch * c.elems
        fwd += c.calls * (b + (2.0 * e if c.copied else 0.0) + (2.0 * e if c.k % MASK_ALIGN else 0.0))
        bwd += c.calls * (b + (2.0 * b + 4.0 * e if c.trained else 0.0))
    return fwd * BIAS_ELEMENT_BYTES, bwd * BIAS_ELEMENT_BYTES


def bias_memory_bytes(model: ModelSpec, micro_batch: int, seq_len: int, target_len: int, tp: int,
                      recompute: str, blocks: tuple[int, int] | None = None, in_flight: float = 1) -> float:
    """Bytes the position-bias masks add to the activations at the backward's peak: the masks saved for the
    backward (per call; only the shared biases under full or selective recompute), for each of `in_flight`
    micro-batches, and the largest call's [batch, heads, q, k] bias gradient -- its last dimension padded to 16
    (_efficient_attention_backward) -- with the accumulated [1, heads, q, k] one (module docstring). A pipeline
    stage runs its (encoder, decoder) `blocks`: its chunk's first block of each stack computes that stack's shared
    bias (engine/parallel/stages.T5Chunk), so the stage holds the biases of the stacks whose blocks it runs."""
    if not model.is_encoder_decoder:
        return 0.0
    return _bias_bytes(*_saved_and_grad(model, micro_batch, seq_len, target_len, tp, recompute, blocks), in_flight)


def _bias_bytes(saved: int, grad: int, in_flight: float) -> float:
    """Bytes of `saved` mask elements per in-flight micro-batch and `grad` gradient elements (bias_memory_bytes)."""
    return (saved * in_flight + grad) * BIAS_ELEMENT_BYTES


_SAVED_AND_GRAD: dict[tuple, tuple] = {}


def _saved_and_grad(model: ModelSpec, micro_batch: int, seq_len: int, target_len: int, tp: int, recompute: str,
                    blocks: tuple[int, int] | None) -> tuple[int, int]:
    """bias_memory_bytes' (elements saved per in-flight micro-batch, elements of the bias gradients), memoised (the
    model by identity, kept to guard reuse): a pipeline's stages differ mostly in their in-flight micro-batches."""
    key = (id(model), micro_batch, seq_len, target_len, tp, recompute, blocks)
    hit = _SAVED_AND_GRAD.get(key)
    if hit is not None and hit[0] is model:
        return hit[1], hit[2]
    calls = [c for c in _calls(model, seq_len, target_len, tp, recompute, blocks) if c.calls]
    rebuilt = recompute in ("full", "selective")  # the checkpointed attention rebuilds its masks in the backward
    saved = sum(c.calls * c.elems if c.copied and not rebuilt else c.elems for c in calls)
    grad = max((micro_batch * c.heads * c.q * -(-c.k // GRAD_ALIGN) * GRAD_ALIGN + c.elems
                for c in calls if c.trained), default=0)
    if len(_SAVED_AND_GRAD) > 100_000:
        _SAVED_AND_GRAD.clear()
    _SAVED_AND_GRAD[key] = (model, saved, grad)
    return saved, grad


def bias_launches(model: ModelSpec, seq_len: int, target_len: int, recompute: str) -> tuple[int, int]:
    """(forward, backward) kernel launches the masks add to one micro-batch's pass, counted in the code read above:
    forward, per encoder call the mask's copy (1), per decoder self-attention call the causal pattern (two aranges
    and a compare) and the torch.where (4), + 1 per call whose mask SDPA pads (key length not a multiple of 8);
    backward, per call with a trained bias the batch sum and the accumulation into the shared gradient (2), + the
    where's backward in the decoder (1). Priced at the fitted launch cost like every block kernel (step.py)."""
    if not model.is_encoder_decoder:
        return 0, 0
    fwd = bwd = 0
    for c, built in zip(_calls(model, seq_len, target_len, 1, recompute), (1, 4, 0)):
        fwd += c.calls * (built + (1 if c.k % MASK_ALIGN else 0))
        bwd += c.calls * ((2 if c.trained else 0) + (1 if built > 1 else 0))
    return fwd, bwd


def priced_stage_bias_memory(model: ModelSpec, kernel: str, flash: bool, device, micro_batch: int, seq_len: int,
                             target_len: int, tp: int, recompute: str, split: tuple[int, ...],
                             in_flight: tuple[float, ...]) -> tuple[float, ...]:
    """priced_bias_memory of each pipeline stage: the (encoder, decoder) blocks of its `split` layers (the encoder
    stack first, as stages.stage_activations) with its `in_flight` micro-batches, for a `model` whose layers
    `split` covers. The elements are looked up once per distinct (encoder, decoder) blocks of the split (a few:
    encoder-only, decoder-only, the stage across the stacks, one more block or not), not once per stage."""
    if not _bias_priced(kernel, flash, device):
        return (0.0,) * len(split)
    by_blocks: dict[tuple[int, int], tuple[int, int]] = {}
    out = []
    for blocks, f in zip(_stage_blocks(model.num_layers, split), in_flight):
        elems = by_blocks.get(blocks)
        if elems is None:
            elems = by_blocks[blocks] = _saved_and_grad(model, micro_batch, seq_len, target_len, tp, recompute,
                                                        blocks)
        out.append(_bias_bytes(*elems, f))
    return tuple(out)


@lru_cache(maxsize=4096)
def _stage_blocks(encoder_layers: int, split: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    """Each stage's (encoder, decoder) blocks of a pipeline `split` over a T5 whose encoder stack (the first
    `encoder_layers` blocks) comes first."""
    out, start = [], 0
    for n in split:
        n_enc = max(0, min(start + n, encoder_layers) - start)
        out.append((n_enc, n - n_enc))
        start += n
    return tuple(out)


def _bias_priced(kernel: str, flash: bool, device) -> bool:
    """Whether the cost model prices the bias masks: a GPU run under flash whose attention kernel takes the bias as a
    mask (BIAS_KERNELS)."""
    return flash and kernel in BIAS_KERNELS and device.kind != "cpu"


def priced_bias_memory(model: ModelSpec, kernel: str, flash: bool, device, micro_batch: int, seq_len: int,
                       target_len: int, tp: int, recompute: str, blocks: tuple[int, int] | None = None,
                       in_flight: float = 1) -> float:
    """bias_memory_bytes where the cost model prices it, in both estimate paths (terms._derived_shape and
    memory.activation_bytes per stage, stages.stage_memory): a GPU run under flash whose attention kernel takes the
    bias as a mask (BIAS_KERNELS, `kernel` resolved: terms.attention_kernel); else 0."""
    if not _bias_priced(kernel, flash, device):
        return 0.0
    return bias_memory_bytes(model, micro_batch, seq_len, target_len, tp, recompute, blocks, in_flight)
