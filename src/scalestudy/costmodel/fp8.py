"""FP8 training (Strategy.precision "fp8", cost model only): what changes against the bf16 step.

Which matmuls run in FP8: the transformer blocks' linear layers (QKV, attention output, FFN in / out) -- Transformer
Engine's te.Linear / LayerNormLinear / LayerNormMLP under fp8_autocast (Megatron-Core / NeMo: the block's TE layers;
the output layer is a plain ColumnParallelLinear and stays bf16, as does the embedding), and torchao's
convert_to_float8_training, which torchtitan applies to the blocks' nn.Linear and never to the `output` head
(torchtitan components/quantization/float8.py filter_fqns default ["output"]). The attention core stays bf16
(FlashAttention / cuDNN in bf16: TE's DotProductAttention is not FP8 in these recipes), and so does every
element-wise kernel, the activations between kernels, the gradients and the optimizer: FP8 is a GEMM-input format.

Peak: the device YAML's `fp8` dense peak (H100 / H200 SXM datasheet: 1,979 TFLOP/s dense; a device without it is
refused in one line by DeviceSpec.peak). GEMM efficiency: the bf16 curve's fraction of peak, applied to the FP8
peak -- torchao's own roofline (torchao/float8/roofline_utils.py at 086ff72e, gpu_name_to_specs 'NVIDIA H100')
prices both dtypes at one pct_achievable_gemm_tops (0.6 "based on quick experimental observation"); no measured FP8
fraction of an H100 training GEMM was found to say otherwise.

The overheads, per micro-batch, priced as HBM bytes at the element-wise rate plus kernels at the fitted launch cost
(one function per formula below), by recipe (RECIPES: the engine's FP8 library):
- "te-delayed" -- Transformer Engine delayed scaling (NeMo / Megatron-Core `fp8_hybrid`, amax_history_len 1024,
  amax_compute_algo max): the scale of each FP8 tensor comes from the amax history of earlier steps, so casting
  needs no pass to find the amax; the cast kernel records this step's amax as it goes. TE's Linear casts its input
  with tex.fp8_cast_transpose_fused (read bf16, write the FP8 tensor and its transpose, which the backward's wgrad
  GEMM reads: Hopper FP8 GEMMs take only the TN layout) and its output gradient with cast_transpose(_bgrad) in the
  backward: 2 + 1 + 1 = 4 bytes per element, one kernel each. Weights: cast once per step and cached across the
  step's micro-batches (is_first_microbatch, which Megatron-Core's TELinear passes; NeMo's fp8_params keeps them
  FP8 from the optimizer step on) -- a once-per-step pass over the rank's block weights (< 0.2% of the published
  steps: not priced). The amax-history roll and scale update is one fused kernel per fp8_autocast region per pass
  over (history x tensors x 4 B): amax_history_bytes, its bytes per micro-batch here, its kernels where the regions
  are known (amax_reductions: one update follows each region's amax reduction).
- "torchao-tensorwise" -- torchao float8 dynamic tensorwise scaling (torchtitan `--model.converters float8`):
  every cast first finds this tensor's amax. roofline_utils.get_tensor_memory_traffic_bytes: a max-abs pass
  (read 2 B; fused into the producing kernel under torch.compile for the input and the output gradient, not for the
  weight), a second-stage reduction kernel, and the cast (read 2 B, write the row-major and column-major FP8 copies,
  1 + 1 B); the weight is cast every forward (per micro-batch; saved for the backward), the input in the forward,
  the output gradient in the backward.
"""

from __future__ import annotations

from scalestudy.costmodel.comm import ring_latency, tree_latency
from scalestudy.costmodel.params import param_breakdown
from scalestudy.specs.model import ModelSpec

FP8 = "fp8"
# What a precision "fp8" run holds and computes in outside the FP8 GEMMs (activations, gradients, norms, attention
# core, LM head, optimizer): bf16 -- TE and torchao run under bf16 autocast / bf16 modules
COMPUTE_PRECISION = "bf16"
# The FP8 library each engine runs (module docstring); other engines are refused in one line (Strategy)
RECIPES = {"megatron": "te-delayed", "fsdp": "torchao-tensorwise"}
BF16_BYTES, FP8_BYTES = 2.0, 1.0
AMAX_HISTORY_LEN = 1024  # NeMo / Megatron-Bridge recipes' fp8_amax_history_len (dgxc-benchmarking gpt3_175b_hydra.yaml)
AMAX_BYTES = 4.0  # fp32 amax and scale entries (TE FP8TensorMeta)
TENSORS_PER_GEMM = 3  # input, weight, output gradient: TE's FP8 meta per GEMM


