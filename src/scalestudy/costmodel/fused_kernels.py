"""Memory-bound element-wise traffic of a GPT block run as fused kernels (`Strategy.kernels` "fused"), counted kernel
by kernel as costmodel/eager_kernels.py counts the eager code, so that the two paths price the same mechanism.

Why per kernel: the footprint rule (step.ELEMENTWISE_PASSES, every stored activation written and read once per pass)
also charges tensors no element-wise kernel touches -- the LN output saved for the QKV GEMM, Q, K, V and the
context a flash kernel reads and writes (priced by its FLOPs), fc1's output counted twice (saved for the GeLU and as
its input) -- 136 B per token and d_model for a GPT-3 shape in 16 bits against the 104 B the fused kernels below
move, and against eager_kernels.gpt2_block's 112 B: eager priced below fused, which no eager code is (it runs every
fused kernel's reads and writes, and more). Measured by tests/unit/test_costmodel_invariants.py ('eager element-wise
kernels never faster than fused') on the one-kernel GeLU / ReLU presets (gpt3-*, opt-*, mt-nlg-530b, mpt-30b).

Kernels (Megatron-LM megatron/model/transformer.py ParallelTransformerLayer, the same in Megatron-Core's local and
Transformer Engine layers; kernel_counts._decoder_only counts the same launches):
- apex FusedLayerNorm / TE LayerNorm: forward reads x, writes y (a + a); backward reads dy and x and writes dx
  (cuComputeGradInput: 3a) and reads them again for the gamma / beta partials (cuComputePartGradGamma: 2a): 5a,
  as eager_kernels.gpt2_block's torch native_layer_norm;
- bias-dropout-add (bias_dropout_add_fused_train, TorchScript): forward reads the branch output and the residual,
  writes the sum and a one-byte dropout mask (3a + 1); backward the branch gradient g * mask (r a + 1, w a); the
  residual's gradient passes through, and autograd sums it with the norm's gradient of the same tensor (r 2a, w a);
- bias-GeLU (bias_gelu_impl, or one nn.GELU / ReLU kernel: llm-foundry MPT): forward reads x, writes y (2a, width
  f); backward reads g and x, writes dx (3a); a gated one (NeMo's fused_bias_geglu, Megatron-Core's bias_swiglu)
  reads both halves and writes the product (3a), backward reads g and both halves and writes their gradients (5a).
Eager minus fused: gpt2_block's separate dropout writes its output and the add reads it again (+2a per residual
forward), and a composed tanh GeLU's ops (eager_kernels.activation_bytes). The attention scores of a materialised
(non-flash) softmax stay on the footprint rule (Megatron's fused scale-mask-softmax + dropout move 4a + 1 forward and
5a + 1 backward per score, the rule's 2 x (2a + 1) each way at a = 2).
"""

from __future__ import annotations


def layer_norm_fused(a: int) -> tuple[float, float]:
    """(forward, backward) bytes per element of a one-kernel LayerNorm (apex / TE / torch native)."""
    return float(2 * a), float(5 * a)


def bias_dropout_add_fused(a: int) -> tuple[float, float]:
    """(forward, backward) bytes per element of Megatron's bias-dropout-add and the residual gradient sum."""
    return float(3 * a + 1), float((2 * a + 1) + 3 * a)


def activation_fused(a: int, gated: bool) -> tuple[float, float]:
    """(forward, backward) bytes per d_ff-wide element of a one-kernel (bias-)activation, gated or not (above)."""
    return (3.0 * a, 5.0 * a) if gated else (2.0 * a, 3.0 * a)


def gpt_block_fused(h: float, f: float, a: int, gated: bool) -> tuple[float, float]:
    """(forward, backward) element-wise bytes per token of a fused GPT block: two LayerNorms and two
    bias-dropout-adds of width h, one bias-activation of width f (above)."""
    norm_f, norm_b = layer_norm_fused(a)
    bda_f, bda_b = bias_dropout_add_fused(a)
    act_f, act_b = activation_fused(a, gated)
    return 2 * (norm_f + bda_f) * h + act_f * f, 2 * (norm_b + bda_b) * h + act_b * f
