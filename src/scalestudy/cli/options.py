"""Options shared by `estimate` and `plan`/`tune`: stage layers and speeds, the cluster of the flags, the per-stage
lines of a mixed-cluster estimate. Both command modules import this one (never each other)."""

from __future__ import annotations

import sys
from typing import Optional

import typer

from scalestudy.errors import ScalestudyError
from scalestudy.yamlfile import int_from_text, number_from_text

GIB = 1024**3

# Execution options `estimate` and `plan` share (one definition, the same flags and help in both commands).
SEQUENCE_PARALLEL = typer.Option(True, "--sequence-parallel/--no-sequence-parallel",
                                 help="Megatron sequence parallelism when tp > 1.")
OVERLAP_GRAD_COMM = typer.Option(True, "--overlap-grad-comm/--no-overlap-grad-comm",
                                 help="Gradient reduction overlaps the backward pass (engine deepspeed with pp > 1 "
                                      "always reduces after the pipeline, as its PipelineEngine does).")
OVERLAP_PARAM_GATHER = typer.Option(None, "--overlap-param-gather/--no-overlap-param-gather",
                                    help="ZeRO-1/2 post-step parameter all-gather overlapped with the next forward, "
                                         "bucket by bucket (Megatron-Core; cost model only). Default: the engine's "
                                         "-- on for megatron --zero 1/2 with --overlap-grad-comm (Megatron-Bridge / "
                                         "NeMo), off otherwise.")
ZERO1_ALL_REDUCE = typer.Option(None, "--zero1-all-reduce/--no-zero1-all-reduce",
                                help="DeepSpeed ZeRO-1 all-reduces the gradients instead of reduce-scattering them "
                                     "(cost model only). Default: on for --engine deepspeed --zero 1, what DeepSpeed "
                                     "runs (0.4.4-0.12: contiguous_gradients forced off at stage 1; later: one "
                                     "all_reduce per bucket, use_multi_rank_bucket_allreduce).")
KERNELS = typer.Option("engine", "--kernels",
                       help="Element-wise kernels: engine (estimate's default: eager for a Hugging Face T5/mT5 "
                            "or GPT-2-style model (FFN gelu_new / gelu_fast) on deepspeed / ddp / fsdp without "
                            "tp/pp and for a Llama-family model on deepspeed without tp/pp; eager-fused-norm for "
                            "one on deepspeed with tp/pp (Megatron-DeepSpeed); fused otherwise) | fused "
                            "(Megatron/TE/torch.compile) | eager (one PyTorch kernel per op, no torch.compile: HF "
                            "models, torchtitan) | eager-fused-norm (eager with a fused RMSNorm).")
GRAD_REDUCE = typer.Option("engine", "--grad-reduce",
                           help="Dtype data-parallel gradients are reduced in: engine (the engine's own: FSDP fp32, "
                                "DeepSpeed the compute dtype, Megatron fp32 under bf16) | fp32 | compute (e.g. FSDP "
                                "reduce_dtype bf16, NeMo grad_sync_dtype bf16); cost model only.")
RECOMPUTE_EARLY_STOP = typer.Option("engine", "--recompute-early-stop",
                                    help="Under --recompute full, stop the re-run before each block's FFN output "
                                         "projection: engine (on for fsdp: PyTorch >= 2.1 non-reentrant checkpoint; "
                                         "off for Megatron / DeepSpeed's reentrant ones) | on | off. train runs on "
                                         "(plan prices its candidates so); off is cost model only.")
PLAN_RECOMPUTE_EARLY_STOP = typer.Option("train", "--recompute-early-stop",
                                         help="Under --recompute full, stop the re-run before each block's FFN "
                                              "output projection: train (what `train` runs: on for deepspeed, fsdp, "
                                              "ddp; the engine's own for megatron / internlm) | engine (the published "
                                              "software's: on for fsdp, off for Megatron / DeepSpeed) | on | off "
                                              "(engine / off: a what-if, priced as given).")