def compute_precision(precision: str) -> str:
    """The precision of everything but the FP8 GEMMs: bf16 for "fp8", the precision itself otherwise."""
    return COMPUTE_PRECISION if precision == FP8 else precision


def recipe(engine: str) -> str:
    """The FP8 scaling recipe `engine` runs (RECIPES); "" for an engine without one."""
    return RECIPES.get(engine, "")


def activation_cast_bytes(elements: float, recipe_name: str) -> float:
    """HBM bytes of casting one GEMM input that an earlier kernel produced (a linear's input in the forward, its
    output gradient in the backward) of `elements` bf16 values to FP8 plus its transpose: TE delayed scaling's
    fp8_cast_transpose_fused reads 2 B and writes 1 + 1 B; torchao tensorwise adds the max-abs pass, fused into
    the producing kernel when compiled (roofline_utils fuse_with_prev=True), so the same 4 B."""
    return elements * (BF16_BYTES + 2.0 * FP8_BYTES)


def weight_cast_bytes(elements: float, recipe_name: str) -> float:
    """HBM bytes per micro-batch of casting `elements` block weights to FP8: torchao tensorwise casts every forward
    -- a max-abs pass of its own (2 B) and the cast to both layouts (2 + 1 + 1 B), roofline_utils
    fuse_with_prev=False; TE caches the FP8 weights across a step's micro-batches (0 per micro-batch)."""
    if recipe_name != "torchao-tensorwise":
        return 0.0
    return elements * (2.0 * BF16_BYTES + 2.0 * FP8_BYTES)


def cast_kernels(recipe_name: str) -> tuple[float, float]:
    """(forward, backward) extra kernels per FP8 linear layer: TE one cast_transpose of the input forward and one of
    the output gradient backward; torchao tensorwise per cast tensor a second-stage amax reduction and the cast
    kernel (roofline_utils counts the three second stages; the casts are kernels of their own): input and weight
    forward (the weight's max-abs pass a third kernel), output gradient backward."""
    if recipe_name == "torchao-tensorwise":
        return 5.0, 2.0
    return 1.0, 1.0


def amax_history_bytes(fp8_gemms: float, recipe_name: str) -> float:
    """HBM bytes of one delayed-scaling amax / scale update over `fp8_gemms` GEMMs (TE's fused
    amax_and_scale_update: read and roll the history, write it and the scale; TENSORS_PER_GEMM tensors each, once
    per forward and once per backward); 0 for dynamic scaling, which keeps no history."""
    if recipe_name != "te-delayed":
        return 0.0
    return 2.0 * fp8_gemms * TENSORS_PER_GEMM * AMAX_HISTORY_LEN * AMAX_BYTES


def linear_cast_bytes(flops: float, n: float, k: float, recipe_name: str) -> tuple[float, float]:
    """(forward, backward) cast bytes of one linear GEMM entry of step._layer_gemms -- `flops` forward FLOPs over
    all layers of an M x K input and a K x N weight (2 M N K each): the input (M x K = flops / 2N elements) cast in
    the forward, the output gradient (M x N = flops / 2K) in the backward (activation_cast_bytes)."""
    return (activation_cast_bytes(flops / (2.0 * n), recipe_name),
            activation_cast_bytes(flops / (2.0 * k), recipe_name))


def linear_layers(model: ModelSpec) -> int:
    """FP8 linear layers of the model's blocks: 4 per block (QKV, attention output, FFN in, FFN out; a gated FFN's
    two input projections are one fused GEMM in TE's LayerNormMLP and Megatron's fc1), 3 more per decoder block of
    an encoder-decoder (cross-attention Q, K/V, output), as step._layer_gemms counts them."""
    if model.is_encoder_decoder:
        return 4 * model.num_layers + 7 * model.num_decoder_layers
    return 4 * model.num_layers


def per_micro_batch(model: ModelSpec, tp: int, recipe_name: str) -> tuple[float, float, float, float]:
    """(forward bytes, backward bytes, forward kernels, backward kernels) of one micro-batch's FP8 work beyond the
    activation casts, all blocks on one tensor-parallel rank: weight casts (weight_cast_bytes of the blocks' matmul
    weights / tp), the delayed-scaling amax update's bytes (amax_history_bytes, split over the two passes: however
    many regions share the blocks, their histories add up to the same bytes) and the cast kernels (cast_kernels per
    linear layer). The amax update kernels are not here: there is one per fp8_autocast region and pass, and the
    regions are a rank's model chunks, not a share of the model's blocks (amax_reductions, stage_terms)."""
    p = param_breakdown(model)
    weights = p.layers_matmul / tp
    linears = linear_layers(model)
    amax = amax_history_bytes(linears, recipe_name) / 2.0
    kf, kb = cast_kernels(recipe_name)
    return (weight_cast_bytes(weights, recipe_name) + amax, amax, kf * linears, kb * linears)


