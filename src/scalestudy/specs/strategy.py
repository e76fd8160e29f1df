"""Strategy and Workload: the one vocabulary shared by the cost model, planner, engine and study store.

If the planner can name a Strategy, `train` can run it (or says clearly why not) and the store can record it.

Engine x zero semantics:
- deepspeed: zero 0-3 as DeepSpeed ZeRO stages; optimizer offload (stage >= 1), parameter offload (stage 3).
- ddp:       zero 0 = DistributedDataParallel; zero 1 = DDP + torch ZeroRedundancyOptimizer.
- fsdp:      FSDP2 `fully_shard`; zero 3 = reshard after forward (ZeRO-3-like),
             zero 2 = keep parameters gathered between forward and backward (ZeRO-2-like);
             CPU offload (`CPUOffloadPolicy`) moves parameters, gradients and the optimizer step to the host
             together, so offload_params and offload_optimizer are both "cpu" or both "none".
- megatron:  cost model only (published Megatron-LM / Megatron-Core / NeMo runs; `train` refuses it): Megatron-Core
             DistributedDataParallel with its contiguous fp32 main-gradient buffer; zero 0 = gradient all-reduce,
             zero 1 = `--use-distributed-optimizer` (reduce-scatter of the fp32 gradients, all-gather of the
             updated 16-bit parameters; 6 + 12/d bytes per parameter, docs/source/distrib_optimizer.md),
             zero 2 = Megatron-FSDP `data_parallel_sharding_strategy optim_grads` (gradients sharded too, reduce-
             scattered every micro-batch; ZeRO-2, as Llama 3's FSDP "shards optimizer states and gradients").
             Not in ZERO_STAGES, so `plan` searches only the engines `train` runs.

Execution options (defaults = what scalestudy's engines do; published runs set what their software did):
- attention:         "flash" (FlashAttention / SDPA, no stored probabilities) or "eager" (materialised softmax).
- sequence_parallel: Megatron sequence parallelism when tp > 1 (Korthikanti et al. 2022).
- cp:                context parallelism degree (default 1): every sequence split over cp ranks, each holding
                     seq_len / cp of its tokens (Megatron-Core / NeMo `context_parallel_size`, torchtitan's
                     `context_parallel_degree`); attention runs as a ring over the cp ranks
                     (costmodel/context_parallel.py). world = tp x cp x pp x dp; engines megatron and fsdp only;
                     flash attention only (Transformer Engine's / torch SDPA's fused kernels); seq_len divisible by
                     2 x cp (the load-balanced causal split into 2 x cp chunks). Cost model only (`train` refuses it).
- overlap_grad_comm: data-parallel gradient reduction overlaps the backward pass (bucketed), or runs after it.
                   DeepSpeed with pp > 1 runs it after the pipeline either way (its PipelineEngine).
- overlap_param_gather: the post-step parameter all-gather of ZeRO-1/2 (deepspeed zero 1-2, megatron zero 1) runs
                     bucket by bucket behind the next step's forward (Megatron-Core `--overlap-param-gather`);
                     no effect where there is no such gather. Unset (None), the engine's default
                     (`param_gather_default`): on for engine megatron at zero >= 1 when overlap_grad_comm is on --
                     NVIDIA's Megatron-Core stacks turn the two on together with the distributed optimizer
                     (Megatron-Bridge CommOverlapConfig._get_optimizer_overlap_cfgs, NeMo 2's
                     MegatronCommOverlapCallback, NeMo >= 1.15's distributed_fused_adam overlap_param_sync) --, off
                     elsewhere (DeepSpeed has no such overlap; train's engines run it off). Cost model only (`train`
                     refuses it on).
- tp_comm_overlap:   tensor-parallel all-gathers / reduce-scatters overlap the adjacent linear GEMMs (engine
                     megatron: Transformer Engine userbuffers, Megatron `--tp-comm-overlap`; fsdp / ddp: PyTorch
                     async TP, torchtitan `enable_async_tensor_parallel`; engines.yaml tp_comm_overlap; needs
                     sequence_parallel when tp > 1); no effect when tp = 1. Unset (None), the engine's default
                     (`tp_comm_overlap_default`): on for engine megatron's distributed optimizer (zero 1) with
                     sequence parallelism at tp > 1 and overlap_grad_comm -- the layout of NVIDIA's Megatron-Core
                     pre-training recipes, which turn it on --, off elsewhere. Cost model only (`train` refuses it on).
- zero1_all_reduce: DeepSpeed ZeRO stage 1 reduces the gradients with one full all-reduce per bucket instead of a
                     reduce-scatter, then all-gathers the updated weights (3 psi of ring traffic, not 2): DeepSpeed
                     0.4.4-0.7.1 and 0.8.0-0.12.x force contiguous_gradients off for stage 1 (non-MoE; engine.py,
                     6ae756c0 / e4ba7222) and stage_1_and_2.reduce_ipg_grads then all-reduces each flattened bucket
                     (buffered_reduce_fallback -> allreduce_bucket, rank None); from DeepSpeed PR 4695 (Dec 2023) on,
                     contiguous gradients go through average_tensor -> allreduce_and_scatter, which under the default
                     use_multi_rank_bucket_allreduce is one all_reduce per bucket, each owner keeping its slice (the
                     current 0.19: DeepSpeed issues 5758 / 7059 log the all_reduce). Unset (None), the engine's
                     default (`zero1_all_reduce_default`): on for engine deepspeed zero 1 -- what DeepSpeed runs, and
                     `train` on DeepSpeed 0.19 --, off (no effect) elsewhere; a run of the short window between
                     those paths says false. Cost model only.
- pp_schedule:       "1f1b" (PipeDream-flush), "gpipe" (all forwards, then all backwards), or "interleaved"
                     (Narayanan et al. 2021, `virtual_stages` model chunks per device, virtual_stages >= 2);
                     gpipe and interleaved need pp >= 2 (refused at pp 1, where they would change nothing).
- kernels:           "engine" (the default: what the engine's software runs for this model, `software_defaults`),
                     "fused" (Megatron / Transformer Engine / torch.compile: element-wise work fused), "eager" (one
                     PyTorch kernel per element-wise op, fp32 norms with their casts: Hugging Face models, torchtitan,
                     fms-fsdp without torch.compile) or "eager-fused-norm" (eager, but one fused RMSNorm kernel:
                     torchtitan norm_type fused_rmsnorm); costmodel/eager_kernels.py counts the bytes. `train` runs
                     its Hugging Face models eager (specs/run.TRAIN_SOFTWARE).
- grad_reduce:       the dtype data-parallel gradients are reduced in: "engine" (what the engine does: fsdp fp32 --
                     scalestudy's own FSDP2 MixedPrecisionPolicy reduce_dtype, as torchtitan, OLMo-core and
                     Composer's amp 'DEFAULT' mode set it; ddp fp32; megatron fp32 under bf16, 16-bit under fp16;
                     deepspeed the compute dtype), "fp32", or "compute" (the compute dtype: FSDP reduce_dtype = the
                     parameter dtype as fms-fsdp's bfSixteen or Composer's 'PURE', Megatron/NeMo grad_sync_dtype
                     bf16). Cost model only: `train` runs "engine".
- recompute_early_stop: whether a full recompute re-runs each block's FFN output projection: "on" -- PyTorch's
                     non-reentrant checkpoint stops re-running a block after its last op that saves a tensor for
                     backward (PyTorch >= 2.1; costmodel/op_checkpoint.py), "off" (reentrant checkpoints: Megatron-LM,
                     NeMo, Megatron-DeepSpeed; PyTorch <= 2.0), or "engine" (on for fsdp, the PyTorch FSDP stacks
                     Composer, torchtitan, OLMo-core and fms-fsdp, and for a Hugging Face model on deepspeed / ddp
                     without tp / pp -- the current transformers checkpoints non-reentrantly, `software_defaults` --,
                     off otherwise: published runs). `train` runs
                     "on" on every engine (engine/settings.activation_checkpointing); plan, tune and study price
                     and emit "on" for it (specs/run.as_trained), and `train` refuses "off".
- cross_entropy:     the loss kernel over the logits, for the memory model (costmodel/memory.logits_bytes): "engine"
                     (the logits, their fp32 copy and fp32 shifted logits: torch cross_entropy, Megatron-LM before
                     2024-06), "inplace" (Megatron-Core since 9634c0e4: one fp32 copy worked in place), "fused"
                     (flash-attn's CrossEntropyLoss, llm-foundry's default: no fp32 copy), "fused-metrics" (the same
                     loss under Composer 0.13-0.16 with llm-foundry's MPT: after every micro-batch two training
                     metrics, LanguageCrossEntropy and LanguagePerplexity, each run torch's cross-entropy over its
                     logits again) or "fused-linear" (Liger's fused linear cross-entropy: the logits never
                     materialised, token chunks) or "hf" (a Hugging Face transformers 4.x model's own
                     CrossEntropyLoss: GPT-2's shifted .contiguous() copy, T5 on the logits' view; in fp32 under
                     ddp's autocast, in the 16-bit logits' dtype under DeepSpeed) or "torch" (torch's cross_entropy
                     on `logits.float()`: torchtitan, transformers >= 4.46 causal models' ForCausalLMLoss -- what
                     "engine" means on fsdp / ddp, named so a run can say it on any engine) or "torch-16bit" (torch's
                     cross_entropy on the 16-bit logits as the model returns them, no .float(), the caller's own
                     reference to the logits alive through the backward: KempnerForge scripts/train.py; a bf16 / fp16
                     model without autocast -- refused on ddp, whose autocast runs the loss in fp32, and in fp32
                     training) or "torch-compiled" (that torch loss on `logits.float()` under torch.compile:
                     torchtitan's loss_fn when training.compile is set, since bbb1b616 of 2025-04-02 -- the 16-bit
                     logits saved, the gradient written in their dtype, no fp32 copy). Also the time of the
                     logits' passes (costmodel/flops.py cross_entropy_bytes_per_logit). "engine" means "hf" for a
                     Hugging Face T5 (`software_defaults`). `train` runs "hf" (T5 without tp/pp) or "torch"
                     (specs/run.TRAIN_SOFTWARE).
- optimizer_dtype:   the dtype of engine megatron's optimizer state: "engine" (fp32 master weights and Adam moments)
                     or "bf16" (NeMo's distributed_fused_adam with `dtype: bf16`: apex DistributedFusedAdam keeps its
                     parameter shard and both moments in bf16, 6 bytes per parameter / dp; costmodel/memory.py);
                     on fsdp "bf16" is a model built in bf16 with no mixed-precision policy (torchtune `dtype:
                     bf16`): shards, gradients and AdamW moments all bf16, 8 bytes per parameter / dp, and under
                     CPU offload 2-byte shard copies and a 14-byte fused host step (costmodel/terms.py).
                     Cost model only: `train` runs "engine".
- optimizer_loop:    how the optimizer step launches its kernels (costmodel/step.optimizer_loop_s): "engine" (fused /
                     multi-tensor: apex / DeepSpeed FusedAdam, torch AdamW foreach or fused, the default; under CPU
                     offload the engine's host optimizer, costmodel/engines.yaml host_optimizer: DeepSpeed's CPU-Adam,
                     FSDP's torch fused CPU AdamW), "per-tensor"
                     (a Python loop, one kernel per op per parameter tensor: torch AdamW foreach=False, transformers'
                     AdamW: HF Trainer optim adamw_hf on torch 2.x), "per-tensor-rms" (nanoT5's AdamWScale: per
                     tensor also the RMS step scale, read back to the host twice), "per-tensor-fp16" (2019 fp16 master
                     weights: Megatron-LM 2019's / early apex FP16_Optimizer with a per-tensor FusedAdam -- per
                     tensor the grad zeroing, an overflow sum and a clip norm each read back to the host, master-grad
                     copy, unscale, Adam, copy back to fp16), "per-tensor-hf" (HF Trainer on torch 1.x:
                     transformers' AdamW plus clip_grad_norm_'s norm and scale and zero_grad's zero_ per tensor, no
                     host sync), "deepspeed-serial" (DeepSpeed ZeRO-1/2 v0.3-v0.13.1: a flat fused step after an
                     overflow sum and a norm per gradient tensor of the rank's partition, each read back to the
                     host), "deepspeed-stage1-whole" (DeepSpeed ZeRO-1 of runtime/zero/stage1.py, v0.3.0: the
                     same two checks over every gradient tensor of the model, not the partition), "foreach" (torch
                     AdamW's default on GPUs: the per-tensor passes as foreach kernels over
                     lists of tensors, 80 B per parameter, no per-tensor launches) or "deepspeed-unfused"
                     (DeepSpeed ZeRO-0 in 16 bits around a client optimizer, FP16_UnfusedOptimizer: per tensor an
                     overflow check read back, a norm, the fp32 gradient copy, unscale and the copy back, around the
                     foreach step) or "deepspeed-bf16" (a DeepSpeed bf16 pipeline at ZeRO-0 around a client
                     optimizer, BF16_Optimizer: a norm per tensor of the stage, then the foreach step on the rank's
                     1/dp flat fp32 partition, its gradient cast to fp32 and the bf16 copy back) or "fused" (fsdp /
                     ddp: torch AdamW fused=True -- on a GPU the engine's fused update; under FSDP's CPU offload the
                     host step runs torch's fused CPU kernel (torch >= 2.4; torchtune's offload recipes) instead of
                     the single-tensor loop torch picks for host tensors: terms.host_adam_slowdown) or "cpu-adam"
                     (fsdp with CPU offload: DeepSpeed's CPU-Adam, DeepSpeedCPUAdam, steps the host shards -- fairseq's
                     --optimizer cpu_adam under its fully_sharded backend -- at the device YAML's
                     cpu_adam_params_per_s, not torch AdamW's host rate).
                     `train` runs "foreach" ("deepspeed-unfused" on DeepSpeed ZeRO-0 in 16 bits, "deepspeed-bf16" on a
                     DeepSpeed bf16 pipeline at ZeRO-0, "engine" with the optimizer offloaded: DeepSpeed's CPU Adam,
                     on a GPU host FSDP's torch AdamW(fused=True), engine/settings.host_adamw):
                     specs/run.TRAIN_SOFTWARE, deepspeed_optimizer_wrapper.
- optimizer_kind:    the optimizer the run steps (costmodel/optimizers.py): "adamw" (AdamW / Adam: two moments per
                     parameter, what every engine's optimizer and `train` run), "sgd" (torch.optim.SGD without
                     momentum, with weight decay: no state -- Lit-GPT / Lightning Thunder's benchmark scripts) or
                     "sgd-momentum" (one momentum buffer per parameter). It sets the optimizer states in memory
                     (fp32 under mixed precision beside the same fp32 master copy; the parameters' dtype under
                     optimizer_dtype bf16) and the update's bytes and, under a per-tensor optimizer_loop, its kernels;
                     optimizer_loop names HOW it launches (per-tensor = foreach=False, foreach, engine = one fused
                     pass), and the loops that are AdamW implementations (ADAMW_ONLY_LOOPS) take "adamw" only.
                     Cost model only: `train` runs "adamw".
- attention_kernel:  the fused attention kernel under flash attention (costmodel/efficiency.attention_efficiency):
                     "engine" (engines.yaml: SDPA's FlashAttention-2 for ddp/fsdp/deepspeed, cuDNN for megatron),
                     "fa1" (FlashAttention-1, flash-attn < 2.0 and its FlashMHA: FA2's rate, bounded by its key-block
                     loop's fp32 traffic, costmodel/flash_v1.py), "fa2", "triton" (flash-attn 0.2-1.0's Triton
                     kernel, Megatron-DeepSpeed's --use-flash-attn-triton, llm-foundry's attn_impl triton: FA2's rate
                     on its head dimension padded to a power of two, alignment.triton_flash_head_dim_factor),
                     "fa3" (FlashAttention-3 on Hopper, e.g. HF attn_implementation flash_attention_3),
                     "cudnn" or "mem-efficient" (PyTorch SDPA's memory-efficient CUTLASS kernel, which SDPA takes when
                     an attention mask is given: Hugging Face T5 under sdpa passes its relative position bias as a
                     float mask, costmodel/attention_bias.py, which also prices the bias tensors). Under eager
                     attention (engines megatron / deepspeed, i.e. Megatron-LM and its forks, or ddp running a copy
                     of Megatron's model code, e.g. FlagPerf's gpt2-pytorch): "torch-softmax" -- the run's
                     FusedScaleMaskSoftmax skipped its fused kernel for the scores' shape, or their dtype (fp32 scores
                     never take it), and ran PyTorch's fp32 softmax (costmodel/megatron_softmax.py: the rule, and
                     BigScience's 2021-10..2022-03 code);
                     "hf-fp32-softmax" (fp16 only) -- Hugging Face OPTAttention's mask add, clamp, half-to-float
                     softmax and cast back (costmodel/eager_kernels.HF_FP32_SOFTMAX_BYTES, DeepSpeed-Chat's OPT);
                     otherwise unread under eager. `train` runs
                     "engine" for decoder-only models and "mem-efficient" for T5 / mT5 (specs/run.TRAIN_SOFTWARE).
- lm_head:           how tensor parallelism splits the vocabulary -- the input embedding, the LM head GEMMs, the
                     logits and the cross-entropy over them: "sharded" (vocabulary-parallel: V/tp per rank --
                     Megatron-LM / NeMo / Megatron-DeepSpeed VocabParallelEmbedding + ColumnParallelLinear head +
                     vocab_parallel_cross_entropy; torchtitan ColwiseParallel output + loss_parallel), "replicated"
                     (every tp rank holds the whole V x d tables and computes every logit and the loss over all V:
                     scalestudy's `train`, engine/parallel/tensor_parallel.py, whose replicated head needs no gradient
                     sync over tp -- each tp rank forms the same gradient; KempnerForge's head under pipeline
                     parallelism), "gathered" (the input embedding whole on every tp rank, the head's weight and GEMM
                     split V/tp, its logits all-gathered to every tp rank for a loss over all V: KempnerForge
                     distributed/tensor_parallel.py, token embedding replicated and output_head
                     ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()) -- `logit_shards`: the
                     logits' memory and the loss's passes over all V; the logits' all-gather is not priced) or "engine"
                     (sharded on every engine). No effect at tp 1. Cost model only (`train`
                     runs "replicated": specs/run.TRAIN_SOFTWARE).
- grad_accum_dtype:  the dtype DeepSpeed accumulates gradients in over a step's micro-batches (its config key
                     data_types.grad_accum_dtype; engine deepspeed only, cost model only): "fp32" (a bf16 run's fp32
                     accumulator: BF16_Optimizer's whole-stage fp32 gradient buffer at ZeRO 0 / 1, 4 B per parameter
                     beside the bf16 gradients -- Megatron-DeepSpeed's BLOOM runs state it), "compute" (the compute dtype,
                     what `train` sets: no fp32 accumulator -- ZeRO-0 accumulates in the parameters' bf16 .grad
                     (FP16_UnfusedOptimizer), a ZeRO-0 bf16 pipeline's BF16_Optimizer in a bf16 buffer, ZeRO 1-2 in
                     the bf16 gradients / partition) or "engine" (DeepSpeed's default when the config names none,
                     engine.get_data_types v0.7.7 .. v0.16: fp32 without ZeRO, the compute dtype with it -- a ZeRO-1
                     run is DeepSpeedZeroOptimizer's, its fp32 gradient partition only). Only bf16 runs differ
                     (costmodel/memory.py deepspeed_bf16_wrapper; DeepSpeed 0.19.8 engine._do_optimizer_sanity_check,
                     bf16_optimizer.py, zero/stage_1_and_2.py).
- grad_buckets:      how PyTorch DistributedDataParallel holds its gradient buckets (gradient_as_bucket_view; engine
                     ddp only, cost model only): "copy" (False, torch's default: the flat buckets, 4 B per parameter,
                     beside the .grad tensors, copied back into them after the all-reduce), "view" (True, what `train`
                     sets: the .grad tensors are views into the buckets -- no second copy when one micro-batch makes the
                     step; with accumulation train's no_sync micro-batches still form fresh .grad tensors beside the
                     buckets, costmodel/memory.ddp_bucket_copy_bytes) or "engine" (copy, as the published DDP runs).
- zero3_fetch:       how DeepSpeed ZeRO-3 gathers its parameters (engine deepspeed, priced at zero 3; cost model only):
                     "coalesced" (DeepSpeed >= 0.6: one coalesced all-gather into a flat buffer per module fetch,
                     prefetched on its own stream), "per-param-sync" (DeepSpeed before 0.5.5, c0eeb69df #1188: one
                     list all_gather per parameter after torch.cuda.synchronize(), one reduce_scatter per gradient
                     over a list of per-rank views -- in series with the compute, with host work per rank of the
                     group; costmodel/zero3.per_param_sync_comm_s) or "engine" (coalesced: the current DeepSpeed,
                     what `train` runs).
- pipeline_scatter_gather: how a pipeline stage boundary replicated over the tensor-parallel ranks (no sequence
                     parallelism, tp > 1) is sent (cost model only; costmodel/comm.stage_boundary_time): "on" (each tp
                     rank sends 1/tp of it and the receiving stage all-gathers the pieces over NVLink -- Megatron-LM's
                     scatter/gather, Narayanan et al. 2021 Sec. 4.1, DeepSpeed's PartitionedTensor sends), "off" (every
                     tp rank sends the whole tensor -- Megatron-LM main before its April 2021 release, e.g. 8aa4619f's
                     training.py communicate() isends the full (seq, micro-batch, hidden) tensor; scalestudy's own
                     pipeline) or "engine" (engines.yaml pipeline_scatter_gather of the engine).
- cublas:            the cuBLAS major version the run's torch build links, for 16-bit GEMMs whose leading dimensions
                     are not multiples of 8 elements (costmodel/alignment.py; NVIDIA Matrix Multiplication Background
                     User's Guide, Table 1): "11" (CUDA >= 11, 2020-06 on: Tensor Cores at a narrower load, the
                     device's unaligned_gemm_fraction) or "10" (CUDA 10.x and older: no Tensor Cores for such a GEMM,
                     the fp32 rate -- e.g. DeepSpeed 0.3.0's own image, CUDA 10.0 + torch 1.2). Cost model only.
- precision:         "bf16", "fp16" or "fp32" (autocast / mixed precision over fp32 master weights), or "fp8" (cost
                     model only): the blocks' linear GEMMs on FP8 Tensor Cores, all else as bf16 -- Transformer Engine
                     delayed scaling under engine megatron, torchao float8 tensorwise under fsdp (costmodel/fp8.py);
                     a device without an `fp8` peak is refused.
- fp8_params:        (precision fp8 under engine megatron; cost model only) NeMo / Megatron-Core `fp8_params`:
                     Transformer Engine FP8 model parameters (te.fp8_model_init) -- the blocks' linear weights are
                     held as FP8 tensors (1 B; the optimizer keeps its fp32 master) instead of bf16 weights plus the
                     cached FP8 copy, and the distributed optimizer all-gathers them in 1 byte (costmodel/fp8.py).
- distribute_saved_activations: (cost model only) under a full recomputation at tp > 1 without sequence
                     parallelism, each checkpointed block input stored split over the tensor-parallel ranks -- 1/tp
                     of it per rank instead of the whole replicated copy -- and all-gathered again before the block
                     is recomputed: Megatron-LM `--distribute-saved-activations` (tensor_parallel/random.py
                     CheckpointFunction: split_tensor_into_1d_equal_chunks, gather_split_1d_tensor), metaseq
                     `--distribute-checkpointed-activations` (OPT-175B), DeepSpeed activation checkpointing
                     `partition_activations` (costmodel/memory.split_saved_input, terms._recompute_tp_delta). No
                     effect at tp 1, under sequence parallelism (there the input is already split) or another
                     recompute (no checkpointed inputs; Megatron-LM asserts recompute granularity full).
- tf32:              whether a precision fp32 run's matmuls run on TF32 Tensor Cores (costmodel/mfu.peak_precision:
                     the device's `tf32` peak where it states one -- A100, H100, H200 -- with the same GEMM efficiency
                     curve; element-wise traffic stays 4-byte fp32; no effect in bf16 / fp16, nor on a device without
                     TF32 such as a V100, where torch's flag does nothing either). False = what scalestudy's `train`
                     gets: it never sets torch.backends.cuda.matmul.allow_tf32, and torch >= 1.12 defaults it off
                     ('highest' float32 matmul precision). True for torch 1.7-1.11's default, a run that sets
                     allow_tf32 / set_float32_matmul_precision('high'), or NVIDIA's NGC PyTorch containers, whose
                     image sets TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 (TF32 on whatever the flag says).
- norm_dtype:        the dtype a GPT block's nn.LayerNorm runs in under eager kernels (costmodel/eager_kernels.py
                     autocast_layer_norm_s): "compute" (the activations' 16 bits: a module held in bf16 / fp16 without
                     torch.autocast -- DeepSpeed, Megatron, scalestudy's own FSDP -- or a low-precision LayerNorm,
                     Composer's LPLayerNorm) or "fp32" (torch.autocast over 16-bit weights, e.g. Composer's amp_bf16
                     under FSDP mixed precision: layer_norm is on autocast's fp32 list, so its 16-bit input is cast up,
                     normalised and returned in fp32 and the next linear casts it back, each its own kernel forward
                     and backward); "engine" = compute. No effect in fp32, on fused kernels (one kernel either way),
                     or on RMSNorm layouts (Llama, T5: their eager norm already runs in fp32). Cost model only.
- gradient_sync:     when FSDP2 reduce-scatters the gradients of a step's micro-batches (engine fsdp; cost model only):
                     "every" (each micro-batch's backward reduce-scatters into the sharded .grad: FSDP2's default,
                     torchtitan, Composer, scalestudy's `train`, engine/settings.py), "last" (the run calls
                     set_requires_gradient_sync(False) on every micro-batch but the last -- KempnerForge
                     training/grad.py maybe_no_sync, torch.distributed.pipelining's PipelineStage for FSDP2 chunks: the
                     unsharded gradients, in the reduce dtype, stay on every rank until the last micro-batch's backward
                     reduce-scatters them once, costmodel/memory.fsdp_unsynced_grad_bytes; one reduce-scatter per
                     step, terms._sharded_overlap; at pp > 1 PipelineStage also keeps each stage's parameters
                     gathered from their first backward to the last, memory.fsdp_pipeline_unsharded_param_bytes) or
                     "engine" (every). No effect without accumulation.
- stage_layers:      explicit layers per pipeline stage (sum = the model's layers, pp >= 2); empty = even split with
                     the remainder spread over the first stages (`stage_split`).

Software defaults (`software_defaults`; `estimate` prints what it assumed, docs/estimate-schema.md). A knob left at
its default describes the software the published runs of that engine used, which for `kernels` and `cross_entropy`
also depends on the model: a T5 / mT5 (encoder-decoder) model on deepspeed, ddp or fsdp without tensor or pipeline
parallelism is, in practice, Hugging Face transformers' T5ForConditionalGeneration -- the PyTorch T5 that HF
Trainer / Accelerate + DeepSpeed runs (the seed study, Benington 2023), that nanoT5 wraps, and that scalestudy's
own `train` builds; no fused-kernel PyTorch T5 runs there (NeMo / Megatron's T5 runs as engine megatron or with tp,
T5X / Mesh TensorFlow are XLA programs) -- so its default is "eager" element-wise kernels and the model's own "hf"
loss, and under attention flash SDPA's "mem-efficient" attention kernel with the position bias as a float mask:
the T5 that runs SDPA at all, transformers 5.x (5.24 read, costmodel/attention_bias.py); the 4.x T5 of the seed
study's era ran its eager attention only, so such a run is typed with attention eager, as every published HF T5
row is. The same holds for a decoder whose FFN activation is one only Hugging Face's modules compose as eager ops
(`HF_ACTIVATIONS`: gelu_new / gelu_fast, transformers' NewGELUActivation / FastGELUActivation -- the GPT-2 presets
and a GPT-2-style config.json): on those engines without tp / pp it is transformers' GPT2LMHeadModel, so "eager"
kernels and the current transformers' causal-LM loss (ForCausalLMLoss, F.cross_entropy on `logits.float()`:
"torch"; a transformers 4.x run before 4.46 says "hf"). A llama-family decoder (rotary, RMSNorm) on deepspeed
without tp / pp is transformers' LlamaForCausalLM (or its kin) the same way, with the same defaults: DeepSpeed
trains the client's nn.Module and ships no model of its own, and the Llamas handed to a plain ZeRO engine come from
transformers -- HF Trainer / Accelerate's DeepSpeed plugin, DeepSpeed-Chat (create_hf_model), DeepSpeed's DeepCompile
benchmark (AutoModelForCausalLM), FlagPerf's llama2_7b deepspeed case, Arctic Long Sequence Training -- as is the
model scalestudy's own `train` runs there; an HF run patched with Liger's kernels says kernels fused. With tp / pp a
Llama on deepspeed is Megatron-DeepSpeed's (its examples run it so: examples_deepspeed/pretrain_llama2_distributed.sh
TP 2, PP 2), whose GPTModel builds it from --swiglu / --normalization rmsnorm / rotary with apex's MixedFusedRMSNorm
on CUDA (megatron/model/__init__.py), the SwiGLU as chunk + F.silu + mul and the rotary embedding as PyTorch ops
(transformer.py ParallelMLP, rotary_pos_embedding.apply_rotary_pos_emb; read at f4157bea): "eager-fused-norm" kernels
and the engine's vocabulary-parallel loss. Every other run keeps "fused" kernels (Megatron-LM, NeMo,
Megatron-DeepSpeed's GPTs, compiled or fused-module stacks) and the engine's loss. Those Hugging Face models (T5, the
GPT-2 kind, a Llama on deepspeed) also checkpoint the way the current transformers does: `recompute_early_stop` "on"
-- transformers 5.x's activation_checkpointing_enable (and its deprecated alias gradient_checkpointing_enable) passes
use_reentrant False to torch.utils.checkpoint unless told otherwise (modeling_utils.py
_activation_checkpointing_enable, read in the 5.25.0 wheel), so torch's non-reentrant checkpoint stops each block's
recompute early (op_checkpoint.py), as scalestudy's own `train` does; the engine default for deepspeed / ddp (off:
Megatron's and DeepSpeed's own reentrant checkpoints) would price a whole-block recompute those models no longer run.
Era: transformers 4.x checkpointed reentrant (4.35 on passes use_reentrant True when given no kwargs, modeling_utils.py
at 040ba146, 2024-12; earlier 4.x took torch's reentrant default), so a transformers 4.x run says
recompute_early_stop off. Not made model-dependent beyond that,
with the reason: decoder-only GPT runs written with Megatron's one-kernel GELU (`ffn: gelu`) on deepspeed are
Megatron-DeepSpeed's (fused), and Llama runs on fsdp / ddp split between fused (torch.compile: fms-fsdp, OLMo-core,
KempnerForge; XLA: MaxText) and eager (HF Trainer / Accelerate, torchtitan without compile) software, so no one
default is evidenced there (eager: issue-flags-only 10.54 -> 10.70%, 2026-12-03); `optimizer_loop` stays "engine", a
fused update (apex / DeepSpeed FusedAdam, Megatron, torchtitan's fused AdamW, and HF Trainer's own default since
transformers' training_args picks adamw_torch_fused on torch >= 2.8; torch's foreach default, HF Trainer's adamw_torch
on older torch, is "foreach", named by the run);
Megatron's `tp_comm_overlap` is on for the distributed optimizer (zero 1) with sequence parallelism at tp > 1 and
overlap_grad_comm (`tp_comm_overlap_default`), off elsewhere -- Megatron-LM's bare --tp-comm-overlap is off, so such a
run of it, or NeMo's, without TP overlap says tp_comm_overlap false; `overlap_param_gather` follows
`overlap_grad_comm` on engine megatron at zero >= 1 (above), what the current NVIDIA stacks run -- Megatron-LM's
bare --overlap-param-gather is off, so a run of it with --overlap-grad-reduce alone says overlap_param_gather false;
`zero1_all_reduce` is on for DeepSpeed ZeRO-1 (above), the gradient all-reduce DeepSpeed runs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from scalestudy.errors import OptionError, ScalestudyError

Engine = Literal["deepspeed", "fsdp", "ddp", "megatron", "internlm"]
Offload = Literal["none", "cpu", "nvme"]
Recompute = Literal["none", "selective", "full", "op"]  # op: torchtitan operator-level SAC (cost model only)
Precision = Literal["bf16", "fp16", "fp32", "fp8"]
Attention = Literal["flash", "eager"]
PipelineSchedule = Literal["1f1b", "gpipe", "interleaved"]

ENGINES = ("deepspeed", "fsdp", "ddp")
OFFLOADS = ("none", "cpu", "nvme")
RECOMPUTES = ("none", "selective", "full", "op")
PRECISIONS = ("bf16", "fp16", "fp32", "fp8")
FP8_ENGINES = ("megatron", "fsdp")  # precision fp8: Transformer Engine / torchao float8 (costmodel/fp8.RECIPES)
ZERO_STAGES = {"deepspeed": (0, 1, 2, 3), "ddp": (0, 1), "fsdp": (2, 3)}  # what `train` runs and `plan` searches
COST_MODEL_ENGINES = {"megatron": (0, 1, 2), "internlm": (1,)}  # engines of published runs the cost model describes;
# `train` refuses them (internlm: InternLM's HybridZeroOptimizer, zero1 over the data-parallel group)
ATTENTIONS = ("flash", "eager")
CONTEXT_PARALLEL_ENGINES = ("megatron", "fsdp")  # Megatron-Core / NeMo context_parallel_size, torchtitan's CP
PP_SCHEDULES = ("1f1b", "gpipe", "interleaved")
KERNELS = ("engine", "fused", "eager", "eager-fused-norm")  # element-wise kernels (costmodel/eager_kernels.py)
GRAD_REDUCES = ("engine", "fp32", "compute")  # gradient-reduction dtype (terms.main_grad_bytes)
CROSS_ENTROPIES = ("engine", "inplace", "fused", "fused-metrics", "fused-linear", "hf",
                   "torch", "torch-16bit", "torch-compiled")  # loss kernel (memory.logits_bytes)
# fused attention kernel (costmodel/efficiency.py; mem-efficient: costmodel/attention_bias.py)
ATTENTION_KERNELS = ("engine", "fa1", "fa2", "fa3", "cudnn", "mem-efficient", "torch-softmax", "hf-fp32-softmax",
                     "triton")
LM_HEADS = ("engine", "sharded", "replicated", "gathered")  # the vocabulary under tp (vocab_shards, logit_shards)
GRAD_ACCUM_DTYPES = ("engine", "fp32", "compute")  # DeepSpeed's gradient accumulation dtype (costmodel/memory.py)
GRAD_BUCKETS = ("engine", "copy", "view")  # DDP's gradient_as_bucket_view False / True (costmodel/memory.py)
OPTIMIZER_DTYPES = ("engine", "bf16")  # optimizer state dtype of engine megatron / fsdp (costmodel/memory.py)
OPTIMIZER_LOOPS = ("engine", "per-tensor", "per-tensor-rms", "per-tensor-fp16", "per-tensor-hf",
                   "deepspeed-serial", "deepspeed-stage1-whole", "foreach", "deepspeed-unfused", "deepspeed-bf16",
                   "fused", "cpu-adam")  # costmodel/step.py
OPTIMIZER_KINDS = ("adamw", "sgd", "sgd-momentum")  # the optimizer stepped (costmodel/optimizers.py)
# optimizer_loop values that are AdamW implementations (nanoT5's AdamWScale, apex FusedAdam per tensor, transformers'
# AdamW, torch AdamW fused=True, DeepSpeed's CPU-Adam): no other optimizer_kind runs them
ADAMW_ONLY_LOOPS = ("per-tensor-rms", "per-tensor-fp16", "per-tensor-hf", "fused", "cpu-adam")
ZERO3_FETCHES = ("engine", "coalesced", "per-param-sync")  # DeepSpeed ZeRO-3's gather path (costmodel/zero3.py)
NORM_DTYPES = ("engine", "compute", "fp32")  # the dtype eager LayerNorms run in (costmodel/eager_kernels.py)
CUBLAS_VERSIONS = ("11", "10")  # cuBLAS major version: Tensor Cores for unaligned fp16 GEMMs (costmodel/alignment.py)
EARLY_STOPS = ("engine", "on", "off")  # full recompute with checkpoint early stop (costmodel/op_checkpoint.py)
SCATTER_GATHERS = ("engine", "on", "off")  # tp-replicated pipeline sends split over the tp ranks (comm.py)
GRADIENT_SYNCS = ("engine", "every", "last")  # FSDP2 reduce-scatter per micro-batch or once per step (memory.py)
# The values of the cost-model software options that scalestudy's `train` runs on its engines (specs/run.train_software
# picks among them per model and layout): a label leaves them unnamed, as it leaves the defaults
TRAIN_VALUES = {"kernels": ("eager",), "recompute_early_stop": ("on",), "cross_entropy": ("hf", "torch"),
                "optimizer_loop": ("foreach", "deepspeed-unfused", "deepspeed-bf16"),
                "attention_kernel": ("mem-efficient",),
                "lm_head": ("replicated",), "grad_accum_dtype": ("compute",), "grad_buckets": ("view",)}


# Strategy's fields that take one of a list of names, and the list
_CHOICES = (("offload_optimizer", OFFLOADS), ("offload_params", OFFLOADS), ("recompute", RECOMPUTES),
            ("precision", PRECISIONS), ("attention", ATTENTIONS), ("pp_schedule", PP_SCHEDULES), ("kernels", KERNELS),
            ("grad_reduce", GRAD_REDUCES), ("recompute_early_stop", EARLY_STOPS), ("cross_entropy", CROSS_ENTROPIES),
            ("attention_kernel", ATTENTION_KERNELS), ("optimizer_dtype", OPTIMIZER_DTYPES),
            ("optimizer_loop", OPTIMIZER_LOOPS), ("optimizer_kind", OPTIMIZER_KINDS), ("lm_head", LM_HEADS), ("grad_accum_dtype", GRAD_ACCUM_DTYPES),
            ("grad_buckets", GRAD_BUCKETS), ("zero3_fetch", ZERO3_FETCHES), ("cublas", CUBLAS_VERSIONS),
            ("norm_dtype", NORM_DTYPES), ("pipeline_scatter_gather", SCATTER_GATHERS),
            ("gradient_sync", GRADIENT_SYNCS))


def check_choice(name: str, value, allowed: tuple[str, ...]) -> None:
    """One line naming the choices when `value` is not one of them (Strategy and plan's Constraints)."""
    if value not in allowed:
        raise OptionError(f"unknown {name} {value!r} (choose from {', '.join(allowed)})", name)


CHOICES = dict(_CHOICES)  # field -> its names, for checking one field on its own (check_field_choice)


def as_choice(name: str, value):
    """A choice field's value as Strategy reads it: YAML reads an unquoted on / off as true / false
    (recompute_early_stop, pipeline_scatter_gather), and YAML / --set read cublas=11 as 11."""
    if isinstance(value, bool) and name in ("recompute_early_stop", "pipeline_scatter_gather"):
        return "on" if value else "off"
    if name == "cublas" and isinstance(value, int) and not isinstance(value, bool):
        return str(value)  # ("unknown cublas 11 (choose from 11, 10)")
    return value


def check_field_choice(name: str, value) -> None:
    """Strategy's unknown-value refusal of one field on its own, for a study spec, which checks each value before
    the rules that combine it with others (a typo is named as one, not as an option train cannot run)."""
    if name in CHOICES:
        check_choice(name, as_choice(name, value), CHOICES[name])


@dataclass(frozen=True)
class Strategy:
    """How to parallelise one training run. Data-parallel degree and accumulation are derived (see `Layout`)."""

    engine: Engine = "deepspeed"
    zero: int = 0
    offload_optimizer: Offload = "none"
    offload_params: Offload = "none"
    tp: int = 1
    pp: int = 1
    cp: int = 1  # context parallelism: each sequence split over cp ranks (module docstring; cost model only)
    micro_batch: int = 1
    recompute: Recompute = "none"
    precision: Precision = "bf16"
    attention: Attention = "flash"
    sequence_parallel: bool = True  # only meaningful when tp > 1
    overlap_grad_comm: bool = True
    pp_schedule: PipelineSchedule = "1f1b"
    virtual_stages: int = 1  # model chunks per pipeline device (interleaved schedule only)
    stage_layers: tuple[int, ...] = ()  # explicit layers per pipeline stage; () = even split, remainder spread
    overlap_param_gather: bool | None = None  # None: the engine's default, param_gather_default (cost model only)
    tp_comm_overlap: bool | None = None  # None: the engine's default, tp_comm_overlap_default (cost model only)
    zero1_all_reduce: bool | None = None  # None: the engine's default, zero1_all_reduce_default (cost model only)
    kernels: str = "engine"  # element-wise kernels fused / eager; engine: software_defaults (module docstring)
    grad_reduce: str = "engine"  # gradient-reduction dtype (cost model only, see the module docstring)
    recompute_early_stop: str = "engine"  # checkpoint early stop under full recompute (cost model only)
    cross_entropy: str = "engine"  # loss kernel over the logits (cost model only, see the module docstring)
    attention_kernel: str = "engine"  # fused attention kernel under flash (cost model only, see the module docstring)
    optimizer_dtype: str = "engine"  # engine megatron / fsdp optimizer state dtype (cost model only)
    optimizer_loop: str = "engine"  # fused / per-tensor optimizer kernels (cost model only, see the module docstring)
    optimizer_kind: str = "adamw"  # the optimizer stepped: adamw / sgd / sgd-momentum (cost model only, module docstring)
    lm_head: str = "engine"  # vocabulary sharded / replicated over tp (cost model only, see the module docstring)
    grad_accum_dtype: str = "engine"  # DeepSpeed's gradient accumulation dtype (cost model only, module docstring)
    grad_buckets: str = "engine"  # DDP's gradient_as_bucket_view (cost model only, module docstring)
    zero3_fetch: str = "engine"  # DeepSpeed ZeRO-3's parameter gather path (cost model only, module docstring)
    pipeline_scatter_gather: str = "engine"  # tp-replicated stage boundary sent 1/tp per rank (cost model only)
    cublas: str = "11"  # cuBLAS major version: unaligned 16-bit GEMMs on Tensor Cores or not (cost model only)
    norm_dtype: str = "engine"  # dtype eager LayerNorms run in: autocast's fp32 or the compute dtype (cost model only)
    tf32: bool = False  # fp32 matmuls on TF32 Tensor Cores (torch allow_tf32; module docstring)
    fp8_params: bool = False  # Transformer Engine FP8 model parameters (cost model only; module docstring)
    distribute_saved_activations: bool = False  # checkpointed inputs split over tp (cost model only; module docstring)
    gradient_sync: str = "engine"  # FSDP2 reduce-scatter every micro-batch or the last only (cost model only)

    def __post_init__(self) -> None:
        if self.overlap_param_gather is None:  # the engine's own default, resolved once: every reader sees a bool
            object.__setattr__(self, "overlap_param_gather",
                               param_gather_default(self.engine, self.zero, self.overlap_grad_comm))
        if self.zero1_all_reduce is None:
            object.__setattr__(self, "zero1_all_reduce", zero1_all_reduce_default(self.engine, self.zero))
        if self.tp_comm_overlap is None:
            object.__setattr__(self, "tp_comm_overlap", tp_comm_overlap_default(
                self.engine, self.zero, self.tp, self.sequence_parallel, self.overlap_grad_comm))
        if not isinstance(self.stage_layers, tuple):
            object.__setattr__(self, "stage_layers", _stage_layers(self.stage_layers))  # "3,1" or [3, 1]: YAML/JSON
        for name in ("recompute_early_stop", "pipeline_scatter_gather", "cublas"):  # YAML's readings (as_choice)
            value = getattr(self, name)
            if not isinstance(value, str):
                object.__setattr__(self, name, as_choice(name, value))
        stages = ZERO_STAGES.get(self.engine) or COST_MODEL_ENGINES.get(self.engine)
        if stages is None:
            raise OptionError(f"unknown engine {self.engine!r} (choose from "
                              f"{', '.join((*ENGINES, *COST_MODEL_ENGINES))})", "engine")
        if isinstance(self.zero, bool) or self.zero not in stages:  # YAML's true would pass as 1
            allowed = ", ".join(map(str, stages))
            raise ScalestudyError(f"engine {self.engine} supports zero stage {allowed}, not {self.zero}")
        for name, allowed in _CHOICES:
            value = getattr(self, name)
            if value not in allowed:  # check_choice words the refusal (a call per field cost plan 1.2 us a strategy)
                check_choice(name, value, allowed)
        if self.precision == "fp8" and self.engine not in FP8_ENGINES:
            raise OptionError(f"precision fp8 is modelled as Transformer Engine under engine megatron or torchao "
                              f"float8 under fsdp, not {self.engine} (cost model only: train runs bf16, fp16 or "
                              f"fp32)", "precision", "engine")
        if self.fp8_params is True and (self.precision, self.engine) != ("fp8", "megatron"):
            raise OptionError(f"fp8_params describes Transformer Engine's FP8 model parameters of a precision fp8 run "
                              f"under engine megatron (NeMo / Megatron-Core fp8_params), not precision "
                              f"{self.precision} under {self.engine}", "fp8_params")
        if self.optimizer_dtype != "engine" and self.engine not in ("megatron", "fsdp"):
            raise OptionError(f"optimizer_dtype {self.optimizer_dtype} describes engine megatron's optimizer "
                              f"(NeMo distributed_fused_adam) or a bf16 model under fsdp (torchtune dtype bf16), "
                              f"not {self.engine}", "optimizer_dtype")
        if self.attention_kernel == "torch-softmax" and (self.attention != "eager" or self.engine not in (
                "deepspeed", "megatron", "ddp")):
            raise OptionError(f"attention_kernel torch-softmax describes Megatron's eager attention whose fused "
                              f"softmax fell back to PyTorch (costmodel/megatron_softmax.py), not attention "
                              f"{self.attention} on {self.engine}", "attention_kernel")
        if self.attention_kernel == "hf-fp32-softmax" and (self.attention != "eager" or self.precision != "fp16"):
            raise OptionError(f"attention_kernel hf-fp32-softmax describes Hugging Face OPT's eager attention in "
                              f"fp16, not attention {self.attention} in {self.precision}", "attention_kernel")
        if self.zero3_fetch != "engine" and self.engine != "deepspeed":  # priced at zero 3 only (a DeepSpeed version)
            raise OptionError(f"zero3_fetch {self.zero3_fetch} describes DeepSpeed ZeRO-3's parameter gathers, "
                              f"not {self.engine}", "zero3_fetch")
        if self.grad_accum_dtype != "engine" and self.engine != "deepspeed":
            raise OptionError(f"grad_accum_dtype {self.grad_accum_dtype} describes DeepSpeed's "
                              f"data_types.grad_accum_dtype, not {self.engine}", "grad_accum_dtype")
        if self.cross_entropy == "torch-16bit" and (self.engine == "ddp" or self.precision == "fp32"):
            # the reason names what refused it: ddp's autocast, or fp32 logits (not the other's reason)
            why = "; ".join(reason for refused, reason in (
                (self.engine == "ddp", "ddp's autocast runs the loss in fp32"),
                (self.precision == "fp32", "an fp32 model's logits are fp32")) if refused)
            raise OptionError(f"cross_entropy torch-16bit describes torch's loss on 16-bit logits of a model held in "
                              f"bf16 / fp16 without autocast, not {self.engine} in {self.precision} ({why}): "
                              f"cross_entropy torch is the loss on logits.float()", "cross_entropy")
        if self.gradient_sync != "engine" and self.engine != "fsdp":
            raise OptionError(f"gradient_sync {self.gradient_sync} describes FSDP2's set_requires_gradient_sync, not "
                              f"{self.engine}: it needs engine fsdp (leave gradient_sync engine on {self.engine})",
                              "gradient_sync")
        if self.grad_buckets != "engine" and self.engine != "ddp":
            raise OptionError(f"grad_buckets {self.grad_buckets} describes PyTorch DDP's gradient_as_bucket_view, "
                              f"not {self.engine}", "grad_buckets")
        if self.optimizer_loop == "deepspeed-stage1-whole" and (self.engine, self.zero) != ("deepspeed", 1):
            raise OptionError(f"optimizer_loop deepspeed-stage1-whole describes DeepSpeed's ZeRO stage 1 optimizer, "
                              f"not {self.engine} zero {self.zero}", "optimizer_loop")
        if self.optimizer_kind != "adamw" and self.optimizer_loop in ADAMW_ONLY_LOOPS:
            raise OptionError(f"optimizer_loop {self.optimizer_loop} is an AdamW implementation, not optimizer_kind "
                              f"{self.optimizer_kind} (per-tensor, foreach or engine name how any optimizer "
                              f"launches)", "optimizer_loop", "optimizer_kind")
        if self.optimizer_loop == "deepspeed-serial" and self.engine != "deepspeed":
            raise OptionError(f"optimizer_loop deepspeed-serial describes DeepSpeed's ZeRO optimizer (its serial "
                              f"overflow and norm checks), not {self.engine}", "optimizer_loop")
        if self.optimizer_loop == "fused" and self.engine not in ("fsdp", "ddp"):
            raise OptionError(f"optimizer_loop fused describes torch AdamW(fused=True) on the torch-native "
                              f"engines (fsdp, ddp), not {self.engine}", "optimizer_loop")
        if self.optimizer_loop == "cpu-adam" and (self.engine, self.offload_optimizer) != ("fsdp", "cpu"):
            raise OptionError(f"optimizer_loop cpu-adam describes DeepSpeed's CPU-Adam stepping FSDP's CPU-offloaded "
                              f"shards, not {self.engine} with offload_optimizer {self.offload_optimizer} (DeepSpeed's "
                              f"own offload steps with it already)", "optimizer_loop")
        if self.optimizer_loop == "deepspeed-unfused" and (self.engine, self.zero) != ("deepspeed", 0):
            raise OptionError(f"optimizer_loop deepspeed-unfused describes DeepSpeed ZeRO-0's "
                              f"FP16_UnfusedOptimizer, not {self.engine} zero {self.zero}", "optimizer_loop")
        if self.optimizer_loop == "deepspeed-bf16" and ((self.engine, self.zero, self.precision) != (
                "deepspeed", 0, "bf16") or self.pp < 2):
            raise OptionError(f"optimizer_loop deepspeed-bf16 describes the BF16_Optimizer of a DeepSpeed bf16 "
                              f"pipeline at ZeRO-0 (pp >= 2), not {self.engine} zero {self.zero} "
                              f"{self.precision} pp {self.pp}", "optimizer_loop")
        for name in ("sequence_parallel", "overlap_grad_comm", "overlap_param_gather", "tp_comm_overlap",
                     "zero1_all_reduce", "tf32", "fp8_params", "distribute_saved_activations"):
            if not isinstance(getattr(self, name), bool):
                raise OptionError(f"{name} must be true or false, got {getattr(self, name)!r}", name)
        for name in ("tp", "pp", "micro_batch", "virtual_stages"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise OptionError(f"{name} must be an integer >= 1, got {value!r}", name)
            if value >= 2**63:  # the engines and numpy hold them as int64
                raise OptionError(f"{name} must fit a 64-bit integer, got {value}", name)
        if self.tp_comm_overlap and self.tp > 1 and not self.sequence_parallel:
            raise OptionError("tp_comm_overlap overlaps the sequence-parallel all-gathers / reduce-scatters with "
                              "the GEMMs: it needs sequence_parallel (Megatron-LM asserts the same)",
                              "tp_comm_overlap", "sequence_parallel")
        self._check_offload()
        self._check_pipeline()
        self._check_context()
        if self.pp > 1 and self.engine == "deepspeed" and self.zero >= 2:
            raise ScalestudyError("pipeline parallelism is incompatible with ZeRO stage 2/3 (DeepSpeed allows 0-1)")

    def _check_offload(self) -> None:
        if self.engine == "fsdp":
            if (self.offload_optimizer, self.offload_params) not in (("none", "none"), ("cpu", "cpu")):
                raise OptionError("FSDP offloads parameters and optimizer to the CPU together: set both "
                                  "offload_params and offload_optimizer to cpu (no nvme)",
                                  "offload_params", "offload_optimizer")
            return
        if self.offload_optimizer != "none" and not (self.engine == "deepspeed" and self.zero >= 1):
            raise ScalestudyError("optimizer offload needs DeepSpeed ZeRO stage 1, 2 or 3 (or FSDP with "
                                  "parameter offload)")
        if self.offload_params != "none" and not (self.engine == "deepspeed" and self.zero == 3):
            raise ScalestudyError("parameter offload needs DeepSpeed ZeRO stage 3 (or FSDP with optimizer offload)")

    def _check_pipeline(self) -> None:
        if any(not isinstance(n, int) or isinstance(n, bool) for n in self.stage_layers):
            raise OptionError(f"stage_layers must be whole layer counts per pipeline stage (e.g. 3,1), got "
                              f"{self.stage_layers!r}", "stage_layers")
        # One rule for every surface (estimate, plan, study, train): a pipeline option at pp 1 would change nothing,
        # so it is refused rather than ignored (a study would run it as a duplicate trial).
        if self.pp_schedule != "1f1b" and self.pp < 2:
            raise OptionError(f"the {self.pp_schedule} pipeline schedule needs pp >= 2 (at pp 1 there is no "
                              "pipeline to schedule: leave pp_schedule at 1f1b)", "pp", "pp_schedule")
        if self.pp_schedule == "interleaved":
            if self.virtual_stages < 2:
                raise OptionError("the interleaved pipeline schedule needs virtual_stages >= 2", "virtual_stages")
        elif self.virtual_stages != 1:
            raise OptionError(f"virtual_stages {self.virtual_stages} needs pp_schedule interleaved", "virtual_stages",
                              "pp_schedule")
        if self.stage_layers:
            if len(self.stage_layers) != self.pp:
                raise OptionError(f"stage_layers lists {len(self.stage_layers)} stages, pp is {self.pp}",
                                  "stage_layers", "pp")
            if self.pp < 2:
                raise OptionError(f"stage_layers {','.join(map(str, self.stage_layers))} splits layers over "
                                  "pipeline stages: it needs pp >= 2 (at pp 1 every layer is on one stage)",
                                  "stage_layers", "pp")
            if any(not isinstance(n, int) or isinstance(n, bool) or n < self.virtual_stages
                   for n in self.stage_layers):
                raise OptionError(f"every pipeline stage needs at least {self.virtual_stages} layer(s) "
                                  f"(stage_layers {','.join(map(str, self.stage_layers))})", "stage_layers")

    def _check_context(self) -> None:
        """Context parallelism: a whole degree, on the engines whose software has it, under fused attention."""
        if not isinstance(self.cp, int) or isinstance(self.cp, bool) or not 1 <= self.cp < 2**63:
            raise OptionError(f"cp must be an integer >= 1, got {self.cp!r}", "cp")
        if self.cp == 1:
            return
        if self.engine not in CONTEXT_PARALLEL_ENGINES:
            raise OptionError(f"cp {self.cp}: context parallelism runs on engine megatron (Megatron-Core >= 0.5 / "
                              f"NeMo) or fsdp (torchtitan), not {self.engine}", "cp", "engine")
        if self.attention != "flash":
            raise OptionError(f"cp {self.cp}: context parallelism's ring attention runs the fused attention kernels "
                              f"only (Transformer Engine, torch SDPA), not attention {self.attention}", "cp",
                              "attention")

    def stage_split(self, num_layers: int) -> tuple[int, ...]:
        """Layers held by each pipeline stage: `stage_layers`, or an even split with the remainder on the first
        stages (e.g. 30 layers over pp 4 -> 8, 8, 7, 7). Raises ScalestudyError when the counts cannot work."""
        if self.stage_layers:
            if sum(self.stage_layers) != num_layers:
                raise OptionError(f"stage_layers sum to {sum(self.stage_layers)}, the model has {num_layers} "
                                  "layers", "stage_layers")
            return self.stage_layers
        if num_layers < self.pp * self.virtual_stages:
            raise OptionError(f"{num_layers} layers cannot fill pp {self.pp} x virtual_stages "
                              f"{self.virtual_stages} model chunks", "pp", "virtual_stages")
        base, extra = divmod(num_layers, self.pp)
        return (base + 1,) * extra + (base,) * (self.pp - extra)

    @property
    def label(self) -> str:
        """Short human name, e.g. 'ds-z2+optcpu tp1 pp1 mb4 bf16'."""
        # megatron zero 1 = the distributed optimizer, zero 2 = Megatron-FSDP optim_grads (module docstring)
        mcore = {0: "mcore", 1: "mcore-distopt"}.get(self.zero, "mcore-fsdp-z2")
        base = {"deepspeed": f"ds-z{self.zero}", "ddp": "ddp" if self.zero == 0 else "ddp-zero1",
                "fsdp": f"fsdp-z{self.zero}", "megatron": mcore, "internlm": "internlm-zero1"}[self.engine]
        if self.offload_optimizer != "none":
            base += f"+opt{self.offload_optimizer}"
        if self.offload_params != "none":
            base += f"+param{self.offload_params}"
        rc = "" if self.recompute == "none" else f" rc-{self.recompute}"
        cp = f" cp{self.cp}" if self.cp > 1 else ""
        return (f"{base} tp{self.tp}{cp} pp{self.pp} mb{self.micro_batch}{rc} {self.precision}"
                f"{self._options_label()}")

    def _options_label(self) -> str:
        """Non-default execution options only, so default strategies keep their short label."""
        parts = []
        if self.attention != "flash":
            parts.append(f"attn-{self.attention}")
        if self.tp > 1 and not self.sequence_parallel:
            parts.append("no-sp")
        if not self.overlap_grad_comm:
            parts.append("sync-grad")
        if (self.engine, self.zero) in _PARAM_GATHERS and \
                self.overlap_param_gather != param_gather_default(self.engine, self.zero, self.overlap_grad_comm):
            # where there is a bucketed post-step parameter all-gather, away from the engine's default
            parts.append("ovl-param-gather" if self.overlap_param_gather else "no-ovl-param-gather")
        if self.tp > 1 and self.tp_comm_overlap != tp_comm_overlap_default(
                self.engine, self.zero, self.tp, self.sequence_parallel, self.overlap_grad_comm):
            # away from the engine's default (tp_comm_overlap_default)
            parts.append("tp-comm-overlap" if self.tp_comm_overlap else "no-tp-comm-overlap")
        if (self.engine, self.zero) == ("deepspeed", 1) and not self.zero1_all_reduce:
            parts.append("z1-reduce")  # away from DeepSpeed's default all-reduce (zero1_all_reduce_default)
        if self.pp > 1 and self.pp_schedule != "1f1b":
            parts.append("gpipe" if self.pp_schedule == "gpipe" else f"interleaved-v{self.virtual_stages}")
        if self.stage_layers:
            parts.append("stages " + "/".join(map(str, self.stage_layers)))
        if self.kernels != "fused" and self._names("kernels"):
            parts.append(f"kernels-{self.kernels}")
        if self.grad_reduce != "engine":
            parts.append(f"grad-reduce-{self.grad_reduce}")
        if self.recompute == "full" and self._names("recompute_early_stop"):
            parts.append(f"early-stop-{self.recompute_early_stop}")
        if self._names("cross_entropy"):
            parts.append(f"ce-{self.cross_entropy}")
        if self._names("attention_kernel"):
            parts.append(f"attn-{self.attention_kernel}")
        if self.optimizer_dtype != "engine":
            parts.append(f"optim-{self.optimizer_dtype}")
        if self._names("optimizer_loop"):
            parts.append(f"optim-{self.optimizer_loop}")
        if self.tp > 1 and self._names("lm_head"):
            parts.append(f"head-{self.lm_head}")
        if self.precision == "bf16" and self._names("grad_accum_dtype"):
            parts.append(f"accum-{self.grad_accum_dtype}")
        if self.tp * self.pp == 1 and self._names("grad_buckets"):
            parts.append(f"grads-{self.grad_buckets}")
        if self.zero == 3 and self.zero3_fetch != "engine":
            parts.append(f"fetch-{self.zero3_fetch}")
        if self.pp > 1 and self.tp > 1 and self.pipeline_scatter_gather != "engine":
            parts.append(f"pp-scatter-gather-{self.pipeline_scatter_gather}")
        if self.cublas != "11":
            parts.append(f"cublas-{self.cublas}")
        if self.norm_dtype == "fp32" and self.precision != "fp32":
            parts.append("norm-fp32")
        if self.optimizer_kind != "adamw":
            parts.append(self.optimizer_kind)
        if self.tf32 and self.precision == "fp32":
            parts.append("tf32")
        if self.gradient_sync == "last":
            parts.append("sync-last")
        if self.fp8_params:
            parts.append("fp8-params")
        if self.distribute_saved_activations and self.recompute == "full" and self.tp > 1 \
                and not self.sequence_parallel:
            parts.append("distributed-saves")
        return "".join(" " + p for p in parts)

    def _names(self, option: str) -> bool:
        """Whether the label names software option `option`: set away from "engine", and not a value train runs on
        its engines (TRAIN_VALUES: every candidate plan emits runs them)."""
        value = getattr(self, option)
        return value != "engine" and not (self.engine in ENGINES and value in TRAIN_VALUES[option])

    def to_dict(self) -> dict:
        # every field is a plain value but stage_layers (a tuple of ints): no deep copy (dataclasses.asdict took
        # most of `plan --json --top 0`, two calls per candidate)
        data = {name: getattr(self, name) for name in self.__dataclass_fields__}
        data["stage_layers"] = list(self.stage_layers)  # JSON/YAML have lists, not tuples
        if data["cp"] == 1:  # named only where set: a record without context parallelism reads as before it existed
            del data["cp"]
        return data

    def unresolved_dict(self) -> dict:
        """to_dict with each option the engine resolved (overlap_param_gather, zero1_all_reduce, tp_comm_overlap)
        left unset where it holds its default, so a copy built from it with another engine, stage or overlap
        (RunConfig.with_flat) resolves that default afresh instead of keeping the old engine's."""
        data = self.to_dict()
        if self.overlap_param_gather == param_gather_default(self.engine, self.zero, self.overlap_grad_comm):
            data["overlap_param_gather"] = None
        if self.zero1_all_reduce == zero1_all_reduce_default(self.engine, self.zero):
            data["zero1_all_reduce"] = None
        if self.tp_comm_overlap == tp_comm_overlap_default(self.engine, self.zero, self.tp, self.sequence_parallel,
                                                           self.overlap_grad_comm):
            data["tp_comm_overlap"] = None
        return data

    @classmethod
    def from_dict(cls, data: dict) -> Strategy:
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            from scalestudy.specs.near_keys import did_you_mean

            raise ScalestudyError(f"unknown strategy field(s): {', '.join(sorted(map(str, unknown)))}"
                                  f"{did_you_mean(unknown, cls.__dataclass_fields__)}")
        return cls(**data)

    def replace(self, **changes) -> Strategy:
        return replace(self, **changes)

    def with_micro_batch(self, micro_batch: int) -> Strategy:
        """This (checked) strategy at another micro-batch: no rule of __post_init__ involves the micro-batch beyond
        its own bounds, checked here, so the others are not run again (the planner builds thousands per second)."""
        if not isinstance(micro_batch, int) or isinstance(micro_batch, bool) or not 1 <= micro_batch < 2**63:
            raise OptionError(f"micro_batch must be an integer >= 1 that fits 64 bits, got {micro_batch!r}",
                              "micro_batch")
        return self._copy_with(micro_batch=micro_batch)

    def with_recompute(self, recompute: str) -> Strategy:
        """This (checked) strategy under another recompute: no rule of __post_init__ reads the recompute but its own
        choice check, run here, so the others are not run again (the planner's groups differ in it)."""
        check_choice("recompute", recompute, RECOMPUTES)
        return self._copy_with(recompute=recompute)

    def _copy_with(self, **changes) -> Strategy:
        """A copy with `changes` and no __post_init__: only for fields whose own checks the caller has run."""
        new = object.__new__(Strategy)
        new.__dict__.update(self.__dict__, **changes)
        return new


# FFN activations only Hugging Face transformers' own modules compose as eager ops (activations.py NewGELUActivation
# / FastGELUActivation: the activation_function GPT-2-style config.json files name); Megatron / fused stacks run the
# same tanh GELU as one kernel and are written `ffn: gelu` (specs/model.from_shape's default)
HF_ACTIVATIONS = ("gelu_new", "gelu_fast")


def hf_decoder(model) -> str:
    """Which Hugging Face transformers decoder `model` (a ModelSpec) is taken for where its engine trains the
    client's own model (`software_defaults`): "gpt2" -- its FFN activation is one only Hugging Face's modules run
    (HF_ACTIVATIONS: the GPT-2 presets and a GPT-2-style config.json); "llama" -- a llama-family decoder (rotary,
    RMSNorm: LlamaForCausalLM and its kin); "" -- neither (a Megatron-style GPT written `ffn: gelu`, a T5)."""
    if model.is_encoder_decoder:
        return ""
    return "gpt2" if model.ffn in HF_ACTIVATIONS else "llama" if model.family == "llama" else ""


# (engine, zero) with a bucketed post-step parameter all-gather that overlap_param_gather can hide: DeepSpeed ZeRO-1/2,
# Megatron's distributed optimizer and Megatron-FSDP optim_grads
_PARAM_GATHERS = (("deepspeed", 1), ("deepspeed", 2), ("megatron", 1), ("megatron", 2))


def param_gather_default(engine: str, zero, overlap_grad_comm) -> bool:
    """`overlap_param_gather` left unset (module docstring): on for engine megatron's distributed optimizer (zero 1;
    zero 2, Megatron-FSDP, gathers likewise) when the gradient reduction overlaps the backward -- Megatron-Bridge's
    CommOverlapConfig sets overlap_grad_reduce and overlap_param_gather together whenever data parallelism > 1 with
    the distributed optimizer, as NeMo 2's MegatronCommOverlapCallback did and NeMo 1.x's distributed_fused_adam
    (apex overlap_param_sync, on by default from NeMo PR 5684, Dec 2022); off otherwise."""
    return engine == "megatron" and zero in (1, 2) and overlap_grad_comm is True


def tp_comm_overlap_default(engine: str, zero, tp, sequence_parallel, overlap_grad_comm) -> bool:
    """`tp_comm_overlap` left unset (module docstring): on for engine megatron's distributed optimizer (zero 1) with
    sequence parallelism at tp > 1 and the gradient reduction overlapped -- the layout of NVIDIA's Megatron-Core
    pre-training recipes, which run Transformer Engine's userbuffers TP overlap in it: Megatron-Bridge (067f987d,
    recipes/llama/h100/llama3.py Llama 3 / 3.1 70B and 405B pretrain, recipes/gpt/h100/gpt3_175b.py:
    CommOverlapConfig(tp_comm_overlap=True)), NeMo's dgxc-benchmarking recipes (GPT-3 175B, Nemotron-4 15B / 340B)
    and Megatron-LM's own H100 scaling table (README at f2e5db40: --tp-comm-overlap); Megatron-LM's
    argument alone is off (--tp-comm-overlap store_true, and it asserts sequence parallelism), so such a run without it
    says tp_comm_overlap false (Nemotron-4 340B's production config: ub_tp_comm_overlap False). Off elsewhere (no
    effect at tp 1; the torch engines' async TP is torchtitan's opt-in)."""
    return (engine == "megatron" and zero == 1 and isinstance(tp, int) and tp > 1 and sequence_parallel is True
            and overlap_grad_comm is True)


def zero1_all_reduce_default(engine: str, zero) -> bool:
    """`zero1_all_reduce` left unset (module docstring): on for engine deepspeed zero 1, whose gradient path is an
    all-reduce per bucket in every release but a short window (<= 0.12: contiguous_gradients forced off at stage 1;
    from PR 4695 on: allreduce_and_scatter under the default use_multi_rank_bucket_allreduce); off elsewhere, where
    it has no effect."""
    return engine == "deepspeed" and zero == 1


def vocab_shards(st, tp: int | None = None) -> int:
    """The ranks the vocabulary dimension -- embedding, LM head, logits, cross-entropy -- is split over (module
    docstring, `lm_head`): `tp` (the strategy's unless given) under a sharded head ("engine" = sharded on every
    engine), 1 when every tp rank holds and computes the whole vocabulary ("replicated")."""
    return 1 if st.lm_head == "replicated" else (st.tp if tp is None else tp)


def logit_shards(st, tp: int | None = None) -> int:
    """The ranks the logits, the loss over them and the input embedding are split over (module docstring, `lm_head`):
    1 where every tp rank holds them whole -- "replicated", and "gathered", whose head GEMM is split (vocab_shards)
    but whose logits are all-gathered for the loss and whose embedding is replicated --, else `tp` (the strategy's
    unless given)."""
    return 1 if st.lm_head in ("replicated", "gathered") else (st.tp if tp is None else tp)


def software_defaults(engine: str, encoder_decoder: bool, tp: int, pp: int, hf_kind: str = "") -> dict[str, str]:
    """What `kernels`, `cross_entropy` and `attention_kernel` left at "engine" mean for a run (module docstring,
    'Software defaults'): a T5 / mT5 on deepspeed, ddp or fsdp without tp / pp is Hugging Face's T5 (eager
    element-wise kernels, its CrossEntropyLoss "hf", and -- transformers 5.x, where T5 runs SDPA -- the
    memory-efficient SDPA kernel its float position-bias mask leaves, read under attention flash only); a decoder
    Hugging Face's model is taken for (`hf_kind`: `hf_decoder` of the model) is that model -- eager kernels and the
    current transformers' causal-LM loss, ForCausalLMLoss on `logits.float()` ("torch") -- for "gpt2" there, for
    "llama" on deepspeed (which trains the client's model and ships none of its own); a "llama" on deepspeed with tp
    / pp is Megatron-DeepSpeed's (its GPTModel with --swiglu, rmsnorm and rotary): apex's fused RMSNorm, SwiGLU and
    rotary as PyTorch ops ("eager-fused-norm") and the engine's loss; anything else fused kernels and the engine's
    loss and attention kernel ("engine", resolved by costmodel/memory.loss_kernel and
    costmodel/terms.attention_kernel). `recompute_early_stop`: "on" for those Hugging Face models -- transformers
    5.x checkpoints with use_reentrant False (module docstring) --, else "engine" (op_checkpoint.early_stop)."""
    single = tp == 1 and pp == 1
    hf = engine in ENGINES and single
    hf_t5 = hf and encoder_decoder
    hf_causal = hf and not encoder_decoder and (hf_kind == "gpt2" or (hf_kind == "llama" and engine == "deepspeed"))
    if engine == "deepspeed" and not single and hf_kind == "llama" and not encoder_decoder:
        return {"kernels": "eager-fused-norm", "cross_entropy": "engine", "attention_kernel": "engine",
                "recompute_early_stop": "engine"}
    return {"kernels": "eager" if hf_t5 or hf_causal else "fused",
            "cross_entropy": "hf" if hf_t5 else "torch" if hf_causal else "engine",
            "attention_kernel": "mem-efficient" if hf_t5 else "engine",
            "recompute_early_stop": "on" if hf_t5 or hf_causal else "engine"}


# (engine, encoder_decoder, without tp and pp, hf_decoder kind) -> the (field, value) pairs of software_defaults
# that are not "engine": software_fill's table, filled on first use (a few dozen keys at most)
_FILLS: dict[tuple, tuple] = {}


def software_fill(fields: dict, encoder_decoder: bool, hf_kind: str = "") -> dict:
    """The values `resolve_software` writes into a strategy whose fields are `fields` (name -> value): a planner
    passes its keyword arguments before building the Strategy, so it is built and checked once. `hf_kind`:
    `hf_decoder` of the model. A table lookup (estimate's and plan's hot path): software_defaults reads the layout
    only as tp = pp = 1 or not."""
    if fields["kernels"] != "engine" and fields["cross_entropy"] != "engine" and (
            not encoder_decoder or fields["attention_kernel"] != "engine") and \
            fields.get("recompute_early_stop", "engine") != "engine":
        return {}  # all named (a decoder's attention_kernel default is always "engine"): plan's trained strategies
    key = (fields["engine"], encoder_decoder, fields["tp"] == 1 and fields["pp"] == 1, hf_kind)
    wanted = _FILLS.get(key)
    if wanted is None:
        wanted = _FILLS[key] = tuple((name, value) for name, value in software_defaults(
            fields["engine"], encoder_decoder, 1 if key[2] else 2, 1, hf_kind).items() if value != "engine")
    # attention_kernel is read under flash only; an eager run keeps its label
    return {name: value for name, value in wanted if fields.get(name, "engine") == "engine" and (
        name != "attention_kernel" or fields["attention"] == "flash")}


def resolve_software(strategy: Strategy, model) -> Strategy:
    """`strategy` with its "engine" kernels (and a Hugging Face model's "engine" loss and checkpoint early stop)
    written as the software `software_defaults` names for `model` (a ModelSpec): what the cost model prices and
    `estimate` prints."""
    fill = software_fill(strategy.__dict__, model.is_encoder_decoder, hf_decoder(model))
    if not fill:
        return strategy
    # built as with_micro_batch does, not re-checked: kernels, cross_entropy, attention_kernel and
    # recompute_early_stop take values of their own lists, which no other __post_init__ rule reads (estimate()
    # resolves every strategy it prices: plan's hot path)
    new = object.__new__(Strategy)
    new.__dict__.update(strategy.__dict__, **fill)
    return new


def software_assumed(strategy: Strategy, meanings: dict[str, str] | None = None) -> str:
    """The software options a (resolved) strategy is priced with, in one line, for `estimate`'s output: the
    element-wise kernels, the loss, the optimizer loop and, where they act, the attention kernel, gradient-reduction
    dtype, checkpoint early stop and the overlap switches ("engine": the engine's own; `meanings`, field -> what the
    cost model prices it as (costmodel/engine_software.engine_meanings), follows it in parentheses)."""
    s = strategy
    parts = [f"kernels {s.kernels}", f"cross_entropy {s.cross_entropy}", f"optimizer_loop {s.optimizer_loop}",
             f"grad_reduce {s.grad_reduce}"]
    if s.optimizer_kind != "adamw":
        parts.append(f"optimizer_kind {s.optimizer_kind}")
    if s.attention == "flash":
        parts.append(f"attention_kernel {s.attention_kernel}")
    if s.recompute == "full":
        parts.append(f"recompute_early_stop {s.recompute_early_stop}")
    if (s.engine, s.zero) in _PARAM_GATHERS:
        parts.append(f"overlap_param_gather {str(s.overlap_param_gather).lower()}")
    if s.tp > 1:
        parts.append(f"tp_comm_overlap {str(s.tp_comm_overlap).lower()}")
        parts.append(f"lm_head {s.lm_head}")
    if (s.engine, s.zero) == ("deepspeed", 1):
        parts.append(f"zero1_all_reduce {str(s.zero1_all_reduce).lower()}")
    if s.engine == "megatron":
        parts.append(f"optimizer_dtype {s.optimizer_dtype}")
    if (s.engine, s.precision) == ("deepspeed", "bf16"):
        parts.append(f"grad_accum_dtype {s.grad_accum_dtype}")
    if s.engine == "ddp" and s.tp * s.pp == 1:
        parts.append(f"grad_buckets {s.grad_buckets}")
    if (s.engine, s.zero) == ("deepspeed", 3) and s.zero3_fetch != "engine":
        parts.append(f"zero3_fetch {s.zero3_fetch}")
    if s.pp > 1 and s.tp > 1 and s.pipeline_scatter_gather != "engine":
        parts.append(f"pipeline_scatter_gather {s.pipeline_scatter_gather}")
    if s.engine == "fsdp" and s.gradient_sync != "engine":
        parts.append(f"gradient_sync {s.gradient_sync}")
    if s.precision == "fp32":
        parts.append(f"tf32 {str(s.tf32).lower()}")
    if s.precision == "fp8" and s.engine == "megatron":
        parts.append(f"fp8_params {str(s.fp8_params).lower()}")
    if s.recompute == "full" and s.tp > 1 and not s.sequence_parallel:
        parts.append(f"distribute_saved_activations {str(s.distribute_saved_activations).lower()}")
    meanings = meanings or {}
    return ", ".join(f"{part} ({meanings[name]})" if name in meanings else part
                     for name, part in ((part.split(" ", 1)[0], part) for part in parts))


def _stage_layers(value) -> tuple:
    """stage_layers from YAML/JSON/--set: "3,1" (or "" = even split) or a list of layer counts."""
    if isinstance(value, str):
        try:
            return tuple(int(part) for part in value.split(",")) if value.strip() else ()
        except ValueError:
            raise OptionError(f"stage_layers takes layer counts per pipeline stage (e.g. 3,1), got {value!r}",
                              "stage_layers") from None
    if not isinstance(value, (list, tuple)):
        raise OptionError(f"stage_layers takes layer counts per pipeline stage (e.g. 3,1), got {value!r}",
                          "stage_layers")
    return tuple(value)


@dataclass(frozen=True)
class Workload:
    """What is trained: global batch in sequences, encoder (or decoder-only) length and decoder target length."""

    global_batch: int
    seq_len: int
    target_len: int = 0  # decoder length of encoder-decoder models; 0 for decoder-only
    train_tokens: float = 0.0  # optional: tokens to train, for time-to-train and device-hours

    def __post_init__(self) -> None:
        if self.global_batch < 1:  # OptionError: a command names its flag (--global-batch), a spec its key
            raise OptionError(f"global_batch must be >= 1, got {self.global_batch}", "global_batch")
        if self.seq_len < 1:
            raise OptionError(f"seq_len must be >= 1, got {self.seq_len}", "seq_len")
        if self.target_len < 0:
            raise OptionError(f"target_len must not be negative, got {self.target_len}", "target_len")
        if not 0 <= self.train_tokens < float("inf"):  # also refuses nan (every comparison with it is false)
            raise ScalestudyError(f"--train-tokens must be a finite number >= 0, got {self.train_tokens}")
        if self.tokens_per_step >= 2**63:  # token counts and ids are int64 in the engines and numpy
            raise ScalestudyError(f"global batch {self.global_batch} x {self.seq_len + self.target_len} tokens per "
                                  "sequence: more tokens per step than a 64-bit integer counts")

    @property
    def tokens_per_step(self) -> int:
        """Tokens per optimizer step, counting encoder input and decoder target tokens."""
        return self.global_batch * (self.seq_len + self.target_len)


@dataclass(frozen=True)
class Layout:
    """The degrees a Strategy takes on a given world size."""

    world_size: int
    dp: int
    tp: int
    pp: int
    grad_accum: int
    cp: int = 1  # context-parallel ranks sharing each sequence (Strategy.cp); world = tp x cp x pp x dp


def resolve_layout(strategy: Strategy, world_size: int, global_batch: int, *, gpus_per_node: int = 0,
                   num_heads: int = 0, num_layers: int = 0, tp_across_nodes: bool = False) -> Layout:
    """Check the degrees divide and return dp and gradient accumulation; raise ScalestudyError otherwise (OptionError
    naming tp, pp, micro_batch, global_batch by their keys: a command renames them to the flags its user typed).

    With `gpus_per_node`, tp divides it (the group inside one node); with `tp_across_nodes` (the cost model, which
    prices such a group's collectives over the NICs) tp may also be a multiple of it: the group fills tp / G whole
    nodes. `train` and `plan` keep tensor parallelism inside a node."""
    if world_size < 1:
        raise ScalestudyError(f"world size must be >= 1, got {world_size}")
    model_par = strategy.tp * strategy.pp * strategy.cp
    if world_size % model_par:
        named = ("tp", "cp", "pp") if strategy.cp > 1 else ("tp", "pp")  # cp only where set
        raise OptionError(f"world size {world_size} is not divisible by "
                          f"{' x '.join(f'{k} {getattr(strategy, k)}' for k in named)}", *named)
    if gpus_per_node and strategy.tp > gpus_per_node and not tp_across_nodes:
        raise OptionError(f"tp {strategy.tp} exceeds {gpus_per_node} devices per node (tensor parallelism stays "
                          "inside a node)", "tp")
    if gpus_per_node and strategy.tp > gpus_per_node and strategy.tp % gpus_per_node:
        raise OptionError(f"tp {strategy.tp} is not a multiple of {gpus_per_node} devices per node (a tensor-parallel "
                          "group spanning nodes fills whole nodes)", "tp")
    if gpus_per_node and strategy.tp <= gpus_per_node and gpus_per_node % strategy.tp:
        raise OptionError(f"tp {strategy.tp} does not divide {gpus_per_node} devices per node", "tp")
    if num_heads and num_heads % strategy.tp:
        raise OptionError(f"{num_heads} attention heads are not divisible by tp {strategy.tp}", "tp")
    if num_layers:
        strategy.stage_split(num_layers)  # raises when the layers cannot be spread over the stages
    dp = world_size // model_par
    per_step = strategy.micro_batch * dp
    if global_batch % per_step:
        raise OptionError(f"global_batch {global_batch} is not divisible by micro_batch {strategy.micro_batch} x dp "
                          f"{dp}", "global_batch", "micro_batch")
    return Layout(world_size=world_size, dp=dp, tp=strategy.tp, pp=strategy.pp, grad_accum=global_batch // per_step,
                  cp=strategy.cp)