CROSS_ENTROPY = typer.Option("engine", "--cross-entropy",
                             help="Loss kernel over the logits (memory and its passes' time): engine (fp32 copies: "
                                  "torch, Megatron-LM before 2024-06) | inplace (Megatron-Core's in-place fp32 "
                                  "softmax) | fused (flash-attn CrossEntropyLoss) | fused-metrics (fused + Composer's two "
                                  "training-metric cross-entropies per micro-batch: llm-foundry MPT) | fused-linear "
                                  "(Liger: no logits) | hf (transformers models' own CrossEntropyLoss: GPT-2's 4.x "
                                  "shifted copy; fp32 under ddp autocast, 16-bit under DeepSpeed; engine's meaning "
                                  "for a HF T5 on deepspeed/ddp/fsdp) | torch (F.cross_entropy on logits.float(): "
                                  "torchtitan, transformers >= 4.46 causal models; engine's meaning for a HF "
                                  "GPT-2-style model there and a Llama-family one on deepspeed without tp/pp) | "
                                  "torch-16bit (F.cross_entropy on the bf16 / fp16 logits, no upcast, the logits "
                                  "kept through the backward: KempnerForge; not on ddp, not in fp32) | "
                                  "torch-compiled (torch on logits.float() under torch.compile: torchtitan since "
                                  "2025-04 with training.compile; the 16-bit logits saved, no fp32 copy).")
ATTENTION_KERNEL = typer.Option("engine", "--attention-kernel",
                                help="Fused attention kernel under --attention flash: engine (engines.yaml: SDPA's "
                                     "FlashAttention-2 for ddp/fsdp/deepspeed, cuDNN for megatron; SDPA's "
                                     "memory-efficient kernel for a HF T5, whose position bias is a float mask) | "
                                     "fa1 (FlashAttention-1, flash-attn < 2.0) | fa2 | fa3 (FlashAttention-3, "
                                     "Hopper) | cudnn | mem-efficient | triton (flash-attn < 2.0's Triton kernel: "
                                     "FA2's rate, head dim padded to a power of two); under --attention eager "
                                     "on deepspeed/megatron/ddp: torch-softmax (Megatron's fused softmax skipped, "
                                     "PyTorch's fp32 softmax ran); hf-fp32-softmax (--attention eager, fp16: Hugging "
                                     "Face OPT's mask add, clamp, fp32 softmax and cast back); cost model only.")
OPTIMIZER_DTYPE = typer.Option("engine", "--optimizer-dtype",
                               help="Optimizer state dtype of engine megatron / fsdp: engine (fp32 master weights "
                                    "and Adam moments) | bf16 (megatron: NeMo distributed_fused_adam dtype bf16, 6 "
                                    "bytes per parameter / dp; fsdp: a bf16 model without mixed precision, torchtune "
                                    "dtype bf16, 8 bytes per parameter / dp); cost model only.")
OPTIMIZER_LOOP = typer.Option("engine", "--optimizer-loop",
                              help="Optimizer kernel launches: engine (a fused update: apex / DeepSpeed FusedAdam, "
                                   "torch fused AdamW) | foreach (torch AdamW's GPU default: 80 B per parameter, "
                                   "what train runs) | deepspeed-unfused (DeepSpeed ZeRO-0 16-bit "
                                   "FP16_UnfusedOptimizer: 13 kernels + 1 host sync per tensor) | deepspeed-bf16 "
                                   "(DeepSpeed bf16 pipeline ZeRO-0 BF16_Optimizer: a norm per tensor, the step on "
                                   "the 1/dp fp32 partition) | per-tensor "
                                   "(Python loop, a kernel per op per tensor: torch AdamW "
                                   "foreach=False, transformers AdamW) | per-tensor-rms (nanoT5 AdamWScale, 2 host "
                                   "syncs per tensor) | per-tensor-fp16 (2019 FP16_Optimizer: Megatron-LM 2019, "
                                   "early apex; 9 kernels + 2 host syncs per tensor) | per-tensor-hf (HF Trainer on "
                                   "torch 1.x: "
                                   "AdamW + clip + zero_grad, 10 kernels per tensor) | deepspeed-serial "
                                   "(DeepSpeed ZeRO-1/2 before v0.13.2: overflow sum + norm .item() per gradient "
                                   "tensor of the rank's partition, 4 kernels + 2 host syncs) | "
                                   "deepspeed-stage1-whole (DeepSpeed 0.3 ZeRO-1, stage1.py: the same checks over "
                                   "every tensor of the model, --zero 1) | fused (fsdp / "
                                   "ddp: torch AdamW fused=True -- the engine's update on a GPU, torch's fused CPU "
                                   "kernel for an FSDP CPU-offloaded step instead of the single-tensor loop) | "
                                   "cpu-adam (fsdp with --offload-optimizer cpu: DeepSpeed's CPU-Adam steps the "
                                   "host shards, fairseq's --optimizer cpu_adam).")