def block_matmul_elems(model: ModelSpec, blocks: int, tp: int) -> float:
    """The blocks' linear weights on one tensor-parallel rank of a pipeline stage of `blocks` blocks (the model's
    mean block where an encoder-decoder's two stacks differ): the parameters FP8 model parameters hold in 1 byte."""
    p = param_breakdown(model)
    layers = p.encoder_layers + p.decoder_layers
    return p.layers_matmul * blocks / max(1, layers) / tp


def param_bytes_saved(matmul_elems: float) -> float:
    """Bytes fp8_params (NeMo / Megatron-Core: Transformer Engine FP8 model parameters, te.fp8_model_init) saves on
    `matmul_elems` block linear weights, held and gathered as FP8 (1 B) instead of bf16 (2 B): the distributed
    optimizer casts its fp32 master shard to FP8 after the step and all-gathers those bytes (Megatron-Core
    distributed optimizer, _param_all_gather with fp8 params: the gather buffer holds the FP8 data), and the model's
    weight in device memory is the FP8 tensor (the optimizer's fp32 master copy is unchanged)."""
    return matmul_elems * (BF16_BYTES - FP8_BYTES)


def weight_cache_bytes(model: ModelSpec, psi: float, recipe_name: str, fp8_params: bool = False) -> float:
    """Device bytes of the FP8 weight copies a rank holding `psi` parameters keeps through a step: Transformer
    Engine, given is_first_microbatch (Megatron-Core's TELinear passes it), casts each linear weight once per step
    and caches the FP8 copy and its transpose for the step's other micro-batches and the backward (TE 1.x
    module/base.py FP8 weight workspaces: Hopper's FP8 GEMMs take only the TN layout, so forward and dgrad read
    differently laid out copies): 1 + 1 B per block matmul weight -- the blocks' matmul share of `psi`. torchao
    float8 keeps none: it casts each weight per use (transient, one layer at a time). `fp8_params`: the weight is
    the FP8 tensor itself (param_bytes_saved prices its 1 B in the weights), so only the transpose is cached (TE
    Float8Tensor's transpose cache, which Hopper's dgrad GEMM reads): 1 B."""
    if recipe_name != "te-delayed":
        return 0.0
    p = param_breakdown(model)
    return (1.0 if fp8_params else 2.0) * FP8_BYTES * psi * p.layers_matmul / p.total


def amax_reductions(recipe_name: str, virtual_stages: int) -> float:
    """Blocking amax all-reduces per micro-batch on one pipeline rank: Megatron-Core wraps each model chunk's
    TransformerBlock.forward in te.fp8_autocast (transformer_block.py), and Transformer Engine reduces the region's
    forward amaxes at the outermost autocast's exit (fp8.py FP8GlobalStateManager.fp8_autocast_exit ->
    reduce_and_update_fp8_tensors(forward=True)) and its backward amaxes when that region's backward ends
    (hook_for_bwd_amax_reduction, a multi-grad hook): 2 per chunk, `virtual_stages` chunks per rank under the
    interleaved schedule (1 otherwise). Each reduction is followed by that region's fused amax-history and scale
    update (tex.fused_amax_and_scale_update_after_reduction, one kernel on the compute stream), so this is also the
    count of update kernels: 2 x 12 a micro-batch on a 12-chunk interleaved rank, not one per pass. 0 for torchao's
    dynamic scaling, whose amax is each rank's own tensor's."""
    if recipe_name != "te-delayed":
        return 0.0
    return 2.0 * max(1, virtual_stages)


def amax_reduction_s(ranks: int, per_node: int, lk: tuple) -> float:
    """Seconds of one amax all-reduce among `ranks` ranks, `per_node` to a node (links `lk`, comm.links): TE calls
    torch.distributed.all_reduce(op=MAX, async_op=False) on the concatenated amaxes (a few KB: latency-bound) and
    its fused amax-and-scale update reads the result, so the compute stream waits for it. Megatron-Core's fp8_group
    is get_amax_reduction_group(with_context_parallel=True): every tensor-, context- and data-parallel rank of the
    pipeline stage (tp_only_amax_red off, the default), i.e. thousands of ranks on a large run. NCCL runs a
    message this small with the algorithm its tuning model (src/graph/tuning.cc) predicts fastest: across nodes the
    tree, up and back down, 2 x ((ranks per node - 1) intra hops + log2(nodes) network hops), comm.tree_latency
    being one of the two halves; inside one node the ring, a reduce-scatter and an all-gather (comm.ring_latency)."""
    if ranks <= 1:
        return 0.0
    return 2.0 * min(tree_latency(ranks, per_node, lk), ring_latency(ranks, per_node, lk))
