"""What a strategy's software knobs left at "engine" are priced as, in words for `estimate`'s "software assumed"
line (specs/strategy.software_assumed): each name is the rule the cost model itself applies (memory.loss_kernel,
terms.attention_kernel / main_grad_bytes, op_checkpoint.early_stop, step.optimizer_loop_s + memory's step
temporary), so the printed convention cannot drift from the priced one."""

from __future__ import annotations

from scalestudy.costmodel.memory import deepspeed_fp16_optimizer, loss_kernel
from scalestudy.costmodel.op_checkpoint import early_stop
from scalestudy.costmodel.terms import attention_kernel, main_grad_bytes
from scalestudy.specs.strategy import Strategy

# memory.loss_kernel's names -> what memory.logits_bytes / flops.cross_entropy_bytes_per_logit price under them
_LOSSES = {"torch": "torch, fp32 copies", "engine": "Megatron vocab-parallel, fp32 copies"}


def _optimizer(st: Strategy) -> str:
    """The optimizer step "engine" prices: a fused update in time (step.optimizer_loop_s: no unfused loop's bytes or
    launches) -- in memory (step_temporary_bytes) torch AdamW(fused=True) on fsdp / ddp, in place (no foreach
    temporary: memory.FOREACH_LOOPS), DeepSpeed FP16_Optimizer's flattened fp32 gradients at ZeRO-0 in fp16 (and bf16
    outside a pipeline), nothing beside the states otherwise."""
    if st.offload_optimizer != "none":
        return "host Adam"
    if st.engine in ("fsdp", "ddp"):
        return "fused update, torch AdamW fused"
    if deepspeed_fp16_optimizer(st.engine, st.zero, st.precision, st.pp):
        return "fused update in FP16_Optimizer"
    return "fused update"


def engine_meanings(st: Strategy, device=None) -> dict[str, str]:
    """Field -> what its "engine" value is priced as, for the fields of `st` left at "engine" that the cost model
    resolves (a resolved strategy: estimate's, whose kernels are already named), on `device` (the attention kernel
    it runs in place of one it cannot: terms.attention_kernel)."""
    meanings = {
        "cross_entropy": _LOSSES.get(loss_kernel(st), loss_kernel(st)),
        "optimizer_loop": _optimizer(st),
        "grad_reduce": "fp32" if main_grad_bytes(st) == 4 else st.precision,
        "attention_kernel": attention_kernel(st, device),
        "recompute_early_stop": "on" if early_stop(st) else "off",
        "optimizer_dtype": "fp32",
        "lm_head": "sharded",  # strategy.vocab_shards: vocabulary-parallel on every engine
        # memory.deepspeed_bf16_wrapper: DeepSpeed's get_data_types, an fp32 accumulator without ZeRO only
        "grad_accum_dtype": "fp32" if st.zero == 0 else "compute",
        "grad_buckets": "copy",  # memory.ddp_bucket_copy_bytes: torch's gradient_as_bucket_view False
    }
    return {name: value for name, value in meanings.items() if getattr(st, name) == "engine"}