def _plan_default_train(option, what: str):
    """`plan`'s copy of an estimate software option whose default is "train": each candidate priced with what
    `train` runs (plan/space.TRAIN_KNOBS); a value named -- "engine" too, a published run's -- priced as given."""
    return typer.Option("train", *option.param_decls, help=f"train (default: what `train` runs, {what}) | "
                                                           + option.help.split(": ", 1)[1])


PLAN_KERNELS = _plan_default_train(KERNELS, "eager Hugging Face models")
PLAN_CROSS_ENTROPY = _plan_default_train(CROSS_ENTROPY, "the model's own loss: hf for a T5 without tp/pp, else torch")
PLAN_OPTIMIZER_LOOP = _plan_default_train(OPTIMIZER_LOOP, "torch AdamW's foreach step; deepspeed-unfused on DeepSpeed "
                                                          "ZeRO-0 in 16 bits, deepspeed-bf16 on its bf16 pipelines")
LM_HEAD = typer.Option("engine", "--lm-head",
                       help="The vocabulary under tensor parallelism (embedding, LM head GEMMs, logits, "
                            "cross-entropy): engine (sharded on every engine) | sharded (vocabulary-parallel: "
                            "Megatron-LM / NeMo / Megatron-DeepSpeed, torchtitan loss_parallel) | replicated (all V on "
                            "every tp rank: scalestudy's train) | gathered (embedding whole, head GEMM split V/tp, "
                            "logits all-gathered for a loss over all V on every tp rank: KempnerForge; the "
                            "all-gather itself not priced); no effect at tp 1; cost model only.")
PLAN_LM_HEAD = _plan_default_train(LM_HEAD, "replicated")
GRAD_ACCUM_DTYPE = typer.Option("engine", "--grad-accum-dtype",
                                help="DeepSpeed's gradient accumulation dtype (data_types.grad_accum_dtype; engine "
                                     "deepspeed, bf16 only): engine (DeepSpeed's default: fp32 without ZeRO, bf16 "
                                     "with it) | fp32 (BF16_Optimizer's fp32 accumulator at ZeRO 0/1, 4 B per "
                                     "parameter) | compute "
                                     "(bf16: no fp32 accumulator, what scalestudy's train sets); cost model only.")
PLAN_GRAD_ACCUM_DTYPE = _plan_default_train(GRAD_ACCUM_DTYPE, "compute on deepspeed")
GRAD_BUCKETS = typer.Option("engine", "--grad-buckets",
                            help="How PyTorch DDP holds its gradient buckets (gradient_as_bucket_view; engine ddp): "
                                 "engine (copy, torch's default and the published runs') | copy (the buckets, 4 B per "
                                 "parameter, beside the gradients) | view (the gradients are views into the buckets: "
                                 "no copy when one micro-batch makes the step; what scalestudy's train sets); cost "
                                 "model only.")
