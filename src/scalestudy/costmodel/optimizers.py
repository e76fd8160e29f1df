"""The optimizer a run steps (Strategy.optimizer): the state it keeps per parameter and what its update moves.

Mixed-precision AdamW is the ZeRO paper's K = 12 (Rajbhandari et al. 2020, Sec. 3.1): an fp32 master copy and two fp32
moments. Other optimizers keep other states beside the same master copy -- counted here as state tensors the size of
the parameter, in the optimizer's dtype (fp32 under mixed precision, 4 B):
- "adamw": exp_avg and exp_avg_sq (torch/optim/adamw.py _init_group; apex / DeepSpeed FusedAdam alike): 2.
- "sgd": torch.optim.SGD without momentum, its default momentum=0 -- `momentum_buffer_list` stays None and no state
  is stored (torch/optim/sgd.py _init_group / _single_tensor_sgd, torch 2.0 .. 2.5): 0. Lit-GPT / Lightning Thunder's
  benchmark scripts (thunderlitgpt2024).
- "sgd-momentum": SGD with momentum > 0: one `momentum_buffer` per parameter, created as torch.clone(grad) on the
  first step (ibid.): 1. Megatron-LM's --optimizer sgd (apex FusedSGD, --sgd-momentum 0.9 by default).

Update traffic, per parameter, in elements of the state dtype:
- one fused pass (apex / DeepSpeed fused kernels, torch fused=True, the flat partitions ZeRO steps): read the
  parameter, its gradient and each state, write the parameter and each state -- 3 + 2 x states; under mixed precision
  plus the 16-bit weight written back (2 B): AdamW 4 x 7 + 2 = 30 B, the ZeRO-Offload paper's figure (Sec. 4, the
  cost model's step.OPTIMIZER_BYTES).
- torch's single-tensor (foreach=False) and multi-tensor (foreach) implementations, op by op (TORCH_STEP): the same
  ops either way, one launch per tensor per op, or one per chunk of tensors.
Weight decay: SGD's L2 term `grad = grad.add(param, alpha=weight_decay)` is a separate op that allocates a new
gradient (torch/optim/sgd.py; foreach: torch._foreach_add): priced on, as LLM recipes set it (Lit-GPT weight_decay 0.1).
Adafactor (Shazeer & Stern 2018; T5's pre-training under Mesh TensorFlow) is not a value: no published row of the
file steps it (T5X's GPU rows run AdamW, adamw_opt.gin) to check a pricing of its factored moments against.
"""

from __future__ import annotations

# state tensors per parameter, each the parameter's size in the optimizer's dtype (module docstring)
STATE_TENSORS = {"adamw": 2, "sgd": 0, "sgd-momentum": 1}

# torch's own update, op by op (kernels per parameter tensor, elements read + written per parameter), the same ops in
# _single_tensor_* (one launch per tensor) and _multi_tensor_* (foreach: one per chunk of tensors):
TORCH_STEP = {
    # torch/optim/adamw.py: param.mul_ weight decay (r1 w1), exp_avg.lerp_ (r2 w1), exp_avg_sq.mul_ (r1 w1)
    # .addcmul_ (r2 w1), sqrt, / bias correction, .add_(eps) (r1 w1 each), param.addcdiv_ (r3 w1): 80 B in fp32,
    # step.OPTIMIZER_LOOPS' per-tensor / foreach
    "adamw": (8, 20),
    # torch/optim/sgd.py, momentum 0: grad.add(param, alpha=weight_decay) (r2 w1, a new tensor), param.add_(grad,
    # alpha=-lr) (r2 w1)
    "sgd": (2, 6),
    # momentum > 0: also buf.mul_(momentum) (r1 w1) .add_(grad, alpha=1 - dampening) (r2 w1), then param.add_(buf)
    "sgd-momentum": (4, 11),
}

# step.OPTIMIZER_LOOPS entries whose step is torch's AdamW op by op ("single": foreach=False, one launch per op and
# tensor; "foreach": multi-tensor) or one fused pass over flat partitions ("flat": DeepSpeed ZeRO-1/2 steps its fp32
# partition with the engine's fused kernel) around the engine's own per-tensor checks; any other loop names an
# AdamW implementation (nanoT5's AdamWScale, apex FusedAdam per tensor, transformers' AdamW, torch AdamW fused=True,
# DeepSpeed's CPU-Adam) that steps no other optimizer
LOOP_STEPS = {"engine": "flat", "per-tensor": "single", "foreach": "foreach", "deepspeed-unfused": "foreach",
              "deepspeed-bf16": "foreach", "deepspeed-serial": "flat", "deepspeed-stage1-whole": "flat"}


def state_elem(engine: str, optimizer_dtype: str) -> float:
    """Bytes per element of the optimizer's states and of its update's traffic: 2 for a bf16 model stepped as it is
    (optimizer_dtype bf16 on fsdp -- torchtune's `dtype: bf16`, Lightning's precision 'bf16-true': no fp32 master, the
    states allocated like the bf16 parameters), else 4 (fp32 master and states; engine megatron's bf16 states keep
    the fp32 update it was priced with)."""
    return 2.0 if engine == "fsdp" and optimizer_dtype == "bf16" else 4.0


def state_bytes(optimizer: str, elem: float = 4.0) -> float:
    """Bytes per parameter of the optimizer's own states (no master copy), `elem` bytes per element."""
    return STATE_TENSORS[optimizer] * elem


def moments_saved(optimizer: str, elem: float = 4.0) -> float:
    """Bytes per parameter `optimizer` keeps fewer than AdamW (negative: more): what the memory model takes off the
    ZeRO paper's K = 12 (and off every engine's AdamW layout, costmodel/memory.py)."""
    return state_bytes("adamw", elem) - state_bytes(optimizer, elem)


def flat_update_bytes(optimizer: str, precision: str, elem: float = 4.0) -> float:
    """Bytes per parameter of one fused update pass (module docstring): parameter r/w, gradient r, states r/w at `elem`
    bytes, plus the 16-bit weight copy when a 4-byte master steps a 16-bit model. AdamW: 30 (mixed) / 28 (fp32) / 14
    (bf16 states, no master: a bf16 model stepped as it is, Strategy.optimizer_dtype bf16 on fsdp)."""
    copy = 2.0 if precision != "fp32" and elem == 4.0 else 0.0
    return elem * (3 + 2 * STATE_TENSORS[optimizer]) + copy


def loop_step_delta(optimizer: str, loop: str) -> tuple[int, float]:
    """(kernels per tensor, fp32 bytes per parameter) that `optimizer` adds to AdamW's entry of step.OPTIMIZER_LOOPS
    for `loop` (negative: fewer): the loop's own checks and copies stay, its AdamW step is replaced by this
    optimizer's (LOOP_STEPS: op by op, foreach or one fused pass). 0 for AdamW."""
    if optimizer == "adamw":
        return 0, 0.0
    step = LOOP_STEPS[loop]
    if step == "flat":
        return 0, flat_update_bytes(optimizer, "bf16") - flat_update_bytes("adamw", "bf16")
    (kernels, elems), (adam_kernels, adam_elems) = TORCH_STEP[optimizer], TORCH_STEP["adamw"]
    return (kernels - adam_kernels if step == "single" else 0), 4.0 * (elems - adam_elems)