PLAN_GRAD_BUCKETS = _plan_default_train(GRAD_BUCKETS, "view on ddp without tp/pp")
PIPELINE_SCATTER_GATHER = typer.Option(
    "engine", "--pipeline-scatter-gather",
    help="How a pipeline stage boundary replicated over the tp ranks (tp > 1, no sequence parallelism) is sent: "
         "engine (the engine's: megatron / deepspeed split it) | on (1/tp per rank, all-gathered on the receiving "
         "stage: Megatron-LM since April 2021, DeepSpeed's pipeline) | off (the whole tensor from every tp rank: "
         "Megatron-LM main before April 2021); cost model only.")
ZERO3_FETCH = typer.Option("engine", "--zero3-fetch",
                           help="How DeepSpeed ZeRO-3 gathers its parameters (engine deepspeed, zero 3): engine "
                                "(coalesced, the current DeepSpeed) | coalesced (>= 0.6: one flat all-gather per "
                                "module, prefetched) | per-param-sync (before 0.5.5: one list all-gather per "
                                "parameter after a device synchronize, in series with the compute); cost model only.")
CUBLAS = typer.Option("11", "--cublas",
                      help="The cuBLAS major version of the run's torch build: 11 (CUDA >= 11: unaligned fp16 "
                           "GEMMs keep Tensor Cores at a narrower load) | 10 (CUDA 10.x and older: a GEMM with a "
                           "dimension off the 8-element grid runs on the CUDA cores, at the fp32 peak); cost model "
                           "only.")
NORM_DTYPE = typer.Option("engine", "--norm-dtype",
                          help="The dtype a GPT block's LayerNorms run in under eager kernels: engine (compute) | "
                               "compute (the 16-bit activations: a bf16 / fp16 module without autocast, or a "
                               "low-precision LayerNorm) | fp32 (torch.autocast over 16-bit weights, e.g. Composer "
                               "amp_bf16 under FSDP mixed precision: the input cast up, the norm in fp32 and the next "
                               "linear's cast back, each its own kernel); cost model only.")
TF32 = typer.Option(False, "--tf32/--no-tf32",
                    help="Precision fp32: the matmuls run on TF32 Tensor Cores, priced at the device's TF32 peak "
                         "(A100 156, H100/H200 494 TFLOP/s dense; element-wise work stays fp32; no effect on a "
                         "V100, which has no TF32, nor in bf16/fp16). Default off: what scalestudy's train gets "
                         "(torch >= 1.12 defaults allow_tf32 to False and train does not set it); on for torch "
                         "1.7-1.11, allow_tf32=True, or NVIDIA's NGC PyTorch containers "
                         "(TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1). Cost model only.")
FP8_PARAMS = typer.Option(False, "--fp8-params/--no-fp8-params",
                          help="Precision fp8 under engine megatron: NeMo / Megatron-Core fp8_params, Transformer "
                               "Engine FP8 model parameters -- the blocks' linear weights held as FP8 (1 B, the "
                               "optimizer's fp32 master unchanged, no bf16 copy) and all-gathered by the distributed "
                               "optimizer in 1 byte. Cost model only.")
DISTRIBUTE_SAVED_ACTIVATIONS = typer.Option(
    False, "--distribute-saved-activations/--no-distribute-saved-activations",
    help="Recompute full at tp > 1 without sequence parallelism: each checkpointed block input kept split over the "
         "tensor-parallel ranks (1/tp per rank) and all-gathered before the block is recomputed -- Megatron-LM "
         "--distribute-saved-activations, metaseq --distribute-checkpointed-activations (OPT-175B), DeepSpeed "
         "partition_activations. Cost model only.")
GRADIENT_SYNC = typer.Option("engine", "--gradient-sync",
                             help="When FSDP2 reduce-scatters a step's gradients (engine fsdp): engine (every) | "
                                  "every (each micro-batch's backward: FSDP2's default, torchtitan, what scalestudy's "
                                  "train runs) | last (set_requires_gradient_sync(False) on all but the last "
                                  "micro-batch: one reduce-scatter per step, the unsharded gradients in the reduce dtype "
                                  "held on every rank between micro-batches -- KempnerForge, torch pipelining's FSDP2 "
                                  "stages); no effect without accumulation; cost model only.")
OPTIMIZER_KIND = typer.Option("adamw", "--optimizer-kind",
                              help="The optimizer the run steps: adamw (two fp32 moments per parameter: every "
                                   "engine's, what scalestudy's train runs) | sgd (torch.optim.SGD without momentum, "
                                   "with weight decay: no optimizer state) | sgd-momentum (one momentum buffer). Sets "
                                   "the optimizer states in memory and the update's bytes; --optimizer-loop says how it "
                                   "launches (per-tensor = foreach=False); cost model only.")
TP_COMM_OVERLAP = typer.Option(None, "--tp-comm-overlap/--no-tp-comm-overlap",
                               help="TP all-gather/reduce-scatter overlapped with the linear GEMMs (engine "
                                    "megatron: Transformer Engine userbuffers; fsdp/ddp: PyTorch async TP, torchtitan "
                                    "enable_async_tensor_parallel; needs sequence parallelism and --tp within a node; "
                                    "cost model only). Unset: the engine's default -- on for --engine megatron "
                                    "--zero 1 with sequence parallelism at tp > 1 and --overlap-grad-comm (NVIDIA's "
                                    "Megatron-Core recipes), off otherwise.")

# The software a run states, one flag each, in the order --help lists them: declared once for `estimate` and `plan`
# (software_options), so that an option added here reaches both commands. plan's defaults are what `train` runs.
SOFTWARE_OPTIONS = {"sequence_parallel": (bool, SEQUENCE_PARALLEL), "overlap_grad_comm": (bool, OVERLAP_GRAD_COMM),
                    "overlap_param_gather": (Optional[bool], OVERLAP_PARAM_GATHER),
                    "tp_comm_overlap": (Optional[bool], TP_COMM_OVERLAP),
                    "zero1_all_reduce": (Optional[bool], ZERO1_ALL_REDUCE), "kernels": (str, KERNELS),
                    "grad_reduce": (str, GRAD_REDUCE), "recompute_early_stop": (str, RECOMPUTE_EARLY_STOP),
                    "cross_entropy": (str, CROSS_ENTROPY), "attention_kernel": (str, ATTENTION_KERNEL),
                    "optimizer_dtype": (str, OPTIMIZER_DTYPE), "optimizer_loop": (str, OPTIMIZER_LOOP),
                    "optimizer_kind": (str, OPTIMIZER_KIND),
                    "lm_head": (str, LM_HEAD), "grad_accum_dtype": (str, GRAD_ACCUM_DTYPE),
                    "grad_buckets": (str, GRAD_BUCKETS), "zero3_fetch": (str, ZERO3_FETCH), "cublas": (str, CUBLAS),
                    "tf32": (bool, TF32), "norm_dtype": (str, NORM_DTYPE),
                    "pipeline_scatter_gather": (str, PIPELINE_SCATTER_GATHER),
                    "gradient_sync": (str, GRADIENT_SYNC), "fp8_params": (bool, FP8_PARAMS),
                    "distribute_saved_activations": (bool, DISTRIBUTE_SAVED_ACTIVATIONS)}
PLAN_SOFTWARE_OPTIONS = {**SOFTWARE_OPTIONS, "kernels": (str, PLAN_KERNELS),
                         "recompute_early_stop": (str, PLAN_RECOMPUTE_EARLY_STOP),
                         "cross_entropy": (str, PLAN_CROSS_ENTROPY), "optimizer_loop": (str, PLAN_OPTIMIZER_LOOP),
                         "lm_head": (str, PLAN_LM_HEAD), "grad_accum_dtype": (str, PLAN_GRAD_ACCUM_DTYPE),
                         "grad_buckets": (str, PLAN_GRAD_BUCKETS)}


def software_options(options: dict):
    """Decorator of a command with a `software` parameter: typer sees one option per entry of `options` (name:
    (type, typer.Option)) in its place; the command receives their values as the one dict `software`."""
    import functools
    import inspect

    def decorate(command):
        signature = inspect.signature(command)
        params = []
        for param in signature.parameters.values():
            if param.name == "software":
                params += [inspect.Parameter(name, param.kind, default=option, annotation=kind)
                           for name, (kind, option) in options.items()]
            else:
                params.append(param)

        @functools.wraps(command)
        def run(**given):
            software = {name: given.pop(name) for name in options}
            return command(**given, software=software)
        run.__signature__ = signature.replace(parameters=params)
        return run
    return decorate


def flag_named_errors(reads_keys: bool = False):
    """Decorator of a command whose user types flags: an error naming options by their field names (OptionError:
    the YAML keys, e.g. optimizer_loop) names the command's flags instead (--optimizer-loop), which a newcomer can
    find in --help. `reads_keys`: the command also takes the keys (train's --config and --set KEY=VALUE), so only
    flags typed on the command line are named so; an option with a flag that was not typed keeps its key, its flag
    after it ('virtual_stages (--virtual-stages)'), as either may be where its value came from."""
    import functools
    import inspect

    from scalestudy.errors import OptionError

    def decorate(command):
        flags = _command_flags(command)

        @functools.wraps(command)  # typer reads the signature and help of the command itself (__wrapped__)
        def run(**given):
            try:
                return command(**given)
            except OptionError as exc:
                names = {}
                for option in exc.options:
                    param, flag = flags.get(option, (None, None))
                    if flag is None:  # no flag for it here: a key only (train's --set optimizer_loop=...)
                        continue
                    default = inspect.signature(command).parameters[param].default.default
                    if not reads_keys or given.get(param, default) != default:  # typed (train's flags default None)
                        names[option] = flag
                    elif "_" in option:  # pp, zero: the key is the flag but for its dashes
                        names[option] = f"{option} ({flag})"
                if not names:
                    raise
                raise OptionError(exc.renamed(names), *exc.options) from None
        return run
    return decorate


def _command_flags(command) -> dict[str, tuple[str, str]]:
    """{option: (parameter, long flag)} of a typer command, under the parameter's name and the name its flag spells
    (plan's `offload` is --offload-optimizer, so offload_optimizer too); a boolean flag by its positive form."""
    import inspect

    flags = {}
    for name, param in inspect.signature(command).parameters.items():
        decls = getattr(param.default, "param_decls", None)
        if decls is None:  # not a typer option
            continue
        longs = [part for decl in decls for part in decl.split("/") if part.startswith("--")]
        flag = longs[0] if longs else "--" + name.replace("_", "-")
        flags[name] = (name, flag)
        flags.setdefault(flag[2:].replace("-", "_"), (name, flag))
    return flags


def parse_stage_layers(text: Optional[str]) -> tuple[int, ...]:
    """--stage-layers 13,11,11,13 -> (13, 11, 11, 13); one-line error otherwise (an empty value or entry too)."""
    if text is None:
        return ()
    try:
        return tuple(int_from_text(x) for x in text.split(","))
    except ValueError:
        raise ScalestudyError(f"--stage-layers takes layer counts separated by commas, got {text!r}") from None


def parse_speeds(text: Optional[str]) -> tuple[float, ...]:
    """--stage-speeds 2,1 -> (2.0, 1.0): measured relative speed of each pipeline stage's ranks."""
    if text is None:
        return ()
    try:
        speeds = tuple(number_from_text(x) for x in text.split(","))
    except ValueError:
        raise ScalestudyError(f"--stage-speeds takes comma-separated numbers (e.g. 2,1), got {text!r}") from None
    if any(not 0 < v < float("inf") for v in speeds):
        raise ScalestudyError(f"--stage-speeds must be positive numbers, got {text!r}")
    if len(speeds) < 2:  # relative to the fastest stage: one stage is its own reference, and nothing would change
        raise ScalestudyError(f"--stage-speeds gives each pipeline stage's speed relative to the others (two or more, "
                              f"e.g. 2,1), got {text!r}")
    if max(speeds) / min(speeds) > 1e12:  # stage times leave floating point: estimate / plan's split raised TypeError
        raise ScalestudyError(f"--stage-speeds {text}: speeds more than 1e12x apart are not measured relative speeds")
    return speeds


def check_target_len(spec, target_len: Optional[int]) -> None:
    """--target-len of a decoder-only model would be dropped (its decoder length is 0, resolve_target_len): refused."""
    if target_len is not None and target_len > 0 and not spec.is_encoder_decoder:  # < 0: resolve_target_len says
        raise ScalestudyError(f"--target-len is the decoder length of an encoder-decoder model; {spec.name} is "
                              f"decoder-only (its sequence is --seq-len): drop --target-len")


def cli_cluster(gpu: str, nodes: int, gpus_per_node: int, cluster_file: Optional[str],
                stage_speeds: tuple[float, ...] = ()):
    """The cluster of --gpu/--nodes/--gpus-per-node or --cluster (a `local-cpu` device, in any group, replaced by
    this machine's measured profile), with --stage-speeds applied."""
    from dataclasses import replace

    from scalestudy.costmodel.cpu_profile import measured_cluster
    from scalestudy.specs.hardware import ClusterSpec, make_cluster, with_stage_speeds
    from scalestudy.wrapped import say

    def log(msg):
        say(msg, sys.stderr)  # wrapped at spaces on a terminal (it cut the profile's notes mid-word)

    clus = make_cluster(gpu, nodes, gpus_per_node, cluster_file)
    if clus.groups:
        measured = {}
        for g in clus.groups:
            if id(g.device) not in measured:
                measured[id(g.device)] = measured_cluster(ClusterSpec(device=g.device), log=log).device
        groups = tuple(replace(g, device=measured[id(g.device)]) for g in clus.groups)
        clus = replace(clus, device=groups[0].device, groups=groups)
    else:
        clus = measured_cluster(clus, log=log)  # local-cpu: this machine, measured
    return with_stage_speeds(clus, stage_speeds)


def check_tp_comm_overlap(overlap: Optional[bool], tps: tuple[int, ...], cluster) -> None:
    """An explicit --tp-comm-overlap with a tensor-parallel group spanning nodes is refused: the cost model prices no
    overlap there (terms._tp_comm: Transformer Engine's userbuffers need the group inside one NVLink domain,
    PyTorch's async TP its symmetric memory), so the figure would silently not be what was asked for."""
    spanning = [tp for tp in tps if tp > cluster.gpus_per_node]
    if overlap and spanning:
        tp = spanning[0]
        raise ScalestudyError(f"--tp-comm-overlap overlaps tensor-parallel collectives inside one node (Transformer "
                              f"Engine userbuffers, PyTorch async TP's symmetric memory): --tp {tp} spans "
                              f"{-(-tp // cluster.gpus_per_node)} nodes of {cluster.gpus_per_node} devices, where no "
                              f"run overlaps them -- drop --tp-comm-overlap or keep --tp within a node")


# The kernels --attention-kernel names for --attention flash (the others, torch-softmax and hf-fp32-softmax,
# describe eager attention; Strategy checks those)
FLASH_KERNELS = ("fa1", "fa2", "fa3", "cudnn", "mem-efficient", "triton")


def check_attention_kernel_runs(attention: str, kernel: str, cluster) -> None:
    """--attention-kernel as typed to estimate or plan: a fused kernel under --attention eager (which runs none: the
    cost model reads the kernel under flash only) is refused rather than ignored; one named for a device that cannot
    run it (a V100: no FlashAttention family) in the cost model's own line (terms.attention_kernel), before a plan's
    search rather than as every candidate rejected."""
    if attention != "flash":
        if kernel in FLASH_KERNELS:
            raise ScalestudyError(f"--attention-kernel {kernel} is a fused kernel of --attention flash; --attention "
                                  f"{attention} runs none (set --attention flash, or leave --attention-kernel at "
                                  f"engine)")
        return
    from scalestudy.costmodel.terms import attention_kernel
    from scalestudy.specs.strategy import Strategy

    for g in cluster.rank_groups():
        if kernel in g.device.attention_kernel_fallback:
            attention_kernel(Strategy(engine="ddp", attention="flash", attention_kernel=kernel), g.device)


def print_stages(est, console=None) -> None:
    """Per pipeline stage of a mixed-cluster estimate: layers, device, time, memory; the slowest marked."""
    if not est.stages:
        return
    from rich.markup import escape

    out = console.print if console else print
    text = escape if console else str  # device names are data: "[" is text, not markup
    slowest = max(est.stages, key=lambda x: x.slot_s)
    for x in est.stages:
        mark = "  <- slowest" if x is slowest else ""
        out(f"  stage {x.index}: {x.layers} layers on ranks {x.ranks[0]}-{x.ranks[1] - 1} "
            f"({text('+'.join(x.devices))}){mark}\n    {x.slot_s * 1e3:.4g} ms per micro-batch, tail "
            f"{x.tail_s * 1e3:.4g} ms per step, {x.memory.total / GIB:.1f} of {x.capacity_bytes / GIB:.1f} GiB"
            f"{'' if x.fits else ' (DOES NOT FIT)'}", **({"highlight": False} if console else {}))


# Resident memory of a CPU rank before its model: a worker's `import torch` (+ torch.distributed) measured 218 MB
# (torch 2.x CPU build, this repository's venv); the model, data and optimizer come on top.
RANK_FLOOR_BYTES = 2.2e8


def check_cpu_ranks(nproc: int) -> None:
    """--nproc ranks on this machine's CPU are processes that must all start: each holds torch's runtime, and gloo
    connects every pair of ranks (one socket per peer in each rank). Refused here, in one line, beyond either bound
    (ranks beyond the cores still run: they time-share)."""
    import resource

    memory = machine_memory_bytes()
    if memory and nproc * RANK_FLOOR_BYTES > memory:
        raise ScalestudyError(f"--nproc {nproc}: {nproc} CPU ranks need >= {nproc * RANK_FLOOR_BYTES / 2**30:.0f} GiB "
                              f"before the model (~{RANK_FLOOR_BYTES / 2**30:.1f} GiB of torch runtime each); this "
                              f"machine has {memory / 2**30:.0f} GiB of RAM")
    files, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if files != resource.RLIM_INFINITY and nproc + 64 > files:  # + the rank's own files, libraries, pipes
        raise ScalestudyError(f"--nproc {nproc}: gloo opens a socket to each of the {nproc - 1} peers in every rank, "
                              f"beyond the open-file limit of {files} (ulimit -n)")


def check_batch_fits_ram(nproc: int, micro_batch: int, tokens_per_sequence: int) -> None:
    """Every rank here builds its micro-batch's token ids (int64, encoder + decoder lengths) in this machine's RAM
    before anything else: a micro-batch whose ids alone exceed the RAM is refused now, not as a MemoryError inside
    the ranks after the data is prepared."""
    memory = machine_memory_bytes()
    ids = nproc * micro_batch * tokens_per_sequence * 8
    if memory and ids > memory:
        raise ScalestudyError(f"--micro-batch {micro_batch} x {tokens_per_sequence} tokens on {nproc} rank(s): the "
                              f"token ids alone take {ids / 2**30:,.0f} GiB (int64), beyond this machine's "
                              f"{memory / 2**30:.0f} GiB of RAM")


def machine_memory_bytes() -> int | None:
    """Physical RAM of this machine (bytes), shared by a CPU run's ranks."""
    import os

    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None
