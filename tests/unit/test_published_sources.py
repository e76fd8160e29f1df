"""Provenance of the published sources added for issue 11 (Megatron-LM H100 README, torchtitan A100 / H100): every
row is the configuration its source states, converted as its source string says, and held out of the fit."""

import math
import re
from dataclasses import fields

import pytest

from scalestudy.costmodel.constants import stored
from scalestudy.costmodel.estimate import estimate
from scalestudy.costmodel.published import _setup, load, memory_row, throughput_row
from scalestudy.errors import ScalestudyError
from scalestudy.specs.hardware import get_device
from scalestudy.specs.strategy import Strategy

HELD_OUT = ("megatron2024", "torchtitan2024", "torchtitan2024h100", "nemo2022jun", "bigscience2022prequel", "ibmfms2024",
            "internlm2023", "tinyllama2023", "dgxc2024", "mosaicml2023ext", "mosaicml2024scale", "olmocore2024",
            "bigscience2022rampup", "bigscience2022reshape", "megatron2024strong", "nemo2022early",
            "nemo2022may", "deepspeed2022azure", "dgxc2025", "mlengineering2026h200", "dgxc2025apr",
            "torchtitan2025asynctp")

# Megatron-LM README images/model_table.png (commit f2e5db40): model size label -> per-GPU model TFLOP/s, MFU
MEGATRON = {"1.7b": (408.8, 0.41), "7.1b": (465.9, 0.47), "16b": (489.1, 0.49), "32b": (459.6, 0.46),
            "70b": (419.7, 0.42), "119b": (420.5, 0.43), "177b": (432.8, 0.44), "314b": (474.4, 0.48),
            "462b": (459.9, 0.47)}
# torchtitan: tokens/s per GPU as the tables state (docs/performance.md @ 1ea476e9; benchmarks/llama3_h100_202412)
TORCHTITAN_TPS = {"tt-llama2-13b-a100-64": 2162, "tt-llama2-70b-a100-64": 353, "tt-llama3-70b-a100-64": 331,
                  "tt-llama3-8b-a100-64-sacop": 2973, "tt-llama2-13b-a100-64-sacop": 1904,
                  "tt-llama3-8b-h100-8-sacop": 5762, "tt-llama3-8b-h100-128-sacop": 5605,
                  "tt-llama3-8b-h100-8-sacop-compile": 6667, "tt-llama3-8b-h100-128-sacop-compile": 6514}
# torchtitan model sizes (billions of parameters, untied head) and measured peak reserved memory (GiB)
TORCHTITAN_SIZE = {"llama2-13b": 13.0, "llama2-70b": 69.0, "llama3-70b": 70.6, "llama3-8b": 8.0}
TORCHTITAN_GIB = {"tt-llama3-8b-h100-8-memory": 82.4, "tt-llama3-8b-h100-128-memory": 67.0,
                  "tt-llama3-8b-h100-8-compile-memory": 77.0, "tt-llama3-8b-h100-128-compile-memory": 62.0}
# BigScience chronicles-prequel.md 'Rebalancing layers' (2022-02-28): (hidden, layers, tp, pp, mbs, heads) -> (GB, s/it)
PREQUEL = {(14336, 70, 8, 12, 2, 64): (40, 121.63), (14336, 70, 4, 12, 2, 64): (59, 102.03),
           (14336, 70, 4, 12, 2, 112): (59, 104.50), (14336, 70, 4, 12, 4, 64): (73, 102.27),
           (13312, 82, 8, 12, 4, 64): (52, 111.79), (13312, 82, 4, 12, 2, 64): (63, 104.45),
           (13312, 82, 4, 12, 4, 64): (74, 104.82), (12288, 100, 8, 6, 2, 64): (61, 139.72),
           (12288, 100, 8, 6, 4, 64): (72, 120.96), (12288, 106, 4, 12, 2, 64): (67, 116.54)}
# IBM fms-fsdp README at ea662fe: tokens/s per GPU on 128 A100 / 96 H100, Llama 2 34B and 70B, FSDP, full AC
FMS = {"fms-llama2-34b-a100-128": 700, "fms-llama2-34b-h100-96": 1550, "fms-llama2-70b-a100-128": 370,
       "fms-llama2-70b-h100-96": 800}
# NeMo launcher README at d4317ddd (2022-07-14), 7.1.2: nodes -> tokens per second
NEMO_JUL = {"5b": {1: 39543, 2: 79128, 5: 195047, 9: 344523, 10: 383500, 18: 670254, 20: 731791},
            "175b": {16: 20642, 32: 38025, 128: 141306}}

# InternLM doc/en/train_performance.md at c18bec93, 'Throughput Measurement', zero1=-1 rows: tp -> {GPUs: TGS}
INTERNLM_TGS = {1: {8: 4062, 16: 3842, 32: 3752, 64: 3690, 128: 3571, 256: 3209, 512: 2861, 1024: 2271},
                2: {8: 3822, 16: 3595, 32: 3475, 64: 3438, 128: 3308, 256: 3094, 512: 2992, 1024: 2785}}

def _rows(kind: str, source: str | None = None) -> list[dict]:
    return [r for r in load()[kind] if r["source"] in HELD_OUT and (source is None or r["source"] == source)]


# ---- heldoutS (2026-12-02 third session): the small runs users do first -- plain PyTorch DDP + torch.compile on
# one node (nanoGPT in the PyTorch SDPA blog); bounds in HELDOUTS_BOUNDS
HELD_OUT = ("pytorch2023sdpa",) + HELD_OUT
# PyTorch blog 2023-04-18 (pytorch.github.io 0ebd6227): row suffix -> (~ms per batch, vocabulary, attention)
SDPA_BLOG = {"manual-attn": (143, 50257, "eager"), "flash": (113, 50257, "flash"),
             "flash-vocab50304": (87, 50304, "flash")}
HELDOUTS_BOUNDS = {  # (mean, max) |error| reached at arrival (stored constants) + ~30%: regression bounds, not targets
    # (reached 18.7 / 28.0%: the two vocabulary-50257 rows +28 / +22% -- the unaligned LM-head GEMM priced like the
    # aligned one -- and the 50304 row -5.8%; 9.0 / 14.4% since e414025 prices GEMM alignment, costmodel/alignment.py)
    "pytorch2023sdpa": (0.12, 0.19)}


def test_pytorch_sdpa_blog_rows_are_nanogpt_at_the_named_commits():
    """tokens/s = 8 GPUs x 12 x 1024 / per-batch time; GPT-2 124M (tied head, 4d GELU FFN) in bf16 autocast, DDP,
    torch.compile (fused element-wise kernels), no recompute; the flash rows differ only in the padded vocabulary
    (77e7e04c), the baseline only in the attention path; the post's 'x% faster' are the times' ratios."""
    rows = {r["id"].removeprefix("sdpa-nanogpt-124m-a100-8g-"): r for r in _rows("throughput", "pytorch2023sdpa")}
    assert set(rows) == set(SDPA_BLOG)
    for key, (ms, vocab, attention) in SDPA_BLOG.items():
        model, cluster, strategy, workload = _setup(rows[key])
        assert rows[key]["published"] == round(96 * 1024 / (ms / 1000)) and rows[key]["metric"] == "tokens_per_s"
        assert (model.num_layers, model.d_model, model.num_heads, model.d_ff, model.vocab_size) == \
            (12, 768, 12, 3072, vocab) and model.tie_word_embeddings
        assert (cluster.world_size, strategy.micro_batch, workload.global_batch, workload.seq_len) == (8, 12, 96, 1024)
        assert (strategy.engine, strategy.zero, strategy.precision, strategy.recompute, strategy.kernels) == \
            ("ddp", 0, "bf16", "none", "fused")
        assert strategy.attention == attention and get_device(rows[key]["device"]).memory_bytes > 80e9
        assert strategy.attention_kernel == ("fa1" if attention == "flash" else "engine")  # torch 2.0's FA1 port
    for faster, percent in (("flash", 26.54), ("flash-vocab50304", 64.37)):  # the post's figures, +-0.5 ms rounding
        assert 143 / SDPA_BLOG[faster][0] - 1 == pytest.approx(percent / 100, abs=0.001)


HELD_OUT = ("dsautotune2021hf",) + HELD_OUT
# DeepSpeedExamples autotuning/hf READMEs (f9dc4de2): (model, engine, micro-batch) -> samples/s on 16 V100; the READMEs'
# (layers, hidden, heads) per model
DSAT_SPS = {("gpt2", "deepspeed", 8): 397.827, ("gpt2-medium", "deepspeed", 4): 142.211,
            ("gpt2-medium", "deepspeed", 6): 163.3, ("gpt2-large", "deepspeed", 2): 56.797,
            ("gpt2-large", "deepspeed", 3): 69.061, ("gpt2-xl", "deepspeed", 1): 27.462,
            ("gpt2", "ddp", 8): 284.142, ("gpt2-medium", "ddp", 2): 71.61, ("gpt2-large", "ddp", 1): 27.874}
DSAT_SHAPE = {"gpt2": (12, 768, 12), "gpt2-medium": (24, 1024, 16), "gpt2-large": (36, 1280, 20),
              "gpt2-xl": (48, 1600, 25)}
HELDOUTS_BOUNDS["dsautotune2021hf"] = (0.40, 0.64)  # reached 90.7 / 110% (DeepSpeed ZeRO-1 +83..+108%, DDP +67..+110%);
# 30.3 / 49.2% once HF GPT-2's eager scores and gelu_new are counted per op (gpt2eager; stored constants)


def test_deepspeed_autotuning_hf_rows_are_the_readme_tables():
    """tokens/s = samples/s x run_clm's 1024-token blocks; 16 ranks on one V100 node, global batch = 16 x mbs (gas 1);
    HF GPT-2 (unpadded 50,257 vocabulary, tied, eager attention and element-wise kernels) in fp16: DeepSpeed's
    default ZeRO-1 (buckets all-reduced as they fill, not overlapped) or DDP under torch AMP with transformers'
    per-tensor AdamW, clip and zero_grad loops; every run fits."""
    rows = _rows("throughput", "dsautotune2021hf")
    seen = set()
    for r in rows:
        model_name = r["id"].removeprefix("dsat-hf-").split("-v100-")[0]
        model, cluster, strategy, workload = _setup(r)
        key = (model_name, strategy.engine, strategy.micro_batch)
        seen.add(key)
        assert r["published"] == round(DSAT_SPS[key] * 1024) and workload.seq_len == 1024
        assert (model.num_layers, model.d_model, model.num_heads) == DSAT_SHAPE[model_name]
        assert (model.vocab_size, model.tie_word_embeddings, model.d_ff) == (50257, True, 4 * model.d_model)
        assert (cluster.world_size, workload.global_batch) == (16, 16 * strategy.micro_batch)
        assert (strategy.precision, strategy.attention, strategy.kernels, strategy.recompute) == \
            ("fp16", "eager", "eager", "none")
        if strategy.engine == "deepspeed":
            assert strategy.zero == 1 and strategy.zero1_all_reduce and not strategy.overlap_grad_comm
        else:
            assert strategy.zero == 0 and strategy.overlap_grad_comm and strategy.optimizer_loop == "per-tensor-hf"
        assert estimate(model, cluster, strategy, workload).fits
    assert seen == set(DSAT_SPS)


def test_heldouts_sources_out_of_sample():
    data = load()
    for source, (mean_bound, max_bound) in HELDOUTS_BOUNDS.items():
        errs = [abs(throughput_row(r, data["sources"]).error) for r in _rows("throughput", source)]
        assert sum(errs) / len(errs) < mean_bound and max(errs) < max_bound, source


# ---- heldoutB (2026-12-02 second session): V100 DeepSpeed ZeRO-1 + Megatron TP/PP (BigScience tr1-13B), the
# Megatron-DeepSpeed 2023 rebase runs (V100 DGX-2, A100), encoder-decoders on one GPU (nanoT5) and at 8-512 A100 (T5X
# on GPU), FSDP + torch.compile (fms-fsdp); their bounds sit in HELDOUTB_BOUNDS (NEW_SOURCE_BOUNDS is heldoutA's)
HELD_OUT = ("ibmfms2024compile", "t5xgpu2023", "deepspeed2023rebase", "bigscience2021tr1", "nanot52023") + HELD_OUT
# tr1-13B chronicles / README: (nodes, global batch) -> seconds per iteration as quoted (4 nodes: '17-17.5 secs';
# 32 nodes: '784 samples in 32 seconds'; 64 nodes: median of the log lines 22.3066 / 23.4914 / 25.5934 s; 128 nodes:
# iteration 168000's 13248.2 ms)
TR1_STEP = {(4, 64): (17.0 + 17.5) / 2, (32, 784): 32.0, (64, 1024): sorted((22.3066, 23.4914, 25.5934))[1],
            (128, 1024): 13.2482}
TR1_BUSBW_GBIT = 55.8169 * 63 / 64  # n16_32gb_all_reduce_bench.txt: median 'algo throughput' x (n-1)/n, n = 64
# nanoT5 README 'Efficiency statistics' (8501daf6): BF16 rows, torch.compile -> (grad acc steps, ~seconds per step)
NANOT5_STEP = {False: (2, 1.30), True: (1, 0.56)}
# Megatron-DeepSpeed rebase README (b080750a / 7f7cea32 / c08e2cc2): row -> (TFLOPs per GPU, GPUs); the memory row
# 'older max allocated 15241 MB' (MiB); DGX-2's '660 Gbps measured' per node of 16 GPUs
REBASE_TFLOPS = {"ds-rebase-gpt13b-v100-128g": (55.6, 128), "ds-rebase-gpt1.3b-v100-16g": (23.11, 16),
                 "ds-rebase-gpt125m-a100-8g": (25.0, 8)}
REBASE_MIB = {"ds-rebase-gpt1.3b-v100-16g-memory": 15241}
# T5X GPU README (25b1c16f): size -> (GPUs, TP, BS/GPU, ~sequences/s); shapes of t5_1_1/*.gin: (d, layers, heads, mlp)
T5X = {"small": (8, 1, 256, 3168), "large": (64, 1, 32, 3886), "xl": (256, 1, 8, 3652), "xxl": (512, 8, 36, 1346)}
T5X_SHAPE = {"small": (512, 8, 6, 1024), "large": (1024, 24, 16, 2816), "xl": (2048, 24, 32, 5120),
             "xxl": (4096, 24, 64, 10240)}
# fms-fsdp README at ed74fd5d (compiled): (size, device) -> tokens/s/GPU; (MFU, HFU) per size on A100 and H100
FMS_COMPILE = {("34b", "a100-80gb"): 820, ("34b", "h100-80gb"): 1830, ("70b", "a100-80gb"): 410,
               ("70b", "h100-80gb"): 890}
FMS_MFU_HFU = {("34b", "a100-80gb"): (0.55, 0.74), ("34b", "h100-80gb"): (0.38, 0.49),
               ("70b", "a100-80gb"): (0.55, 0.74), ("70b", "h100-80gb"): (0.38, 0.47)}
HELDOUTB_BOUNDS = {  # (mean, max) |error| reached at 355a257 (stored constants) + ~30%: regression bounds, not
    # targets (reached: tr1 36.0 / 47.2%, nanoT5 67.9 / 113.5%, rebase 71.0 / 134.4%, T5X 44.1 / 125.7%, fms
    # compile 8.4 / 12.0%; the mechanisms: docs/costmodel-validation.md, heldoutB section; tr1 restated by dsz1
    # at 22.3 / 31.5% after 85ee71c's pipeline reduction and 9889761's Omni-Path rate; by v100 at 16.7 / 24.4%
    # with DeepSpeed ZeRO-1's gradient all-reduce, zero1_all_reduce; nanoT5 restated by smallhost at 3.1 / 4.9% after
    # gelu_new's fp32 chain under autocast and AdamWScale's per-tensor loop, optimizer_loop per-tensor-rms; bound
    # + ~4 points for the refit of kernel_overhead_s, which prices the loop)
    "bigscience2021tr1": (0.22, 0.32), "nanot52023": (0.08, 0.12), "deepspeed2023rebase": (0.92, 1.75),
    "t5xgpu2023": (0.58, 1.64), "ibmfms2024compile": (0.12, 0.16)}


def _t5_span_lengths(raw: int, noise_density: float = 0.15, mean_span: float = 3.0) -> tuple[int, int]:
    """T5's random_spans_helper (nanoT5 copied_utils.compute_input_and_target_lengths): (inputs, targets) tokens
    of `raw` tokens of text once the noise spans are replaced by sentinels, each side with its EOS."""
    noise = int(round(raw * noise_density))
    spans = int(round(noise / mean_span))
    return raw - noise + spans + 1, noise + spans + 1


def test_bigscience_tr1_v100_rows_are_the_chronicles_and_the_nccl_bench():
    """tokens/s = global batch x 2048 / s per iteration; TP 2 x PP 4 = 2 nodes of 4 V100 per replica, ZeRO-1, fp16,
    full recompute, micro-batch 1; the Omni-Path rate is BigScience's own NCCL bus bandwidth on these nodes: the node's
    egress over the 2 ports NCCL 2.7.8 maps its 4 GPUs to, shared by the 4 GPUs (comm.bus_time then prices that bench
    at the measured rate)."""
    rows = _rows("throughput", "bigscience2021tr1")
    assert {(r["nodes"], r["global_batch"]) for r in rows} == set(TR1_STEP)
    for r in rows:
        model, cluster, strategy, workload = _setup(r)
        assert r["published"] == round(workload.global_batch * 2048 / TR1_STEP[r["nodes"], workload.global_batch])
        assert (strategy.tp, strategy.pp, strategy.micro_batch, cluster.gpus_per_node) == (2, 4, 1, 4)
        assert (strategy.engine, strategy.zero, strategy.precision, strategy.recompute) == ("deepspeed", 1, "fp16",
                                                                                             "full")
        assert (model.num_layers, model.d_model, model.d_ff, model.vocab_size) == (40, 5120, 20480, 50432)
        assert model.vocab_size % (128 * strategy.tp) == 0 and model.vocab_size - 50257 < 128 * strategy.tp
        assert cluster.inter_node_bytes_per_s == pytest.approx(TR1_BUSBW_GBIT / 8 * 1e9 / 4, rel=2e-3)
    micro_batches = {r["nodes"]: r["global_batch"] // (r["nodes"] * 4 // 8) for r in rows}
    assert micro_batches == {4: 32, 32: 49, 64: 32, 128: 16}  # per replica per step (the chronicles' GAS)


def test_nanot5_rows_are_the_efficiency_table():
    """Encoder tokens/s = 128 x 512 / s; T5 span corruption of 568 raw tokens gives 512 inputs and 114 targets;
    micro-batch = 128 / grad acc; torch.compile = fused element-wise kernels, eager otherwise."""
    assert _t5_span_lengths(568) == (512, 114)
    rows = _rows("throughput", "nanot52023")
    assert len(rows) == len(NANOT5_STEP)
    for r in rows:
        compiled = r["id"].endswith("-compile")
        grad_acc, seconds = NANOT5_STEP[compiled]
        model, cluster, strategy, workload = _setup(r)
        assert r["published"] == round(128 * 512 / seconds) and r["metric"] == "source_tokens_per_s"
        assert (workload.global_batch, workload.seq_len, workload.target_len) == (128, 512, 114)
        assert strategy.micro_batch * grad_acc == 128 and cluster.world_size == 1
        assert strategy.kernels == ("fused" if compiled else "eager") and strategy.attention == "eager"
        assert strategy.optimizer_loop == "per-tensor-rms"  # AdamWScale, outside torch.compile's scope (main.py)
        assert (model.family, model.ffn, model.tie_word_embeddings, model.d_ff) == ("t5", "gated-gelu", False, 2048)


def test_megatron_deepspeed_rebase_rows_are_the_readme_converted():
    """tokens/s = TFLOPs x GPUs x 2048 / throughput_calculator's FLOPs per sample (Narayanan eq. 3, recompute factor
    4, vocabulary padded to 128 x tp); layouts of the linked scripts; DGX-2: 16 GPUs and 660 Gb/s per node."""
    rows = _rows("throughput", "deepspeed2023rebase")
    assert {r["id"] for r in rows} == set(REBASE_TFLOPS)
    for r in rows:
        model, cluster, strategy, workload = _setup(r)
        tflops, gpus = REBASE_TFLOPS[r["id"]]
        h, layers, s, vocab = model.d_model, model.num_layers, workload.seq_len, model.vocab_size
        assert vocab % (128 * strategy.tp) == 0 and vocab - 50257 < 128 * strategy.tp and s == 2048
        per_sample = 96 * s * layers * h * h * (1 + s / (6 * h) + vocab / (16 * layers * h))
        assert r["published"] == round(tflops * 1e12 * gpus * s / per_sample) and cluster.world_size == gpus
        assert (strategy.engine, strategy.precision, strategy.recompute) == ("deepspeed", "fp16", "full")
        if r["device"] == "v100-32gb":
            assert cluster.gpus_per_node == 16 and cluster.inter_node_bytes_per_s == pytest.approx(660e9 / 8 / 16, 1e-3)
    (mem,) = _rows("memory", "deepspeed2023rebase")
    assert mem["measured"] and mem["published_gb"] == pytest.approx(REBASE_MIB[mem["id"]] * 2**20 / 1e9, abs=0.005)
    base = next(r for r in rows if r["id"] == mem["id"].removesuffix("-memory"))
    assert all(mem[k] == base[k] for k in ("model", "device", "cluster", "tp", "pp", "micro_batch", "zero", "software"))


def test_t5x_gpu_rows_are_the_readme_table():
    """encoder tokens/s = sequences/s x 512 (targets 128); global batch = GPUs x BS/GPU / TP; the v1.1 shapes of
    the gins (gated GELU, untied head, vocabulary 32,128); JAX/XLA is no engine of the model: ddp, fused, no overlap."""
    rows = {r["id"]: r for r in _rows("throughput", "t5xgpu2023")}
    assert len(rows) == len(T5X)
    for size, (gpus, tp, per_gpu, seqs) in T5X.items():
        r = rows[f"t5x-v1.1-{size}-a100-{gpus}g"]
        model, cluster, strategy, workload = _setup(r)
        assert r["published"] == seqs * 512 and workload.global_batch == gpus * per_gpu // tp
        assert (cluster.world_size, strategy.tp, strategy.micro_batch) == (gpus, tp, per_gpu)
        assert (model.d_model, model.num_layers, model.num_heads, model.d_ff) == T5X_SHAPE[size]
        assert (model.vocab_size, model.tie_word_embeddings, workload.seq_len, workload.target_len) == \
            (32128, False, 512, 128)
        assert (strategy.engine, strategy.kernels, strategy.overlap_grad_comm) == ("ddp", "fused", False)
        assert ("threefry_dropout" in r["unmodelled"]) == (size == "small") and "jax_xla_runtime" in r["unmodelled"]
        assert ("host_input_pipeline" in r["unmodelled"]) == (size == "small")
    assert 1e6 * 2048 / 3168 / 86400 == pytest.approx(7.48, abs=0.01)  # the table's walltime for small


def test_fms_compile_rows_are_the_readme_and_every_block_is_checkpointed():
    """tokens/s = tokens/s/GPU x GPUs, global batch 2 x GPUs; 'Selective AC' checkpoints a fraction p of the blocks and
    HFU / MFU = 1 + p / 3 (the recomputed forward), so the A100 cells' 0.74 / 0.55 mean p = 1 (recompute full) within
    the table's rounding; the same shapes and software as ibmfms2024 but compiled (kernels fused)."""
    rows = _rows("throughput", "ibmfms2024compile")
    eager = {(r["model"]["layers"], r["device"]): r for r in _rows("throughput", "ibmfms2024")}
    assert len(rows) == len(FMS_COMPILE)
    for r in rows:
        size = "34b" if r["model"]["layers"] == 48 else "70b"
        model, cluster, strategy, workload = _setup(r)
        assert r["published"] == FMS_COMPILE[size, r["device"]] * cluster.world_size
        assert workload.global_batch == 2 * cluster.world_size and (strategy.recompute, strategy.kernels) == \
            ("full", "fused")
        old = eager[r["model"]["layers"], r["device"]]
        assert all(r[k] == old[k] for k in ("model", "nodes", "gpus_per_node", "micro_batch", "engine", "zero"))
        assert r["software"] == dict(old["software"], kernels="fused")
    mfu, hfu = FMS_MFU_HFU["34b", "a100-80gb"]
    p = 3 * ((hfu - 0.005) / (mfu + 0.005) - 1)  # the smallest ratio the rounding allows
    assert 0.9 < p and 3 * ((0.69 + 0.005) / (0.61 - 0.005) - 1) < 0.5  # 13b (left out): p about 0.4


def test_heldoutb_sources_out_of_sample():
    """Regression bounds; on arrival every row but the DGX-2 13B one is over-predicted (model too fast): tr1 +13% at
    data-parallel 2 growing to +38..+47% at 16-64 (the 2021 ZeRO-1 reduction), nanoT5 eager +114% (T5's eager fp32
    attention path), compiled +22%, rebase 1.3B +134% / 125M +77% (13B -1.5%)."""
    data = load()
    for source, (mean_bound, max_bound) in HELDOUTB_BOUNDS.items():
        errs = [abs(throughput_row(r, data["sources"]).error) for r in _rows("throughput", source)]
        assert sum(errs) / len(errs) < mean_bound and max(errs) < max_bound, source


def test_new_sources_name_version_hardware_and_conversion():
    sources = load()["sources"]
    for key in HELD_OUT:
        text = sources[key]
        assert re.search(r"commit [0-9a-f]{8}", text), key  # the version the numbers were read at
        assert re.search(r"V100|A100|H100|H200", text) and re.search(r"[Nn]ot stated", text), key  # assumptions said
        assert "fit: false" in text, key  # says why it is held out
    assert {r["source"] for r in load()["throughput"]} >= set(HELD_OUT)


def test_held_out_list_is_the_yaml_one():
    held_out = load()["held_out_sources"]  # order-free: sources are appended at both ends of the list
    assert sorted(held_out) == sorted(HELD_OUT) and len(set(held_out)) == len(held_out)


def test_held_out_rows_are_never_fitted_and_their_devices_exist():
    for r in _rows("throughput"):
        assert r.get("fit", True) is False, r["id"]
    for r in _rows("throughput") + _rows("memory"):
        get_device(r["device"])
    assert not set(HELD_OUT) & set(stored().fitted_on)


def test_unmodelled_flags_are_really_not_strategy_options():
    """A flag a run used that Strategy cannot express is listed per row; once Strategy gains it, move it into the
    row's `software` (and reconsider fit: false)."""
    options = {f.name for f in fields(Strategy)}
    listed = {flag for r in _rows("throughput") for flag in r.get("unmodelled", [])}
    # fp32_grad_reduce (Composer FSDP 'DEFAULT') and bf16_grad_sync (NeMo grad_sync_dtype bf16) became
    # Strategy.grad_reduce on 2026-12-02 (test_mpt_rows_reduce_gradients_as_their_tables_mp_mode_says)
    # parallel_residual: GPT-NeoX gpt_j_residual (heldoutA); per_tensor_optimizer_host_sync (nanoT5's AdamWScale)
    # became Strategy.optimizer_loop per-tensor-rms on 2026-12-02
    # host_input_pipeline: T5X small, seqio tokenizes and span-corrupts raw Pile text online (USE_CACHED_TASKS False)
    # at 396 sequences/s per process (8 processes; 3168 under the README's one-process singlenode script), 6.5x
    # the large row's per-process rate; no published rate to price it with
    # fsdp_grad_sync_last_microbatch: KempnerForge reduce-scatters only on the last micro-batch (scripts/train.py
    # maybe_no_sync -> FSDP2 set_requires_gradient_sync(False); its 13B profile: 205 reduce-scatters = 5 steps x 41
    # units); the model reduce-scatters every micro-batch (docs/costmodel-validation.md, z3scale section)
    # per_tensor_grad_allreduce: NeMo 1.7.2 encoder-decoder O2 all-reduces each gradient tensor from its hook during
    # the backward (priced as the bucketed overlap); sagemaker_smp_runtime: BloombergGPT's SMP stands behind engine
    # fsdp (rowtruth; the fitted MT-NLG rows' deepspeed_2021_bf16_zero1 is outside this held-out set)
    # fused_cpu_adamw (torchtune's FSDP2 CPU offload steps torch's fused CPU AdamW) became Strategy.optimizer_loop
    # fused on 2026-12-03; document_masked_attention: torchtune's packed
    # samples run FlexAttention under a block-causal document mask, priced as causal attention over the whole pack
    # flash_attn_v1_kernel (MosaicGPT's flash-attn 0.2.2 FlashMHA) became Strategy.attention_kernel fa1 on 2026-12-03
    # cpu_checkpointing: DeepSpeed's activation_checkpointing cpu_checkpointing (the ZeRO-Offload tutorial's 10B run)
    # copies each layer's checkpoint to host memory and back; no Strategy option
    # tf32_matmul (FlagPerf's fp32 runs' GEMMs on TF32 Tensor Cores) became Strategy.tf32 on 2026-12-04
    # nanotron_zero1_all_reduce: nanotron's ZeroDistributedOptimizer all-reduces the fp32 gradients before its
    # all-gather (Strategy.zero1_all_reduce is DeepSpeed's; engine megatron reduce-scatters); tp_linear_async_
    # communication: nanotron's column-linear all-gather / reduce-scatter overlapped with the local GEMM
    # hf_zero3_auto_buckets: HF Trainer's 'auto' ZeRO-3 buckets (reduce d^2, prefetch 0.9 d^2 elements: flant5ds2023)
    # where engines.yaml prices DeepSpeed's defaults (5e8 / 5e7)
    # bind_cores_to_rank: `deepspeed --bind_cores_to_rank` gives each rank its own physical cores for CPU-Adam
    # (dsbind2025); the model prices every multi-rank host step unbound (engines.yaml unbound_ranks_host_adam_slowdown)
    # sgd_optimizer (thunderlitgpt2024's torch SGD, weight decay, foreach=False, no state) became
    # Strategy.optimizer_kind sgd on 2026-12-04; bf16_rmsnorm: its Lit-GPT RMSNorm runs in bf16 (the model's eager
    # Llama norm is fp32 with casts); fp8_params (NeMo's Transformer Engine FP8 model parameters, dgxc2024fp8)
    # became Strategy.fp8_params on 2026-12-04; memory_efficient_fp16: metaseq's fp16 weights with fp32 Adam moments
    # and no fp32 master copy (opt2022), priced as engine fsdp's mixed precision (< 1 GB per rank there);
    # float8_tp_all_gather / fsdp_float8_all_gather: torchao's Float8 TP input all-gathers and FSDP2 parameter
    # all-gathers in 1 byte (torchtitan2024h100nd), priced in bf16 (fp8_params is Transformer Engine's, megatron only);
    # float8_weight_recompute: torchao's force_recompute_fp8_weight_in_bwd (torchtitan2025trainy)
    # fp8_current_scaling: Transformer Engine's per-tensor current scaling (Megatron-Bridge fp8_recipe 'tensorwise',
    # mbridgeperf), priced as engine megatron's delayed scaling (costmodel/fp8.py RECIPES)
    assert listed == {"overlap_p2p_comm", "parallel_residual", "jax_xla_runtime", "threefry_dropout",
                      "host_input_pipeline",
                      "per_tensor_grad_allreduce", "sagemaker_smp_runtime", "document_masked_attention",
                      "cpu_checkpointing", "nanotron_zero1_all_reduce", "tp_linear_async_communication",
                      "hf_zero3_auto_buckets", "bind_cores_to_rank", "bf16_rmsnorm", "memory_efficient_fp16",
                      "float8_tp_all_gather", "fsdp_float8_all_gather", "float8_weight_recompute",
                      "fp8_current_scaling"}
    assert not listed & options
    for r in _rows("throughput", "megatron2024"):  # the README's stated flags, now Strategy options
        sw = r["software"]
        assert (r["engine"], r["zero"], sw["overlap_grad_comm"], sw["overlap_param_gather"]) == \
            ("megatron", 1, True, True)
        assert sw.get("tp_comm_overlap", False) == (r["tp"] > 1)
        assert ("overlap_p2p_comm" in r.get("unmodelled", [])) == (sw.get("pp_schedule") == "interleaved")


def test_megatron_core_h100_out_of_sample():
    """Held-out Megatron-Core r0.8 H100 runs with the distributed optimizer, --overlap-param-gather and
    --tp-comm-overlap modelled (engine megatron): within 10% mean / 32% max (reached 8.9% / 29.0% with the H100
    GEMM ceiling from its measured MAMF rather than a constant fitted on H100 rows; the tp 8 pp 1 row -29%: its fp32
    gradient reduce-scatter has one micro-batch's backward to hide behind at micro-batch 1);
    the published 314B and 462B runs fit in 80 GB (6 + 12/d bytes per parameter)."""
    data = load()
    errs = [abs(throughput_row(r, data["sources"]).error) for r in _rows("throughput", "megatron2024")]
    assert sum(errs) / len(errs) < 0.10 and max(errs) < 0.32
    for r in _rows("throughput", "megatron2024"):
        assert estimate(*_setup(r)).fits, r["id"]


def test_megatron_rows_are_the_readme_table():
    rows = _rows("throughput", "megatron2024")
    assert len(rows) == len(MEGATRON)
    for r in rows:
        label = r["id"].removeprefix("megatron-h100-")
        tflops, mfu = MEGATRON[label]
        assert r["published"] == tflops and abs(tflops / 989 - mfu) < 0.006  # MFU column = TFLOP/s / 989
        assert r["metric"] == "model_tflops_per_device" and r["model"]["vocab"] == 131072 and r["model"]["seq"] == 4096
        model, cluster, strategy, workload = _setup(r)
        assert cluster.world_size // (strategy.tp * strategy.pp) == 48  # data-parallel size 48 throughout
        # untied embeddings reproduce the stated sizes: 12 L h^2 + 2 V h (+ positions, norms, biases)
        est = estimate(model, cluster, strategy, workload)
        assert est.params_total / 1e9 == pytest.approx(float(label[:-1]), rel=0.035)
        if strategy.pp > 1:  # interleaved, one layer per model chunk
            assert strategy.pp_schedule == "interleaved" and strategy.virtual_stages * strategy.pp == model.num_layers


def test_torchtitan_rows_are_the_tables_converted():
    for r in _rows("throughput", "torchtitan2024") + _rows("throughput", "torchtitan2024h100"):
        model, cluster, strategy, workload = _setup(r)
        assert r["published"] == TORCHTITAN_TPS[r["id"]] * cluster.world_size  # tokens/s per GPU x GPUs
        assert strategy.engine == "fsdp" and strategy.zero == 3 and strategy.tp == strategy.pp == 1
        est = estimate(model, cluster, strategy, workload)
        name = re.match(r"tt-(llama\d-\d+b)", r["id"]).group(1)
        assert est.params_total / 1e9 == pytest.approx(TORCHTITAN_SIZE[name], abs=0.05)
        assert r["recompute"] == "op" if "-sacop" in r["id"] else r["recompute"] in ("none", "full")
        # compile = false in every train_configs toml; norm_type fused_rmsnorm in llama2_13b / llama3_8b at 1ea476e9,
        # rmsnorm in the 70B tomls and at 9dec370a (H100); the H100 tables' torch.compile rows fuse each block
        fused_norm = r["source"] == "torchtitan2024" and "70b" not in r["id"]
        eager = "eager-fused-norm" if fused_norm else "eager"
        assert strategy.kernels == ("fused" if r["id"].endswith("-compile") else eager)
    for r in _rows("memory", "torchtitan2024h100"):
        assert r["measured"] and r["published_gb"] == pytest.approx(TORCHTITAN_GIB[r["id"]] * 2**30 / 1e9, abs=0.01)


def test_torchtitan_fsdp_out_of_sample():
    """Held-out FSDP runs: every A100 row within 11% now that op-level AC is modelled (recompute op; reached max
    8.0%, was 15.3% with op AC approximated as selective; 10.5% once the eager element-wise kernels of torchtitan
    without torch.compile are counted -- kernels: eager on the 70B rows, -7.7 -> -10.5%: what is left there is not
    element-wise); the H100 rows, at the hosts' 500 W limit, within 16% (reached +26/+29% with fused kernels, was
    +42/+46%; +11.8/+14.5% with kernels: eager, torchtitan's composed fp32 RMSNorm); their measured peak memory
    within 14%
    (reached -11.3/-11.8% against the tensor peak since the torch cross-entropy backward and FSDP2's root unit are
    counted, -15/-17% before, +52/+66% earlier; torchtitan reports the caching allocator's peak reserved bytes, the
    model counts tensors); the H100 scaling from 1 to 16 nodes (per-GPU throughput 5762 -> 5605, memory -15.4 GiB as
    model states shard 16x wider) within a few percent."""
    data = load()
    for r in _rows("throughput", "torchtitan2024"):
        assert abs(throughput_row(r, data["sources"]).error) < 0.11, r["id"]
    for r in _rows("memory", "torchtitan2024h100"):
        assert abs(memory_row(r, data["sources"]).error) < 0.14, r["id"]
    one, sixteen, one_c, sixteen_c = (throughput_row(r, data["sources"])
                                      for r in _rows("throughput", "torchtitan2024h100"))
    assert abs(one.error) < 0.16 and abs(sixteen.error) < 0.16
    # torch.compile (fused element-wise kernels): the published gain is +15.7 / +16.2%; eager vs fused predicts
    # +12.8 / +12.8% (reached +9.0 / +11.0% error on the compiled rows)
    assert abs(one_c.error) < 0.15 and abs(sixteen_c.error) < 0.15
    for eager, compiled in ((one, one_c), (sixteen, sixteen_c)):
        # 0.053 since the flash backward is priced at 2.5x its forward (flops.attention_backward_factor): more
        # attention time in both rows dilutes the modelled compile gain (+10.9% at 128 GPUs vs the published +16.2%)
        assert abs(compiled.predicted / eager.predicted - compiled.published / eager.published) < 0.06
    per_gpu = [row.predicted / n for row, n in ((one, 8), (sixteen, 128))]
    assert per_gpu[1] / per_gpu[0] == pytest.approx(5605 / 5762, abs=0.04)  # reached: 0.948 vs 0.973
    mem = []
    for r in _rows("memory", "torchtitan2024h100"):
        model, cluster, strategy, workload = _setup(r)
        mem.append(estimate(model, cluster, strategy, workload).memory.total / 2**30)
    assert mem[0] - mem[1] == pytest.approx(82.4 - 67.0, rel=0.15)  # reached: 14.1 GiB vs 15.4 GiB
    assert all(math.isfinite(m) for m in mem)


def test_nemo_july_tables_and_gpt_vocab_padding():
    rows = _rows("throughput", "nemo2022jun")
    assert len(rows) == sum(len(v) for v in NEMO_JUL.values())
    for r in rows:
        size = "175b" if "175b" in r["id"] else "5b"
        assert r["published"] == NEMO_JUL[size][r["nodes"]] and r["metric"] == "tokens_per_s"
        assert (r["tp"], r.get("pp", 1), r["global_batch"]) == ((8, 8, 1536) if size == "175b" else (2, 1, 1440))
    # NeMo pads the GPT-2 BPE (50,257) to a multiple of make_vocab_size_divisible_by (128) x tp
    gpt = [r for r in load()["throughput"] if r["source"] in ("nemo2022", "nemo2022jun") and "family" not in r["model"]]
    assert len(gpt) == 21
    for r in gpt:
        multiple = 128 * r.get("tp", 1)
        assert r["model"]["vocab"] == math.ceil(50257 / multiple) * multiple, r["id"]


def test_bigscience_prequel_rows_are_the_tables():
    thr, mem = _rows("throughput", "bigscience2022prequel"), _rows("memory", "bigscience2022prequel")
    assert len(thr) == len(mem) == len(PREQUEL)
    for r in thr + mem:
        m = r["model"]
        key = (m["d_model"], m["layers"], r["tp"], r["pp"], r["micro_batch"], m["heads"])
        gb, sec_it = PREQUEL[key]
        assert r["nodes"] * r["gpus_per_node"] == 384 and r["global_batch"] == 2048 and m["vocab"] == 250880
        if "published_gb" in r:
            assert r["measured"] and r["published_gb"] == gb
        else:
            assert r["published"] == round(2048 * 2048 / sec_it)  # global batch x seq / (s per iteration)
        # 'type:transformer|embedding': (layers + 2) slots over pp, the embedding taking one at each end
        stages = r["software"]["stage_layers"]
        slots = (m["layers"] + 2) // r["pp"]
        assert stages == [slots - 1] + [slots] * (r["pp"] - 2) + [slots - 1] and sum(stages) == m["layers"]


def test_ibm_fms_rows_are_the_readme_converted():
    rows = _rows("throughput", "ibmfms2024")
    assert {r["id"] for r in rows} == set(FMS)
    for r in rows:
        model, cluster, strategy, workload = _setup(r)
        assert r["published"] == FMS[r["id"]] * cluster.world_size and workload.global_batch == 2 * cluster.world_size
        assert (strategy.engine, strategy.zero, strategy.recompute, workload.seq_len) == ("fsdp", 3, "full", 4096)
        assert strategy.kernels == "eager"  # use_torch_compile False; fms's composed fp32 RMSNorm and rotary
        size = estimate(model, cluster, strategy, workload).params_total / 1e9
        assert size == pytest.approx(33.7 if "34b" in r["id"] else 69.0, abs=0.1)


def test_held_out_rows_state_their_precision_and_fp8_needs_an_fp8_peak():
    """Every held-out row says its precision (bf16; fp16 where the recipe says --fp16: DeepSpeed on Azure,
    GPT-NeoX-20B; fp32 where the run kept fp32 weights and compute: FlagPerf's fp32 cases and nanoT5's TF32 rows;
    fp8 for the dgxc FP8 tables), and an fp8 row on a device without an FP8 peak (A100) is refused in one line."""
    for r in _rows("throughput") + [m for m in _rows("memory") if "engine" in m]:
        if r["source"] in ("flagperf2023fp32", "nanot52023tf32"):  # nanoT5's TF32 rows: fp32 on TF32 cores
            assert r["precision"] == "fp32", r["id"]
            continue
        if r["source"] in ("dgxc2024fp8", "torchtitan2024h100fp8", "torchtitan2024h100nd",
                           "torchtitan2025trainy", "torchtitan2025asynctpfp8",
                           "nemo2407perf", "mbridgeperf"):  # FP8 (costmodel/fp8.py)
            assert r["precision"] == "fp8", r["id"]
            continue
        if r["source"] == "flant5ds2023":  # its table: bf16 on A100, fp32 on V100 (T5 overflows in fp16)
            assert r["precision"] == ("bf16" if r["device"].startswith("a100") else "fp32"), r["id"]
            continue
        fp16 = r["source"] in ("deepspeed2022azure", "gptneox2022", "bigscience2021tr1", "deepspeed2023rebase",
                               "dsautotune2021hf",
                               "glm130b2022", "megatron2019",
                               "bigscience2021tr8", "bigscience2021tr3m", "megatron2021readme", "narayanan2021t2",
                               "bigscience2022layouts", "deepspeed2020zerotut", "dschat2023sft",
                               "deepspeed2023ds4sci", "fairseq2021fsdp", "dlperf2021megatron",
                               "dlperf2020deepspeed", "opt2022") or \
            r["id"].startswith("atorch-llama2-7b-ds3d")
        assert r["precision"] == ("fp16" if fp16 else "bf16"), r["id"]
    fp8 = dict(_rows("throughput", "dgxc2024fp8")[0], device="a100-80gb")
    with pytest.raises(ScalestudyError, match="does not support fp8"):
        estimate(*_setup(fp8))


# The same READMEs' FP8 tables as dgxc2024 (fp8 helper, 2026-12-04): at arrival, stored constants, 4.2% mean,
# 14.5% max (GPT-3 175B at 1,024 GPUs: the published FP8 step dips to 6.72 s where BF16 holds 9.0 s at every size);
# torchtitan's two Float8 rows of the torchtitan2024h100 tables: -8.6 / -8.9% (their bf16 siblings -7.3 / -6.8%)
HELD_OUT = ("dgxc2024fp8", "torchtitan2024h100fp8") + HELD_OUT


def test_internlm_rows_are_the_doc_table():
    """InternLM-7B, ZeRO-1 over all data-parallel ranks (zero1=-1), 8-1024 A100 over 4x100Gb RoCE per node: every
    row is the doc's TGS x GPUs with the doc's micro-batching (16,384 tokens per GPU per step at every scale)."""
    rows = _rows("throughput", "internlm2023")
    assert len(rows) == sum(len(v) for v in INTERNLM_TGS.values())
    for r in rows:
        model, cluster, strategy, workload = _setup(r)
        gpus = cluster.world_size
        assert r["published"] == INTERNLM_TGS[strategy.tp][gpus] * gpus and r["metric"] == "tokens_per_s"
        assert (strategy.engine, strategy.zero, strategy.recompute, strategy.micro_batch) == \
            ("internlm", 1, "none", 2 * strategy.tp)
        assert strategy.overlap_grad_comm and not strategy.overlap_param_gather  # broadcast_params(overlap=False)
        assert workload.global_batch * workload.seq_len // gpus == 16384  # micro_num 4 x micro_bsz x 2048 / tp
        # '4 * 100Gb RoCE' per node = 6.25e9 B/s per GPU; one node needs no override
        assert (gpus == 8) == ("cluster" not in r)
        assert float(r.get("cluster", {}).get("inter_node_bytes_per_s", 6.25e9)) == 6.25e9
        assert estimate(model, cluster, strategy, workload).params_total / 1e9 == pytest.approx(7.32, abs=0.01)


def test_internlm_zero1_scaling_out_of_sample():
    """Held-out ZeRO-1 data-parallel scaling on a 4-NIC-per-node cluster (engine internlm: bf16 all-reduce buckets
    and one broadcast per owner over the node's NICs): one node within 10% (reached +2.2 / +5.6%), up to 128 GPUs
    within 15% (tp 1 +3%, tp 2 +7..+11%); beyond, the model is too fast by up to 26% (1024 GPUs, tp 1; 23% before
    NCCL's flat ring at the pooled NIC rate, comm.bus_time): the per-owner broadcast latency grows with dp but less
    than published. Bounds: reached values plus a margin."""
    data = load()
    errs = {r["id"]: throughput_row(r, data["sources"]).error for r in _rows("throughput", "internlm2023")}
    assert all(abs(e) < 0.10 for k, e in errs.items() if k.endswith("-8g"))
    assert all(abs(e) < 0.15 for k, e in errs.items() if int(k.rsplit("-", 1)[1][:-1]) <= 128)
    assert sum(map(abs, errs.values())) / len(errs) < 0.10 and max(map(abs, errs.values())) < 0.28  # 0.089 / 0.264


def test_tinyllama_row_is_the_readme_figure():
    """TinyLlama 1.1B (GQA 4 groups, d 2048): '24k tokens per second per A100-40G GPU' with FSDP, no recomputation,
    the pretrain script's 8 devices x micro-batch 8 x 2048; a small-hidden model predicted within 5% (reached -1.9%)."""
    (r,) = _rows("throughput", "tinyllama2023")
    model, cluster, strategy, workload = _setup(r)
    assert r["published"] == 24000 * cluster.world_size == 192000
    assert (strategy.engine, strategy.zero, strategy.recompute, strategy.micro_batch, workload.seq_len) == \
        ("fsdp", 3, "none", 8, 2048)
    assert estimate(model, cluster, strategy, workload).params_total / 1e9 == pytest.approx(1.10, abs=0.01)
    # reached -0.0509 at the 2026-12-02 refit; -0.074 with FlashAttention-2's backward at 2.5x its forward FLOPs
    # (flops.attention_backward_factor), stored constants not refitted
    assert abs(throughput_row(r, load()["sources"]).error) < 0.08


# NVIDIA dgxc-benchmarking v24.11.1 (35a9aec0) BF16 tables: GPUs -> (tokens per second, training step s)
DGXC = {"gpt3-175b": {128: (58843, 8.91), 256: (117159, 8.95), 512: (230710, 9.09), 1024: (465517, 9.01),
                      2048: (930001, 9.02)},
        "nemotron4-15b": {16: (92630, 2.83), 32: (183317, 2.86), 64: (366635, 2.86), 128: (725658, 2.89),
                          256: (1456356, 2.88), 512: (2872811, 2.92), 1024: (5745622, 2.92), 2048: (11335957, 2.96)},
        "nemotron4-340b": {128: (28432, 4.61), 256: (56134, 4.67), 512: (111551, 4.70), 1024: (221686, 4.73),
                           2048: (433296, 4.84)}}
# recipe configs: global batch per GPU count, (tp, pp, micro-batch), recompute, size in billions of parameters
DGXC_RECIPE = {"gpt3-175b": (lambda g: 2 * g, (4, 8, 1), "none", 174.6),
               "nemotron4-15b": (lambda g: 4 * g, (4, 1, 4), "none", 15.6),
               "nemotron4-340b": (lambda g: g // 4, (8, 8, 1), "selective", 341.0)}


def test_dgxc_rows_are_the_recipe_tables():
    """Every row is a table cell (tokens/s = seq x GBS / step time) at the recipe's layout, batch and recompute;
    Megatron-Core's distributed optimizer with its overlaps; Nemotron4's squared-ReLU FFN (4d) as a SwiGLU of 8d/3
    (same weights and GEMM FLOPs), GQA with 8 query groups; VP 12 = one layer per model chunk."""
    rows = _rows("throughput", "dgxc2024")
    assert len(rows) == sum(len(v) for v in DGXC.values())
    for r in rows:
        name, gpus = re.fullmatch(r"dgxc-(.+)-(\d+)g", r["id"]).groups()
        gpus = int(gpus)
        tps, step = DGXC[name][gpus]
        batch, layout, recompute, size = DGXC_RECIPE[name]
        model, cluster, strategy, workload = _setup(r)
        assert r["published"] == tps and cluster.world_size == gpus and workload.global_batch == batch(gpus)
        assert workload.global_batch * workload.seq_len / step == pytest.approx(tps, rel=0.003)
        assert (strategy.tp, strategy.pp, strategy.micro_batch) == layout and strategy.recompute == recompute
        assert (strategy.engine, strategy.zero, strategy.overlap_grad_comm, strategy.overlap_param_gather,
                strategy.tp_comm_overlap, strategy.sequence_parallel) == ("megatron", 1, True, True, True, True)
        assert estimate(model, cluster, strategy, workload).params_total / 1e9 == pytest.approx(size, rel=0.005)
        if name.startswith("nemotron4"):
            # squared-ReLU FFN of width 4d (relu2), GQA 8, 256k vocabulary, Megatron-Core's in-place cross-entropy
            assert (model.d_ff, model.ffn, model.num_kv_heads, model.vocab_size) == (4 * model.d_model, "relu2", 8,
                                                                                     256000)
            assert strategy.cross_entropy == "inplace"
        if strategy.pp > 1:
            assert strategy.pp_schedule == "interleaved" and strategy.virtual_stages * strategy.pp == model.num_layers
            assert set(r["unmodelled"]) == {"overlap_p2p_comm"}
        assert strategy.grad_reduce == "compute"  # the recipes' distributed_fused_adam grad_sync_dtype bf16


# llm-foundry scripts/train/benchmarking/README.md at 49521837, bf16 rows not in mosaicml2023, one per entry:
# "<size>-s<seq>-<GPUs>x<gpu>[-mb<m>]:<MicroBatchSize>:<GlobalBatchSize>:<zero 3 FULL_SHARD / 2 SHARD_GRAD_OP>:
#  <Activation Checkpointing 1/0>:<Throughput (T/s)>"
MPT_ROWS = """
70b-s2048-512xh100:8:4096:3:1:515636 70b-s2048-256xh100:8:2048:3:1:265149 70b-s2048-128xh100:8:1024:3:1:135490
30b-s2048-512xh100:8:4096:3:1:1083366 30b-s2048-256xh100:8:2048:3:1:550022 30b-s2048-128xh100:8:1024:3:1:281491
13b-s2048-512xh100:16:8192:3:1:2535811 13b-s2048-256xh100:16:4096:3:1:1277214 13b-s2048-128xh100:16:2048:3:1:650264
7b-s2048-512xh100:6:3072:3:0:4951479 7b-s2048-256xh100:6:1536:3:0:2590548 7b-s2048-128xh100:6:768:3:0:1340830
3b-s2048-512xh100:8:4096:2:0:11092218 3b-s2048-256xh100:8:2048:2:0:5829686 3b-s2048-128xh100:8:1024:2:0:2998098
1b-s2048-512xh100:12:6144:2:0:20396905 1b-s2048-256xh100:12:3072:2:0:10894207 1b-s2048-128xh100:12:1536:2:0:5647854
70b-s2048-32xh100:2:1024:3:1:28242 30b-s8192-8xh100:1:168:3:1:11072 30b-s4096-8xh100:1:168:3:1:14419
30b-s2048-32xh100:14:1344:3:1:73860 30b-s2048-16xh100:10:480:3:1:36209 30b-s2048-8xh100:3:504:3:1:16022
30b-s1024-8xh100:6:1008:3:1:16672 13b-s32768-8xh100:1:24:3:1:15812 13b-s16384-8xh100:3:72:3:1:23881
13b-s4096-8xh100:10:240:3:1:37740 13b-s2048-64xh100:2:128:3:0:307209 13b-s2048-32xh100:2:64:3:0:153960
13b-s2048-16xh100:2:32:3:0:76280 13b-s2048-8xh100:2:16:3:0:38336 13b-s1024-8xh100:40:960:3:1:44019
7b-s65536-8xh100:1:16:3:1:15654 7b-s32768-8xh100:2:32:3:1:26550 7b-s8192-8xh100:8:128:3:1:55481
7b-s4096-8xh100:16:256:3:1:68893 7b-s1024-8xh100:64:1024:3:1:81628 3b-s65536-8xh100:1:16:3:1:26099
3b-s32768-8xh100:3:144:3:1:46984 3b-s16384-8xh100:1:48:3:0:89223 3b-s8192-8xh100:3:144:3:0:132626
3b-s4096-8xh100:5:240:3:0:167712 3b-s2048-64xh100:6:1152:3:0:1441663 3b-s2048-32xh100:6:576:3:0:736701
3b-s2048-16xh100:10:480:3:0:386285 3b-s1024-8xh100:20:960:3:0:216369 3b-s512-8xh100:40:1920:3:0:223721
1b-s65536-8xh100:1:16:3:1:44050 1b-s32768-8xh100:1:32:3:0:96203 1b-s16384-8xh100:2:64:3:0:157194
1b-s8192-8xh100:3:96:3:0:233256 1b-s4096-8xh100:7:224:3:0:308282 1b-s2048-64xh100:20:1280:3:0:2841754
1b-s2048-32xh100:20:640:3:0:1444183 1b-s2048-16xh100:20:320:3:0:736596 1b-s2048-8xh100:14:112:3:0:363645
1b-s1024-8xh100:18:576:3:0:391287 1b-s512-8xh100:56:1792:3:0:418201 760m-s32768-8xh100:1:16:3:0:130333
760m-s16384-8xh100:3:48:3:0:222521 760m-s8192-8xh100:6:96:3:0:334602 760m-s4096-8xh100:12:192:3:0:443674
760m-s2048-32xh100:24:768:3:0:2175091 760m-s2048-16xh100:24:384:3:0:1096819 760m-s2048-8xh100:24:384:3:0:505177
760m-s1024-8xh100:48:768:3:0:628648 760m-s512-8xh100:96:1536:3:0:669998 70b-s2048-32xa100-80:2:1024:3:1:11962
30b-s8192-8xa100-80:1:168:3:1:4594 30b-s4096-8xa100-80:1:168:3:1:6513 30b-s1024-8xa100-80:6:1008:3:1:7571
30b-s512-8xa100-80:12:2016:3:1:7739 13b-s32768-8xa100-80:1:24:3:1:8134 13b-s16384-8xa100-80:3:72:3:1:11454
13b-s8192-8xa100-80:5:120:3:1:14362 13b-s4096-8xa100-80:10:240:3:1:16482 13b-s1024-8xa100-80:40:960:3:1:18647
7b-s65536-8xa100-80:1:16:3:1:8108 7b-s32768-8xa100-80:2:32:3:1:13382 7b-s16384-8xa100-80:4:64:3:1:19629
7b-s8192-8xa100-80:8:128:3:1:25655 7b-s4096-8xa100-80:16:256:3:1:29472 7b-s1024-8xa100-80:64:1024:3:1:34857
3b-s65536-8xa100-80:1:16:3:1:14137 3b-s32768-8xa100-80:3:144:3:1:24235 3b-s16384-8xa100-80:1:48:3:0:44233
3b-s8192-8xa100-80:3:144:3:0:61567 3b-s4096-8xa100-80:5:240:3:0:75658 3b-s2048-8xa100-80:10:160:3:0:86491
3b-s1024-8xa100-80:20:960:3:0:92643 3b-s512-8xa100-80:40:1920:3:0:97019 1b-s65536-8xa100-80:1:16:3:1:24353
1b-s32768-8xa100-80:1:32:3:0:50207 1b-s16384-8xa100-80:2:64:3:0:79650 1b-s8192-8xa100-80:3:96:3:0:110516
1b-s4096-8xa100-80:7:224:3:0:142457 1b-s1024-8xa100-80:18:576:3:0:176898 1b-s512-8xa100-80:56:1792:3:0:185186
760m-s65536-8xa100-80:1:16:3:1:33150 760m-s32768-8xa100-80:1:16:3:0:70417 760m-s16384-8xa100-80:3:48:3:0:114198
760m-s8192-8xa100-80:6:96:3:0:167471 760m-s4096-8xa100-80:12:192:3:0:218808 760m-s2048-8xa100-80:24:384:3:0:259472
760m-s1024-8xa100-80:48:768:3:0:238122 760m-s512-8xa100-80:96:1536:3:0:235571 350m-s65536-8xa100-80:1:16:3:0:60195
350m-s32768-8xa100-80:2:32:3:0:109222 350m-s16384-8xa100-80:4:64:3:0:188478 350m-s8192-8xa100-80:8:128:3:0:292559
350m-s4096-8xa100-80:16:256:3:0:396442 350m-s2048-8xa100-80:32:512:3:0:470263
350m-s1024-8xa100-80:64:1024:3:0:518504 350m-s512-8xa100-80:128:2048:3:0:554643
125m-s65536-8xa100-80:1:16:3:0:162946 125m-s32768-8xa100-80:2:32:3:0:291256 125m-s16384-8xa100-80:4:64:3:0:480322
125m-s8192-8xa100-80:8:128:3:0:723142 125m-s4096-8xa100-80:16:256:3:0:947172 125m-s2048-8xa100-80:32:512:3:0:1133901
125m-s1024-8xa100-80:64:1024:3:0:1251751 125m-s512-8xa100-80:128:2048:3:0:1325455
70b-s2048-64xa100-40:2:128:3:1:17672 30b-s2048-32xa100-40:4:128:3:1:27431 13b-s8192-8xa100-40:1:128:3:1:11258
13b-s4096-8xa100-40:2:256:3:1:12830 13b-s2048-128xa100-40:16:2048:3:1:252444 13b-s2048-64xa100-40:16:1024:3:1:126479
13b-s2048-32xa100-40:14:448:3:1:63946 13b-s2048-16xa100-40:10:160:3:1:31900 13b-s2048-8xa100-40:4:512:3:1:13347
13b-s1024-8xa100-40:8:1024:3:1:13817 13b-s512-8xa100-40:16:2048:3:1:14108 7b-s16384-8xa100-40:1:32:3:1:17998
7b-s8192-8xa100-40:3:96:3:1:23098 7b-s4096-8xa100-40:6:192:3:1:26930 7b-s2048-64xa100-40:18:1152:3:1:234614
7b-s2048-32xa100-40:18:576:3:1:119202 7b-s2048-16xa100-40:16:256:3:1:58322 7b-s2048-8xa100-40:12:384:3:1:29436
7b-s1024-8xa100-40:24:768:3:1:30833 7b-s512-8xa100-40:48:1536:3:1:31167 3b-s32768-8xa100-40:1:32:3:1:23640
3b-s16384-8xa100-40:2:128:3:1:35726 3b-s8192-8xa100-40:1:64:3:0:57193 3b-s4096-8xa100-40:2:128:3:0:70223
3b-s2048-128xa100-40:6:768:3:0:1220885 3b-s2048-64xa100-40:6:384:3:0:623167 3b-s2048-32xa100-40:6:192:3:0:317261
3b-s2048-16xa100-40:5:80:3:0:156013 3b-s2048-8xa100-40:5:320:3:0:80520 3b-s1024-8xa100-40:10:640:3:0:85854
3b-s512-8xa100-40:20:1280:3:0:90596 1b-s32768-8xa100-40:1:32:3:1:40762 1b-s16384-8xa100-40:1:64:3:0:77723
1b-s8192-8xa100-40:2:128:3:0:107799 1b-s4096-8xa100-40:4:256:3:0:134851 1b-s2048-128xa100-40:10:1280:3:0:2386897
1b-s2048-64xa100-40:10:640:3:0:1216104 1b-s2048-32xa100-40:10:320:3:0:497782 1b-s2048-16xa100-40:8:128:3:0:305372
1b-s2048-8xa100-40:8:512:3:0:154171 1b-s1024-8xa100-40:16:1024:3:0:167677 1b-s512-8xa100-40:32:2048:3:0:174256
760m-s32768-8xa100-40:1:32:3:1:57464 760m-s16384-8xa100-40:1:32:3:0:111316 760m-s8192-8xa100-40:3:96:3:0:160853
760m-s4096-8xa100-40:6:192:3:0:206909 760m-s2048-128xa100-40:12:1536:3:0:3704382
760m-s2048-64xa100-40:12:768:3:0:1878030 760m-s2048-32xa100-40:12:384:3:0:948745
760m-s2048-16xa100-40:12:192:3:0:473723 760m-s2048-8xa100-40:12:384:3:0:241389
760m-s1024-8xa100-40:24:768:3:0:267376 760m-s512-8xa100-40:48:1536:3:0:279504 350m-s32768-8xa100-40:1:32:3:0:107329
350m-s16384-8xa100-40:2:64:3:0:183175 350m-s8192-8xa100-40:4:128:3:0:279466 350m-s4096-8xa100-40:8:256:3:0:374670
350m-s2048-128xa100-40:18:2304:3:0:6647647 350m-s2048-64xa100-40:18:1152:3:0:3372118
350m-s2048-32xa100-40:18:576:3:0:1721978 350m-s2048-16xa100-40:18:288:3:0:886622
350m-s2048-8xa100-40:16:512:3:0:447963 350m-s1024-8xa100-40:32:1024:3:0:500184
350m-s512-8xa100-40:64:2048:3:0:530277 125m-s32768-8xa100-40:1:32:3:0:261208 125m-s16384-8xa100-40:2:48:3:0:443876
125m-s8192-8xa100-40:5:120:3:0:694868 125m-s4096-8xa100-40:13:312:3:0:921297
125m-s2048-128xa100-40:26:3328:3:0:15863837 125m-s2048-64xa100-40:26:1664:3:0:8015010
125m-s2048-32xa100-40:26:832:3:0:4067922 125m-s2048-16xa100-40:26:416:3:0:2088560
125m-s2048-8xa100-40:26:624:3:0:1090678 125m-s1024-8xa100-40:52:1248:3:0:1186314
125m-s512-8xa100-40:104:2496:3:0:1253886
""".split()
MPT_SHAPES = {"125m": (768, 12, 12), "350m": (1024, 24, 16), "760m": (1536, 24, 12), "1b": (2048, 24, 16),
              "3b": (2560, 32, 20), "7b": (4096, 32, 32), "13b": (5120, 40, 40), "30b": (7168, 48, 56),
              "70b": (8192, 80, 64)}  # scripts/train/yamls/pretrain/mpt-*.yaml: d_model, n_layers, n_heads


def test_mosaicml_rows_are_the_readme_tables():
    """Every held-out MPT row is a README row: T/s, micro-batch, global batch, sharding and checkpointing as the
    table says, the yaml's shape, and the table's NumParams (12 L d^2 + 13 L d + 2 d + V d + seq d) as counted."""
    rows = _rows("throughput", "mosaicml2023ext") + _rows("throughput", "mosaicml2024scale")
    table = {key: tuple(map(int, rest)) for key, *rest in (e.split(":") for e in MPT_ROWS)}
    assert len(rows) == len(table) and {r["id"].removeprefix("mpt-") for r in rows} == set(table)
    for r in rows:
        mb, gb, zero, ckpt, tps = table[r["id"].removeprefix("mpt-")]
        size, seq, gpus = re.match(r"mpt-(\w+?)-s(\d+)-(\d+)x", r["id"]).groups()
        model, cluster, strategy, workload = _setup(r)
        assert (r["published"], strategy.micro_batch, workload.global_batch) == (tps, mb, gb)
        assert (strategy.engine, strategy.zero, strategy.recompute) == ("fsdp", zero, "full" if ckpt else "none")
        assert (workload.seq_len, cluster.world_size) == (int(seq), int(gpus))
        d, layers, heads = MPT_SHAPES[size]
        assert (model.d_model, model.num_layers, model.num_heads, model.vocab_size) == (d, layers, heads, 50368)
        params = 12 * layers * d * d + 13 * layers * d + 2 * d + 50368 * d + int(seq) * d
        assert estimate(model, cluster, strategy, workload).params_total == params
        assert r["source"] == ("mosaicml2024scale" if gpus in ("128", "256", "512") and "xh100" in r["id"]
                               else "mosaicml2023ext")


# OLMo-core README at 310866e4: BF16 tokens/s per device; scripts' (d_model, layers, SwiGLU hidden, micro-batch, GBS)
OLMO = {"1b": (44000, 2048, 18, 5632, 4, 1024), "7b": (10000, 4096, 32, 11008, 2, 1024),
        "13b": (4600, 5120, 40, 13824, 1, 2048)}


def test_olmo_core_rows_are_the_readme_and_scripts():
    rows = _rows("throughput", "olmocore2024")
    assert {re.fullmatch(r"olmocore-(\w+)-8xh100", r["id"]).group(1) for r in rows} == set(OLMO)
    for r in rows:
        tps, d, layers, hidden, mb, gb = OLMO[re.fullmatch(r"olmocore-(\w+)-8xh100", r["id"]).group(1)]
        model, cluster, strategy, workload = _setup(r)
        assert r["published"] == tps * cluster.world_size and cluster.world_size == 8  # launcher default, assumed
        assert (model.d_model, model.num_layers, model.d_ff, model.vocab_size) == (d, layers, hidden, 100352)
        assert hidden == 256 * -(-int(8 * d / 3) // 256)  # llama_like: int(8 d / 3) up to a multiple of 256
        assert (strategy.micro_batch, workload.global_batch, workload.seq_len) == (mb, gb, 4096)
        assert (strategy.engine, strategy.zero, strategy.recompute, strategy.kernels) == ("fsdp", 3, "none", "fused")


def test_mpt_rows_reduce_gradients_as_their_tables_mp_mode_says():
    """llm-foundry's tables give each row's MP Mode: amp_bf16 DEFAULT (Composer get_mixed_precision: bf16
    parameters, fp32 reduce_dtype -- engine fsdp's own reduce-scatter) on every H100 and A100 80GB row except 70b,
    bf16 PURE (reduce_dtype bf16 -> grad_reduce: compute) on every A100 40GB row and 70b on A100 80GB; fms-fsdp's
    bfSixteen policy reduces in bf16 too."""
    rows = [r for r in load()["throughput"] if r["source"].startswith("mosaicml") or r["source"] == "ibmfms2024"]
    assert len(rows) == 213
    for r in rows:
        pure = r["source"] == "ibmfms2024" or r["device"] == "a100-40gb" or (
            r["device"] == "a100-80gb" and r["id"].startswith("mpt-70b"))
        assert _setup(r)[2].grad_reduce == ("compute" if pure else "engine"), r["id"]
    (tiny,) = _rows("throughput", "tinyllama2023")  # Lightning bf16-mixed: FSDP reduce_dtype bf16
    assert _setup(tiny)[2].grad_reduce == "compute"


def test_bloom_rampup_rows_are_the_production_setup_at_small_batches():
    """BLOOM 176B at GBS 16 / MBS 2 (15.23 s per iteration) and GBS 192 / MBS 1 (73 TFLOPs, converted with the same
    log line's TFLOPs-per-sample ratio): bigscience2022's configuration with only the batch changed."""
    (base,) = [r for r in load()["throughput"] if r["id"] == "bloom-176b-48n"]
    rows = _rows("throughput", "bigscience2022rampup")
    expected = {16: (2, round(16 * 2048 / 15.23)), 192: (1, round(2048 * 73 * 16 / (8.04 * 15.23)))}
    assert {r["global_batch"] for r in rows} == set(expected)
    for r in rows:
        mb, tps = expected[r["global_batch"]]
        assert (r["micro_batch"], r["published"], r["metric"]) == (mb, tps, "tokens_per_s")
        same = ("model", "device", "nodes", "gpus_per_node", "cluster", "tp", "pp", "recompute", "engine", "zero",
                "software")
        assert all(r[k] == base[k] for k in same)


# mean / max |error| reached by the sources added 2026-12-02 (stored constants), plus a margin: regression bounds,
# not targets (issue 11's target is 8% / 20%; the STATUS / RESULTS notes say which mechanism each miss points to)
NEW_SOURCE_BOUNDS = {  # (mean, max) |error|; restated 2026-12-02 05:20 at the reached values + ~30% (stored constants)
    # mosaicml2024scale (0.13, 0.21) -> (0.07, 0.13): 10.9 / 16.6 -> 5.3 / 9.8% once every data-parallel collective's
    # ring latency is exposed (dpscale 702fa22, comm.exposed_latency: FSDP's per-block rings at 128-512 ranks)
    # (0.07 -> 0.08): 6.9 / 12.0 -> 7.4 / 12.8% when gemm.half_dim became measured (gemmcurve 2026-12-05: 122.4 from
    # a GEMM sweep, the share refitted 0.8188 -> 0.8295): the fit moved, not a mechanism; its H100 rows were already
    # too fast (-1.8..+12.0%) and the higher share makes them faster -- worse, accepted with the measured value
    "dgxc2024": (0.05, 0.08), "mosaicml2024scale": (0.08, 0.13), "mosaicml2023ext": (0.08, 0.40),
    "olmocore2024": (0.08, 0.14), "bigscience2022rampup": (0.04, 0.05), "bigscience2022reshape": (0.09, 0.14),
    # megatron2024strong: 5.1 / 7.8% (was ~4.3 / 5.6%) once cuDNN fused attention on Hopper runs the causal triangle
    # (gemmcurve 2026-12-02, step.executed_attention_share; its 177B rows are over-predicted, + dgxc / Llama 3 improve)
    # (0.08 -> 0.09): 7.1 / 7.6 -> 8.5 / 9.8% when the stored constants became the fit's minimum (fitfix2, published.fit
    # from a fixed grid, 0.8188 / 71.7 / 31.3 us): the fit moved, not the model; the old values were a stalled search's
    # (max 0.10 -> 0.11): 8.5 / 9.8 -> 8.9 / 10.2% when gemm.half_dim became measured (gemmcurve 2026-12-05, share
    # refitted 0.8188 -> 0.8295): the fit moved, not a mechanism -- worse, accepted with the measured value
    "megatron2024strong": (0.09, 0.11),
    # second pass (heldout), reached at 6c7e3c2: 10.7 / 30.0, 5.9 / 11.0, 4.5 / 5.0, 9.4 / 10.6, 59.8 / 65.0%;
    # at the end of the session (offload, memory, early stop, buckets): 9.5 / 27.2, 5.9 / 11.0, 3.0 / 3.6,
    # 9.3 / 10.4, 11.8 / 35.3%
    "nemo2022early": (0.12, 0.31), "nemo2022may": (0.08, 0.13),
    # deepspeed2022azure: its 175B row (ZeRO-3, 65 s of traffic beside 110 s of compute) -4.0 -> -6.7% since the
    # compute runs 18.9% slower beside the collectives (mpt 2026-12-02, terms._exposed), -7.65% with every ring's
    # latency exposed (702fa22) and the pageable upload (b97e16c); 1T -2.6%: mean 5.1%
    # 2026-12-03 (sharded): 10.6 / 19.2% once DeepSpeed ZeRO-3's gathers pool the node's NICs (gather_rails node: the
    # post's DeepSpeed 0.6.2 gathers one coalesced _all_gather_base per module): 175B -8.8 -> -2.1%, 1T +2.9 -> +19.2%
    # (the one-NIC effective rate had hidden what its offloaded 1T step lacks)
    "deepspeed2022azure": (0.14, 0.25),
    "dgxc2025": (0.12, 0.13),
    # mlengineering2026h200: 8.0 / 9.7% since ZeRO-3 offload's host side is priced (dshost 2026-12-02: blocking
    # gradient copies, pageable upload, unbound ranks' CPU Adam; the 8K row +35 -> +9.5%; 128K-256K -9%: compute)
    "mlengineering2026h200": (0.11, 0.14),
    # dgxc v25.04 Nemotron4 (reached 13.3 / 41.5%: the 15B TP 2 rows' DP cost at dp 512-1024; 8.1 / 9.9% after
    # Megatron-Core's dp-scaled buckets)
    "dgxc2025apr": (0.11, 0.13),
    # torchtitan FSDP x TP 8 (reached 13.5 / 29.0%: modelled async-TP gain ~2x the published; 12.4 / 23.7%; 5.9 / 6.7%
    # with torch micro-pipeline TP priced as its own mechanism and op-SAC's backward re-gathers, pipetp 2026-12-02)
    "torchtitan2025asynctp": (0.08, 0.09)}


def _errors(source: str) -> dict:
    data = load()
    return {r["id"]: throughput_row(r, data["sources"]).error for r in _rows("throughput", source)}


def test_sources_added_2026_12_02_out_of_sample():
    """Reached (HEAD 516749d): dgxc2024 4.3 / 13.1% (GPT-3 175B within 2.3%, Nemotron4 15B within 5% up to 1024 GPUs;
    every row under: DP cost grows with dp in the model, not in the runs), mosaicml2024scale 12.8 / 31.0% (13B-70B
    with checkpointing within 6%; 1B-7B without it +17..+31%, growing with GPUs), mosaicml2023ext 12.6 / 76.0%
    (H100 long sequences +38..+76%), olmocore2024 20.5 / 27.5%, bigscience2022rampup 20.4 / 24.6% (too fast at
    1 and 24 micro-batches per step on 12 stages), bigscience2022reshape 15.5 / 29.2% (too slow on 24 and 36 stages:
    the model charges the busiest stage's layers plus the head, the last stage holds one layer less),
    megatron2024strong 7.1 / 7.6% (+7.6% at dp 2, -6.7% at dp 96: the model loses 16% of per-GPU throughput over
    the strong scaling, the README 11%)."""
    for source, (mean_bound, max_bound) in NEW_SOURCE_BOUNDS.items():
        errs = [abs(e) for e in _errors(source).values()]
        assert sum(errs) / len(errs) < mean_bound and max(errs) < max_bound, source
    dgxc = _errors("dgxc2024")
    # reached 0.0557 after the end-of-session refit of 2026-12-02 (layer overhead 287 -> 398 us; 0.0300 before it)
    assert all(abs(e) < 0.06 for k, e in dgxc.items() if "gpt3-175b" in k)
    # Nemotron4 15B: -4.5..-7.0% once cuDNN fused attention's backward is priced at 2.5x its forward
    # (flops.attention_backward_factor; stored constants, before the next refit)
    assert all(abs(e) < 0.075 for k, e in dgxc.items() if "15b" in k and not k.endswith("-2048g"))


# BigScience reshaping-log.md (c352f83b): (nodes, tp, pp, micro-batch) -> seconds per iteration at GBS 2048
RESHAPE = {(24, 4, 12, 2): 215.99, (24, 4, 12, 1): 234.72, (24, 4, 24, 1): 220.30, (24, 2, 24, 1): 199.82,
           (36, 4, 36, 1): 155.71, (36, 2, 36, 1): 141.22}


def test_bloom_reshape_rows_are_the_log():
    """BLOOM 176B on other 3D layouts: tokens/s = 2048 x 2048 / s_it, the 'type:transformer|embedding' split."""
    rows = _rows("throughput", "bigscience2022reshape")
    assert {(r["nodes"], r["tp"], r["pp"], r["micro_batch"]) for r in rows} == set(RESHAPE)
    for r in rows:
        assert r["published"] == round(2048 * 2048 / RESHAPE[(r["nodes"], r["tp"], r["pp"], r["micro_batch"])])
        stages, slots = r["software"]["stage_layers"], 72 // r["pp"]
        assert stages == [slots - 1] + [slots] * (r["pp"] - 2) + [slots - 1] and sum(stages) == 70
        assert (r["engine"], r["zero"], r["recompute"], r["global_batch"]) == ("deepspeed", 1, "full", 2048)


def test_megatron_strong_scaling_rows_are_the_readme_end_points():
    """GPT-3 175B strong scaled at batch 1152 from 96 to 4608 H100: MFU 47% -> 42% (x 989 TFLOP/s), the model
    table's 177B layout (tp 8, pp 6) at data-parallel size 2 and 96."""
    (table,) = [r for r in load()["throughput"] if r["id"] == "megatron-h100-177b"]
    rows = _rows("throughput", "megatron2024strong")
    assert {(r["nodes"] * r["gpus_per_node"], r["published"]) for r in rows} == {(96, 464.8), (4608, 415.4)}
    for r in rows:
        same = ("model", "device", "tp", "pp", "micro_batch", "global_batch", "recompute", "engine", "zero", "metric",
                "software", "unmodelled")
        assert all(r[k] == table[k] for k in same)


# Second pass (heldout, 2026-12-02): the cells as published. NeMo launcher T5 / mT5 3B tokens/s at 1-20 nodes (22.03
# T5 93afba33, 22.04 mT5 4d2313ba, 22.05 both 1c51ded5); dgxc v25.02 GPT-3 175B step seconds per GPU count;
# ml-engineering H200 TFLOPS/GPU per sequence length and peak GiB.
NEMO_T5 = {"nemo2203-t5-3b": (89029, 175682, 349422, 433354, 820050, 1395131),
           "nemo2204-mt5-3b": (87654, 170637, 325295, 393846, 731429, 1198829),
           "nemo2205-t5-3b": (103842, 204421, 397813, 489345, 929345, 1701415),
           "nemo2205-mt5-3b": (87685, 172433, 336312, 411142, 769202, 1303767)}
DGXC25_STEP = {128: 8.309, 256: 8.408, 512: 8.42, 1024: 8.453, 2048: 8.49}
MLENG = {8192: (141, 16.3), 32768: (324, 25.8), 65536: (391, 37.5), 131072: (420, 66.5), 196608: (422, 95.7),
         262144: (419, 124.5)}
# dgxc v25.04 Nemotron4 (NeMo 2.0): (size, GPUs) -> step seconds; tokens/s = 4096 x GBS / step
DGXC2504_STEP = {("15b", 16): 2.66, ("15b", 32): 2.66, ("15b", 64): 2.67, ("15b", 128): 2.67, ("15b", 256): 2.68,
                 ("15b", 512): 2.71, ("15b", 1024): 2.74, ("15b", 2048): 2.78, ("340b", 256): 4.36, ("340b", 512): 4.39,
                 ("340b", 1024): 4.41, ("340b", 2048): 4.43}


def test_second_pass_sources_are_their_tables():
    """Each row is its table cell at the configuration of the commit that published it: NeMo 22.03 T5 (O1 -> torch
    DDP, overlapped, one micro-batch of 27 per step) and 22.04/22.05 (O2 -> megatron zero 0, all-reduce after the
    backward); dgxc v25.02 = the dgxc2024 rows with VP 6; H200 tokens/s from benchmark.py's causal-attention FLOPs."""
    thr = load()["throughput"]
    for prefix, cells in NEMO_T5.items():
        rows = {r["nodes"]: r for r in thr if r["id"].startswith(prefix + "-")}
        assert {n: r["published"] for n, r in rows.items()} == dict(zip((1, 2, 4, 5, 10, 20), cells))
        for n, r in rows.items():
            model, cluster, strategy, workload = _setup(r)
            ddp = prefix.startswith("nemo2203")
            assert (strategy.engine, strategy.overlap_grad_comm) == (("ddp", True) if ddp else ("megatron", False))
            assert (workload.global_batch, strategy.tp, workload.seq_len) == (108 * n if ddp else 1920, 2, 512)
            assert model.vocab_size == (250112 if "mt5" in prefix else 29184) and r["metric"] == "source_tokens_per_s"
    dgxc24 = {r["nodes"]: r for r in _rows("throughput", "dgxc2024") if "gpt3" in r["id"]}
    for r in _rows("throughput", "dgxc2025"):
        gpus, old = r["nodes"] * 8, dgxc24[r["nodes"]]
        assert abs(r["published"] - 2048 * r["global_batch"] / DGXC25_STEP[gpus]) <= 1  # the table rounds down
        assert r["software"] == dict(old["software"], virtual_stages=6)
        assert all(r[k] == old[k] for k in old if k not in ("id", "source", "published", "software"))
    mleng_zero2 = {r["id"]: r for r in _rows("memory", "mlengineering2026h200") if "-zero2-" in r["id"]}
    for name, gib in (("liger", 80), ("eager", 99)):  # bench_decompose.py's steady-state 8K step: 'Liger ... 99 -> 80 GiB'
        r = mleng_zero2.pop(f"mleng-llama31-8b-h200-8k-zero2-{name}-memory")
        assert r["published_gb"] == pytest.approx(gib * 2**30 / 1e9, abs=0.006) and r["model"]["seq"] == 8192
        assert (r["engine"], r["zero"], r["recompute"], r["measured_as"]) == ("deepspeed", 2, "none", "reserved")
    assert not mleng_zero2
    for r in _rows("throughput", "mlengineering2026h200") + _rows("memory", "mlengineering2026h200"):
        if "-zero2-" in r["id"]:
            continue
        m, s = r["model"], r["model"]["seq"]
        head = m["d_model"] // m["heads"]
        attn = m["d_model"] * (2 * m["d_model"] + 2 * m["kv_heads"] * head)  # q, o and the grouped k, v
        dense = m["layers"] * (3 * m["d_model"] * m["d_ff"] + attn)
        flops = 6 * (dense + m["vocab"] * m["d_model"]) * s + 6 * s * s * m["d_model"] * m["layers"]
        tflops, gib = MLENG[s]
        if "published" in r:
            assert r["published"] == round(tflops * 1e12 * 8 * s / flops) and r["global_batch"] == 8
        else:
            assert r["measured"] and r["published_gb"] == pytest.approx(gib * 2**30 / 1e9, abs=0.006)
        assert (r["engine"], r["zero"], r["recompute"]) == ("deepspeed", 3, "full")
        assert r["software"]["offload_optimizer"] == "cpu"
    azure = {r["id"]: r for r in _rows("throughput", "deepspeed2022azure")}
    assert {k: r["published"] for k, r in azure.items()} == {"ds-azure-175b-256g-s512": 204.49,
                                                             "ds-azure-1t-1024g-s1024": 165.36}
    for r in azure.values():
        model, cluster, strategy, workload = _setup(r)
        assert workload.global_batch == cluster.world_size * strategy.micro_batch and strategy.tp == strategy.pp == 1
        assert (strategy.engine, strategy.zero, strategy.recompute) == ("deepspeed", 3, "full")
        assert strategy.precision == "fp16"
        assert strategy.offload_optimizer == ("cpu" if model.d_model == 25600 else "none")
    tps = {"70b-256-vanilla": 597.3, "70b-256-async": 652.4, "8b-64-vanilla": 4378, "8b-64-async": 4809.4}
    for r in _rows("throughput", "torchtitan2025asynctp"):  # TPS per GPU x GPUs; global batch = local x FSDP degree
        gpus = r["nodes"] * 8
        assert r["published"] == round(tps[r["id"].removeprefix("tt-asynctp-llama3-")] * gpus)
        assert r["tp"] == 8 and r["global_batch"] == r["micro_batch"] * gpus // 8
        assert r["software"]["tp_comm_overlap"] == r["id"].endswith("-async")
    for r in _rows("throughput", "dgxc2025apr"):  # launch.sh layouts: 15B TP 2 MBS 2 GBS 4 x GPUs, 340B GBS GPUs / 4
        size, gpus = re.fullmatch(r"dgxc2504-nemotron4-(\d+b)-(\d+)g", r["id"]).groups()
        gpus = int(gpus)
        assert abs(r["published"] - 4096 * r["global_batch"] / DGXC2504_STEP[size, gpus]) <= 1
        layout = (2, 1, 2, 4 * gpus) if size == "15b" else (8, 8, 1, gpus // 4)
        assert (r["tp"], r["pp"], r["micro_batch"], r["global_batch"]) == layout and r["recompute"] == "none"
        assert r["software"]["grad_reduce"] == "compute" and r["software"]["tp_comm_overlap"]


# ---- Decoder LLM runs at scale (heldoutA, 2026-12-02 second session): MegaScale's Megatron-LM baseline, Llama 3 405B
HELD_OUT = HELD_OUT + ("megascale2024", "llama3herd2024", "gptneox2022", "flashattn2022", "nemotron4tr2024")
# MegaScale (NSDI'24) Table 2, Megatron-LM rows: GPUs -> (global batch, iteration s, tokens/s, MFU); Figure 9 (530B,
# global batch = GPUs): GPUs -> MFU
MEGASCALE_175B = {256: (768, 40.0, 39300, 0.530), 512: (768, 21.2, 74100, 0.499), 768: (768, 15.2, 103800, 0.467),
                  1024: (768, 11.9, 132700, 0.447), 3072: (6144, 29.02, 433600, 0.487),
                  6144: (6144, 14.78, 851600, 0.478), 8192: (6144, 12.24, 1027900, 0.433),
                  12288: (6144, 8.57, 1466800, 0.412)}
MEGASCALE_530B = {2240: 0.492, 4480: 0.488, 11200: 0.482}
MEGASCALE_ABLATION_BASELINE = 0.477  # Table 3: 175B, 256 GPUs, batch 256, 'the original Megatron-LM'
# Llama 3 Table 4 rows without context parallelism: GPUs -> (DP, batch per DP, TFLOPs/GPU)
LLAMA3_405B = {8192: (64, 32, 430), 16384: (128, 16, 400)}
NEW_SOURCE_BOUNDS.update({  # reached at bdf3cc1's cost model (stored constants): 3.5 / 6.1%, 4.5 / 4.7%, +16.1%
    # megascale2024: 5.9 / 9.4% since the per-block overhead is kernels x a per-kernel constant (kernel_counts.py)
    # llama3herd2024: 13.2 / 13.4% since its rows are engine megatron zero 2 (Meta's sharded gradients: a fp32
    # reduce-scatter every micro-batch, priced beside compute; 4.6 / 5.3% at zero 1, which cannot fit in memory)
    "megascale2024": (0.07, 0.11), "llama3herd2024": (0.145, 0.15), "gptneox2022": (0.21, 0.21),
    "flashattn2022": (0.13, 0.22),  # reached 9.4 / 17.0% (all under: a hand-fused stack faster than the model)
    "nemotron4tr2024": (0.04, 0.05)})  # reached 1.4 / 2.2% (at 0be0566)


def test_megascale_rows_are_the_paper_tables_and_its_mfu_convention_is_ours():
    """Table 2 throughput at 2,048 tokens per sequence (within the table's rounding of the iteration time); its MFU
    column = tokens/s per GPU x the cost model's model FLOPs per token / 312 TFLOP/s, so the 530B MFU cells of
    Figure 9 are compared under the same convention; layouts: TP 8 x PP 8 (175B, 6 chunks) and PP 35 (530B, 3)."""
    rows = {r["id"]: r for r in _rows("throughput", "megascale2024")}
    assert len(rows) == len(MEGASCALE_175B) + len(MEGASCALE_530B) + 1
    ablation = rows["megascale-megatron-175b-256g-gb256"]
    assert (ablation["published"], ablation["global_batch"]) == (MEGASCALE_ABLATION_BASELINE, 256)
    differ = ("id", "published", "global_batch", "metric")
    assert {k: v for k, v in ablation.items() if k not in differ} == \
        {k: v for k, v in rows["megascale-megatron-175b-256g"].items() if k not in differ}
    for gpus, (batch, iteration_s, tokens_s, mfu) in MEGASCALE_175B.items():
        r = rows[f"megascale-megatron-175b-{gpus}g"]
        assert (r["published"], r["global_batch"], r["nodes"] * r["gpus_per_node"]) == (tokens_s, batch, gpus)
        assert batch * 2048 / iteration_s == pytest.approx(tokens_s, rel=0.005)
        est = estimate(*_setup(r))
        assert tokens_s / gpus * est.model_flops / est.tokens_per_step / 312e12 == pytest.approx(mfu, abs=0.001)
    for gpus, mfu in MEGASCALE_530B.items():
        r = rows[f"megascale-megatron-530b-{gpus}g"]
        assert (r["published"], r["metric"], r["global_batch"], r["nodes"] * 8) == (mfu, "mfu", gpus, gpus)
    for r in rows.values():
        model, cluster, strategy, workload = _setup(r)
        chunks, dp = (6, cluster.world_size // 64) if model.num_layers == 96 else (3, cluster.world_size // 280)
        assert (strategy.tp, strategy.pp, strategy.virtual_stages, strategy.micro_batch) == \
            (8, 64 // 8 if chunks == 6 else 35, chunks, 1)
        assert workload.global_batch % (dp * strategy.pp) == 0  # Megatron's interleaved schedule needs it
        assert (strategy.engine, strategy.zero, strategy.overlap_grad_comm, strategy.overlap_param_gather) == \
            ("megatron", 1, False, False)  # no overlap flags exist at Megatron-LM 285068c8
        assert (model.vocab_size, workload.seq_len) == (64000, 2048)


def test_llama3_rows_are_table_4_converted_with_palm_flops():
    """tokens/s = TFLOPs/GPU x GPUs / (6 N + 6 L h s): PaLM's model FLOPs (causal attention), N with both untied
    embeddings; 16M tokens per step = DP x batch per DP x 8,192; 126 layers as 7 + 14 x 8 + 7."""
    rows = _rows("throughput", "llama3herd2024")
    assert len(rows) == len(LLAMA3_405B) + 1  # + the CP 16 row (test_context_parallel_rows_are_their_tables)
    for r in (r for r in rows if r.get("cp", 1) == 1):
        model, cluster, strategy, workload = _setup(r)
        dp, per_dp, tflops = LLAMA3_405B[cluster.world_size]
        m = r["model"]
        attn = 2 * m["d_model"] ** 2 + 2 * m["d_model"] * m["kv_heads"] * (m["d_model"] // m["heads"])
        params = m["layers"] * (attn + 3 * m["d_model"] * m["d_ff"]) + 2 * m["vocab"] * m["d_model"]
        assert params == pytest.approx(405.85e9, rel=1e-4)
        flops = 6 * params + 6 * m["layers"] * m["d_model"] * m["seq"]
        assert r["published"] == round(tflops * 1e12 * cluster.world_size / flops)
        assert workload.global_batch == dp * per_dp and workload.global_batch * workload.seq_len == 2 ** 24
        assert cluster.world_size // (strategy.tp * strategy.pp) == dp and (strategy.tp, strategy.pp) == (8, 16)
        assert strategy.stage_layers == (7,) + (8,) * 14 + (7,) and strategy.recompute == "none"
        assert r["unmodelled"] == ["overlap_p2p_comm"]


def test_gptneox_row_is_the_release_config_and_its_logged_flops():
    """published = 117 TFLOP/s x 96 GPUs / GPT-NeoX's logged FLOPs per token (6 x total params + 60 s h L, c560814b);
    total params of the untied 20B model as the cost model counts them (within the TP-replicated norms and biases);
    configs/20B.yml: 12 data-parallel replicas x micro-batch 4 x 32 accumulation steps."""
    (r,) = _rows("throughput", "gptneox2022")
    model, cluster, strategy, workload = _setup(r)
    params = estimate(model, cluster, strategy, workload).params_total
    assert params == pytest.approx(20_554_567_680, rel=2e-3)
    assert r["published"] == round(117e12 * 96 / (6 * 20_554_567_680 + 60 * 2048 * 6144 * 44))
    assert (cluster.world_size, strategy.tp, strategy.pp, strategy.zero, strategy.recompute) == (96, 2, 4, 1, "full")
    assert workload.global_batch == 96 // (2 * 4) * strategy.micro_batch * 32 and model.vocab_size == 50432
    assert r["precision"] == "fp16" and r["unmodelled"] == ["parallel_residual"]
    # DeeperSpeed eb7f5cff (0.3.15): the pipeline all-reduces (buffered_allreduce_fallback), stage1.py all-gathers
    assert strategy.zero1_all_reduce and strategy.optimizer_loop == "deepspeed-serial" and not strategy.overlap_grad_comm


# flash-attention training/README.md 'Training speed' (4a6eaa9f): model -> (million tokens per step, tokens/s,
# hours per 1B tokens)
FLASHATTN = {"125m": (0.5, 1310e3, 0.21), "355m": (0.5, 503e3, 0.55), "760m": (0.5, 245e3, 1.13),
             "1.3b": (1.0, 169e3, 1.64), "2.7b": (1.0, 85e3, 3.27)}


def test_flashattn_rows_are_the_readme_table_and_its_configs():
    """Whole-node tokens/s (the hours column is 1e9 / tokens/s / 3600); micro-batch by the configs' gpu_mem rule at
    80 GB; DDP + apex Adam up to 355M, ZeroRedundancyOptimizer from 760M; vocabulary padded to a multiple of 8."""
    rows = {r["id"].removeprefix("flashattn-gpt3-").removesuffix("-8g"): r
            for r in _rows("throughput", "flashattn2022")}
    assert set(rows) == set(FLASHATTN)
    for name, (million_tokens, tokens_s, hours) in FLASHATTN.items():
        model, cluster, strategy, workload = _setup(rows[name])
        assert rows[name]["published"] == tokens_s and 1e9 / tokens_s / 3600 == pytest.approx(hours, abs=0.006)
        assert workload.global_batch * workload.seq_len == million_tokens * 2 ** 20 and cluster.world_size == 8
        assert strategy.micro_batch == {768: 32, 1024: 32, 1536: 16, 2048: 8, 2560: 4}[model.d_model]
        assert (strategy.engine, strategy.zero) == ("ddp", 0 if model.d_model <= 1024 else 1)
        assert model.vocab_size == 50264 and model.vocab_size % 8 == 0 and strategy.recompute == "none"
        assert (strategy.attention, strategy.attention_kernel) == ("flash", "fa1")  # the repo's FA1 at 4a6eaa9f


# Nemotron-4 340B report Table 2: GPUs -> (data-parallel size, batch, iteration s, MFU %)
NEMOTRON4_RAMP = {1536: (16, 768, 10.3, 42.4), 3072: (32, 1536, 10.3, 42.3), 6144: (64, 2304, 8.0, 41.0)}


def test_nemotron4_rows_are_the_ramp_table_at_the_launcher_layout():
    """tokens/s = batch x 4096 / iteration s; TP 8 x PP 12, one layer per model chunk (VP 8), micro-batch 1; the MFU
    column lies between the full-square and causal model-FLOPs counts of the cost model's shape."""
    rows = _rows("throughput", "nemotron4tr2024")
    assert len(rows) == len(NEMOTRON4_RAMP)
    for r in rows:
        model, cluster, strategy, workload = _setup(r)
        dp, batch, iteration_s, mfu = NEMOTRON4_RAMP[cluster.world_size]
        assert r["published"] == round(batch * 4096 / iteration_s) and workload.global_batch == batch
        assert (strategy.tp, strategy.pp, strategy.virtual_stages, strategy.micro_batch) == (8, 12, 8, 1)
        assert cluster.world_size // 96 == dp and (batch // dp) % strategy.pp == 0
        est = estimate(model, cluster, strategy, workload)
        per_token = est.model_flops / est.tokens_per_step  # full-square attention
        causal = per_token - 6 * model.num_layers * model.d_model * workload.seq_len
        tokens_per_gpu = r["published"] / cluster.world_size
        assert tokens_per_gpu * causal / 9.89e12 - 0.3 <= mfu <= tokens_per_gpu * per_token / 9.89e12 + 0.3


# ---- LLaMA v1 (heldoutC, 2026-12-02 second session): paper Table 15 GPU-hours and tokens, shapes of the v1 release
HELD_OUT = HELD_OUT + ("llama1paper2023",)
# size -> (training tokens, GPU-hours, d_model, layers, heads, released model-parallel size = assumed TP)
LLAMA1 = {"7b": (1.0e12, 82_432, 4096, 32, 32, 1), "13b": (1.0e12, 135_168, 5120, 40, 40, 2),
          "33b": (1.4e12, 530_432, 6656, 60, 52, 4), "65b": (1.4e12, 1_022_362, 8192, 80, 64, 8)}
NEW_SOURCE_BOUNDS.update({"llama1paper2023": (0.09, 0.14)})  # reached 6.4 / 10.2% (HEAD f156a7f, stored constants);
# 7.9 / 13.0% since a multi-node ring's NVLink steps pay the AMD hosts' network post (comm.ring_latency)
# arrival (fp8 helper, stored constants) + ~30%: dgxc2024fp8 4.2 / 14.5%, torchtitan2024h100fp8 8.75 / 8.9%
NEW_SOURCE_BOUNDS.update({"dgxc2024fp8": (0.055, 0.19), "torchtitan2024h100fp8": (0.115, 0.12)})


def test_llama1_rows_are_the_gpu_hours_converted_at_the_released_layout():
    """tokens/s = tokens / (GPU-hours x 3600) x 2,048 GPUs, and the 65B row is the stated ~380 tokens/s/GPU; SwiGLU
    width int(8d / 3) rounded up to 256 (llama/model.py at 1076b9c5); 4M-token batch; TP = the README's MP size;
    micro-batch = the largest divisor of the per-replica batch whose modelled memory fits (the next one up does not)."""
    from dataclasses import replace

    rows = {r["id"].removeprefix("llama1-").removesuffix("-2048g"): r for r in _rows("throughput", "llama1paper2023")}
    assert set(rows) == set(LLAMA1)
    for size, (tokens, gpu_hours, d, layers, heads, tp) in LLAMA1.items():
        r = rows[size]
        model, cluster, strategy, workload = _setup(r)
        assert r["published"] == round(tokens / (gpu_hours * 3600) * 2048) and cluster.world_size == 2048
        assert (model.d_model, model.num_layers, model.num_heads, strategy.tp, strategy.pp) == (d, layers, heads, tp, 1)
        assert model.d_ff == 256 * -(-int(8 * d / 3) // 256) and model.vocab_size == 32000
        assert workload.global_batch * workload.seq_len == 4 * 2 ** 20 and r["precision"] == "bf16"
        per_replica = workload.global_batch // (cluster.world_size // tp)
        assert estimate(model, cluster, strategy, workload).fits and per_replica % strategy.micro_batch == 0
        if strategy.micro_batch < per_replica:
            bigger = replace(strategy, micro_batch=2 * strategy.micro_batch)
            assert not estimate(model, cluster, bigger, workload).fits, size
    assert rows["65b"]["published"] / 2048 == pytest.approx(380, rel=2e-3)


# GLM-130B training notes (logs/main-log-en.md, 96469512): global batch -> (s/iter, logged TFLOPS)
GLM130B = {4224: (88.5, 134), 6144: (122.5, 141)}
HELD_OUT = HELD_OUT + ("glm130b2022",)
NEW_SOURCE_BOUNDS.update({"glm130b2022": (0.18, 0.19)})  # reached 15.3 / 15.5% (HEAD f156a7f, stored constants)


def test_glm130b_rows_are_the_speed_tests_and_their_logged_flops_are_full_recompute():
    """tokens/s = batch x 2048 / s per iteration at TP 4 x PP 8 x DP 24 (768 A100 40GB); the logged TFLOPS is 4 x the
    forward FLOPs of the GeGLU / full-square-attention / tied-logits shape (full recomputation) within 1%; micro-batch
    4 is the largest divisor of the per-replica batch whose modelled memory fits 40 GB."""
    from dataclasses import replace

    rows = _rows("throughput", "glm130b2022")
    assert len(rows) == len(GLM130B)
    for r in rows:
        model, cluster, strategy, workload = _setup(r)
        seconds, tflops = GLM130B[workload.global_batch]
        assert r["published"] == round(workload.global_batch * 2048 / seconds)
        assert (cluster.world_size, strategy.tp, strategy.pp, strategy.zero, strategy.recompute) == \
            (768, 4, 8, 1, "full")
        assert workload.global_batch // (cluster.world_size // 32) in (176, 256) and r["precision"] == "fp16"
        h, layers, s = model.d_model, model.num_layers, workload.seq_len
        forward = 2 * layers * (4 * h * h + 3 * h * model.d_ff) + 4 * layers * s * h + 2 * h * model.vocab_size
        assert 4 * forward * r["published"] / 768 / 1e12 == pytest.approx(tflops, rel=0.01)
        assert model.tie_word_embeddings and strategy.kernels == "eager-fused-norm"
        assert strategy.zero1_all_reduce and strategy.optimizer_loop == "deepspeed-serial"  # DeepSpeed 0.6.1 fp16
        assert estimate(model, cluster, strategy, workload).fits
        assert not estimate(model, cluster, replace(strategy, micro_batch=8), workload).fits


# ---- heldoutV (2026-12-02 third session): classic V100 runs. Megatron-LM 2019 (Shoeybi et al., arXiv 1909.08053):
# Table 1 shapes (hidden, heads, layers, billions) -> Figure 5 weak-scaling efficiency on (model-parallel GPUs,
# model + data parallel GPUs) against the 39 TFLOP/s single-GPU baseline; Table 7 (8.3B, 8 GPUs): heads -> efficiency;
# Table 8 (1.2B, batch 8): GPUs -> speedup
MEGATRON2019_TABLE1 = {(1536, 16, 40, 1.2): ((1, 1.00), (64, 0.96)), (1920, 20, 54, 2.5): ((2, 0.95), (128, 0.83)),
                       (2304, 24, 64, 4.2): ((4, 0.82), (256, 0.79)), (3072, 32, 72, 8.3): ((8, 0.77), (512, 0.74))}
MEGATRON2019_HEADS = {16: 0.82, 24: 0.80, 32: 0.77}
MEGATRON2019_SPEEDUP = {2: 1.64, 4: 2.34, 8: 2.98}
HELD_OUT = HELD_OUT + ("megatron2019",)
# reached 55.1 / 86.0% (stored constants) with the fused optimizer, 32.7 / 43% with optimizer_loop per-tensor (the
# 2019 FP16_Optimizer loop; its 2 host syncs per tensor and the three-pass attention mask of mpu/transformer.py at
# a0368ddf are not priced): every row over-predicted
# 21.5 / 32.0% with the 3-pass eager mask counted (gpt2eager); 15.1 / 24.0% with Megatron-LM 2019's separate bias
# adds (smallhost, eager_kernels.megatron_bias_add_s)
NEW_SOURCE_BOUNDS.update({"megatron2019": (0.20, 0.31)})


def test_megatron2019_rows_are_the_paper_tables_on_dgx2h():
    """TFLOP/s per GPU = 39 x the weak-scaling efficiency (Figure 5, Table 7) or x speedup / GPUs (Table 8); GPT-2
    shapes of Table 1 (96 per head but Table 7's), vocabulary 51,200 (50,257 padded to 128 x 8), seq 1024, batch 8 per
    model replica (8 for the model-parallel runs, 512 = 8 x 64 replicas), fp16, recompute every layer; 16 V100 per
    DGX-2H node; gradients reduced after the backward (Megatron's own DDP) except on 256 / 512 GPUs (torch DDP)."""
    rows = _rows("throughput", "megatron2019")
    assert len(rows) == 2 * len(MEGATRON2019_TABLE1) + 2 + len(MEGATRON2019_SPEEDUP)
    seen = set()
    for r in rows:
        model, cluster, strategy, workload = _setup(r)
        gpus, d, heads = cluster.world_size, model.d_model, model.num_heads
        shape = next(k for k in MEGATRON2019_TABLE1 if k[0] == d)
        if d == 1536 and gpus in MEGATRON2019_SPEEDUP:
            efficiency = MEGATRON2019_SPEEDUP[gpus] / gpus
        elif heads != shape[1]:
            efficiency = MEGATRON2019_HEADS[heads]
        else:
            efficiency = dict(MEGATRON2019_TABLE1[shape])[gpus]
            assert d // heads == 96
        assert r["published"] == pytest.approx(39.0 * efficiency, abs=1e-4)
        assert r["metric"] == "hardware_tflops_per_device" and r["precision"] == "fp16"
        assert (model.num_layers, model.vocab_size, workload.seq_len) == (shape[2], 51200, 1024)
        est = estimate(model, cluster, strategy, workload)
        assert est.params_total / 1e9 == pytest.approx(shape[3], abs=0.06) and model.tie_word_embeddings
        dp = gpus // strategy.tp
        assert workload.global_batch == 8 * dp and strategy.micro_batch == 8 and strategy.pp == 1
        assert (strategy.engine, strategy.zero, strategy.recompute) == ("megatron", 0, "full")
        assert (strategy.attention, strategy.kernels, strategy.sequence_parallel) == ("eager", "eager", False)
        assert strategy.optimizer_loop == "per-tensor-fp16"  # FP16_Optimizer per-tensor loops, 2 syncs (a0368ddf)
        assert strategy.overlap_grad_comm == (gpus >= 256)
        assert cluster.gpus_per_node == min(gpus, 16) and "cluster" not in r and r["device"] == "v100-32gb"
        assert est.fits
        seen.add((gpus, d, heads))
    assert len(seen) == len(rows)


# BigScience tr8-104B tune-up (experiments/tr8-104B.md, 9449d93e / 3ce72692): (tp, pp, dp) -> seconds per iteration
# at 32 Jean Zay nodes x 4 V100, MBS 1, GBS 2048; the file's TFlops column = 104 x 4 x 2 x 2048 x 2048 / (s x 128 x 1e3)
TR8_STEP = {(4, 32, 1): (696, 39.17), (4, 16, 2): (681, 40.0), (2, 32, 2): (633, 43.0)}
HELD_OUT = HELD_OUT + ("bigscience2021tr8",)
# reached 49.2 / 60.5% (stored constants), every row over-predicted (model too fast): head dim 11600 / 80 = 145 and,
# at tp 4, 2900-wide QKV / attention-output GEMM operands are not multiples of 8 (fp16 tensor cores); 26.4 / 34.1%
# since e414025 prices them (costmodel/alignment.py); 18.3 / 30.7% since d72deb8: the TP 4 rows (20 heads per rank)
# ran the fp32 softmax fallback (BigScience's 2021-10..2022-03 code skipped the fused kernel: megatron_softmax.py)
NEW_SOURCE_BOUNDS.update({"bigscience2021tr8": (0.21, 0.34)})


def test_bigscience_tr8_rows_are_the_tune_up_table_converted():
    """tokens/s = 2048 x 2048 / s; the file's TFlops follow from the same seconds (its perl line); 'normal 104B' =
    the tr8-104B.slurm of that commit (64 layers, 11600, 80 heads; ~104B parameters), ZeRO-1, fp16, full recompute,
    GPT-2 vocabulary padded to 128 x tp, Jean Zay's Omni-Path rate of the tr1 rows; every row fits 32 GB."""
    rows = _rows("throughput", "bigscience2021tr8")
    tr1_rate = _rows("throughput", "bigscience2021tr1")[0]["cluster"]["inter_node_bytes_per_s"]
    assert len(rows) == len(TR8_STEP)
    for r in rows:
        model, cluster, strategy, workload = _setup(r)
        dp = cluster.world_size // (strategy.tp * strategy.pp)
        seconds, tflops = TR8_STEP[(strategy.tp, strategy.pp, dp)]
        assert r["published"] == round(2048 * 2048 / seconds) and workload.global_batch == 2048
        assert 104 * 4 * 2 * 2048 * 2048 / (seconds * 128 * 1e3) == pytest.approx(tflops, rel=2e-3)  # the table rounds
        assert (model.num_layers, model.d_model, model.num_heads, workload.seq_len) == (64, 11600, 80, 2048)
        assert model.vocab_size == 50257 + (-50257) % (128 * strategy.tp) and model.tie_word_embeddings
        assert (cluster.world_size, cluster.gpus_per_node, strategy.micro_batch) == (128, 4, 1)
        assert (strategy.engine, strategy.zero, strategy.recompute, r["precision"]) == ("deepspeed", 1, "full", "fp16")
        assert r["cluster"]["inter_node_bytes_per_s"] == tr1_rate and strategy.zero1_all_reduce
        est = estimate(model, cluster, strategy, workload)
        assert est.params_total / 1e9 == pytest.approx(104, abs=1.0) and est.fits


# BigScience 'Benchmarking setup 1B3' (experiments/tr3m-1B3.md, a590cbdc): (tp, pp, dp, mbs, recompute) -> seconds per
# iteration on 2 Jean Zay nodes x 4 V100 32GB at GBS 512 (the 32GB tables; the file's TFlops = its perl line)
TR3M_STEP = {(1, 1, 8, 1, "full"): 29, (1, 1, 8, 2, "full"): 29, (1, 1, 8, 4, "full"): 28, (1, 1, 8, 8, "full"): 28,
             (1, 2, 4, 1, "full"): 30, (1, 2, 4, 2, "full"): 29, (1, 2, 4, 8, "full"): 29, (1, 4, 2, 1, "full"): 32,
             (1, 4, 2, 8, "full"): 32, (2, 1, 4, 1, "full"): 53, (1, 1, 8, 1, "none"): 23, (1, 2, 4, 1, "none"): 23,
             (1, 4, 2, 1, "none"): 25, (1, 4, 2, 2, "none"): 24, (2, 1, 4, 1, "none"): 39}
HELD_OUT = HELD_OUT + ("bigscience2021tr3m",)
# reached 11.3 / 54.3% (stored constants): TP 1 rows within 0.6-11.6% (model too fast by ~10% at PP 1, where it
# credits larger micro-batches the run does not show), TP 2 rows +52 / +54% (the run's TP 2 is 1.7-1.8x TP 1's time);
# 5.8 / 15.4% since d72deb8: the TP 2 rows ran PyTorch's fp32 softmax fallback (costmodel/megatron_softmax.py)
NEW_SOURCE_BOUNDS.update({"bigscience2021tr3m": (0.08, 0.19)})


def test_bigscience_tr3m_rows_are_the_1b3_benchmark_tables():
    """tokens/s = 512 x 2048 / s; the file's TFlops follow from the same seconds with factor 4 (checkpointing) or 3;
    shape and flags of tr3m-1B3-emb-norm-pile.slurm (24 x 2048, FFN 8192 = 4h, 16 heads, ZeRO-1, fp16), DeepSpeed's
    pipeline engine at every PP (reduction after the last micro-batch), tr1's Omni-Path rate; every row fits 32 GB."""
    rows = _rows("throughput", "bigscience2021tr3m")
    tr1_rate = _rows("throughput", "bigscience2021tr1")[0]["cluster"]["inter_node_bytes_per_s"]
    assert len(rows) == len(TR3M_STEP)
    tflops = {(1, 1, 8, 1, "full"): 47.0, (2, 1, 4, 1, "full"): 25.7, (1, 4, 2, 2, "none"): 42.5}  # three cells
    for r in rows:
        model, cluster, strategy, workload = _setup(r)
        dp = cluster.world_size // (strategy.tp * strategy.pp)
        key = (strategy.tp, strategy.pp, dp, strategy.micro_batch, strategy.recompute)
        seconds = TR3M_STEP[key]
        assert r["published"] == round(512 * 2048 / seconds) and workload.global_batch == 512
        if key in tflops:
            factor = 4 if strategy.recompute == "full" else 3
            assert 1.3 * factor * 2 * 2048 * 512 / (seconds * 8 * 1e3) == pytest.approx(tflops[key], abs=0.15)  # the table truncates
        assert (model.num_layers, model.d_model, model.num_heads, model.d_ff, workload.seq_len) == \
            (24, 2048, 16, 8192, 2048)
        assert model.vocab_size == 50257 + (-50257) % (128 * strategy.tp) and model.tie_word_embeddings
        assert (cluster.world_size, cluster.gpus_per_node, r["precision"]) == (8, 4, "fp16")
        assert (strategy.engine, strategy.zero, strategy.overlap_grad_comm) == ("deepspeed", 1, False)
        assert r["cluster"]["inter_node_bytes_per_s"] == tr1_rate and strategy.zero1_all_reduce
        assert estimate(model, cluster, strategy, workload).fits


# ---- heldout4 (2026-12-02 fourth pass): ZeRO-3 / sharded data parallelism ACROSS NODES from new publishers.
# BloombergGPT (arXiv 2303.17564v3, Sec. 3.3-3.4, Table 4): 32.5 s per step, 102 TFLOPs, 512 A100 40GB on 64
# p4d.24xlarge (400 Gb/s EFA per node), SMP sharded data parallelism (MiCS) with activation checkpointing
HELD_OUT = HELD_OUT + ("bloomberggpt2023",)
# reached +65.0% (HEAD 335d792, stored constants): model too fast -- 19.7 s against 32.5 s, 1.8 s of its 7.5 s of
# ZeRO-3 traffic exposed at micro-batch 4 (assumed; micro-batch 1 would be +1.4%)
NEW_SOURCE_BOUNDS.update({"bloomberggpt2023": (0.85, 0.85)})


def test_bloomberggpt_row_is_the_paper_step_and_its_tflops_are_8n():
    """tokens/s = 2048 x 2048 / 32.5 s; the paper's 102 TFLOPs is 8 x 50.56e9 FLOPs per token at that rate (forward
    counted four times under full recompute, no attention term); shape of Appendix A.5 (50,558,868,480 parameters);
    micro-batch 4 = the largest divisor of the 4 sequences per GPU whose modelled memory fits 40 GB; 400 Gb/s EFA
    per node over 8 GPUs at the a100 device's 23/25 achievable fraction."""
    (r,) = _rows("throughput", "bloomberggpt2023")
    model, cluster, strategy, workload = _setup(r)
    assert r["published"] == round(2048 * 2048 / 32.5) and workload.global_batch == 2048
    assert 8 * 50_558_868_480 * r["published"] / 512 / 1e12 == pytest.approx(102, rel=0.01)
    assert (model.num_layers, model.d_model, model.num_heads, model.vocab_size, workload.seq_len) == \
        (70, 7680, 40, 131072, 2048) and model.tie_word_embeddings
    assert (cluster.world_size, cluster.gpus_per_node, r["device"]) == (512, 8, "a100-40gb")
    assert cluster.inter_node_bytes_per_s == pytest.approx(400e9 / 8 / 8 * 23 / 25)
    assert (strategy.engine, strategy.zero, strategy.recompute, strategy.tp, strategy.pp) == ("fsdp", 3, "full", 1, 1)
    assert workload.global_batch // cluster.world_size == 4 == strategy.micro_batch
    est = estimate(model, cluster, strategy, workload)
    assert est.params_total / 1e9 == pytest.approx(50.56, abs=0.1) and est.fits


# ATorch (intelligent-machine-learning/dlrover atorch/examples/llama2/README.md, 3a442b72): Llama-2-7B at 4096 tokens
# on A100 80GB nodes with 800 Gb/s RDMA. FSDP rows: GPUs -> TFLOPs (batch 4 per GPU, no accumulation); DS 3D rows:
# (GPUs, tp, pp) -> TFLOPs (micro-batch 8, 64 accumulation steps). TFLOPs = example_utils.compute_llama2_training_flops
ATORCH_FSDP = {8: 204.67, 16: 197.22, 32: 196.04, 64: 195.14}
ATORCH_DS3D = {(8, 1, 2): 190.27, (8, 2, 1): 159.19, (8, 2, 2): 155.73, (16, 2, 2): 154.84, (32, 2, 2): 154.44,
               (64, 2, 2): 153.93}
HELD_OUT = HELD_OUT + ("atorch2023",)
# reached 4.5 / 9.5% (HEAD d6c1e30 + uncommitted tree of 13:30, stored constants): FSDP -9.5 / -7.4 / -7.0 / -6.8%
# (model too slow; the published run is at 65.6% hardware-FLOP utilisation), DS 3D -7.4% at tp 1 pp 2, +1.0..+1.8%
NEW_SOURCE_BOUNDS.update({"atorch2023": (0.06, 0.125)})


def _atorch_flops_per_token(model, seq: int) -> float:
    """compute_llama2_training_flops (gradient checkpointing, no LoRA) per token: matmuls only, full-square scores."""
    h, ff, vocab, layers = model.d_model, model.d_ff, model.vocab_size, model.num_layers
    layer = 8 * seq * h * h + 4 * seq * seq * h + 6 * seq * h * ff
    return (layers * layer * 4 + 2 * seq * h * vocab * 3) / seq


def test_atorch_rows_are_the_readme_tflops_through_the_scripts_flop_count():
    """tokens/s = TFLOPs x 1e12 x GPUs / (the scripts' hardware FLOPs per token); HFU = TFLOPs / 312; the FSDP rows are
    FULL_SHARD + autocast + per-layer checkpointing with HF eager kernels, the DS 3D rows DeepSpeed ZeRO-1 fp16 with
    its pipeline engine; 800 Gb/s per node at the a100 device's achievable fraction; every row fits 80 GB."""
    rows = _rows("throughput", "atorch2023")
    assert len(rows) == len(ATORCH_FSDP) + len(ATORCH_DS3D)
    for r in rows:
        model, cluster, strategy, workload = _setup(r)
        gpus = cluster.world_size
        assert (model.d_model, model.num_layers, model.num_heads, model.num_kv_heads, model.d_ff, model.vocab_size,
                workload.seq_len) == (4096, 32, 32, 32, 11008, 32000, 4096) and not model.tie_word_embeddings
        assert cluster.inter_node_bytes_per_s == pytest.approx(800e9 / 8 / 8 * 23 / 25) and gpus // 8 == r["nodes"]
        if strategy.engine == "fsdp":
            tflops = ATORCH_FSDP[gpus]
            assert (strategy.zero, strategy.micro_batch, r["precision"]) == (3, 4, "bf16")
            assert workload.global_batch == 4 * gpus
            assert (strategy.kernels, strategy.cross_entropy, strategy.attention) == ("eager", "hf", "flash")
        else:
            tflops = ATORCH_DS3D[(gpus, strategy.tp, strategy.pp)]
            dp = gpus // (strategy.tp * strategy.pp)
            assert (strategy.zero, strategy.micro_batch, r["precision"]) == (1, 8, "fp16")
            assert workload.global_batch == 8 * 64 * dp  # 64 accumulation steps
            assert not strategy.overlap_grad_comm and not strategy.sequence_parallel
        assert r["published"] == round(tflops * 1e12 * gpus / _atorch_flops_per_token(model, 4096))
        assert strategy.recompute == "full" and estimate(model, cluster, strategy, workload).fits
    assert [round(ATORCH_FSDP[g] / 312 * 100, 1) for g in (8, 16, 32, 64)] == [65.6, 63.2, 62.8, 62.5]  # README HFU(%)


# KempnerForge MFU benchmark (benchmarks/mfu_scaling, 9f3f03a0; code 01b461a): experiment -> (GPUs, model, tp,
# dp_shard, batch_size, grad_accum_steps, tok/s, step s) as mfu_bench.sh runs it and mfu_scaling.md reports it
KFORGE = {2: (2, "7b", 1, 2, 2, 4, 18728, 3.50), 4: (4, "7b", 1, 4, 4, 2, 38983, 3.36),
          6: (4, "7b", 2, 2, 4, 2, 25980, 2.52), 7: (8, "7b", 4, 2, 4, 2, 44299, 1.48),
          8: (8, "13b", 1, 8, 4, 4, 35405, 14.81), 9: (8, "13b", 4, 2, 4, 4, 27345, 4.79),
          10: (16, "7b", 4, 4, 4, 2, 82988, 1.58), 11: (16, "13b", 4, 4, 4, 4, 53814, 4.87),
          12: (32, "7b", 4, 8, 4, 2, 155917, 1.68), 13: (32, "13b", 4, 8, 4, 4, 104309, 5.03),
          14: (32, "70b", 4, 8, 2, 4, 17657, 14.85)}
KFORGE_SIZE = {"7b": 8.03, "13b": 14.84, "70b": 70.55}  # the report's Models table, billions
HELD_OUT = HELD_OUT + ("kempnerforge2026",)
# reached 10.0 / 21.8% (HEAD + uncommitted tree of 13:25, stored constants): pure FSDP on one node -21 / -22% and
# FSDP=8 13B (compile off) -12% (model too slow: 51-54% MFU published on H200), TP 4 x FSDP rows -4..+16% (70B +16%)
# 2026-12-04: the run's gradient_sync last / bf16 loss / gathered logits / bf16 model set on these rows as on their
# memory rows (a run's software on all its rows): 10.8 / 28.6% LOSO, 70B +28.6% (too fast)
# 2026-12-05 (fitfix2): 11.4 / 30.1% (70B +30.1%) when the stored constants became the fit's minimum (0.8188 / 71.7 /
# 31.3 us, published.fit from a fixed grid; was 11.0 / 29.3%): the fit moved, not the model -- max 0.30 -> 0.31
NEW_SOURCE_BOUNDS.update({"kempnerforge2026": (0.13, 0.31)})


def test_kempnerforge_rows_are_the_mfu_report_at_the_scripts_batches():
    """tok/s = dp_shard x batch_size x grad_accum x 4096 / Step Time within 0.3%; shapes give the report's parameter
    counts (FFN 4 d 2/3 x 1.3 rounded up to 256); 4 H200 per node; compile off only in experiment 08."""
    rows = {int(r["id"].split("-")[1]): r for r in _rows("throughput", "kempnerforge2026")}
    assert set(rows) == set(KFORGE)
    for n, r in rows.items():
        gpus, size, tp, dp, mb, accum, tps, step = KFORGE[n]
        model, cluster, strategy, workload = _setup(r)
        assert r["published"] == tps and dp * mb * accum * 4096 / step == pytest.approx(tps, rel=3e-3)
        assert (cluster.world_size, cluster.gpus_per_node, r["device"]) == (gpus, min(gpus, 4), "h200")
        assert (strategy.tp, strategy.micro_batch, workload.global_batch, workload.seq_len) == (tp, mb, dp * mb * accum,
                                                                                               4096)
        assert (strategy.engine, strategy.zero, strategy.recompute, strategy.sequence_parallel) == \
            ("fsdp", 3, "full", True)
        assert strategy.kernels == ("eager" if n == 8 else "fused")
        est = estimate(model, cluster, strategy, workload)
        assert est.params_total / 1e9 == pytest.approx(KFORGE_SIZE[size], abs=0.01) and est.fits


# KempnerForge MFU report's Mem/GPU column (GiB: metrics/memory.py peak_gb = max_memory_allocated / 1024**3 at 01b461a)
KFORGE_MEM_GIB = {2: 62.4, 4: 61.1, 6: 45.9, 7: 32.7, 8: 88.5, 9: 45.1, 10: 29.4, 11: 39.2, 12: 27.6, 13: 36.3, 14: 93.2}


def test_kempnerforge_memory_rows_are_the_report_at_its_throughput_rows_configs():
    """Each measured row is its experiment's throughput row (model, layout, batch, kernels) with the report's
    Mem/GPU in GB, read as max_memory_allocated over the whole run: the whole bf16 model on the device before
    fully_shard without TP (whole_model_load), bf16 optimizer state (model.to(bf16) before sharding); what the
    model cannot express is listed per row."""
    data = load()
    base = {int(r["id"].split("-")[1]): r for r in _rows("throughput", "kempnerforge2026")}
    rows = {int(r["id"].split("-")[1]): r for r in _rows("memory", "kempnerforge2026")}
    assert set(rows) == set(KFORGE_MEM_GIB)
    for n, r in rows.items():
        b = base[n]
        assert r["id"] == b["id"] + "-memory" and r["measured"] and r["measured_as"] == "allocated"
        assert r["published_gb"] == pytest.approx(KFORGE_MEM_GIB[n] * 2**30 / 1e9, abs=0.01)
        assert all(r.get(k) == b.get(k) for k in ("model", "device", "nodes", "gpus_per_node", "tp", "micro_batch",
                                                  "global_batch", "recompute", "engine", "zero", "precision"))
        # gradient_sync last: training/grad.py maybe_no_sync; F.cross_entropy on the bf16 logits; under TP the logits
        # gathered to Replicate -- the same run's software on its throughput row (a run's facts go on all its rows)
        assert r["software"] == b["software"] == {"kernels": b["software"]["kernels"], "optimizer_dtype": "bf16",
                                                  "gradient_sync": "last", "cross_entropy": "torch-16bit",
                                                  **({"lm_head": "gathered"} if "tp" in r else {})}
        assert bool(r.get("whole_model_load")) == ("tp" not in r)
        assert "fsdp_grad_sync_last_microbatch" not in b.get("unmodelled", ())
        assert memory_row(r, data["sources"]).check == "measured"

# KempnerForge config validation report (5d3e7232): Mem/GPU (GiB, max_memory_allocated of rank 0) and the KempnerPulse
# nvidia-smi reading of 7b_32gpu_fsdp's GPU 0 (MiB)
KFORGE_CFG_MEM_GIB = {"kforge-cfg-7b-h200-4g-fsdp4": 81.0, "kforge-cfg-7b-h200-32g-fsdp32": 51.3,
                      "kforge-cfg-7b-h200-12g-tp4-fsdp3": 30.4, "kforge-pp-13b-h200-32g-tp4-pp2-fsdp4": 24.0,
                      "kforge-pp-29b-h200-32g-tp4-pp2-fsdp4": 32.8, "kforge-pp-70b-h200-32g-tp4-pp4-fsdp2": 51.0}


def test_kempnerforge_config_validation_memory_rows_are_the_report():
    base = {r["id"]: r for r in _rows("throughput", "kempnerforge2026cfg") + _rows("throughput", "kempnerforge2026pp")}
    rows = _rows("memory", "kempnerforge2026cfg") + _rows("memory", "kempnerforge2026pp")
    assert {r["id"] for r in rows} == {k + "-memory" for k in KFORGE_CFG_MEM_GIB} | {
        "kforge-cfg-7b-h200-32g-fsdp32-smi-memory"}
    for r in rows:
        b = base[r["id"].removesuffix("-memory").removesuffix("-smi")]
        smi = r["id"].endswith("-smi-memory")
        assert r["measured_as"] == ("device" if smi else "allocated")
        gb = 73302 * 2**20 / 1e9 if smi else KFORGE_CFG_MEM_GIB[b["id"]] * 2**30 / 1e9
        assert r["published_gb"] == pytest.approx(gb, abs=0.01)
        assert all(r.get(k) == b.get(k) for k in ("model", "device", "nodes", "gpus_per_node", "tp", "pp",
                                                  "micro_batch", "global_batch", "recompute", "engine", "zero"))
        gathered = {"lm_head": "gathered"} if "tp" in r and "pp" not in r else {}
        assert r["software"] == {**b["software"], "optimizer_dtype": "bf16", "gradient_sync": "last",
                                 "cross_entropy": "torch-16bit", **gathered}
        assert bool(r.get("whole_model_load")) == ("tp" not in r and "pp" not in r and not smi)

# KempnerForge weak scaling (benchmarks/weak_scaling_160gpu README, e9f91892; code 3ad9d9a): (model, GPUs) -> (tok/s,
# Step s) at TP 4 x FSDP GPUs/4, 4 accumulation steps; the 70B 8-GPU point is left out (the model does not fit it)
KFORGE_WEAK = {("13b", 8): (29860, 4.39), ("13b", 32): (110373, 4.75), ("13b", 64): (216507, 4.84),
               ("13b", 128): (423306, 4.95), ("13b", 160): (534644, 4.91), ("70b", 32): (18688, 14.03),
               ("70b", 64): (35824, 14.63), ("70b", 96): (52190, 15.07), ("70b", 128): (69985, 14.98),
               ("70b", 160): (85571, 15.32)}
HELD_OUT = HELD_OUT + ("kempnerforge2026weak",)
# reached 7.8 / 10.2% (HEAD + uncommitted tree of 13:35, stored constants): 13B -7.6..-10.2% (model too slow), 70B
# +5.1..+9.8% (too fast); both flat with GPU count like the runs (92-97% weak-scaling efficiency)
# 2026-12-04: the same software as kempnerforge2026's rows (gradient_sync last, ...): 13.4 / 23.3% LOSO, 13B -3..-8%,
# 70B +21..+23% (too fast: one reduce-scatter a step; the rows agree with ~27-30 GB/s of InfiniBand per GPU, not 45)
NEW_SOURCE_BOUNDS.update({"kempnerforge2026weak": (0.15, 0.25)})


def test_kempnerforge_weak_scaling_rows_are_the_report_at_tp4_fsdp_across_nodes():
    """tok/s = (GPUs / 4) x batch x 4 x 4096 / Step s within 0.5%; the shapes of the MFU report; TP 4 inside each
    4-GPU node, FSDP over the nodes (2-40); every row fits 141 GB."""
    rows = _rows("throughput", "kempnerforge2026weak")
    assert len(rows) == len(KFORGE_WEAK)
    for r in rows:
        model, cluster, strategy, workload = _setup(r)
        size = "13b" if model.d_model == 5120 else "70b"
        tps, step = KFORGE_WEAK[(size, cluster.world_size)]
        dp, mb = cluster.world_size // 4, (4 if size == "13b" else 2)
        assert r["published"] == tps and dp * mb * 4 * 4096 / step == pytest.approx(tps, rel=5e-3)
        assert (strategy.tp, strategy.micro_batch, cluster.gpus_per_node) == (4, mb, 4)
        assert workload.global_batch == dp * mb * 4  # 4 accumulation steps
        assert (strategy.engine, strategy.zero, strategy.kernels, r["device"]) == ("fsdp", 3, "fused", "h200")
        assert estimate(model, cluster, strategy, workload).fits


# KempnerForge 175B on 360 H200 (benchmarks/175b_360gpu README, b62d2e36; code 5666d0d): TP 4 x FSDP2 dp_shard 90
HELD_OUT = HELD_OUT + ("kempnerforge2026xl",)
# reached -18.2% (batch 8: model compute alone 19.7 s > the 19.09 s step) and +61.0% (batch 1: the runs' 8.1% MFU is
# FSDP-bound, the model exposes 5.9 of 8.4 s of gathers / reduce-scatters against a ~14.0 s step) -- HEAD d4c08ac +
# uncommitted tree of 13:28, stored constants
NEW_SOURCE_BOUNDS.update({"kempnerforge2026xl": (0.52, 0.80)})


def test_kempnerforge_175b_rows_are_the_report_and_its_batch_1_mfu():
    """batch 8: tokens/s = 8 x 90 x 4096 / 19.09 s within 0.1%; batch 1: the same tokens/s-per-MFU ratio at the report's
    8.1% MFU; 175.0B parameters; TP 4 inside each 4-GPU node, FSDP over all 90 nodes, no accumulation; both fit."""
    rows = {r["micro_batch"]: r for r in _rows("throughput", "kempnerforge2026xl")}
    assert set(rows) == {8, 1}
    assert 8 * 90 * 4096 / 19.09 == pytest.approx(rows[8]["published"], rel=1e-3)
    assert rows[1]["published"] == round(rows[8]["published"] * 8.1 / 47.7)
    for mb, r in rows.items():
        model, cluster, strategy, workload = _setup(r)
        assert (cluster.world_size, cluster.gpus_per_node, strategy.tp, workload.global_batch) == (360, 4, 4, 90 * mb)
        assert (strategy.engine, strategy.zero, strategy.recompute, strategy.kernels) == ("fsdp", 3, "full", "fused")
        est = estimate(model, cluster, strategy, workload)
        assert est.params_total / 1e9 == pytest.approx(175.0, abs=0.1) and est.fits


# T5X GPU table with Transformer Engine (google-research/t5x 0bc3617a docs/usage/gpu-usage.md): size -> (GPUs, TP,
# BS / GPU, ~sequences/s); the A100 xl row at 144 GPUs is left out (its per-GPU batch is ambiguous, source string)
T5X_TE = {"small": (8, 1, 256, 5712), "large": (64, 1, 32, 4853), "xl": (256, 1, 8, 4322), "xxl": (512, 8, 36, 1887)}
HELD_OUT = HELD_OUT + ("t5xgpu2023te",)
# reached +26.8 / -11.0 / -24.3 / -7.6% (small / large / xl / xxl; heldout5, HEAD 8a5c05b + live tree of 14:05, stored
# constants): the model prices the Feb and Apr 2023 stacks within 1% of each other, the runs moved +18..+80%
NEW_SOURCE_BOUNDS.update({"t5xgpu2023te": (0.21, 0.30)})


def test_t5x_te_rows_are_the_apr_2023_table_at_the_feb_rows_shapes():
    """GBS = GPUs x BS/GPU / TP; published = sequences/s x 512 input tokens; every row is its t5xgpu2023 row (same
    size, GPUs, batch, shapes and software) but for the published figure and the source; all fit 80 GB."""
    old = {r["id"].split("-")[2]: r for r in _rows("throughput", "t5xgpu2023")}
    rows = {r["id"].split("-")[2]: r for r in _rows("throughput", "t5xgpu2023te")}
    assert set(rows) == set(T5X_TE)
    for size, r in rows.items():
        gpus, tp, bs, seqs = T5X_TE[size]
        model, cluster, strategy, workload = _setup(r)
        assert r["published"] == seqs * 512 and workload.global_batch == gpus * bs // tp
        assert (cluster.world_size, strategy.tp, strategy.micro_batch) == (gpus, tp, bs)
        assert all(r[k] == old[size][k] for k in r if k not in ("id", "source", "published", "unmodelled"))
        assert estimate(model, cluster, strategy, workload).fits


# NVIDIA Rosetta Pax README (JAX-Toolbox 51f9aced): size -> (GPUs, FSDP, BS / GPU, bf16 sequences/s, MAX_STEPS,
# walltime days as the README rounds it)
PAX = {"126m": (64, 1, 4, 1761.3, 600000, 1.01), "5b": (256, 256, 8, 465.45, 75000, 3.82),
       "175b": (256, 256, 6, 18.29, 75000, 72.92)}
HELD_OUT = HELD_OUT + ("pax2023",)
# reached +44.6 / +39.6 / +0.7% (126M DP 64 / 5B FSDP 256 selective / 175B FSDP 256 full; heldout5, live tree of
# 13:40, stored constants): the JAX runs of the small models are as over-predicted as T5X small; 175B across 32 nodes
# holds
NEW_SOURCE_BOUNDS.update({"pax2023": (0.33, 0.50)})


def test_pax_rows_are_the_readme_bf16_column_and_its_walltimes():
    """published = sequences/s x 2048; GBS = BS/GPU x GPUs; the README's walltime = MAX_STEPS x GBS / sequences/s;
    126M pure data parallel without remat, 5B / 175B FSDP over all 256 GPUs (selective / full remat); all fit."""
    rows = {r["id"].split("-")[1][3:]: r for r in _rows("throughput", "pax2023")}
    assert set(rows) == set(PAX)
    for size, r in rows.items():
        gpus, fsdp, bs, seqs, steps, days = PAX[size]
        model, cluster, strategy, workload = _setup(r)
        assert r["published"] == round(seqs * 2048) and workload.global_batch == gpus * bs
        assert steps * workload.global_batch / seqs / 86400 == pytest.approx(days, rel=2e-3)  # 72.90 vs 72.92
        assert (cluster.world_size, strategy.micro_batch, strategy.zero) == (gpus, bs, 3 if fsdp > 1 else 0)
        assert strategy.recompute == {"126m": "none", "5b": "selective", "175b": "full"}[size]
        assert estimate(model, cluster, strategy, workload).fits


# NeMo launcher README a6bf3b73 'mT5 Results': size -> (GPUs, GBS, tokens/s); configs conf/training/mt5/{170m,390m}.yaml
NEMO_MT5_CONV = {"170m": (32, 2048, 4112062), "390m": (64, 2048, 3744914)}
HELD_OUT = HELD_OUT + ("nemo2022mt5small",)
# reached +41.2 / +29.3% (heldout5, live tree of 13:45, stored constants): the small-mT5 premium the vocab section
# found with no O(V) mechanism in NeMo 1.x (was +46 / +31% before the head bias)
NEW_SOURCE_BOUNDS.update({"nemo2022mt5small": (0.40, 0.47)})


def test_nemo_mt5_small_rows_are_the_convergence_tables_at_the_launcher_yamls():
    """tokens/s as printed; tp 1, no accumulation (GBS = micro-batch x data-parallel), mT5's 250,112-word tied head,
    engine megatron with the all-reduce during the backward (NeMo v1.7.2's enc-dec bf16 O2 sets async_grad_allreduce
    True: per-tensor hooks under optimizer.grad_sync(); rowtruth 2026-12-02), the per-tensor collectives unmodelled;
    both fit 80 GB."""
    rows = {r["id"].split("-")[2]: r for r in _rows("throughput", "nemo2022mt5small")}
    assert set(rows) == set(NEMO_MT5_CONV)
    for size, r in rows.items():
        gpus, gbs, tps = NEMO_MT5_CONV[size]
        model, cluster, strategy, workload = _setup(r)
        assert r["published"] == tps and (cluster.world_size, workload.global_batch) == (gpus, gbs)
        assert strategy.micro_batch * cluster.world_size == gbs and strategy.tp == 1
        assert (model.vocab_size, model.tie_word_embeddings) == (250112, True)
        assert (strategy.engine, strategy.overlap_grad_comm) == ("megatron", True)
        assert r["unmodelled"] == ["per_tensor_grad_allreduce"]
        assert estimate(model, cluster, strategy, workload).fits


# Alibaba Megatron-LLaMA README (d2e05b8 / e3d671a): row suffix -> (GPUs, optimizer engine zero, tokens/s per GPU);
# the 32-GPU rate is table 1's 10B tokens in 40.3 hours
MLLAMA = {"32g-odo": (32, 2, 1e10 / (40.3 * 3600) / 32), "256g-odo": (256, 2, 1890), "512g-odo": (512, 2, 1845),
          "256g-do": (256, 1, 1630), "512g-do": (512, 1, 1430)}
HELD_OUT = HELD_OUT + ("megatronllama2023",)
# reached -1.1 / +10.3 / +11.0 / +18.4 / +12.7% (heldout5, live tree of 13:45, stored constants): the 32-GPU row holds,
# the model loses 4% per GPU from 32 to 512 GPUs where the runs lose 14% (ODO) / 34% (DO at 512 vs the 32-GPU ODO rate)
NEW_SOURCE_BOUNDS.update({"megatronllama2023": (0.13, 0.22)})


def test_megatron_llama_rows_are_the_readme_tables_at_the_13b_script():
    """LLaMA-13B at TP 2, micro-batch 4, GBS 2048, selective recompute, sequence parallel; ODO = ZeRO-2 (a
    reduce-scatter every micro-batch, overlapped), DO = the distributed optimizer after the backward; the README's
    0.85 scaling ratio is 1845 / the 32-GPU rate; 4 x 200 Gb/s per 8-GPU node; all fit 80 GB."""
    rows = {r["id"].split("a100-")[1]: r for r in _rows("throughput", "megatronllama2023")}
    assert set(rows) == set(MLLAMA)
    assert 1845 / MLLAMA["32g-odo"][2] == pytest.approx(0.85, abs=0.01)
    for key, r in rows.items():
        gpus, zero, per_gpu = MLLAMA[key]
        model, cluster, strategy, workload = _setup(r)
        assert r["published"] == round(per_gpu * gpus) and cluster.world_size == gpus
        assert (strategy.tp, strategy.micro_batch, workload.global_batch) == (2, 4, 2048)
        assert strategy.recompute == "selective" and strategy.attention_kernel == "fa1"  # flash_attn_unpadded_func
        assert (strategy.engine, strategy.zero, strategy.overlap_grad_comm) == ("megatron", zero, zero == 2)
        assert float(r["cluster"]["inter_node_bytes_per_s"]) == pytest.approx(4 * 200e9 / 8 / 8 * 0.92)
        est = estimate(model, cluster, strategy, workload)
        assert est.params_total / 1e9 == pytest.approx(13.0, abs=0.05) and est.fits


# BAAI FlagPerf Megatron-Core Llama 3 cases (training/nvidia/llama3_{8B,70B}-megatron/README.md): row key ->
# (GPUs, tp, pp, token/p/s, MFU % as printed); MFU = token/p/s x 6 x (8e9 | 70e9) / (312e12 | 989e12)
FLAGPERF = {"8b-a800-8g-pp2dp4tp1": (8, 1, 2, 3698.7, 56.9), "8b-a800-8g-pp4dp2tp1": (8, 1, 4, 3306.5, 50.0),
            "8b-a800-8g-pp2dp2tp2": (8, 2, 2, 3409.2, 52.4), "8b-a800-8g-pp2dp1tp4": (8, 4, 2, 3006.1, 46.2),
            "8b-a800-8g-pp8dp1tp1": (8, 1, 8, 2690.3, 41.4), "8b-a800-8g-pp1dp1tp8": (8, 8, 1, 2451.2, 37.7),
            "8b-a800-8g-pp4dp1tp2": (8, 2, 4, 3042.7, 46.8), "8b-h100-8g-pp1dp4tp2": (8, 2, 1, 8103, 39.3),
            "8b-h100-16g-pp1dp8tp2": (16, 2, 1, 7914, 38.4), "70b-h100-64g-pp4dp2tp8": (64, 8, 4, 851, 36.1)}
HELD_OUT = HELD_OUT + ("flagperf2024",)
# reached -17..-10% on the 8B rows but TP 8 (-0.5%) and 70B TP 8 x PP 4 (-5.0%) (heldout5, live tree of 13:50, stored
# constants): the model is too slow where the runs reach 50-57% MFU on A800 and too cheap on TP 8's all-reduces
NEW_SOURCE_BOUNDS.update({"flagperf2024": (0.16, 0.20)})


def test_flagperf_rows_are_the_readme_tables_and_their_mfu_column():
    """published = token/p/s x GPUs; the harness's MFU (6 x 8e9 or 70e9 FLOPs per token) reproduces the printed MFU;
    micro-batch 1, GBS 512, seq 8192, no recompute, distributed optimizer without overlaps; A800 = a100-80gb with 8
    NVLink links; all fit 80 GB."""
    rows = {r["id"].split("llama3-")[1]: r for r in _rows("throughput", "flagperf2024")}
    assert set(rows) == set(FLAGPERF)
    for key, r in rows.items():
        gpus, tp, pp, tps, mfu = FLAGPERF[key]
        model, cluster, strategy, workload = _setup(r)
        n, peak = (70e9, 989e12) if key.startswith("70b") else (8e9, 312e12 if "a800" in key else 989e12)
        # the PP4DP2TP1 ablation prints MFU 50.0 where its 3306.5 token/p/s give 50.9 (a typo in one of the two)
        tolerance = 1 if key == "8b-a800-8g-pp4dp2tp1" else 0.11
        assert round(tps * 6 * n / peak * 100, 1) == pytest.approx(mfu, abs=tolerance)
        assert r["published"] == round(tps * gpus) and cluster.world_size == gpus
        assert (strategy.tp, strategy.pp, strategy.micro_batch, workload.global_batch, workload.seq_len) == \
            (tp, pp, 1, 512, 8192)
        assert (strategy.engine, strategy.zero, strategy.recompute, strategy.overlap_grad_comm) == \
            ("megatron", 1, "none", False)
        if "a800" in key:
            assert float(r["cluster"]["intra_node_bytes_per_s"]) == pytest.approx(8 * 25e9 * 0.8)
        assert estimate(model, cluster, strategy, workload).fits


# ---- heldoutM (2026-12-02 fifth session): Megatron-LM README 2021 rows narayanan2021 lacks, NeMo launcher r22.03
HELD_OUT = HELD_OUT + ("megatron2021readme", "nemo2022mar")
# Megatron-LM README images/cases_april2021.png (50a4b5fa) at examples/sc21/run_table_1.sh, and the GPT-3 example of
# the README at 152aab30 (examples/pretrain_gpt3_175B.sh): id -> (hidden, layers, heads, GPUs, tp, pp, MBS, batch,
# layers per virtual stage or 0, TFLOP/s per GPU, billions of parameters as the table prints them)
MEGATRON21 = {"megatron21-3.6b": (3072, 30, 32, 64, 2, 1, 16, 512, 0, 138, 3.6),
              "megatron21-76.1b": (10240, 60, 80, 1024, 8, 4, 2, 1792, 5, 140, 76.1),
              "megatron21-310.1b": (16384, 96, 128, 1920, 8, 16, 1, 2160, 3, 155, 310.1),
              "megatron21-529.6b": (20480, 105, 128, 2520, 8, 35, 1, 2520, 1, 163, 529.6),
              "megatron21-gpt3-175b-jan": (12288, 96, 96, 1024, 8, 16, 1, 1536, 0, 138, 175.0)}
# NeMo launcher README 6.1.2 at 261d93af (r22.03): nodes -> tokens per second, GPT-3 5B
NEMO_MAR = {1: 39660, 2: 78769, 5: 193258, 9: 342920, 10: 383500, 18: 652460, 20: 726384}
HELDOUTM_BOUNDS = {  # (mean, max) |error| reached at arrival (stored constants) + a margin: regression bounds
    # megatron2021readme 3.1 / 8.1% (3.6B +8.1%, 76B +3.4%, 310B +0.1%, 530B -1.9%, 175B Jan 2021 +1.9%);
    # nemo2022mar 0.9 / 2.5%
    "megatron2021readme": (0.06, 0.12), "nemo2022mar": (0.04, 0.06)}


def _eq3_flops_per_sample(h: int, layers: int, vocab: int, seq: int) -> float:
    """Narayanan et al. 2021 eq. 3 per sequence, recomputation included: 96 s l h^2 (1 + s/6h + V/16lh)."""
    return 96 * seq * layers * h * h * (1 + seq / (6 * h) + vocab / (16 * layers * h))


def test_megatron2021_readme_rows_are_the_table_image_at_the_sc21_scripts():
    """published = the README's TFLOP/s per GPU (hardware FLOPs of eq. 3 = the model's under full recompute); the
    shapes, layouts and batches are run_table_1.sh's (interleaved: layers per virtual stage -> chunks, micro-batches
    a multiple of pp) and pretrain_gpt3_175B.sh's (1F1B, 16 stages); eq. 3 x 1536 / (1024 x 138e12) is the README's
    'around 32 seconds'; vocabulary 51,200, seq 2048, fp16, recompute full, A100 80GB, 8 GPUs per node."""
    rows = {r["id"]: r for r in _rows("throughput", "megatron2021readme")}
    assert set(rows) == set(MEGATRON21)
    for key, (h, layers, heads, gpus, tp, pp, mbs, batch, per_chunk, tflops, size) in MEGATRON21.items():
        r = rows[key]
        model, cluster, strategy, workload = _setup(r)
        assert (model.d_model, model.num_layers, model.num_heads, model.vocab_size, workload.seq_len) == \
            (h, layers, heads, 51200, 2048)
        assert (cluster.world_size, cluster.gpus_per_node, strategy.tp, strategy.pp, strategy.micro_batch,
                workload.global_batch) == (gpus, 8, tp, pp, mbs, batch)
        assert r["published"] == tflops and r["metric"] == "hardware_tflops_per_device"
        assert (r["precision"], strategy.recompute, strategy.attention, strategy.sequence_parallel) == \
            ("fp16", "full", "eager", False)
        dp = gpus // (tp * pp)
        if per_chunk:
            assert strategy.pp_schedule == "interleaved" and strategy.virtual_stages == layers // pp // per_chunk
            assert (batch // (dp * mbs)) % pp == 0
        elif pp > 1:
            assert strategy.pp_schedule == "1f1b"
        # torch DDP (overlapped) below model-parallel size 8, Megatron's local DDP after the backward above it
        assert (strategy.engine, strategy.overlap_grad_comm) == (("ddp", True) if tp * pp < 8 else ("megatron", False))
        est = estimate(model, cluster, strategy, workload)
        assert est.hardware_flops == pytest.approx(batch * _eq3_flops_per_sample(h, layers, 51200, 2048), rel=1e-9)
        assert est.params_total / 1e9 == pytest.approx(size, rel=0.02) and est.fits
    jan = MEGATRON21["megatron21-gpt3-175b-jan"]
    step = 1536 * _eq3_flops_per_sample(12288, 96, 51200, 2048) / (1024 * jan[9] * 1e12)
    assert step == pytest.approx(32, abs=0.5)


def test_nemo2203_rows_are_the_march_table_at_the_launcher_yaml():
    """tokens/s as the r22.03 table prints them (its 20-node cell is the convergence row: 160 GPUs, GBS 1440,
    726,384); 5b.yaml at 261d93af: tp 2, micro-batch 2, global batch 1440, bf16 O2, no recompute, vocabulary 50,257
    padded to 128 x 2; NeMo 1.7's main-gradient all-reduce after the backward; within 3% of the July table."""
    rows = {r["id"]: r for r in _rows("throughput", "nemo2022mar")}
    assert set(rows) == {f"nemo2203-gpt-5b-{n}n" for n in NEMO_MAR}
    july = {r["nodes"]: r for r in _rows("throughput", "nemo2022jun") if "5b" in r["id"]}
    for n, tps in NEMO_MAR.items():
        r = rows[f"nemo2203-gpt-5b-{n}n"]
        model, cluster, strategy, workload = _setup(r)
        assert r["published"] == tps and r["metric"] == "tokens_per_s" and r["precision"] == "bf16"
        assert (model.d_model, model.num_layers, model.num_heads, model.vocab_size, workload.seq_len) == \
            (4096, 24, 32, 50432, 2048)
        assert model.vocab_size == math.ceil(50257 / 256) * 256
        assert (cluster.nodes, strategy.tp, strategy.pp, strategy.micro_batch, workload.global_batch) == \
            (n, 2, 1, 2, 1440)
        assert (strategy.engine, strategy.zero, strategy.overlap_grad_comm, strategy.recompute) == \
            ("megatron", 0, False, "none")
        assert {k: v for k, v in r.items() if k not in ("id", "source", "published")} == \
            {k: v for k, v in july[n].items() if k not in ("id", "source", "published")}
        assert abs(tps / NEMO_JUL["5b"][n] - 1) < 0.03
        assert estimate(model, cluster, strategy, workload).fits
    assert NEMO_MAR[20] == 726384


def test_heldoutm_sources_out_of_sample():
    """Regression bounds (reached at arrival, stored constants, + a margin), not targets."""
    for source, (mean_bound, max_bound) in HELDOUTM_BOUNDS.items():
        errs = [abs(e) for e in _errors(source).values()]
        assert sum(errs) / len(errs) < mean_bound and max(errs) < max_bound, source


# ---- heldoutF (2026-12-02 fifth session): ZeRO-3-class FSDP across nodes in other stacks -- MaxText on JAX / XLA
# (DGX Cloud Benchmarking maxtext/README_70b.md) and torchtitan's bf16 405B FSDP2 x TP 8 row
# Llama2 70B BF16, pure FSDP (v24.11.1 = v25.01 table): GPUs -> (step s, tokens/s, MFU %) as printed
MAXTEXT_L2 = {64: (6.999, 74908.99, 52.59), 128: (7.072, 148271.49, 52.04), 256: (7.153, 293184.96, 51.45)}
HELD_OUT = HELD_OUT + ("dgxc2024maxtext",)
# reached -12.8 / -12.6 / -13.1% (heldoutF, live tree of 17:05, stored constants): the runs' FSDP growth from 8 to 32
# nodes (+2.2% step) is the model's (+2.5%); the level is compute (52% MFU, ~63% hardware FLOPs under the custom remat)
NEW_SOURCE_BOUNDS.update({"dgxc2024maxtext": (0.22, 0.23)})


def test_dgxc_maxtext_llama2_rows_are_the_readme_table_and_its_flop_count():
    """published = the tokens/s column = 4096 x GBS / step; the README's count per sequence (Notes: 12 L d^2 (1 + g/a +
    s/d) + 18 L ffn d + 6 V d, times s) is 1.82e15 and reproduces its MFU column at 989 TFLOP/s; pure FSDP over all
    GPUs (GBS = 2 x GPUs), no TP / PP, MaxText's custom remat priced as full; all fit 80 GB."""
    rows = {r["nodes"] * r["gpus_per_node"]: r for r in _rows("throughput", "dgxc2024maxtext")}
    assert set(rows) == set(MAXTEXT_L2)
    s, d, layers, ffn, vocab = 4096, 8192, 80, 28672, 32000
    per_seq = s * (12 * layers * d ** 2 * (1 + 8 / 64 + s / d) + 18 * layers * ffn * d + 6 * vocab * d)
    assert per_seq == pytest.approx(1.82e15, rel=0.003)
    for gpus, (step, tps, mfu) in MAXTEXT_L2.items():
        r = rows[gpus]
        model, cluster, strategy, workload = _setup(r)
        assert workload.global_batch == 2 * gpus and cluster.world_size == gpus and workload.seq_len == s
        assert s * workload.global_batch / step == pytest.approx(tps, abs=0.01)
        assert r["published"] == round(tps)
        assert workload.global_batch * 1.82e15 / step / gpus / 989e12 * 100 == pytest.approx(mfu, abs=0.01)
        assert (strategy.engine, strategy.zero, strategy.tp, strategy.pp, strategy.micro_batch) == ("fsdp", 3, 1, 1, 2)
        assert (strategy.recompute, strategy.attention, strategy.attention_kernel) == ("full", "flash", "cudnn")
        est = estimate(model, cluster, strategy, workload)
        assert est.fits and est.params_total / 1e9 == pytest.approx(69.0, abs=0.3)


# Llama3 70B BF16, pure FSDP (v25.02 table, jax:25.01-maxtext, remat save_qkv_proj): GPUs -> (step s, tokens/s, MFU %)
MAXTEXT_L3 = {128: (15.563, 134752.43, 51.20), 256: (15.444, 271581.46, 51.59)}
HELD_OUT = HELD_OUT + ("dgxc2025maxtext",)
# reached -5.9 / -7.4% (heldoutF, live tree of 17:05, stored constants; the issue's flags alone -21 / -22%: the engine's
# fa2 kernel instead of cuDNN's, which runs only the causal triangle on Hopper)
NEW_SOURCE_BOUNDS.update({"dgxc2025maxtext": (0.12, 0.13)})


def test_dgxc_maxtext_llama3_rows_are_the_readme_table_and_its_flop_count():
    """published = 8192 x GBS / step; the README's count per sequence at s 8192 and the 128,256 vocabulary is 3.94e15
    and reproduces its MFU column; pure FSDP over 16 / 32 nodes, micro-batch 2, full recompute; fits 80 GB."""
    rows = {r["nodes"] * r["gpus_per_node"]: r for r in _rows("throughput", "dgxc2025maxtext")}
    assert set(rows) == set(MAXTEXT_L3)
    s, d, layers, ffn, vocab = 8192, 8192, 80, 28672, 128256
    per_seq = s * (12 * layers * d ** 2 * (1 + 8 / 64 + s / d) + 18 * layers * ffn * d + 6 * vocab * d)
    assert per_seq == pytest.approx(3.94e15, rel=0.002)
    for gpus, (step, tps, mfu) in MAXTEXT_L3.items():
        r = rows[gpus]
        model, cluster, strategy, workload = _setup(r)
        assert workload.global_batch == 2 * gpus and cluster.world_size == gpus and workload.seq_len == s
        assert s * workload.global_batch / step == pytest.approx(tps, abs=0.01) and r["published"] == round(tps)
        assert workload.global_batch * 3.94e15 / step / gpus / 989e12 * 100 == pytest.approx(mfu, abs=0.01)
        assert (strategy.engine, strategy.zero, strategy.tp, strategy.recompute) == ("fsdp", 3, 1, "full")
        assert model.vocab_size == vocab
        assert estimate(model, cluster, strategy, workload).fits


HELD_OUT = HELD_OUT + ("torchtitan2024h100tp",)
# reached +7.3% (heldoutF, live tree of 16:58, stored constants; +9.2% at 17:05 without z3expose's unadopted FSDP2 copy
# term): 1.6 s of 9.0 s of FSDP traffic exposed over 16 nodes
NEW_SOURCE_BOUNDS.update({"torchtitan2024h100tp": (0.13, 0.13)})


def test_torchtitan_405b_row_is_the_performance_page_and_its_mfu():
    """109 WPS per GPU (train.py divides by the model-parallel size) x 128 GPUs; torchtitan's MFU (6 x non-embedding
    parameters + 12 L h q s per token, 989 TFLOP/s) gives the page's 29.0% for Llama 3.1 405B; FSDP 16 x TP 8, local
    batch 2, global 32, full AC; fits the 96 GB H100."""
    (r,) = _rows("throughput", "torchtitan2024h100tp")
    model, cluster, strategy, workload = _setup(r)
    assert r["published"] == 109 * 128 and cluster.world_size == 128
    d, layers, heads, kv, ffn, vocab, s = 16384, 126, 128, 8, 53248, 128256, 8192
    ffn_rule = 4096 * -(-int(1.2 * int(2 * 4 * d / 3)) // 4096)  # torchtitan ModelArgs: multiple_of 4096, x1.2
    assert ffn_rule == ffn and model.d_ff == ffn
    per_layer = 2 * d * d + 2 * d * (kv * d // heads) + 3 * d * ffn + 2 * d
    non_embedding = layers * per_layer + d + vocab * d  # the output head counts, the token embedding does not
    flop_per_token = 6 * non_embedding + 12 * layers * heads * (d // heads) * s
    assert flop_per_token * 109 / 989e12 * 100 == pytest.approx(29.0, abs=0.1)
    assert (strategy.engine, strategy.zero, strategy.tp, strategy.micro_batch, workload.global_batch) == \
        ("fsdp", 3, 8, 2, 32)
    assert strategy.recompute == "full" and strategy.sequence_parallel
    est = estimate(model, cluster, strategy, workload)
    assert est.fits and est.params_total / 1e9 == pytest.approx(405.9, abs=1.0)


# BigScience tr11-200B-ml chronicles-prequel.md, the 02-25 sections (f6582434): 181B = hidden 14336, 72 layers, 64 heads
# on 48 nodes; (dp, tp, pp, mbs, gbs) -> Sec/it at iteration 2 (the second TP 4 / PP 12 / MBS 2 run, 113.54 s at 38 GB,
# the OOM rows and the 177B TP 1 / PP 48 row are left out, as the source string says)
BS_LAYOUTS = {(8, 8, 6, 4, 1568): 113.01, (8, 8, 6, 4, 2048): 114.11, (8, 8, 6, 6, 2016): 123.57,
              (4, 8, 12, 4, 1568): 92.75, (4, 8, 12, 4, 2048): 117.07, (4, 8, 12, 2, 1568): 99.93,
              (4, 8, 12, 2, 2048): 128.82, (6, 8, 8, 4, 2016): 113.16, (12, 8, 4, 2, 2016): 125.52,
              (12, 8, 4, 4, 2016): 114.81, (24, 8, 2, 1, 2016): 145.45, (24, 8, 2, 2, 2016): 136.13,
              (8, 4, 12, 4, 2048): 111.89, (8, 4, 12, 2, 2048): 110.48, (16, 4, 6, 4, 2048): 117.11,
              (16, 4, 6, 2, 2048): 111.71, (16, 2, 12, 2, 2048): 112.50, (8, 2, 24, 1, 2048): 119.53,
              (8, 2, 24, 2, 2048): 122.75, (4, 4, 24, 1, 2048): 130.60}
HELD_OUT = HELD_OUT + ("bigscience2022layouts",)
# reached 8.1 / 26.1% (stored constants) with DeepSpeed's defaults (d03e5333): the GBS 1568 TP 8 / PP 6 snapshot +26.1%
# (same layout at GBS 2048 +1.1%), TP 8 / PP 2 / DP 24 +22.4 / +18.2%; 6.6 / 22.0% once the rows say what DeepSpeed
# 0.5.x / 0.6.0 ran for fp16 ZeRO-1 (all-reduced buckets, serial per-tensor checks): TP 8 / PP 2 / DP 24 +13.6 / +9.4%;
# 5.1 / 22.0% since d72deb8: the TP 8 rows at MBS 1 / 2 / 6 ran PyTorch's fp32 softmax (costmodel/megatron_softmax.py)
HELDOUTM_BOUNDS.update({"bigscience2022layouts": (0.07, 0.25)})


def test_bigscience_layout_rows_are_the_02_25_tables_at_the_slurm_of_that_day():
    """tokens/s = GBS x 2048 / Sec/it; DP x TP x PP = 384 on 48 nodes; fp16, ZeRO-1, every layer recomputed
    (tr11-200B-ml.slurm at a16f0ea7); 'type:transformer' partition (Megatron-DeepSpeed before 00f5f889): 72 / pp layers
    per stage, no stage_layers; vocabulary 250,880; Omni-Path at the measured 2.53e9 B/s per GPU, as the prequel
    rows."""
    rows = _rows("throughput", "bigscience2022layouts")
    seen = {}
    for r in rows:
        model, cluster, strategy, workload = _setup(r)
        dp = cluster.world_size // (strategy.tp * strategy.pp)
        key = (dp, strategy.tp, strategy.pp, strategy.micro_batch, workload.global_batch)
        assert r["published"] == round(workload.global_batch * 2048 / BS_LAYOUTS[key])
        assert r["id"] == f"bs-layouts-181b-tp{key[1]}pp{key[2]}dp{dp}-mb{key[3]}-gbs{key[4]}"
        assert (model.d_model, model.num_layers, model.num_heads, model.vocab_size, workload.seq_len) == \
            (14336, 72, 64, 250880, 2048)
        assert (cluster.nodes, cluster.gpus_per_node, float(r["cluster"]["inter_node_bytes_per_s"])) == (48, 8, 2.53e9)
        assert (strategy.engine, strategy.zero, strategy.recompute, r["precision"]) == ("deepspeed", 1, "full", "fp16")
        # DeepSpeed 0.5.10 / 0.6.0 engine.py: contiguous_gradients off at stage 1 -> buffered_reduce_fallback all-reduce
        assert (strategy.zero1_all_reduce, strategy.optimizer_loop, strategy.overlap_grad_comm) == \
            (True, "deepspeed-serial", False)
        assert "stage_layers" not in r["software"] and model.num_layers % strategy.pp == 0
        assert workload.global_batch % (dp * strategy.micro_batch) == 0
        assert r["metric"] == "tokens_per_s" and estimate(model, cluster, strategy, workload).fits
        seen[key] = r
    assert set(seen) == set(BS_LAYOUTS)
    # the prequel's production-shaped neighbour (TP 4 / PP 12 / MBS 2 at 02-27, 70 layers, BF16 optimizer): 102.03 s
    assert BS_LAYOUTS[8, 4, 12, 2, 2048] == pytest.approx(102.03 * 72 / 70, rel=0.06)


HELD_OUT = HELD_OUT + ("pax2024",)
# reached +17.6% (heldoutF, live tree of 17:05, stored constants): compute 2.79 s + 0.14 s of 0.32 s FSDP traffic
# exposed against 3.45 s; the same configuration's 23.08 row (pax2023, 4.40 s) is +39% with the same FSDP bytes
NEW_SOURCE_BOUNDS.update({"pax2024": (0.23, 0.23)})


def test_pax_24_04_row_is_the_readme_table_and_the_pax2023_configuration():
    """594.13 sequences/s x 2048 tokens; the README's walltime (75,000 steps x 2048 sequences) is 2.99 days; the shape,
    mesh, batch and recompute are pax2023's 5B row -- only the container (and so the attention kernel) changed."""
    (r,) = _rows("throughput", "pax2024")
    (old,) = [o for o in _rows("throughput", "pax2023") if "gpt5b" in o["id"]]
    assert r["published"] == round(594.13 * 2048)
    assert 75000 * 2048 / 594.13 / 86400 == pytest.approx(2.99, abs=0.005)
    same = ("model", "device", "nodes", "gpus_per_node", "micro_batch", "global_batch", "recompute", "engine", "zero",
            "precision", "metric")
    assert all(r[k] == old[k] for k in same)
    assert (r["software"]["attention"], old["software"]["attention"]) == ("flash", "eager")
    model, cluster, strategy, workload = _setup(r)
    assert workload.global_batch == 8 * cluster.world_size == 2048
    assert estimate(model, cluster, strategy, workload).fits


# KempnerForge config validation report: row key -> (dp_shard, tp, batch_size, grad_accum_steps, tok/s, step s)
KFORGE_CFG = {"7b-h200-4g-fsdp4": (4, 1, 8, 4, 38858, 13.49), "7b-h200-32g-fsdp32": (32, 1, 4, 4, 297384, 7.05),
              "7b-h200-12g-tp4-fsdp3": (3, 4, 4, 8, 67045, 5.86)}
HELD_OUT = HELD_OUT + ("kempnerforge2026cfg",)
# reached -19.9 / -20.5 / +0.4% (heldoutF, live tree of 17:20, stored constants): the pure-FSDP rows are the H200 compute
# ceiling of kempnerforge2026's FSDP rows (-21%); per GPU the runs lose 4.3% from 1 to 8 nodes, the model 5.2%
NEW_SOURCE_BOUNDS.update({"kempnerforge2026cfg": (0.18, 0.27)})


def test_kempnerforge_config_validation_rows_are_the_report_and_the_tomls():
    """tok/s = dp_shard x batch_size x grad_accum_steps x 4096 / step time (scripts/train.py) within 0.3%; the
    micro-batch is the toml's batch_size, the global batch its product with the accumulation and dp_shard; 4 H200 per
    node; all fit 141 GB."""
    rows = {r["id"].split("kforge-cfg-")[1]: r for r in _rows("throughput", "kempnerforge2026cfg")}
    assert set(rows) == set(KFORGE_CFG)
    for key, (dp, tp, bs, ga, tps, step) in KFORGE_CFG.items():
        r = rows[key]
        model, cluster, strategy, workload = _setup(r)
        assert r["published"] == tps and dp * bs * ga * 4096 / step == pytest.approx(tps, rel=0.003)
        assert (cluster.world_size, cluster.gpus_per_node, strategy.tp) == (dp * tp, 4, tp)
        assert (strategy.micro_batch, workload.global_batch, workload.seq_len) == (bs, dp * bs * ga, 4096)
        assert (strategy.engine, strategy.zero, strategy.recompute, strategy.kernels) == ("fsdp", 3, "full", "fused")
        assert model.d_ff == 256 * math.ceil(int(4 * 4096 * 2 / 3 * 1.3) / 256) == 14336
        assert estimate(model, cluster, strategy, workload).fits


# NeMo launcher README 3579cdb3 (22.08), GPT-3 175B tokens/s by nodes; release-perf CI step times (22.08.11 container,
# training=gpt3/175b, public/data/gpt3/gpt3_175b_tp8_pp8_{128,32}nodes_bf16_precision_O2_100steps.json)
NEMO_2208_175B = {8: 7500, 16: 14950, 32: 29537, 64: 58211, 128: 109684}
NEMO_2208_CI_175B_STEP_S = {128: 28.70000839999999, 32: 103.0242136}


def test_nemo_2208_175b_table_counts_1536_sequences_per_step():
    rows = [r for r in load()["throughput"] if r["source"] == "nemo2022" and r["id"].startswith("nemo-gpt-175b")]
    assert {r["nodes"]: r["published"] for r in rows} == NEMO_2208_175B
    for r in rows:  # the run: 175b.yaml at 3579cdb3; the table's count: the July yaml's global batch
        assert (r["tp"], r["pp"], r["micro_batch"], r["global_batch"], r["counted_batch"]) == (8, 8, 2, 2048, 1536)
        assert r["recompute"] == "selective" and r["software"]["sequence_parallel"] is True
    # the CI's own step times: 1536 x 2048 tokens over them is the table (128 nodes to 0.1%, 32 nodes to 3.5%);
    # 2048 x 2048 is not (33-38% off)
    for nodes, step in NEMO_2208_CI_175B_STEP_S.items():
        assert abs(1536 * 2048 / step / NEMO_2208_175B[nodes] - 1) < (0.001 if nodes == 128 else 0.035)
        assert 2048 * 2048 / step / NEMO_2208_175B[nodes] - 1 > 0.3
    # counted with 1536, every cell is one micro-batch slot of ~0.40 s over its (m + pp - 1) slots, m = 2048 / (2 dp)
    for nodes, tps in NEMO_2208_175B.items():
        slots = 2048 // (2 * nodes // 8) + 8 - 1
        assert 0.400 < 1536 * 2048 / tps / slots < 0.407
    # the metric: counted_batch x seq over the predicted step, the same estimate as without it
    for r in rows:
        est = estimate(*_setup(r))
        row = throughput_row(r, load()["sources"])
        assert row.predicted == pytest.approx(1536 * 2048 / est.step_s, rel=1e-12)
        assert "counts gb1536" in row.config


# ---- heldoutH (2026-12-02 fifth session): BAAI FlagPerf cases on other stacks than flagperf2024 -- DeepSpeed 0.11.1
# ZeRO-3 around Hugging Face models (A800 / H800 / H100) and FlagScale / Megatron-Core layouts on H800 and 440 H100
# DeepSpeed cases (README '性能指标' tables): id -> (token/p/s, MFU % as printed, harness parameter count, peak,
# seq, micro-batch, global batch)
FLAGPERF_DS = {
    "flagperf-ds-llama2-7b-a800-8g": (3564, 47.9, 7e9, 312e12, 4096, 1, 8),
    "flagperf-ds-llama2-7b-a800-8g-s2048-mb3": (3917, 52.7, 7e9, 312e12, 2048, 3, 24),
    "flagperf-ds-llama2-7b-a800-8g-s2048-mb3-ga64": (4062, 54.7, 7e9, 312e12, 2048, 3, 1536),
    "flagperf-ds-llama2-7b-h800-8g": (7151, 30.4, 7e9, 989e12, 4096, 1, 8),
    "flagperf-ds-chatglm3-6b-h100-8g": (8429.22, 30.7, 6e9, 989e12, 4096, 1, 8)}
# Megatron-family cases: id -> (token/p/s, MFU %, harness parameter count, GPUs, tp, pp, accumulate_steps, seq)
FLAGPERF_MEGA = {
    "flagperf-fs-llama2-70b-h800-32g-tp8pp4": (641.93, 27.2, 70e9, 32, 8, 4, 44, 4096),
    "flagperf-fs-llama2-70b-h800-32g-tp4pp8": (791.37, 33.6, 70e9, 32, 4, 8, 44, 4096),
    "flagperf-fs-llama2-70b-h800-32g-tp4pp8-gbs1024": (908.29, 38.6, 70e9, 32, 4, 8, 1024, 4096),
    "flagperf-mc-llama3-8b-h100-440g-pp1dp220tp2": (7047, 34.2, 8e9, 440, 2, 1, 8, 8192)}
HELD_OUT = HELD_OUT + ("flagperf2024ds", "flagperf2024mega")
HELDOUTH_BOUNDS = {  # (mean, max) |error| reached at arrival (stored constants, live tree 17:45) + a margin
    # flagperf2024ds 3.3 / 5.0% (llama2 7B A800 -4.2 / -2.3 / -5.0%, H800 -1.8%, ChatGLM3 6B H100 -3.4%)
    # flagperf2024mega 3.3 / 5.2% (FlagScale 70B H800 +4.7 / +1.4 / +1.7%, Megatron-Core 8B on 440 H100 -5.2%)
    "flagperf2024ds": (0.06, 0.09), "flagperf2024mega": (0.06, 0.09)}


def test_heldouth_sources_out_of_sample():
    """Regression bounds (reached at arrival, stored constants, + a margin), not targets."""
    for source, (mean_bound, max_bound) in HELDOUTH_BOUNDS.items():
        errs = [abs(e) for e in _errors(source).values()]
        assert sum(errs) / len(errs) < mean_bound and max(errs) < max_bound, source


def test_flagperf_deepspeed_rows_are_the_readme_tables_and_the_harness_conversion():
    """published = token/p/s x 8 (the harness: DeepSpeed's global RunningAvgSamplesPerSec x seq x micro-batch / 8);
    its MFU (6 x 7e9 or 6e9 per token over 312 / 989 TFLOP/s) reproduces the printed column; ZeRO-3 over one node,
    no checkpointing, HF modules (eager element-wise ops, the models' fp32 loss); Llama 2 7B's and ChatGLM3 6B's
    parameter counts; A800 / H800 = 8-link NVLink; all fit 80 GB."""
    rows = {r["id"]: r for r in _rows("throughput", "flagperf2024ds")}
    assert set(rows) == set(FLAGPERF_DS)
    for key, r in rows.items():
        tps, mfu, n, peak, seq, mb, gbs = FLAGPERF_DS[key]
        model, cluster, strategy, workload = _setup(r)
        assert tps * 6 * n / peak * 100 == pytest.approx(mfu, abs=0.1)  # printed truncated or rounded
        assert r["published"] == round(tps * 8) and cluster.world_size == 8
        assert (workload.seq_len, strategy.micro_batch, workload.global_batch) == (seq, mb, gbs)
        assert (strategy.engine, strategy.zero, strategy.tp, strategy.pp, strategy.recompute) == \
            ("deepspeed", 3, 1, 1, "none")
        assert (strategy.kernels, strategy.cross_entropy, strategy.attention) == ("eager", "hf", "flash")
        if "a800" in key or "h800" in key:
            assert float(r["cluster"]["intra_node_bytes_per_s"]) == pytest.approx(8 * 25e9 * 0.8)
        assert get_device(r["device"]).name == ("a100-80gb" if "a800" in key else "h100-80gb")
        est = estimate(model, cluster, strategy, workload)
        # LlamaForCausalLM 7B: 6.74e9; ChatGLM3: 28 x (4096 x (4096 + 2 x 256) + 4096^2 + 3 x 4096 x 13696) + 2 x
        # 65,024 x 4096 = 6.24e9 (its qkv bias, 0.1 M, not counted)
        layer = 4096 * (4096 + 2 * 256) + 4096 * 4096 + 3 * 4096 * 13696
        expect = 6.74e9 if "llama2" in key else 28 * layer + 2 * 65024 * 4096
        assert est.params_total == pytest.approx(expect, rel=0.003)
        assert est.fits


def test_flagperf_megatron_rows_are_the_readme_tables_and_the_harness_gbs():
    """published = token/p/s x GPUs; the harness's GBS = micro-batch x GPUs x accumulate_steps / (tp x pp) (44 or
    1024 for the 70B with data-parallel size 1; 1760 = 8 x 220 for the 440-GPU 8B row); its MFU (6 x 70e9 / 8e9 per
    token over 989 TFLOP/s) reproduces the printed column; no recompute, sequence parallel, distributed optimizer
    without overlaps, 1F1B; H800 = 8-link NVLink and one 200 Gb/s HCA per GPU; all fit 80 GB."""
    rows = {r["id"]: r for r in _rows("throughput", "flagperf2024mega")}
    assert set(rows) == set(FLAGPERF_MEGA)
    for key, r in rows.items():
        tps, mfu, n, gpus, tp, pp, ga, seq = FLAGPERF_MEGA[key]
        model, cluster, strategy, workload = _setup(r)
        assert tps * 6 * n / 989e12 * 100 == pytest.approx(mfu, abs=0.1)  # printed truncated or rounded
        assert r["published"] == round(tps * gpus) and cluster.world_size == gpus
        gbs = 1 * gpus * ga // (tp * pp)
        assert (strategy.tp, strategy.pp, strategy.micro_batch, workload.global_batch, workload.seq_len) == \
            (tp, pp, 1, gbs, seq)
        assert (strategy.engine, strategy.zero, strategy.recompute, strategy.overlap_grad_comm,
                strategy.sequence_parallel) == ("megatron", 1, "none", False, True)
        if "h800" in key:
            assert gbs in (44, 1024) and gpus // (tp * pp) == 1
            assert float(r["cluster"]["intra_node_bytes_per_s"]) == pytest.approx(8 * 25e9 * 0.8)
            assert float(r["cluster"]["inter_node_bytes_per_s"]) == pytest.approx(200e9 / 8 * 0.9)
        else:
            assert gbs == 1760 and gpus // (tp * pp) == 220
        est = estimate(model, cluster, strategy, workload)
        assert est.fits


# FlagScale Aquila2 7B on one A800 node (aquila2_7b-flagscale/README.md): id -> (token/p/s, MFU %, tp, pp, micro-batch)
FLAGPERF_AQUILA = {"flagperf-fs-aquila2-7b-a800-8g-tp1pp1dp8": (3936.8, 53.0, 1, 1, 1),
                   "flagperf-fs-aquila2-7b-a800-8g-tp8pp1dp1-mb8": (2866.3, 38.6, 8, 1, 8),
                   "flagperf-fs-aquila2-7b-a800-8g-tp1pp8dp1-mb4": (2093.5, 28.2, 1, 8, 4),
                   "flagperf-fs-aquila2-7b-a800-8g-tp2pp2dp2-mb4": (3468.3, 46.7, 2, 2, 4)}
HELD_OUT = HELD_OUT + ("flagperf2023aquila",)
# reached 4.4 / 8.5% (stored constants, live tree 17:30: pre-training case -2.2 / -1.0 / -5.5 / -1.9%, fine-tuning
# case -5.8 / -5.6 / -8.5%)
HELDOUTH_BOUNDS.update({"flagperf2023aquila": (0.07, 0.12)})


def test_flagperf_aquila_rows_are_the_readme_table_and_the_harness_gbs():
    """published = token/p/s x 8; GBS = micro-batch x 8 x 9 / (tp x pp); MFU column = token/p/s x 6 x 7e9 / 312e12;
    vocabulary 100,008 padded to 128 x tp; FFN 11008 (--multiple-of 256); no sequence parallelism, no overlaps
    (FlagScale ed55532); 7.30e9 parameters; all fit 80 GB."""
    rows = {r["id"]: r for r in _rows("throughput", "flagperf2023aquila") if "-sft-" not in r["id"]}
    assert set(rows) == set(FLAGPERF_AQUILA)
    for key, r in rows.items():
        tps, mfu, tp, pp, mb = FLAGPERF_AQUILA[key]
        model, cluster, strategy, workload = _setup(r)
        assert tps * 6 * 7e9 / 312e12 * 100 == pytest.approx(mfu, abs=0.1)
        assert r["published"] == round(tps * 8) and cluster.world_size == 8
        assert (strategy.tp, strategy.pp, strategy.micro_batch, workload.global_batch, workload.seq_len) == \
            (tp, pp, mb, mb * 8 * 9 // (tp * pp), 2048)
        assert model.vocab_size == -(-100008 // (128 * tp)) * 128 * tp
        assert model.d_ff == 256 * -(-int(2 * 4 * 4096 / 3) // 256) == 11008
        assert (strategy.engine, strategy.sequence_parallel, strategy.overlap_grad_comm) == ("megatron", False, False)
        est = estimate(model, cluster, strategy, workload)
        assert est.params_total / 1e9 == pytest.approx(7.30, abs=0.01) and est.fits


# FlagScale Aquila2 7B fine-tuning case (aquila2_7b_finetune-flagscale/README.md): id -> (token/p/s, MFU %, tp, GAS)
FLAGPERF_AQUILA_SFT = {"flagperf-fs-aquila2-7b-sft-a800-8g-tp1pp1dp8": (3813.2, 51.3, 1, 4),
                       "flagperf-fs-aquila2-7b-sft-a800-8g-tp2pp1dp4-ga8": (3639.8, 49.0, 2, 8),
                       "flagperf-fs-aquila2-7b-sft-a800-8g-tp1pp1dp8-ga16": (4318.9, 58.1, 1, 16)}


def test_flagperf_aquila_finetune_rows_are_the_readme_table_and_the_harness_gbs():
    """published = token/p/s x 8; GBS = 8 x GAS / tp (micro-batch 1); MFU column = token/p/s x 6 x 7e9 / 312e12;
    vocabulary 100,008 padded to 64 x tp (--make-vocab-size-divisible-by 64); seq 2048; all fit 80 GB."""
    rows = {r["id"]: r for r in _rows("throughput", "flagperf2023aquila") if "-sft-" in r["id"]}
    assert set(rows) == set(FLAGPERF_AQUILA_SFT)
    for key, r in rows.items():
        tps, mfu, tp, ga = FLAGPERF_AQUILA_SFT[key]
        model, cluster, strategy, workload = _setup(r)
        assert tps * 6 * 7e9 / 312e12 * 100 == pytest.approx(mfu, abs=0.1)
        assert r["published"] == round(tps * 8) and cluster.world_size == 8
        assert (strategy.tp, strategy.pp, strategy.micro_batch, workload.global_batch, workload.seq_len) == \
            (tp, 1, 1, 8 * ga // tp, 2048)
        assert model.vocab_size == -(-100008 // (64 * tp)) * 64 * tp
        assert estimate(model, cluster, strategy, workload).fits


# ---- launcherci (2026-12-02 fifth session): NeMo launcher release-performance CI, container 22.08.11 (NeMo 1.11.0),
# public/data/{t5,mt5}/*_bf16_precision_O2_100steps.json at 79fc45c1: (family, size, tp, pp, nodes) -> (mean
# train_step_timing of steps 51-100 in s, the json's TFLOP/s per GPU) as stored for 22.08.11
NEMO_CI_2208 = {
    ("t5", "220m", 1, 1, 1): (1.1502516, 113.9), ("t5", "220m", 1, 1, 4): (0.31588980000000005, 103.68),
    ("t5", "3b", 2, 1, 1): (10.102848399999997, 160.17), ("t5", "3b", 2, 1, 4): (2.655696200000001, 152.33),
    ("t5", "3b", 2, 1, 5): (2.137822, 151.39), ("t5", "3b", 2, 1, 20): (0.673572, 120.12),
    ("t5", "3b", 2, 2, 4): (3.4007762, 118.96), ("t5", "3b", 2, 4, 4): (3.5400752, 114.28),
    ("t5", "3b", 4, 1, 1): (13.016131600000001, 124.32), ("t5", "3b", 4, 2, 4): (4.2955072, 94.18),
    ("t5", "3b", 4, 4, 4): (4.474798, 90.41), ("t5", "3b", 8, 1, 1): (19.8149534, 81.67),
    ("t5", "3b", 8, 1, 4): (5.200267200000001, 77.79), ("t5", "3b", 8, 2, 4): (6.3130974, 64.08),
    ("t5", "3b", 8, 4, 4): (6.559204200000003, 61.68), ("t5", "11b", 4, 1, 5): (7.914909799999999, 160.55),
    ("t5", "11b", 4, 1, 20): (2.4464023999999998, 129.85), ("t5", "23b", 4, 2, 10): (12.186193400000002, 121.63),
    ("t5", "23b", 4, 2, 40): (4.3977272, 84.26), ("t5", "41b", 4, 4, 10): (20.195431600000006, 140.52),
    ("t5", "41b", 4, 4, 40): (6.008657199999999, 118.08), ("mt5", "170m", 1, 1, 1): (0.8224864000000001, 50.92),
    ("mt5", "170m", 1, 1, 4): (0.24106660000000005, 43.44), ("mt5", "390m", 1, 1, 2): (0.8767859999999998, 74.71),
    ("mt5", "390m", 1, 1, 8): (0.2814588, 58.18), ("mt5", "3b", 2, 1, 1): (10.886780999999996, 148.64),
    ("mt5", "3b", 2, 1, 4): (2.9473186000000005, 137.26), ("mt5", "3b", 2, 1, 5): (2.477607, 130.63),
    ("mt5", "3b", 2, 1, 20): (0.8536134000000001, 94.79), ("mt5", "3b", 2, 2, 4): (3.572479, 113.24),
    ("mt5", "3b", 2, 4, 4): (3.7276447999999998, 108.53), ("mt5", "3b", 4, 1, 1): (13.951398400000002, 115.99),
    ("mt5", "3b", 4, 1, 4): (3.7471018, 107.96), ("mt5", "3b", 4, 2, 4): (4.457945599999999, 90.75),
    ("mt5", "3b", 4, 4, 4): (4.653063199999998, 86.94), ("mt5", "3b", 8, 1, 1): (20.712060599999994, 78.13),
    ("mt5", "3b", 8, 1, 4): (5.6738192000000005, 71.3), ("mt5", "3b", 8, 2, 4): (6.679992800000001, 60.56),
    ("mt5", "3b", 8, 4, 4): (6.916334999999999, 58.49), ("mt5", "11b", 4, 1, 5): (9.408436000000002, 135.06),
    ("mt5", "11b", 4, 1, 20): (3.2906100000000005, 96.54), ("mt5", "23b", 4, 2, 10): (14.554190799999997, 101.84),
    ("mt5", "23b", 4, 2, 40): (6.086049400000002, 60.88)}
# conf/training/{t5,mt5}/<size>.yaml (553c73ac .. 0b4f732c): (d_model, layers per side, heads, ffn, micro-batch, GBS)
NEMO_CI_SHAPES = {("t5", "220m"): (768, 12, 12, 2048, 64, 2048), ("t5", "3b"): (2048, 24, 32, 5120, 24, 1920),
                  ("t5", "11b"): (4096, 24, 64, 10240, 12, 1920), ("t5", "23b"): (5120, 36, 80, 10880, 4, 1920),
                  ("t5", "41b"): (6144, 48, 96, 10880, 4, 1920), ("mt5", "170m"): (512, 8, 6, 1024, 64, 2048),
                  ("mt5", "390m"): (768, 12, 12, 2048, 32, 2048), ("mt5", "3b"): (2048, 24, 32, 5120, 24, 1920),
                  ("mt5", "11b"): (4096, 24, 64, 10240, 8, 1920), ("mt5", "23b"): (5120, 36, 80, 10880, 4, 1920)}
HELD_OUT = HELD_OUT + ("nemoci2208t5", "nemoci2208mt5")
# reached at arrival (launcherci, live tree 17:25, stored constants): nemoci2208t5 6.2 / 25.7% (3B grid -10.1..+3.9,
# 220M +16.8 / +25.7), nemoci2208mt5 11.1 / 48.6% (3B grid -6.0..+8.5 except 20 nodes +21.0; 170M / 390M +12..+36,
# 23B 40 nodes +48.6) -- regression bounds with a margin, not targets. mT5's max 0.55 -> 0.70 (pipe3): with a T5
# stage's blocks shared by seconds, not FLOPs (block_seconds), the encoder-first slowest stage is no longer priced
# 6.6-18.4% slow, and the 23B 40-node row shows the per-step gap that slow stage hid (+49.6 -> +65.2%: mT5's
# per-step premium, unpriced: docs/costmodel-validation.md "mT5's per-step premium, fifth pass")
LAUNCHERCI_BOUNDS = {"nemoci2208t5": (0.07, 0.30), "nemoci2208mt5": (0.14, 0.70)}


def _ci_tflops(fam: str, gbs: int, hs: int, layers: int, nodes: int, step: float) -> float:
    """tests/ci_tests/utils/get_train_tflops.py (79fc45c1): enc 512, dec 128, ffn counted as 4 h, vocab 29,000 (T5) /
    250,000 (mT5), model TFLOP/s per GPU rounded to 0.01."""
    e, d, v = 512, 128, {"t5": 29000, "mt5": 250000}[fam]
    flops = (2 * gbs * hs * hs * (5 * e + 4 * d) + 6 * gbs * hs * 4 * hs * (e + d)
             + 4 * gbs * hs * (e * e + d * d + e * d)) * 3 * layers + 6 * gbs * d * hs * v
    return round(flops / step / (nodes * 8) / 1e12, 2)


def test_nemo_ci_2208_rows_are_the_release_perf_jsons_at_the_launcher_yaml():
    """Every 22.08.11 bf16 O2 T5 / mT5 json is a row: global batch x 512 over the json's step time; shape, layout and
    batch from the yaml (the CI overrides nodes, tp, pp, precision, O2 only); vocabulary padded to 128 x tp; NeMo
    1.11 O2 software (megatron zero 0, eager attention, gradient all-reduce overlapped only at tp 1 pp 1)."""
    rows = _rows("throughput", "nemoci2208t5") + _rows("throughput", "nemoci2208mt5")
    assert len(rows) == len(NEMO_CI_2208) == 43
    seen = set()
    for r in rows:
        fam, size = r["id"].split("-")[1:3]
        key = (fam, size, r["tp"], r.get("pp", 1), r["nodes"])
        seen.add(key)
        step, _ = NEMO_CI_2208[key]
        hs, layers, heads, ffn, mb, gbs = NEMO_CI_SHAPES[(fam, size)]
        model, cluster, strategy, workload = _setup(r)
        assert r["source"] == f"nemoci2208{fam}" and r["fit"] is False and r["metric"] == "source_tokens_per_s"
        assert r["published"] == round(gbs * 512 / step)
        assert (model.d_model, model.num_layers, model.num_heads, r["model"]["d_ff"], r["model"]["ffn"]) == \
            (hs, layers, heads, ffn, "gated-gelu")
        assert (workload.seq_len, workload.target_len, r["model"]["tied"]) == (512, 128, True)
        raw = 28996 + 100 if fam == "t5" else 250000 + 100
        assert model.vocab_size == math.ceil(raw / (128 * r["tp"])) * 128 * r["tp"]
        assert (cluster.nodes, cluster.gpus_per_node, strategy.tp, strategy.pp, strategy.micro_batch,
                workload.global_batch) == (key[4], 8, key[2], key[3], mb, gbs)
        assert (strategy.engine, strategy.zero, strategy.recompute, r["precision"]) == ("megatron", 0, "none", "bf16")
        assert (strategy.attention, strategy.sequence_parallel) == ("eager", False)
        assert strategy.overlap_grad_comm is (r["tp"] == 1 and r.get("pp", 1) == 1)
        assert estimate(model, cluster, strategy, workload).fits
    assert seen == set(NEMO_CI_2208)
    assert {r["model"]["vocab"] for r in rows if r["tp"] == 8} == {29696, 250880}


def test_nemo_ci_2208_t5_tflops_column_confirms_the_yaml_batch_and_shape():
    """The json's TFLOP/s of every 22.08.11 T5 entry is get_train_tflops.py at the yaml's GBS / hidden / layers and
    the stored step: the CI ran the yaml's global batch at every node count. (The mT5 22.08.11 column was filled in
    later with another count, 1-35% lower: not a check.)"""
    for (fam, size, tp, pp, nodes), (step, tflops) in NEMO_CI_2208.items():
        hs, layers, _, _, _, gbs = NEMO_CI_SHAPES[(fam, size)]
        if fam == "t5":
            assert _ci_tflops(fam, gbs, hs, layers, nodes, step) == pytest.approx(tflops, abs=0.006)
        else:
            assert _ci_tflops(fam, gbs, hs, layers, nodes, step) > tflops


def test_nemo_ci_2208_readme_t5_cells_are_faster_than_every_ci_t5_run():
    """Same yaml, same 22.08 software: the README's T5 3B cells (nemo2022) are 9-14% faster than the CI's T5 runs,
    its mT5 cells within -0.3..+8% of the CI's mT5 runs at 1-5 nodes -- the README's mT5 / T5 ratio (1.18-1.24 at
    1-5 nodes) is not the CI's (1.08-1.16)."""
    readme = {r["id"]: 1920 * 512 / r["published"] for r in load()["throughput"] if r["source"] == "nemo2022"}
    for n in (1, 4, 5, 20):
        t5_ci, mt5_ci = NEMO_CI_2208[("t5", "3b", 2, 1, n)][0], NEMO_CI_2208[("mt5", "3b", 2, 1, n)][0]
        assert 0.09 < t5_ci / readme[f"nemo-t5-3b-{n}n"] - 1 < 0.14
        assert -0.003 < mt5_ci / readme[f"nemo-mt5-3b-{n}n"] - 1 < (0.09 if n < 20 else 0.14)
        assert readme[f"nemo-mt5-3b-{n}n"] / readme[f"nemo-t5-3b-{n}n"] > 1.18
        assert mt5_ci / t5_ci < (1.16 if n < 20 else 1.27)


def test_launcherci_sources_out_of_sample():
    """Regression bounds (reached at arrival, stored constants, + a margin), not targets."""
    for source, (mean_bound, max_bound) in LAUNCHERCI_BOUNDS.items():
        errs = [abs(e) for e in _errors(source).values()]
        assert sum(errs) / len(errs) < mean_bound and max(errs) < max_bound, source


# KempnerForge config validation report, its FSDP2 + pipeline + TP configurations (torchpp): row key ->
# (pp, dp_shard, batch_size, grad_accum_steps, tok/s, step s)
KFORGE_PP = {"13b-h200-32g-tp4-pp2-fsdp4": (2, 4, 4, 4, 52739, 4.97),
             "29b-h200-32g-tp4-pp2-fsdp4": (2, 4, 1, 8, 22631, 5.79),
             "70b-h200-32g-tp4-pp4-fsdp2": (4, 2, 1, 4, 8212, 3.99)}
HELD_OUT = HELD_OUT + ("kempnerforge2026pp",)
# reached +24.1 / +13.3 / +13.6% (torchpp, stored constants, FSDP's exposure in the pipeline slots): every row too
# fast; with the head, embedding and loss whole on every TP rank (lm_head replicated, headtp) +11.4 / -5.3 / -3.1%
NEW_SOURCE_BOUNDS.update({"kempnerforge2026pp": (0.20, 0.30)})


def test_kempnerforge_pipeline_rows_are_the_report_and_the_tomls():
    """tok/s = dp_shard x batch_size x grad_accum_steps x 4096 / step time within 0.2%; the micro-batch is the
    toml's batch_size and the pipeline's micro-batches its grad_accum_steps (scripts/train.py: n_microbatches =
    grad_accum_steps over the concatenated batch); 32 H200 as pp x dp_shard x tp 4; no compile (eager kernels),
    basic TP under PP (no sequence parallelism); the SwiGLU widths from config/schema.py's rule."""
    rows = {r["id"].split("kforge-pp-")[1]: r for r in _rows("throughput", "kempnerforge2026pp")}
    assert set(rows) == set(KFORGE_PP)
    for key, (pp, dp, bs, ga, tps, step) in KFORGE_PP.items():
        r = rows[key]
        model, cluster, strategy, workload = _setup(r)
        assert r["published"] == tps and dp * bs * ga * 4096 / step == pytest.approx(tps, rel=0.002)
        assert (cluster.world_size, cluster.gpus_per_node, strategy.tp, strategy.pp) == (32, 4, 4, pp)
        assert pp * dp * 4 == 32
        assert (strategy.micro_batch, workload.global_batch, workload.seq_len) == (bs, dp * bs * ga, 4096)
        e = estimate(model, cluster, strategy, workload)
        assert (e.layout.dp, e.layout.grad_accum) == (dp, ga) and e.fits
        assert (strategy.engine, strategy.zero, strategy.recompute, strategy.kernels) == ("fsdp", 3, "full", "eager")
        assert strategy.sequence_parallel is False and strategy.pp_schedule == "1f1b"
        assert "unmodelled" not in r and strategy.gradient_sync == "last" and strategy.optimizer_dtype == "bf16"
        assert strategy.lm_head == "replicated"  # basic TP under PP: embedding, head and loss whole on every TP rank
    widths = {k: rows[k]["model"]["d_ff"] for k in rows}
    assert widths["13b-h200-32g-tp4-pp2-fsdp4"] == 256 * math.ceil(int(4 * 5120 * 2 / 3 * 1.3) / 256) == 17920
    assert widths["29b-h200-32g-tp4-pp2-fsdp4"] == 256 * math.ceil(int(4 * 6144 * 2 / 3 * 1.3) / 256) == 21504


def test_kempnerforge_pipeline_rows_price_fsdp_exposure_in_every_slot():
    """FSDP's exposed per-micro-batch time sits in each stage's slot, so the fill and drain carry it (pp - 1) times
    beyond the m slots of the slowest stage (stage_terms.sharded_dp_in_slot)."""
    for r in _rows("throughput", "kempnerforge2026pp"):
        model, cluster, strategy, workload = _setup(r)
        e = estimate(model, cluster, strategy, workload)
        pp, ga = e.layout.pp, e.layout.grad_accum
        assert e.dp_comm_s > 0
        fill = (pp - 1) * e.dp_comm_s / ga
        terms = e.compute_s + e.tp_comm_s + e.pp_comm_s + e.bubble_s + e.dp_comm_s + e.optimizer_s + e.offload_s
        assert e.step_s == pytest.approx(terms + e.framework_s, rel=1e-12) and e.bubble_s > fill


# ---- launcherci: the same 43 configurations in container 22.09.05 (NeMo 1.12.0+b51ab59; nemoci2209t5 / mt5), as
# stored: (family, size, tp, pp, nodes) -> (mean train_step_timing of steps 51-100 in s, TFLOP/s per GPU)
NEMO_CI_2209 = {
    ("mt5", "170m", 1, 1, 1): (0.8115207999999997, 79.02), ("mt5", "170m", 1, 1, 4): (0.22630039999999998, 70.85),
    ("t5", "220m", 1, 1, 1): (1.1330777999999995, 115.62), ("mt5", "390m", 1, 1, 2): (0.8843787999999999, 92.94),
    ("t5", "220m", 1, 1, 4): (0.3052684, 107.29), ("mt5", "390m", 1, 1, 8): (0.2813254, 73.04),
    ("mt5", "3b", 2, 1, 1): (10.750086999999999, 158.29), ("t5", "3b", 2, 1, 1): (10.112106999999998, 160.03),
    ("mt5", "3b", 2, 1, 4): (2.9535153999999992, 144.03), ("t5", "3b", 2, 1, 4): (2.6224594000000003, 154.26),
    ("mt5", "3b", 2, 1, 5): (2.4308710000000002, 140.0), ("t5", "3b", 2, 1, 5): (2.1401826, 151.22),
    ("mt5", "3b", 2, 1, 20): (0.8537392000000003, 99.66), ("t5", "3b", 2, 1, 20): (0.6609073999999998, 122.42),
    ("mt5", "3b", 2, 2, 4): (3.5920306000000006, 118.43), ("t5", "3b", 2, 2, 4): (3.4191992, 118.32),
    ("mt5", "3b", 2, 4, 4): (3.6967382, 115.08), ("t5", "3b", 2, 4, 4): (3.514644599999999, 115.1),
    ("mt5", "3b", 4, 1, 1): (13.809124399999998, 123.23), ("t5", "3b", 4, 1, 1): (13.054424600000003, 123.96),
    ("mt5", "3b", 4, 1, 4): (3.6934708000000014, 115.18), ("mt5", "3b", 4, 2, 4): (4.4913292, 94.72),
    ("t5", "3b", 4, 2, 4): (4.2744018, 94.65), ("mt5", "3b", 4, 4, 4): (4.5865658, 92.75),
    ("t5", "3b", 4, 4, 4): (4.4788566, 90.32), ("mt5", "3b", 8, 1, 1): (20.4300474, 83.29),
    ("t5", "3b", 8, 1, 1): (19.6314514, 82.43), ("mt5", "3b", 8, 1, 4): (5.4423325999999985, 78.17),
    ("t5", "3b", 8, 1, 4): (5.155743599999999, 78.47), ("mt5", "3b", 8, 2, 4): (6.495396800000001, 65.49),
    ("t5", "3b", 8, 2, 4): (6.2612412, 64.61), ("mt5", "3b", 8, 4, 4): (6.783624, 62.71),
    ("t5", "3b", 8, 4, 4): (6.5892708, 61.4), ("mt5", "11b", 4, 1, 5): (9.5127406, 137.09),
    ("t5", "11b", 4, 1, 5): (7.720816199999999, 164.58), ("mt5", "11b", 4, 1, 20): (3.4141292000000005, 95.49),
    ("t5", "11b", 4, 1, 20): (2.6027308, 122.06), ("mt5", "23b", 4, 2, 10): (13.419264600000002, 112.0),
    ("t5", "23b", 4, 2, 10): (12.094736400000002, 122.54), ("mt5", "23b", 4, 2, 40): (5.9378258000000015, 63.28),
    ("t5", "23b", 4, 2, 40): (4.3597472, 84.99), ("t5", "41b", 4, 4, 10): (19.9295488, 142.4),
    ("t5", "41b", 4, 4, 40): (6.073482799999999, 116.82)}
HELD_OUT = HELD_OUT + ("nemoci2209t5", "nemoci2209mt5")
# reached at arrival (launcherci, live tree, stored constants): nemoci2209t5 6.2 / 21.5%, nemoci2209mt5 11.0 / 45.0%;
# mT5's max 0.52 -> 0.66 (pipe3: the 23B 40-node row +45.9 -> +61.2%, as nemoci2208mt5's above)
LAUNCHERCI_BOUNDS.update({"nemoci2209t5": (0.07, 0.26), "nemoci2209mt5": (0.13, 0.66)})


def test_nemo_ci_2209_rows_are_the_2208_configurations_in_the_next_container():
    """Same yaml, overrides and software keys as the 22.08.11 rows; published = GBS x 512 over the 22.09.05 step;
    this container's TFLOP/s column (the CI's get_train_tflops.py) reproduces for T5 and mT5 alike -- the mT5 yaml
    batch and shape are the CI's too."""
    rows = {r["id"]: r for r in _rows("throughput", "nemoci2209t5") + _rows("throughput", "nemoci2209mt5")}
    before = {r["id"]: r for r in _rows("throughput", "nemoci2208t5") + _rows("throughput", "nemoci2208mt5")}
    assert len(rows) == len(NEMO_CI_2209) == 43
    for rid, r in rows.items():
        fam, size = rid.split("-")[1:3]
        key = (fam, size, r["tp"], r.get("pp", 1), r["nodes"])
        step, tflops = NEMO_CI_2209[key]
        hs, layers, _, _, _, gbs = NEMO_CI_SHAPES[(fam, size)]
        assert r["published"] == round(gbs * 512 / step)
        assert _ci_tflops(fam, gbs, hs, layers, key[4], step) == pytest.approx(tflops, abs=0.006)
        twin = before[rid.replace("nemoci2209", "nemoci2208")]
        assert {k: v for k, v in r.items() if k not in ("id", "source", "published")} == \
            {k: v for k, v in twin.items() if k not in ("id", "source", "published")}
        if step > 1:
            assert abs(step / NEMO_CI_2208[key][0] - 1) < 0.08
    # the mT5 / T5 ratio in this container too: ~1.04-1.06 on one node, 1.29 at 20 nodes (tp 2)
    one = [NEMO_CI_2209[("mt5", "3b", tp, 1, 1)][0] / NEMO_CI_2209[("t5", "3b", tp, 1, 1)][0] for tp in (2, 4, 8)]
    assert all(1.04 < x < 1.065 for x in one)
    assert 1.28 < NEMO_CI_2209[("mt5", "3b", 2, 1, 20)][0] / NEMO_CI_2209[("t5", "3b", 2, 1, 20)][0] < 1.30


def test_rowtruth_rows_state_the_gradient_path_of_their_code():
    """rowtruth (2026-12-02): MT-NLG's 2021 DeepSpeed ZeRO-1 all-reduces under the pipeline (contiguous_gradients off at
    stage 1 from v0.4.4, default off before); its bf16 ZeRO code was not public then (DeepSpeed #1398, v0.5.5), so the
    rows say bf16 and name the unpriced path -- stating the all-reduce moves nothing under bf16, where the model already
    all-reduces; BloombergGPT names the runtime engine fsdp stands in for."""
    from scalestudy.costmodel.published import predict

    for r in _rows("throughput", "smith2022"):
        _, _, strategy, _ = _setup(r)
        assert (strategy.engine, strategy.zero, strategy.precision, strategy.zero1_all_reduce) == \
            ("deepspeed", 1, "bf16", True)
        assert r["unmodelled"] == ["deepspeed_2021_bf16_zero1"]
        sw = {k: v for k, v in r["software"].items() if k != "zero1_all_reduce"}
        assert predict(r) == pytest.approx(predict({**r, "software": {**sw, "zero1_all_reduce": False}}), rel=1e-12)
    (r,) = _rows("throughput", "bloomberggpt2023")
    assert r["engine"] == "fsdp" and r["unmodelled"] == ["sagemaker_smp_runtime"]


# ---- launcherci: GPT-3 release-perf CI jsons, container 22.08.11 (nemoci2208gpt): (size, tp, pp, nodes) -> mean
# train_step_timing of steps 51-100 in s (175B and the 5B tp-1 16-node json are nemo2022's own measurements: left out)
NEMO_CI_2208_GPT = {
    ("126m", 1, 1, 8): 0.12032440000000001, ("20b", 4, 1, 16): 26.3671974, ("40b", 4, 2, 128): 7.2365706,
    ("40b", 4, 2, 32): 24.004928200000005, ("5b", 1, 1, 4): 24.703440800000003, ("5b", 2, 1, 1): 102.8394014,
    ("5b", 2, 1, 4): 26.359031200000004, ("5b", 2, 2, 4): 26.965334800000004, ("5b", 2, 4, 4): 29.5123476,
    ("5b", 4, 1, 1): 118.2479432, ("5b", 4, 1, 4): 30.069596000000015, ("5b", 4, 2, 4): 30.624988999999992,
    ("5b", 4, 4, 4): 34.88503320000001, ("5b", 8, 1, 1): 153.56036097560974, ("5b", 8, 1, 4): 38.727782,
    ("5b", 8, 2, 4): 40.1305918, ("5b", 8, 4, 4): 46.853381}
# conf/training/gpt3/<size>.yaml (0a68a839 .. 0b4f732c): (d, layers, heads, mb, GBS, recompute, SP)
NEMO_CI_GPT_SHAPES = {"126m": (768, 12, 12, 4, 256, "none", False), "5b": (4096, 24, 32, 2, 2048, "none", False),
                      "20b": (6144, 44, 48, 4, 2048, "selective", True),
                      "40b": (8192, 48, 64, 2, 2048, "selective", True)}
HELD_OUT = HELD_OUT + ("nemoci2208gpt",)
# reached at arrival (launcherci, live tree 17:42, stored constants): 4.3 / 25.0% (5B grid -4.8..+7.3%, 20B +3.5%,
# 40B -3.1 / -2.3%, 126M +25.0%: one 0.12 s micro-batch per step)
LAUNCHERCI_BOUNDS.update({"nemoci2208gpt": (0.06, 0.30)})


def test_nemo_ci_2208_gpt_rows_are_the_release_perf_jsons_at_the_launcher_yaml():
    """GBS x 2048 over the json's step; shape, batch, recompute and SP from the yaml, tp / pp / nodes from the CI;
    vocabulary 50,257 padded to 128 x tp; apex DistributedFusedAdam (megatron zero 1, no parameter-gather overlap),
    gradient overlap only at tp 1 pp 1 without SP; the README's 5B 16-node cell is the CI's 16-node run (0.3%)."""
    rows = _rows("throughput", "nemoci2208gpt")
    assert len(rows) == len(NEMO_CI_2208_GPT) == 17
    for r in rows:
        size = r["id"].split("-")[2]
        model, cluster, strategy, workload = _setup(r)
        key = (size, strategy.tp, strategy.pp, cluster.nodes)
        d, layers, heads, mb, gbs, rc, sp = NEMO_CI_GPT_SHAPES[size]
        assert r["published"] == round(gbs * 2048 / NEMO_CI_2208_GPT[key]) and r["metric"] == "tokens_per_s"
        assert (model.d_model, model.num_layers, model.num_heads, workload.seq_len) == (d, layers, heads, 2048)
        assert model.vocab_size == math.ceil(50257 / (128 * strategy.tp)) * 128 * strategy.tp
        assert (strategy.micro_batch, workload.global_batch, strategy.recompute, strategy.sequence_parallel) == \
            (mb, gbs, rc, sp)
        assert (strategy.engine, strategy.zero, strategy.attention, r["software"]["overlap_param_gather"]) == \
            ("megatron", 1, "eager", False)
        assert strategy.overlap_grad_comm is (strategy.tp == 1 and strategy.pp == 1 and not sp)
        assert r["fit"] is False and estimate(model, cluster, strategy, workload).fits
    readme_16n = next(r for r in load()["throughput"] if r["id"] == "nemo-gpt-5b-16n")["published"]
    assert abs(2048 * 2048 / 6.3796 / readme_16n - 1) < 0.004


# ---- stop 26 holdout (2026-12-03): VectorLM's Llama-3-8B full-rank FSDP table (docs/reference_throughput.md at
# 9045f08a): (GPUs, context) -> (aggregate tokens/s, the per-device batch the table names)
VECTORLM_LLAMA3_8B = {(4, 2048): (12688.44, 8), (4, 4096): (12249.74, 4), (4, 8192): (11463.46, 2)}
# the 1- and 2-GPU cells are held back (pure-bf16 AdamW, 8 B per parameter, is not expressible on engine fsdp: the memory
# model refuses them -- test_costmodel_memory.test_no_published_run_is_predicted_not_to_fit)
HELD_OUT = HELD_OUT + ("vectorlm2024",)
# reached (HEAD 3b26548, stored constants): 9.9 / 14.1% (-6.4 / -9.3 / -14.1% at 2048 / 4096 / 8192: FA2's causal
# attention priced on the full square; docs, stop 26 holdout)
NEW_SOURCE_BOUNDS.update({"vectorlm2024": (0.13, 0.19)})


def test_vectorlm_rows_are_the_table_at_its_benchmark_config():
    """Aggregate tokens/s of the full-rank rows; micro-batch = the table's per-device batch, 4 micro-batches per step
    (profiling/configs/benchmark.yaml gradient_accumulation_steps), FULL_SHARD with bf16 reduce, every decoder layer
    checkpointed, FA2, HF eager modules; one node, 4 A100-SXM4-80GB."""
    rows = _rows("throughput", "vectorlm2024")
    assert len(rows) == len(VECTORLM_LLAMA3_8B) == 3
    for r in rows:
        model, cluster, strategy, workload = _setup(r)
        published, batch = VECTORLM_LLAMA3_8B[cluster.world_size, workload.seq_len]
        assert r["published"] == published and r["metric"] == "tokens_per_s" and r["fit"] is False
        per_step = batch * cluster.world_size * 4  # micro-batches per step: gradient_accumulation_steps 4
        assert (cluster.nodes, strategy.micro_batch, workload.global_batch) == (1, batch, per_step)
        assert batch * workload.seq_len == 16384  # the table's optimum holds 16K tokens per device at every length
        assert (strategy.engine, strategy.zero, strategy.recompute, strategy.attention) == ("fsdp", 3, "full", "flash")
        assert (r["software"]["kernels"], r["software"]["grad_reduce"]) == ("eager", "compute")
        assert (model.d_model, model.num_layers, model.vocab_size) == (4096, 32, 128256)


# ---- stop 26 holdout: DeepCompile's ZeRO-3 / FSDP baselines (tohtana/bench_deep_compile 73e5969c,
# results/acc_step_1/results.txt): (DeepSpeed?, per-GPU batch, seq) -> iteration time in s, Llama-3-70B on 4 x 8 A100
DEEPCOMPILE_BASELINES = {(True, 1, 512): 3.9418, (True, 1, 1024): 4.8844, (True, 1, 2048): 7.4453,
                         (True, 2, 512): 4.8861, (True, 2, 1024): 7.2830, (True, 2, 2048): 13.2516,
                         (True, 4, 512): 7.1655, (True, 4, 1024): 12.6745,
                         (False, 1, 512): 4.4552, (False, 1, 1024): 5.7958, (False, 1, 2048): 8.6019,
                         (False, 2, 512): 5.7477, (False, 2, 1024): 8.2850, (False, 2, 2048): 14.1282,
                         (False, 4, 512): 8.1015, (False, 4, 1024): 13.4375}
HELD_OUT = HELD_OUT + ("deepcompile2024",)
# reached at arrival (HEAD 9820f9e, stored constants): 47.3 / 80.5% -- ZeRO-3 -38..-80% (engines.yaml deepspeed
# gather_rails rank), FSDP +5..+69% (comm exposed too little at <= 2K tokens per GPU); docs, stop 26 holdout.
# 2026-12-03 (sharded): 12.8 / 37.6% -- ZeRO-3 -2..+38% with DeepSpeed 0.16's coalesced gathers on the node's pooled
# NICs, FSDP -1..+30% with the reentrant checkpoint's exposed re-gather (engines.yaml regather_on_recompute)
NEW_SOURCE_BOUNDS.update({"deepcompile2024": (0.17, 0.49)})


def test_deepcompile_rows_are_the_logged_baselines():
    """32 GPUs x batch x seq over the logged mean iteration time; DeepSpeed ZeRO-3 (bf16, stage 3) or FSDP1 FULL_SHARD
    with accelerate's bf16 reduce; HF gradient checkpointing (reentrant), SDPA's memory-efficient kernel under the
    padding mask, eager HF modules, accumulation 1, on 4 nodes x 8 A100 80GB."""
    rows = _rows("throughput", "deepcompile2024")
    assert len(rows) == len(DEEPCOMPILE_BASELINES) == 16
    for r in rows:
        model, cluster, strategy, workload = _setup(r)
        key = (strategy.engine == "deepspeed", strategy.micro_batch, workload.seq_len)
        assert r["published"] == pytest.approx(32 * key[1] * key[2] / DEEPCOMPILE_BASELINES[key], abs=0.06)
        assert (cluster.nodes, cluster.gpus_per_node, workload.global_batch, strategy.zero) == (4, 8, 32 * key[1], 3)
        assert (strategy.recompute, strategy.attention, r["software"]["attention_kernel"]) == \
            ("full", "flash", "mem-efficient")
        assert r["software"]["recompute_early_stop"] == "off" and r["software"]["kernels"] == "eager"
        assert r["software"].get("grad_reduce", "compute") == "compute"  # DeepSpeed's own: the bf16 compute dtype
        assert (model.d_model, model.num_layers, model.vocab_size) == (8192, 80, 128256)


# ---- stop 28 newrows (2026-12-03): torchtune README cells (30b8519e 'Memory and training speed', 1814feb1
# 'Optimization flags'): row id -> (tokens/s as published, GPUs, micro-batch, seq)
TORCHTUNE_CELLS = {"torchtune-llama31-70b-full-8xa100-cpu-offload": (1568, 8, 2, 2048),
                   "torchtune-llama32-3b-a100-packed-compile-ac": (7210, 1, 2, 4096)}
HELD_OUT = HELD_OUT + ("torchtune2024", "torchtune2024flags")
# reached at arrival (HEAD 0129c34, stored constants): -73.0% (70B: the host AdamW priced unfused, 61.9 of the
# model's 77.5 s; at host_adam_slowdown 1.0 it is -17.4%) and -21.2% (3B: causal attention priced over the whole
# 4096-token pack, FlexAttention masks documents; at 512-token sequences the same tokens price -7.1%); docs, stop 28
NEW_SOURCE_BOUNDS.update({"torchtune2024": (0.80, 0.80), "torchtune2024flags": (0.26, 0.26)})
# stop 29 (fsdpoff): 70B with the recipe's optimizer stated -- optimizer_loop fused (torch's fused CPU AdamW) and
# optimizer_dtype bf16 (dtype bf16: 14 B per parameter on the host, 2-byte shard copies): +15.8% (fp32 states: -15.3%)
NEW_SOURCE_BOUNDS["torchtune2024"] = (0.20, 0.20)


def test_torchtune_rows_are_the_readme_cells_at_their_configs():
    """Aggregate tokens/s of the README cells; one node of A100 80GB, batch 2 per GPU, no accumulation, bf16, every
    decoder layer checkpointed, torch.compile: 70B on FSDP2 FULL_SHARD with CPU offload (parameters and optimizer on
    the host), 3B on one GPU (no data parallelism)."""
    rows = _rows("throughput", "torchtune2024") + _rows("throughput", "torchtune2024flags")
    assert sorted(r["id"] for r in rows) == sorted(TORCHTUNE_CELLS)
    for r in rows:
        model, cluster, strategy, workload = _setup(r)
        published, gpus, batch, seq = TORCHTUNE_CELLS[r["id"]]
        assert r["published"] == published and r["metric"] == "tokens_per_s" and r["fit"] is False
        assert (cluster.nodes, cluster.world_size, strategy.micro_batch, workload.global_batch, workload.seq_len) == \
            (1, gpus, batch, batch * gpus, seq)
        assert (strategy.recompute, strategy.attention, r["software"]["kernels"]) == ("full", "flash", "fused")
        assert "document_masked_attention" in r["unmodelled"] and model.vocab_size == 128256
        assert estimate(model, cluster, strategy, workload).fits
    offload = next(r for r in rows if r["source"] == "torchtune2024")
    strategy = _setup(offload)[2]
    assert (strategy.engine, strategy.zero, strategy.offload_params, strategy.offload_optimizer) == \
        ("fsdp", 3, "cpu", "cpu")
    # 70B_full.yaml: torch.optim.AdamW fused: True; dtype bf16 (the model, hence AdamW's moments, in bf16)
    assert (strategy.optimizer_loop, strategy.optimizer_dtype) == ("fused", "bf16")


# ---- stop 29 ptdp (2026-12-03): Narayanan et al. 2021 Table 2 (arXiv 2104.04473; the same values in cli99/llm-analysis
# b60b392f examples/megatron-lm/run_train*.sh): row id -> (GPUs, global batch, micro-batch, TFLOP/s per GPU as published)
NARAYANAN_TABLE2 = {"narayanan-zero3-530b-640": (640, 2560, 4, 138), "narayanan-zero3-530b-1120": (1120, 2240, 2, 98),
                    "narayanan-zero3-530b-2240": (2240, 2240, 1, 48),
                    "narayanan-ptdp-175b-384": (384, 1536, 1, 153), "narayanan-ptdp-175b-768": (768, 1536, 1, 149),
                    "narayanan-ptdp-175b-1536": (1536, 1536, 1, 141), "narayanan-ptdp-530b-560": (560, 2240, 1, 171),
                    "narayanan-ptdp-530b-1120": (1120, 2240, 1, 167), "narayanan-ptdp-530b-2240": (2240, 2240, 1, 159)}
HELD_OUT = HELD_OUT + ("narayanan2021t2",)
# reached at arrival (HEAD ca83b54, stored constants): 13.3 / 54.3% -- PTD-P -3.3..+2.9% (six rows), ZeRO-3 530B +21.8 /
# +32.9 / +54.3% at 640 / 1120 / 2240 GPUs (the 175B ZeRO-3 rows of the same table, narayanan2021: +9.0 / +24.1 / +19.7%);
# docs/costmodel-validation.md, stop 29 ptdp. With the per-parameter path's HBM copies priced (zero3.
# PER_PARAM_SYNC_COPY_PASSES): 11.7 / 47.9% -- ZeRO-3 530B +18.8 / +28.0 / +47.9% (175B: +6.6 / +20.3 / +16.1%)
NEW_SOURCE_BOUNDS.update({"narayanan2021t2": (0.15, 0.57)})


def test_narayanan_table2_rows_are_the_paper_table():
    """Table 2 at a fixed global batch as the GPUs double: ZeRO-3 (DeepSpeed of early 2021, no model parallelism, no
    accumulation) on the 529.6B model, PTD-P at model-parallel size 96 (tensor 8 x pipeline 12, 174.6B) and 280 (8 x 35,
    529.6B), micro-batch 1, Megatron's local DDP and the interleaved schedule; fp16, every layer recomputed."""
    rows = _rows("throughput", "narayanan2021t2")
    assert sorted(r["id"] for r in rows) == sorted(NARAYANAN_TABLE2)
    for r in rows:
        model, cluster, strategy, workload = _setup(r)
        gpus, batch, micro, published = NARAYANAN_TABLE2[r["id"]]
        assert r["published"] == published and r["metric"] == "hardware_tflops_per_device"
        assert (cluster.world_size, cluster.gpus_per_node, workload.global_batch, strategy.micro_batch) == \
            (gpus, 8, batch, micro)
        assert (model.d_model, model.num_layers, model.num_heads) == \
            ((20480, 105, 128) if "530b" in r["id"] else (12288, 96, 96))
        assert (model.vocab_size, workload.seq_len, strategy.precision, strategy.recompute) == (51200, 2048, "fp16", "full")
        if strategy.engine == "deepspeed":  # no model parallelism, no accumulation: micro-batch = batch / GPUs
            assert (strategy.zero, strategy.tp, strategy.pp, strategy.zero3_fetch) == (3, 1, 1, "per-param-sync")
            assert gpus * micro == batch
        else:
            assert (strategy.engine, strategy.zero, strategy.tp, strategy.overlap_grad_comm) == ("megatron", 0, 8, False)
            assert strategy.tp * strategy.pp == (280 if "530b" in r["id"] else 96)
            assert model.num_layers // strategy.pp // strategy.virtual_stages in (1, 2)  # the artifact's layers per chunk
        assert estimate(model, cluster, strategy, workload).fits


# ---- newsrc (2026-12-03): MosaicGPT on torch 1.12 FSDP (mosaicml/examples llm/throughput/README.md at 22d724c8), every
# row of its 'A100 80GB' and 'A100 40GB' tables, one per entry: "<size>-s<seq>-<GPUs>xa100-<80|40>[-gbs<GBS>]:
# <MicroBatchSize>:<GlobalBatchSize (S)>:<ActCkpt 1/0>:<Throughput (T/s)>" (the -gbs suffix: the 40GB table holds 7b
# s1024 on 8 GPUs twice, at GradAccum 128 and 8)
MOSAICGPT_ROWS = """
70b-s2048-128xa100-80:8:1024:1:42028.81 30b-s8192-64xa100-80:2:128:1:42023.16 30b-s8192-32xa100-80:2:64:1:20698.23
30b-s4096-128xa100-80:4:512:1:94312.24 30b-s4096-32xa100-80:4:128:1:23553.76
30b-s2048-256xa100-80:8:2048:1:198267.62 30b-s2048-128xa100-80:8:1024:1:100995.65
30b-s2048-64xa100-80:8:512:1:50651.59 30b-s2048-32xa100-80:8:256:1:25427.85 30b-s2048-16xa100-80:8:128:1:12663.75
13b-s8192-128xa100-80:2:256:1:171301.11 13b-s8192-64xa100-80:2:128:1:86550.86 13b-s8192-32xa100-80:2:64:1:43682.94
13b-s4096-64xa100-80:4:256:1:101058.89 13b-s4096-32xa100-80:4:128:1:50169.12
13b-s2048-128xa100-80:8:1024:1:218852.00 13b-s2048-64xa100-80:8:512:1:110076.33
13b-s2048-32xa100-80:8:256:1:54335.55 13b-s2048-16xa100-80:8:128:1:27666.72 13b-s16384-8xa100-80:1:256:1:8659.76
13b-s8192-8xa100-80:2:512:1:11055.68 13b-s4096-8xa100-80:4:1024:1:12850.50 13b-s2048-8xa100-80:8:2048:1:13929.35
13b-s512-8xa100-80:32:1024:1:15001.49 7b-s16384-8xa100-80:2:256:1:14901.90 7b-s8192-8xa100-80:4:512:1:19422.58
7b-s4096-8xa100-80:8:1024:1:23343.51 7b-s2048-8xa100-80:16:2048:1:25651.12 3b-s16384-8xa100-80:4:256:1:28295.66
3b-s8192-8xa100-80:8:512:1:39341.83 3b-s4096-8xa100-80:16:1024:1:49169.98 3b-s2048-8xa100-80:32:2048:1:55710.27
1b-s16384-8xa100-80:4:256:1:48846.93 1b-s8192-8xa100-80:8:512:1:69094.52 1b-s4096-8xa100-80:16:1024:1:88432.31
1b-s2048-8xa100-80:32:2048:1:100751.50 760m-s16384-8xa100-80:2:256:0:92578.78
350m-s16384-8xa100-80:2:256:0:164446.54 125m-s16384-8xa100-80:4:256:0:386517.07
7b-s16384-16xa100-40:1:512:1:28335.96 7b-s16384-8xa100-40:1:512:1:13209.76 7b-s8192-16xa100-40:1:1024:1:34828.29
7b-s8192-8xa100-40:1:1024:1:17654.50 7b-s4096-16xa100-40:4:2048:1:43721.20 7b-s4096-8xa100-40:2:2048:1:20723.96
7b-s2048-16xa100-40:8:4096:1:47970.51 7b-s2048-8xa100-40:4:4096:1:22668.72 7b-s1024-16xa100-40:16:8192:1:50702.28
7b-s1024-8xa100-40:8:8192:1:23507.13 7b-s1024-8xa100-40-gbs512:8:512:1:23644.47
3b-s16384-16xa100-40:1:512:1:54143.88 3b-s16384-8xa100-40:1:512:1:27136.33 3b-s8192-16xa100-40:2:1024:1:73389.42
3b-s8192-8xa100-40:2:1024:1:37105.58 3b-s4096-16xa100-40:4:2048:1:89949.31 3b-s4096-8xa100-40:4:2048:1:45806.55
3b-s2048-16xa100-40:8:4096:1:101680.35 3b-s2048-8xa100-40:8:4096:1:51966.01 3b-s1024-16xa100-40:16:8192:1:109800.44
3b-s1024-8xa100-40:16:8192:1:56451.90 3b-s512-16xa100-40:32:16384:1:113903.78 3b-s512-8xa100-40:32:16384:1:58127.21
1b-s16384-16xa100-40:2:512:1:95127.80 1b-s16384-8xa100-40:2:512:1:47981.69 1b-s8192-16xa100-40:4:1024:1:132589.32
1b-s8192-8xa100-40:4:1024:1:66805.43 1b-s4096-16xa100-40:8:2048:1:166925.89 1b-s4096-8xa100-40:8:2048:1:84606.61
1b-s2048-16xa100-40:16:4096:1:192671.44 1b-s2048-8xa100-40:16:4096:1:98012.45
1b-s1024-16xa100-40:32:8192:1:210501.37 1b-s1024-8xa100-40:32:8192:1:107026.65
1b-s512-16xa100-40:64:16384:1:219562.21 1b-s512-8xa100-40:64:16384:1:112139.27
760m-s16384-8xa100-40:1:512:0:54899.02 350m-s16384-8xa100-40:1:512:0:158971.66
125m-s16384-8xa100-40:2:512:0:381870.41
""".split()
HELD_OUT = HELD_OUT + ("mosaicgpt2022",)
# reached at arrival (HEAD 485296a, stored constants): 15.2 / 106.3% (A100 80GB 9.8%, 40GB 20.8%; every row over but
# 30b at seq 2048); issue flags only 21.4 / 104.9%, 41 of 77 rows > 20%. docs/costmodel-validation.md, newsrc
# 2026-12-04 (smallmodel): 11.4 / 91.0% -> 8.4 / 85.0% with norm_dtype fp32 (nn.LayerNorm under Composer's amp_bf16
# autocast: the norms in fp32 between casts, eager_kernels.autocast_layer_norm_s)
NEW_SOURCE_BOUNDS.update({"mosaicgpt2022": (0.11, 1.10)})


def test_mosaicgpt_rows_are_the_readme_tables():
    """Every row is a README cell: T/s, micro-batch, global batch (= micro-batch x GradAccum x GPUs), FULL_SHARD,
    ActCkpt; the yaml's shape with the GPT-2 tokenizer's unpadded 50,257 vocabulary, tied head and learned positions
    (ParamCount = 12 L d^2 + 13 L d + 2 d + 50257 d + seq d, as the table counts it); torch 1.12 software: no
    compile (eager kernels), reentrant checkpointing (no early stop), torch's cross-entropy, FlashAttention-1."""
    rows = _rows("throughput", "mosaicgpt2022")
    table = {key: rest for key, *rest in (e.split(":") for e in MOSAICGPT_ROWS)}
    assert len(rows) == len(table) == 77 and {r["id"].removeprefix("mosaicgpt-") for r in rows} == set(table)
    for r in rows:
        mb, gb, ckpt, tps = table[r["id"].removeprefix("mosaicgpt-")]
        size, seq, gpus, mem = re.match(r"mosaicgpt-(\w+?)-s(\d+)-(\d+)xa100-(80|40)", r["id"]).groups()
        model, cluster, strategy, workload = _setup(r)
        assert (r["published"], strategy.micro_batch, workload.global_batch) == (float(tps), int(mb), int(gb))
        assert r["metric"] == "tokens_per_s" and r["device"] == f"a100-{mem}gb" and r["fit"] is False
        assert (strategy.engine, strategy.zero, strategy.recompute) == ("fsdp", 3, "full" if ckpt == "1" else "none")
        assert (workload.seq_len, cluster.world_size, cluster.gpus_per_node) == (int(seq), int(gpus), 8)
        d, layers, heads = MPT_SHAPES[size]  # the same d_model / n_layers / n_heads as llm-foundry's mpt-*.yaml
        assert (model.d_model, model.num_layers, model.num_heads, model.vocab_size) == (d, layers, heads, 50257)
        params = 12 * layers * d * d + 13 * layers * d + 2 * d + 50257 * d + int(seq) * d
        assert estimate(model, cluster, strategy, workload).params_total == params
        assert (strategy.attention, strategy.attention_kernel, strategy.kernels, strategy.cross_entropy,
                strategy.recompute_early_stop) == ("flash", "fa1", "eager", "torch", "off")
        assert strategy.grad_reduce == "engine" and "unmodelled" not in r  # MP Mode DEFAULT; flash-attn 0.2.2
        assert strategy.norm_dtype == "fp32"  # nn.LayerNorm under amp_bf16 autocast over FSDP's bf16 parameters


# ---- newsrc2 (2026-12-03): FlashAttention-2 paper (arXiv 2307.08691 v1) Table 1, TFLOPs/s per A100 by the paper's
# formula (6 seqlen N + 12 L d seqlen^2 per sequence): (size, context) -> ({kernel: TFLOPs/s}, micro-batch, global batch)
FA2_TABLE1 = {("1.3b", "2k"): ({"fa1": 189, "fa2": 196}, 8, 512), ("1.3b", "8k"): ({"fa1": 170, "fa2": 220}, 4, 128),
              ("2.7b", "2k"): ({"fa1": 189, "fa2": 205}, 4, 512), ("2.7b", "8k"): ({"fa1": 175, "fa2": 225}, 4, 128)}
HELD_OUT = HELD_OUT + ("flashattn2023",)
# reached at arrival (HEAD fba9bb5, stored constants): 9.8 / 16.9% -- FlashAttention-1 -4.5 / -5.5% (2k), +8.2 / +6.6%
# (8k); FlashAttention-2 -7.7 / -12.8% (2k), -16.2 / -16.9% (8k): the model prices fa1 and fa2 within 0.3% of each
# other, the table 4-29% apart; issue flags only 10.5 / 17.6%. docs/costmodel-validation.md, newsrc2
NEW_SOURCE_BOUNDS.update({"flashattn2023": (0.13, 0.22)})


def test_flashattn2_rows_are_the_paper_table_converted():
    """Whole-node tokens/s = 8 x TFLOPs/s / (6 N + 12 L d s) with N the repository GPT's parameters (tied 50,264-wide
    embedding, learned positions of the context length); the flash-attention training configs' micro-batch at 80 GB
    and global batch (512 at 2K, 128 at 8K); ZeroRedundancyOptimizer, no recomputation, FA1 vs FA2 the only change."""
    rows = _rows("throughput", "flashattn2023")
    assert len(rows) == 8
    for r in rows:
        size, ctx, kernel = re.match(r"fa2paper-gpt3-(1\.3b|2\.7b)-(2k|8k)-(fa1|fa2)$", r["id"]).groups()
        tflops, micro, batch = FA2_TABLE1[(size, ctx)]
        model, cluster, strategy, workload = _setup(r)
        d, layers, s = model.d_model, model.num_layers, workload.seq_len
        assert (d, layers, s) == ((2048, 24) if size == "1.3b" else (2560, 32)) + (2048 if ctx == "2k" else 8192,)
        params = 12 * layers * d * d + 13 * layers * d + 2 * d + 50264 * d + s * d
        assert estimate(model, cluster, strategy, workload).params_total == params
        assert r["published"] == round(8 * tflops[kernel] * 1e12 / (6 * params + 12 * layers * d * s))
        assert (cluster.world_size, strategy.micro_batch, workload.global_batch) == (8, micro, batch)
        assert (strategy.engine, strategy.zero, strategy.recompute, strategy.precision) == ("ddp", 1, "none", "bf16")
        assert (strategy.attention, strategy.attention_kernel, strategy.cross_entropy) == ("flash", kernel, "fused")
        assert model.vocab_size == 50264 and d // model.num_heads == 128 and r["fit"] is False

# deepspeed2020zerotut: DeepSpeed's ZeRO / ZeRO-Offload tutorials of 2020-09-10 (DeepSpeed 0.3.0, V100-SXM3 32GB,
# DeepSpeedExamples Megatron-LM GPT-2): row -> (SamplesPerSec the training log prints, GPUs, batch per GPU, ZeRO
# stage, optimizer offload)
ZERO_TUTORIAL = {"dszt-gpt2-1.5b-z1-v100-8g": (11.664020446845, 8, 1, 1, "none"),
                 "dszt-gpt2-10b-z2-v100-32g": (6.930641144266186, 32, 1, 2, "none"),
                 "dszt-gpt2-10b-z2-offload-v100-1g": (0.38679924499474744, 1, 10, 2, "cpu")}
HELD_OUT = HELD_OUT + ("deepspeed2020zerotut",)
# reached at arrival (stored constants): 90.5 / 187.2%, every row over-predicted (+55.6% ZeRO-1 1.5B on 8 GPUs,
# +187.2% ZeRO-2 10B on 32, +28.7% ZeRO-Offload 10B on 1); issue flags only +61.7 / +207.1 / +32.8%.
# docs/costmodel-validation.md, newsrc3
NEW_SOURCE_BOUNDS.update({"deepspeed2020zerotut": (1.00, 2.00)})


def test_zero_tutorial_rows_are_the_training_logs():
    """Every row is a tutorial's flags over the Megatron-LM GPT-2 launch script (seq 1024, checkpointing, fp16, the
    GPT-2 vocabulary padded to 50,304) and its log's SamplesPerSec x 1024 tokens; 1.5B and 10B as the tutorials
    name them; DeepSpeed 0.3.0's stage 1 reduce-scatters after the backward, stage 2 with overlap_comm reduces
    during it, both check overflow and norm per gradient tensor; the offload row steps DeepSpeedCPUAdam on the host."""
    rows = {r["id"]: r for r in _rows("throughput", "deepspeed2020zerotut")}
    assert set(rows) == set(ZERO_TUTORIAL)
    for key, (samples_per_s, gpus, mb, stage, offload) in ZERO_TUTORIAL.items():
        r = rows[key]
        model, cluster, strategy, workload = _setup(r)
        assert r["published"] == round(samples_per_s * 1024) and r["metric"] == "tokens_per_s" and r["fit"] is False
        assert (cluster.world_size, strategy.micro_batch, workload.global_batch) == (gpus, mb, gpus * mb)
        assert (strategy.engine, strategy.zero, strategy.offload_optimizer, strategy.recompute) == \
            ("deepspeed", stage, offload, "full")
        assert (workload.seq_len, model.vocab_size, r["precision"], r["device"]) == (1024, 50304, "fp16", "v100-32gb")
        assert (strategy.attention, strategy.kernels, strategy.tp, strategy.pp) == ("eager", "eager", 1, 1)
        # stage 1 is stage1.py (checks every tensor of the model), stage 2 stage2.py (the rank's partition)
        assert strategy.optimizer_loop == ("engine" if offload == "cpu" else
                                           "deepspeed-stage1-whole" if stage == 1 else "deepspeed-serial")
        assert strategy.cublas == "10"  # DeepSpeed's 2020 image: CUDA 10.0, torch 1.2
        assert strategy.overlap_grad_comm == (stage == 2)
        size = estimate(model, cluster, strategy, workload).params_total / 1e9
        assert size == pytest.approx(1.5 if "1.5b" in key else 10.0, rel=0.07)
    assert _setup(rows["dszt-gpt2-1.5b-z1-v100-8g"])[2].zero1_all_reduce is False
    assert rows["dszt-gpt2-10b-z2-offload-v100-1g"]["unmodelled"] == ["cpu_checkpointing"]

HELD_OUT = HELD_OUT + ("dschat2023sft",)
# reached at arrival (stored constants): +24.1%, issue flags only +34.8%; docs/costmodel-validation.md, newsrc3
NEW_SOURCE_BOUNDS.update({"dschat2023sft": (0.32, 0.32)})


def test_dschat_sft_row_is_the_log():
    """DeepSpeed-Chat's step-1 log: OPT-1.3B (ReLU FFN, 50,272 tied vocabulary) at 8 x 512 padded tokens per GPU on
    one DGX-2's 16 V100, ZeRO-2 fp16 without checkpointing; published = the last RunningAvgSamplesPerSec x 512."""
    (r,) = _rows("throughput", "dschat2023sft")
    model, cluster, strategy, workload = _setup(r)
    assert r["published"] == round(171.7425285021646 * 512) and r["metric"] == "tokens_per_s" and r["fit"] is False
    assert (cluster.world_size, cluster.gpus_per_node, strategy.micro_batch, workload.global_batch) == (16, 16, 8, 128)
    assert (strategy.engine, strategy.zero, strategy.recompute, strategy.offload_optimizer) == \
        ("deepspeed", 2, "none", "none")
    assert (workload.seq_len, model.vocab_size, model.d_ff, model.ffn, r["precision"]) == \
        (512, 50272, 8192, "relu", "fp16")
    assert (strategy.attention, strategy.kernels, strategy.cross_entropy, strategy.optimizer_loop,
            strategy.overlap_grad_comm) == ("eager", "eager", "hf", "deepspeed-serial", False)
    assert estimate(model, cluster, strategy, workload).params_total / 1e9 == pytest.approx(1.3, rel=0.07)


# ---- newsrc (2026-12-04): FlagPerf's fp32 PyTorch cases in the NGC 22.04 container, p_train samples/s of the whole job:
# (case, nodes, GPUs per node) -> samples/s (T5-small at 1024 / 128 tokens, GPT-2 345M at 1024)
FLAGPERF_FP32 = {("t5small", 1, 1): 111.5, ("t5small", 1, 8): 871.8, ("t5small", 2, 8): 1694.3,
                 ("gpt2-345m", 1, 1): 14.2, ("gpt2-345m", 1, 8): 97.5, ("gpt2-345m", 2, 8): 156.5}
HELD_OUT = HELD_OUT + ("flagperf2023fp32",)
# reached at arrival (HEAD 6f61a75, stored constants): T5-small -59.9 / -59.3 / -58.1%, GPT-2 345M -67.4 / -65.5 /
# -57.2% (issue flags only -58.0 / -57.4 / -56.2%, -67.0 / -62.4 / -53.4%): the model priced fp32 at the fp32 peak,
# the runs' GEMMs ran on TF32. With Strategy.tf32 (the NGC container's TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1), HEAD
# e3cc649 + tf32: +10.8 / +11.2 / +14.1%, +44.4 / +16.1 / +42.5% (mean 23.2%, max 44.4%); the issue flags alone leave
# tf32 at its default (off) and so the fp32 peak. docs/costmodel-validation.md, newsrc and tf32
NEW_SOURCE_BOUNDS.update({"flagperf2023fp32": (0.30, 0.58)})


def test_flagperf_fp32_rows_are_the_readme_tables():
    """samples/s x 1024 (T5: encoder tokens, metric source_tokens_per_s); 32 x 1024 / 128 padded T5 samples per GPU
    through accelerate's DDP, 4 x 1024 GPT-2 samples per GPU with 8 accumulation steps on one GPU only; fp32 weights
    and compute on A100 40GB, torch 1.12's per-tensor AdamW, no recomputation; the GEMMs on TF32 Tensor Cores (the
    NGC 22.04 image's TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1): tf32 true, nothing left unmodelled for it."""
    rows = _rows("throughput", "flagperf2023fp32")
    assert len(rows) == 6
    for r in rows:
        case, nodes, gpus = re.match(r"flagperf-(t5small|gpt2-345m)-fp32-a100-(\d)x(\d)$", r["id"]).groups()
        nodes, gpus, t5 = int(nodes), int(gpus), case == "t5small"
        model, cluster, strategy, workload = _setup(r)
        assert r["published"] == round(FLAGPERF_FP32[(case, nodes, gpus)] * 1024) and r["fit"] is False
        assert r["metric"] == ("source_tokens_per_s" if t5 else "tokens_per_s")
        assert (cluster.world_size, r["device"], r["precision"]) == (nodes * gpus, "a100-40gb", "fp32")
        assert (strategy.engine, strategy.zero, strategy.recompute, strategy.optimizer_loop, strategy.attention) == \
            ("ddp", 0, "none", "per-tensor", "eager")
        micro = 32 if t5 else 4
        accumulation = 8 if not t5 and nodes * gpus == 1 else 1
        assert (strategy.micro_batch, workload.global_batch) == (micro, micro * accumulation * nodes * gpus)
        assert strategy.tf32 is True and "unmodelled" not in r
        params = estimate(model, cluster, strategy, workload).params_total
        if t5:  # Hugging Face t5-small: the README's '60 millions' parameters
            assert (params, workload.seq_len, workload.target_len, model.vocab_size) == (60506624, 1024, 128, 32128)
            assert (strategy.kernels, strategy.cross_entropy) == ("eager", "hf")
        else:  # Megatron's GPT-2 345M, vocabulary padded to a multiple of 128
            assert (workload.seq_len, model.vocab_size, model.d_model, model.num_layers) == (1024, 50304, 1024, 24)
            assert params / 1e6 == pytest.approx(355, rel=0.01)


# ---- tpx (2026-12-04): DeepSpeed4Science's long-sequence GPT 30B, tensor parallel 32 over 4 DGX A100-40GB nodes
# (Megatron-DeepSpeed cc3a94c6 README, 'New Megatron-DeepSpeed' column): sequence length (k tokens) -> TFLOPS per GPU
DS4SCI_TFLOPS = {2: 68, 4: 80, 8: 86, 16: 92, 32: 100, 64: 106, 128: 119, 256: 94}
HELD_OUT = HELD_OUT + ("deepspeed2023ds4sci",)
# reached at arrival (HEAD d33ffa5 + tensor parallelism over whole nodes, stored constants): -48.2 / -34.9 / -18.7 /
# -4.5 / +6.6 / +19.6 / +23.0 / +72.8% from 2K to 256K: too slow at short context (ring latency and tp-32's thin
# GEMMs), too fast at long context (the attention core). docs/costmodel-validation.md, tpx
NEW_SOURCE_BOUNDS.update({"deepspeed2023ds4sci": (0.37, 0.95)})


def test_ds4sci_rows_are_the_readme_table_through_throughput_calculator():
    """tokens/s = TFLOPS x 1e12 x 32 / (96 L h^2 (1 + s/6h + V/16Lh)) (Megatron-DeepSpeed throughput_calculator, factor 4
    under --checkpoint-activations, vocabulary 50,257 padded to a multiple of 128 x 32); the GPT 30B script's layout:
    tp 32 over 4 nodes of 8, micro-batch 1, global batch 2, ZeRO 0, fp16, full recompute, sequence parallel."""
    rows = _rows("throughput", "deepspeed2023ds4sci")
    assert sorted(int(re.search(r"-s(\d+)k$", r["id"]).group(1)) for r in rows) == sorted(DS4SCI_TFLOPS)
    layers, hidden, vocab = 64, 6144, 53248
    assert vocab == -(-50257 // (128 * 32)) * 128 * 32
    for r in rows:
        k = int(re.search(r"-s(\d+)k$", r["id"]).group(1))
        model, cluster, strategy, workload = _setup(r)
        s = 1024 * k
        flops_per_token = 96 * layers * hidden**2 * (1 + s / (6 * hidden) + vocab / (16 * layers * hidden))
        assert r["published"] == round(DS4SCI_TFLOPS[k] * 1e12 * 32 / flops_per_token) and r["fit"] is False
        assert (cluster.nodes, cluster.gpus_per_node, r["device"], r["precision"]) == (4, 8, "a100-40gb", "fp16")
        assert (strategy.tp, strategy.pp, strategy.micro_batch, workload.global_batch, workload.seq_len) == \
            (32, 1, 1, 2, s)
        assert (strategy.engine, strategy.zero, strategy.recompute, strategy.sequence_parallel, strategy.attention) == \
            ("deepspeed", 0, "full", True, "flash")
        assert (model.d_model, model.num_layers, model.num_heads, model.vocab_size) == (hidden, layers, 64, vocab)
        e = estimate(model, cluster, strategy, workload)
        assert e.layout.dp == 1 and e.layout.grad_accum == 2 and e.tp_comm_s > 0  # the group spans the 4 nodes


HELD_OUT = HELD_OUT + ("dgxc2025aprllama31",)
# dgxc-benchmarking v25.04 (741c8860) llama3.1/README.md, BF16 tables: size -> {GPUs: (step s, tokens/s)}; layouts
# from its layout tables: (tp, pp, virtual stages, GBS per GPU or by GPUs), CP 2 and MBS 1 throughout
DGXC_LLAMA31 = {"8b": {8: (12.27, 85459), 16: (12.3, 170500), 32: (12.32, 340447), 64: (12.33, 680341),
                       128: (12.33, 1360683)},
                "70b": {64: (14.66, 71526), 128: (14.67, 142955), 256: (14.68, 285716), 512: (14.67, 571821),
                        1024: (14.65, 1145202), 2048: (14.66, 2288843)},
                "405b": {512: (19.78, 106024), 1024: (19.84, 211406), 2048: (19.87, 422175)}}
DGXC_LLAMA31_LAYOUT = {"8b": (1, 1, 1), "70b": (4, 4, 5), "405b": (8, 8, 8)}


def test_context_parallel_rows_are_their_tables():
    """The CP rows hold what their tables state -- dgxc Llama 3.1: CP 2, the layout table's TP / PP / VP, tokens/s =
    8192 x GBS / step; Llama 3 Table 4's CP 16 row: 380 TFLOPs/GPU x 16,384 GPUs / (6 N + 6 L h s) at s = 131,072 --
    and stay near their predictions at arrival (context parallelism priced, nothing tuned): dgxc 8B -10.0..-10.2%,
    70B -4.4..-4.9%, 405B +0.5..+0.7% (mean 5.7%); Llama 3 CP 16 -1.4%."""
    rows = _rows("throughput", "dgxc2025aprllama31")
    assert len(rows) == sum(len(v) for v in DGXC_LLAMA31.values())
    for r in rows:
        size = r["id"].split("-")[2]
        gpus = r["nodes"] * r["gpus_per_node"]
        step, tps = DGXC_LLAMA31[size][gpus]
        tp, pp, vp = DGXC_LLAMA31_LAYOUT[size]
        assert (r["cp"], r["tp"], r["pp"], r["micro_batch"]) == (2, tp, pp, 1)
        assert r["software"].get("virtual_stages", 1) == vp
        assert r["published"] == tps and abs(8192 * r["global_batch"] / step / tps - 1) < 0.002, r["id"]
    errs = _errors("dgxc2025aprllama31")
    assert sum(abs(e) for e in errs.values()) / len(errs) < 0.07 and max(abs(e) for e in errs.values()) < 0.11
    (cp16,) = [r for r in _rows("throughput", "llama3herd2024") if r.get("cp", 1) > 1]
    flops_per_token = 6 * 405.85e9 + 6 * 126 * 16384 * 131072
    assert (cp16["cp"], cp16["model"]["seq"]) == (16, 131072)
    assert cp16["published"] == round(380e12 * 16384 / flops_per_token)
    assert abs(_errors("llama3herd2024")[cp16["id"]]) < 0.03


HELD_OUT = HELD_OUT + ("dgxc2024llama31",)
# dgxc-benchmarking v24.11.1 (35a9aec0) llama3.1/README_<size>.md, 'Llama 3.1 <size> 24.09 BF16' tables: row id ->
# (step s, tokens/s, layers, tp, pp, virtual stages, GBS); CP 2 and MBS 1 throughout; the 405B proxies run 7 / 21 / 42
# of its layers (configure.sh). The 96-GPU step cell reads '8.7  5' (8.75 s, as its throughput says).
DGXC2411_LLAMA31 = {
    "8b-cp2-8g": (12.91, 81222, 32, 1, 1, 1, 128), "8b-cp2-16g": (13.00, 161319, 32, 1, 1, 1, 256),
    "8b-cp2-32g": (13.05, 321403, 32, 1, 1, 1, 512), "8b-cp2-64g": (13.08, 641331, 32, 1, 1, 1, 1024),
    "8b-cp2-128g": (13.10, 1280704, 32, 1, 1, 1, 2048),
    "70b-cp2-64g": (14.72, 71235, 80, 4, 4, 5, 128), "70b-cp2-128g": (14.73, 142373, 80, 4, 4, 5, 256),
    "70b-cp2-256g": (14.8, 283399, 80, 4, 4, 5, 512), "70b-cp2-512g": (14.89, 563372, 80, 4, 4, 5, 1024),
    "70b-cp2-1024g": (14.92, 1124478, 80, 4, 4, 5, 2048), "70b-cp2-2048g": (14.98, 2248957, 80, 4, 4, 5, 4096),
    "405b-7l-cp2-32g": (8.85, 116632, 7, 8, 1, 1, 126), "405b-21l-cp2-96g": (8.75, 117965, 21, 8, 3, 7, 126),
    "405b-42l-cp2-192g": (16.93, 121936, 42, 8, 3, 7, 252), "405b-cp2-576g": (17.20, 120022, 126, 8, 9, 7, 252),
    "405b-cp2-1152g": (17.52, 235660, 126, 8, 9, 7, 504), "405b-cp2-2304g": (17.62, 468646, 126, 8, 9, 7, 1008)}
# reached at arrival (stored constants, nothing tuned): 3.2% mean, 5.5% max -- 8B -4.5..-5.5%, 70B -3.1..-4.0%, 405B
# -2.4..+2.1% (the 7-layer proxy +2.1%); issue flags alone the same within 0.2 points. docs/costmodel-validation.md, nextsrc
NEW_SOURCE_BOUNDS.update({"dgxc2024llama31": (0.05, 0.08)})


def test_dgxc_2411_llama31_rows_are_the_24_09_tables():
    """tokens/s = 8192 x GBS / step as the READMEs state; the recipe yamls' layouts (CP 2, MBS 1, no recompute) and
    shapes: 405B with the yaml's 16 query groups and, on mock data, the GPT-2 BPE vocabulary padded to 128 x TP 8
    (51,200); 8B / 70B the Llama 3 tokenizer's 128,256 padded to 128 x TP (128,512 at TP 4)."""
    rows = _rows("throughput", "dgxc2024llama31")
    assert sorted(r["id"] for r in rows) == sorted("dgxc2411-llama31-" + k for k in DGXC2411_LLAMA31)
    for r in rows:
        step, tps, layers, tp, pp, vp, gbs = DGXC2411_LLAMA31[r["id"].removeprefix("dgxc2411-llama31-")]
        model, cluster, strategy, workload = _setup(r)
        # the 70B 2048-GPU column's throughput (2,248,957) is 8192 x 4096 / 14.92 s, the step of its 1024-GPU column,
        # not of its own 14.98 s (0.4% apart): published keeps the table's tokens/s, as for every other row
        slack = 0.005 if r["id"].endswith("70b-cp2-2048g") else 0.002
        assert r["published"] == tps and abs(8192 * gbs / step / tps - 1) < slack and r["fit"] is False, r["id"]
        assert (strategy.tp, strategy.pp, strategy.cp, strategy.micro_batch, workload.global_batch) == \
            (tp, pp, 2, 1, gbs)
        assert r["software"].get("virtual_stages", 1) == vp and strategy.recompute == "none"
        assert (strategy.engine, strategy.zero, strategy.sequence_parallel) == ("megatron", 1, tp > 1)
        assert (model.num_layers, workload.seq_len, r["device"], r["precision"]) == (layers, 8192, "h100-80gb", "bf16")
        vocab = 51200 if "405b" in r["id"] else -(-128256 // (128 * tp)) * 128 * tp
        assert model.vocab_size == vocab and model.vocab_size % (128 * tp) == 0
    errs = _errors("dgxc2024llama31")
    mean, worst = NEW_SOURCE_BOUNDS["dgxc2024llama31"]
    assert sum(abs(e) for e in errs.values()) / len(errs) < mean and max(abs(e) for e in errs.values()) < worst


# ---- newsrcB (2026-12-04): nanotron v0.5's Ultra-Scale Playbook sweep (README 'Benchmarks', docs/benchmark_summary.svg
# at c2528430): (model size label, nodes of 8 H100) -> (MFU %, dp, tp, pp, accumulation, micro-batch, ZeRO stage)
NANOTRON_PB = {
    ("1.3b", 64): (5.25, 128, 2, 2, 1, 2, 1), ("3.6b", 64): (10.49, 128, 4, 1, 1, 2, 1),
    ("8.9b", 64): (18.69, 128, 4, 1, 1, 2, 0), ("80b", 64): (17.79, 32, 16, 1, 4, 2, 1),
    ("1.3b", 32): (23.20, 64, 4, 1, 1, 4, 0), ("3.6b", 32): (26.77, 64, 4, 1, 1, 4, 0),
    ("8.9b", 32): (32.71, 32, 8, 1, 1, 8, 0), ("80b", 32): (30.75, 4, 4, 16, 64, 1, 1),
    ("1.3b", 16): (29.46, 64, 2, 1, 1, 4, 0), ("3.6b", 16): (34.59, 32, 4, 1, 1, 8, 0),
    ("8.9b", 16): (36.33, 16, 8, 1, 2, 8, 0), ("80b", 16): (34.29, 1, 4, 32, 256, 1, 0),
    ("1.3b", 8): (32.47, 32, 1, 2, 8, 1, 1), ("3.6b", 8): (35.53, 32, 1, 2, 8, 1, 1),
    ("8.9b", 8): (39.50, 32, 1, 2, 8, 1, 1), ("80b", 8): (30.65, 1, 4, 16, 256, 1, 0),
    ("1.3b", 4): (38.38, 16, 1, 2, 16, 1, 1), ("3.6b", 4): (40.39, 16, 1, 2, 8, 2, 1),
    ("8.9b", 4): (43.31, 16, 1, 2, 16, 1, 1), ("80b", 4): (14.76, 1, 8, 4, 256, 1, 0),
    ("1.3b", 2): (41.59, 8, 1, 2, 32, 1, 1), ("3.6b", 2): (43.77, 8, 1, 2, 16, 2, 1),
    ("8.9b", 2): (43.94, 4, 4, 1, 16, 4, 1),
    ("1.3b", 1): (44.32, 4, 1, 2, 16, 4, 1), ("3.6b", 1): (46.68, 4, 1, 2, 32, 2, 1),
    ("8.9b", 1): (45.22, 2, 1, 4, 128, 1, 1)}
# scripts/scaling_benchmarks.py model_configs: label -> (layers, hidden, heads, SwiGLU width, tied, the figure's B params)
NANOTRON_PB_MODELS = {"1.3b": (16, 2048, 32, 8192, True, 1.34), "3.6b": (28, 3072, 32, 8192, True, 3.57),
                      "8.9b": (32, 4096, 32, 14336, False, 8.86), "80b": (80, 8192, 64, 28672, False, 80.0)}
HELD_OUT = HELD_OUT + ("nanotron2025playbook",)
# reached at arrival (HEAD f5a58b4, stored constants): mean 35.5%, max +171.5% (issue flags only 44.3% / +229.2%, 11 of
# 26 rows over 20%) with the layers split evenly; with nanotron's compute-balanced split (stage_layers, below) 33.6% /
# +171.5% (flags only 45.5% / +229.2%, 11 over 20%). Within 10% from 16 to 256 GPUs at 8.9B / 80B with TP 4-8, PP 1-32;
# too fast on the 64-node DP-128 cells (+73 to +172%: 1M-token steps of 0.4-5.9 s, per-replica work of 2 sequences)
# and on 80B at TP 8 x PP 4 on 4 nodes (+163%, its 66 GB beside 80 GB), too slow at 1.3B with TP 1 (-14 to -25%)
# 2026-12-04 (dpscale, cf7f084): the launcher's CUDA_DEVICE_MAX_CONNECTIONS=1 read as no gradient overlap: 26.5 ->
# 18.4% mean (stored constants), max +165% (80B tp 8 pp 4, unchanged)
NEW_SOURCE_BOUNDS.update({"nanotron2025playbook": (0.24, 2.25)})


def _nanotron_stage_layers(layers: int, d: int, ffn: int, pp: int) -> list[int]:
    """nanotron models/base.py build_model (c2528430): pipeline blocks in order -- embedding (cost 0), the decoder
    layers (4 h d_head d + 3 F d each), final norm (0), LM head (V d) -- each on the current rank, which advances
    once the cumulative cost exceeds (rank + 1) / pp of the total."""
    costs = [0] + [4 * d * d + 3 * ffn * d] * layers + [0, 131072 * d]
    total, cumulative, rank, ranks = sum(costs), 0, 0, []
    for cost in costs:
        cumulative += cost
        ranks.append(rank)
        rank += cumulative > total * (rank + 1) / pp
    return [ranks[1:1 + layers].count(r) for r in range(pp)]


def test_nanotron_playbook_rows_are_the_figure_cells_converted():
    """tokens/s = MFU x 989e12 x GPUs / nanotron's model FLOPs per token, 3 (L (8 d^2 + 6 d F + 4 s d) + 2 d V)
    (models/llama.get_flops: no GQA, full-square attention); every cell DP x GAS x MBS = 256 sequences of 4096 (1M
    tokens), vocabulary 131,072, tied below 4B parameters; engine megatron at the cell's ZeRO stage, sequence parallel,
    1F1B over nanotron's compute-balanced stages, FlashAttention-2, no recomputation; the shapes reproduce the figure's
    parameter counts."""
    rows = _rows("throughput", "nanotron2025playbook")
    assert len(rows) == len(NANOTRON_PB) == 26
    for r in rows:
        size, gpus = re.match(r"nanotron-pb-([\d.]+b)-h100-(\d+)g-", r["id"]).groups()
        mfu, dp, tp, pp, gas, mbs, zero = NANOTRON_PB[(size, int(gpus) // 8)]
        layers, d, heads, ffn, tied, billions = NANOTRON_PB_MODELS[size]
        model, cluster, strategy, workload = _setup(r)
        assert (model.num_layers, model.d_model, model.num_heads, model.kv_heads, model.d_ff, model.vocab_size,
                model.tie_word_embeddings) == (layers, d, heads, heads, ffn, 131072, tied)
        per_token = 3 * (layers * (8 * d * d + 6 * d * ffn + 4 * 4096 * d) + 2 * d * 131072)
        assert r["published"] == round(mfu / 100 * 989e12 * int(gpus) / per_token) and r["fit"] is False
        assert (cluster.world_size, r["device"], r["precision"], r["metric"]) == (int(gpus), "h100-80gb", "bf16",
                                                                                   "tokens_per_s")
        est = estimate(model, cluster, strategy, workload)
        assert (est.layout.dp, strategy.tp, strategy.pp, strategy.micro_batch, strategy.zero) == (dp, tp, pp, mbs, zero)
        assert workload.global_batch == dp * gas * mbs == 256 and workload.seq_len == 4096
        assert (strategy.engine, strategy.recompute, strategy.attention, strategy.attention_kernel) == \
            ("megatron", "none", "flash", "fa2")
        assert strategy.sequence_parallel and strategy.pp_schedule == "1f1b" and strategy.overlap_param_gather is False
        assert list(strategy.stage_layers) == (_nanotron_stage_layers(layers, d, ffn, pp) if pp > 1 else [])
        assert est.params_total / 1e9 == pytest.approx(billions, abs=0.005) and est.fits


# ---- newsrcA (2026-12-04): fairseq's FSDP example (examples/fully_sharded_data_parallel/README.md, read at 65204058):
# GPT-3 13B (transformer_lm_gpt3_13), fairscale FSDP with --cpu-offload and DeepSpeed's CPU-Adam, fp16, full
# recompute, 8 x 2048 tokens per GPU on 1 and 8 V100 32GB: '~310 -> ~3200 words per second'
HELD_OUT = HELD_OUT + ("fairseq2021fsdp",)
# reached at arrival (HEAD f5a58b4 + optimizer_loop cpu-adam, stored constants): +24.0 / +30.9% (issue flags only, the
# host step priced as FSDP's torch AdamW on host tensors: -24.8 / -30.5%); both ~10 s per update fast although their
# offload copies differ by 11.5 s (published.yaml fairseq2021fsdp)
NEW_SOURCE_BOUNDS.update({"fairseq2021fsdp": (0.37, 0.41)})


def test_fairseq_fsdp_offload_rows_are_the_readme_runs():
    """The README's two runs of one command: the logged parameter count (fairseq's learned positions keep two rows
    beyond the 2048 the model prices), 8 sequences of 2048 per GPU, fairscale FSDP resharding after forward with the
    fp32 shards and Adam state on the host, stepped there by DeepSpeed's CPU-Adam."""
    rows = _rows("throughput", "fairseq2021fsdp")
    assert {(r["gpus_per_node"], r["published"]) for r in rows} == {(1, 310), (8, 3200)}
    for r in rows:
        model, cluster, strategy, workload = _setup(r)
        est = estimate(model, cluster, strategy, workload)
        assert 13_110_865_920 - est.params_total == 2 * 5120 and est.fits
        assert (strategy.engine, strategy.zero, strategy.offload_params, strategy.offload_optimizer) == \
            ("fsdp", 3, "cpu", "cpu")
        assert (strategy.optimizer_loop, strategy.attention, strategy.recompute, r["precision"]) == \
            ("cpu-adam", "eager", "full", "fp16")
        assert (strategy.micro_batch, workload.global_batch, workload.seq_len) == (8, 8 * cluster.world_size, 2048)
        assert (r["device"], cluster.nodes, r["metric"], r["fit"]) == ("v100-32gb", 1, "tokens_per_s", False)


def test_cpu_adam_prices_fsdp_host_step_at_the_cpu_adam_rate():
    """optimizer_loop cpu-adam: the host step of FSDP's CPU offload at the device's CPU-Adam rate, not torch's
    single-tensor AdamW's (engines.yaml host_adam_slowdown) nor its fused one's (the engine's default, 28 of CPU-Adam's
    30 B per fp32 parameter); refused where no FSDP host step exists."""
    from dataclasses import replace
    from scalestudy.costmodel.engines import engine_table
    from scalestudy.errors import OptionError
    (r,) = [r for r in _rows("throughput", "fairseq2021fsdp") if r["gpus_per_node"] == 8]
    model, cluster, strategy, workload = _setup(r)
    cpu_adam = estimate(model, cluster, strategy, workload).optimizer_s
    torch_adamw = estimate(model, cluster, replace(strategy, optimizer_loop="per-tensor"), workload).optimizer_s
    assert torch_adamw / cpu_adam == pytest.approx(engine_table()["fsdp"].host_adam_slowdown)
    fused = estimate(model, cluster, replace(strategy, optimizer_loop="engine"), workload).optimizer_s
    assert fused / cpu_adam == pytest.approx(28.0 / 30.0)
    assert cpu_adam == pytest.approx(13_110_855_680 / cluster.device.cpu_adam_params_per_s)  # 8 shards, one host
    for engine, zero, offload in (("deepspeed", 3, "cpu"), ("fsdp", 3, "none")):
        with pytest.raises(OptionError, match="cpu-adam"):
            Strategy(engine=engine, zero=zero, offload_optimizer=offload, offload_params=offload,
                     optimizer_loop="cpu-adam")


# ---- newsrcA (2026-12-04): IBM fms-fsdp's README table of 2024-02-21..26 (3d28d725 / 5805ace5, before cf6e42c7): the
# ibmfms2024 runs at micro-batch 8 (34B) and 6 (70B): model -> (batch, A100 tokens/s/GPU, H100 tokens/s/GPU)
FMS_EARLY = {"34b": (8, 772, 1700), "70b": (6, 380, 850)}
HELD_OUT = HELD_OUT + ("ibmfms2024early",)
# reached at arrival (HEAD 8e9edd7, stored constants): -10.4 / +4.4 / -8.6 / +6.5% (34B A100 / H100, 70B A100 / H100);
# issue flags only -6.3 / +12.5 / -5.2 / +13.3%
NEW_SOURCE_BOUNDS.update({"ibmfms2024early": (0.10, 0.14)})


def test_fms_early_rows_are_the_ibmfms_runs_at_their_larger_batch():
    """The README's batch-8 / batch-6 cells x GPUs, on the ibmfms2024 rows' model, cluster and software: only the
    micro-batch (and so the global batch) differs, as the code between e82195e5 and ea662fe5 does not."""
    later = {(r["id"].split("-")[2], r["device"]): r for r in _rows("throughput", "ibmfms2024")}
    rows = _rows("throughput", "ibmfms2024early")
    assert len(rows) == 4
    for r in rows:
        size = r["id"].split("-")[3]
        batch, a100, h100 = FMS_EARLY[size]
        gpus = r["nodes"] * r["gpus_per_node"]
        assert r["published"] == (a100 if r["device"] == "a100-80gb" else h100) * gpus
        assert (r["micro_batch"], r["global_batch"], r["fit"]) == (batch, batch * gpus, False)
        twin = later[(size, r["device"])]
        same = ("model", "device", "nodes", "gpus_per_node", "recompute", "engine", "zero", "precision", "metric",
                "software")
        assert all(r[k] == twin[k] for k in same) and twin["micro_batch"] == 2
        model, cluster, strategy, workload = _setup(r)
        assert estimate(model, cluster, strategy, workload).fits


# ---- newsrcB (2026-12-04): Schmid 2023's FLAN-T5 XL / XXL fine-tuning table (deep-learning-pytorch-huggingface
# a51da7f1): HF Trainer + DeepSpeed 0.8 ZeRO-3 on one p4d / p3 node. row id -> (hours, GPUs, batch per GPU, offload)
FLANT5 = {"flant5ds-xl-a100-40gb-8g-mb72": (2.5, 8, 72, False), "flant5ds-xxl-a100-40gb-8g-mb8": (10, 8, 8, False),
          "flant5ds-xxl-a100-40gb-8g-mb48-offload": (19, 8, 48, True),
          "flant5ds-xxl-a100-40gb-8g-mb32-offload-84948dd": (24, 8, 32, True),  # the cell a51da7f1 replaced
          "flant5ds-xl-v100-16gb-8g-mb1-fp32": (105, 8, 1, False),
          "flant5ds-xl-v100-16gb-4g-mb8-fp32-offload": (69, 4, 8, True),
          "flant5ds-xl-v100-16gb-8g-mb8-fp32-offload": (32, 8, 8, True)}
HELD_OUT = HELD_OUT + ("flant5ds2023",)
# reached at arrival (HEAD d94e8e5, stored constants; issue flags only = full, every software key is an issue flag):
# +7.9 / +26.4 / +119.2% (A100 XL mb72, XXL mb8, XXL mb48 offload), +131.6 / -3.5 / -7.2% (V100 XL mb1, 4 GPUs
# offload, 8 GPUs offload): mean 49.3%, max 131.6%; with 84948dd0's XXL offload cell at batch 32 (+144.1%, its step
# 25.7 s against batch 48's 30.5 s: ~16 s a step that does not grow with the batch, the model's 3.4 s) 62.8 / 144.1%
NEW_SOURCE_BOUNDS.update({"flant5ds2023": (0.82, 1.88)})


def test_flant5_deepspeed_rows_are_the_results_table_converted():
    """3 epochs x 287,113 articles x 512 source tokens over the table's duration; the table's batch per GPU on its GPUs
    at gradient accumulation 1; the run's ZeRO-3 (+ CPU offload of parameters and optimizer together), HF gradient
    checkpointing, eager T5 attention; labels padded to 129, rounded up to 136 by the collator's multiple of 8."""
    rows = _rows("throughput", "flant5ds2023")
    assert {r["id"] for r in rows} == set(FLANT5)
    for r in rows:
        hours, gpus, batch, offload = FLANT5[r["id"]]
        assert r["published"] == round(3 * 287_113 * 512 / (hours * 3600)) and r["metric"] == "source_tokens_per_s"
        assert (r["nodes"], r["gpus_per_node"], r["micro_batch"], r["global_batch"]) == (1, gpus, batch, batch * gpus)
        assert r["model"]["target"] == math.ceil(129 / 8) * 8 and r["model"]["seq"] == 512
        assert r["precision"] == ("bf16" if r["device"] == "a100-40gb" else "fp32")
        model, cluster, strategy, workload = _setup(r)
        assert (strategy.engine, strategy.zero, strategy.recompute, strategy.attention) == \
            ("deepspeed", 3, "full", "eager")
        offloaded = ("cpu", "cpu") if offload else ("none", "none")
        assert (strategy.offload_params, strategy.offload_optimizer) == offloaded
        assert estimate(model, cluster, strategy, workload).fits and r["fit"] is False


# ---- newsrc2 (2026-12-04): DeepSpeed's core-binding blog (blogs/zenflow-corebinding, 2b68bbc5): ZeRO-2 (+ CPU offload)
# fine-tuning of Qwen2.5 on 2 A100 40GB of one DGX A100. row id -> (ms per step, model, offload, cores bound to ranks)
DSBIND = {"dsbind-qwen25-3b-a100-40gb-2g-z2-offload": (2887, "3b", True, False),
          "dsbind-qwen25-3b-a100-40gb-2g-z2-offload-bound": (2497, "3b", True, True),
          "dsbind-qwen25-1.5b-a100-40gb-2g-z2": (240, "1.5b", False, False),
          "dsbind-qwen25-1.5b-a100-40gb-2g-z2-offload-bound": (1365, "1.5b", True, True)}
HELD_OUT = HELD_OUT + ("dsbind2025",)
# reached at arrival (HEAD 7f6a3d4, stored constants; issue flags only within 0.8 point of each): +50.5 / +30.1% (3B
# offload unbound / bound), -0.6% (1.5B ZeRO-2), +36.7% (1.5B offload bound): mean 29.5%, max 50.5%. The GPU step
# holds (the 1.5B without offload); the offloaded steps' host side is ~1 s (3B) / ~0.4 s (1.5B) longer than priced
NEW_SOURCE_BOUNDS.update({"dsbind2025": (0.39, 0.66)})


def test_dsbind_rows_are_the_blog_tables_at_the_example_script():
    """8 sequences of 512 (Alpaca padded to max_length) per step over the blog's step times; micro-batch 4 on 2 GPUs;
    ZeRO-2 with overlap_comm at its stage-2 default (off), no checkpointing; the bound runs flagged, not priced; the
    model's memory agrees with the blog that the 3B needs the offload on two 40 GB GPUs and the 1.5B does not."""
    rows = {r["id"]: r for r in _rows("throughput", "dsbind2025")}
    assert set(rows) == set(DSBIND)
    for rid, (ms, size, offload, bound) in DSBIND.items():
        r = rows[rid]
        assert r["published"] == round(8 * 512 / (ms / 1000), 1) and r["metric"] == "tokens_per_s"
        assert (r["model"]["d_model"], r["model"]["layers"]) == ((2048, 36) if size == "3b" else (1536, 28))
        assert (r["device"], r["nodes"], r["gpus_per_node"], r["micro_batch"], r["global_batch"]) == \
            ("a100-40gb", 1, 2, 4, 8)
        assert ("bind_cores_to_rank" in r.get("unmodelled", [])) == bound and r["fit"] is False
        model, cluster, strategy, workload = _setup(r)
        assert (strategy.engine, strategy.zero, strategy.recompute, strategy.overlap_grad_comm) == \
            ("deepspeed", 2, "none", False)
        assert strategy.offload_optimizer == ("cpu" if offload else "none") and workload.seq_len == 512
        assert estimate(model, cluster, strategy, workload).fits
        plain = dict(r, software={k: v for k, v in r["software"].items() if k != "offload_optimizer"})
        assert estimate(*_setup(plain)).fits == (size == "1.5b")


# ---- newsrc2 (2026-12-04): DeepSpeedExamples training/bf16_master_weight (6a3d817a): the 'Baseline (fp32 master)' row,
# a 6.86B post-LN GPT-style model under DeepSpeed ZeRO-3 on 4 H100, 1 x 512 tokens per GPU, every block checkpointed
HELD_OUT = HELD_OUT + ("dsbf16master2025",)
# reached at arrival (HEAD 6290d4d, stored constants): +15.5% (issue flags only +20.3%: fused kernels by default); the
# peak allocated memory +13.8% (38.3 GB modelled against 31.38 GiB = 33.7 GB)
NEW_SOURCE_BOUNDS.update({"dsbf16master2025": (0.21, 0.21)})


def test_dsbf16master_rows_are_the_readme_baseline_at_the_readme_command():
    """4 GPUs x 1 x 512 tokens over 0.6016 s; the peak in GiB as train.py's format_memory prints it; batch 1 from the
    command (the config's micro-batch 4 is not what the DataLoader hands the model); ZeRO-3 with overlap_comm, every
    block checkpointed; the model's parameters the script's modules within 0.001%."""
    (r,) = _rows("throughput", "dsbf16master2025")
    (m,) = [x for x in _rows("memory") if x["source"] == "dsbf16master2025"]
    assert r["published"] == round(4 * 512 / 0.6016, 1) and m["published_gb"] == round(31.38 * 2**30 / 1e9, 2)
    assert m["measured_as"] == "allocated" and m["whole_model_load"] is True
    for row in (r, m):
        model, cluster, strategy, workload = _setup(row)
        est = estimate(model, cluster, strategy, workload)
        assert (row["device"], cluster.world_size, strategy.micro_batch, workload.global_batch, workload.seq_len) == \
            ("h100-80gb", 4, 1, 4, 512)
        assert (strategy.engine, strategy.zero, strategy.recompute, strategy.attention, strategy.overlap_grad_comm) == \
            ("deepspeed", 3, "full", "eager", True)
        assert est.params_total == pytest.approx(6_858_007_633, rel=1e-5) and est.fits


# ---- source (2026-12-04): OneFlow DLPerf's NVIDIA Megatron-LM 8aa4619f runs (Megatron-LM/README.md at 10f7979) on
# 1-4 nodes of 8 V100-SXM2-16GB with one 100 Gb/s EDR NIC per node. case -> (nodes, gpus per node, dp, tp, pp,
# micro-batch, global batch, hidden, heads, layers, latency ms, the README's 'Achieved teraFLOP/s per GPU')
DLPERF_MEGATRON = {
    "DP_1x1x1_2_1536x16": (1, 1, 1, 1, 1, 2, 2, 1536, 16, 16, 464.12, 43.25),
    "DP_8x1x1_16_1536x16": (1, 8, 8, 1, 1, 2, 16, 1536, 16, 16, 480.96, 41.74),
    "DP_16x1x1_32_1536x16": (2, 8, 16, 1, 1, 2, 32, 1536, 16, 16, 664.46, 30.21),
    "DP_32x1x1_64_1536x16": (4, 8, 32, 1, 1, 2, 64, 1536, 16, 16, 683.51, 29.37),
    "MP_1x1x1_8_768x12": (1, 1, 1, 1, 1, 8, 8, 768, 12, 12, 611.2, 32.63),
    "MP_1x8x1_16_1536x16": (1, 8, 1, 8, 1, 16, 16, 1536, 16, 16, 692.44, 28.99),
    "MP_1x16x1_16_3072x16": (2, 8, 1, 16, 1, 16, 16, 3072, 32, 16, 5610.23, 6.22),
    "MP_1x32x1_16_3072x32": (4, 8, 1, 32, 1, 16, 16, 3072, 32, 32, 13037.85, 2.60),
    "2D_2x4x1_16_1536x16": (1, 8, 2, 4, 1, 8, 16, 1536, 16, 16, 576.48, 34.82),
    "2D_4x2x1_16_1536x16": (1, 8, 4, 2, 1, 4, 16, 1536, 16, 16, 593.68, 33.81),
    "2D_2x8x1_16_2304x24": (2, 8, 2, 8, 1, 8, 16, 2304, 24, 24, 1313.52, 23.00),
    "2D_4x8x1_32_2304x24": (4, 8, 4, 8, 1, 8, 32, 2304, 24, 24, 1508.48, 20.03),
    "DP_PP_8x1x4_512_1536x16": (4, 8, 8, 1, 4, 2, 512, 1536, 16, 16, 4893.55, 32.82),
    "MP_PP_1x8x4_512_2304x24": (4, 8, 1, 8, 4, 16, 512, 2304, 24, 24, 22166.85, 21.80),
    "2D_PP_2x4x4_512_2304x24": (4, 8, 2, 4, 4, 8, 512, 2304, 24, 24, 15331.23, 31.53),
    "2D_PP_2x8x2_512_2304x24": (4, 8, 2, 8, 2, 8, 512, 2304, 24, 24, 16281.51, 29.69)}
HELD_OUT = HELD_OUT + ("dlperf2021megatron",)
# reached at arrival (HEAD 6c23ab9, stored constants; every software key an issue flag): mean 27.2%, max +84.4%.
# Single-GPU and one-node rows +15..+22% (the V100 offset every V100 source shows: megatron2019 +8..+24%), DP over
# the one NIC +17 / +19% (the all-reduce priced right at 12 GB/s a node), tensor parallelism across nodes +52 / +84%
# (TP 16 / 32: the cross-node all-reduces take ~1.6-1.9x their priced time), TP 8 x DP 2-4 across nodes +28%
# (eight concurrent one-member-per-node rings on one NIC), PP 4 x DP 8 +2%, TP 8 x PP 4 +53%
NEW_SOURCE_BOUNDS.update({"dlperf2021megatron": (0.36, 1.10)})


def test_dlperf_megatron_rows_are_the_readme_table_at_the_script():
    """global batch x 2048 over each case's latency; the README's TFLOP/s column is the same latency converted with
    Narayanan et al.'s eq. 3 at vocabulary 51,200 (so the latency is the whole iteration); Megatron-LM 8aa4619f pads
    the GPT-2 vocabulary to 128 x TP; one EDR NIC per node on the multi-node rows; the model fits every run."""
    rows = {r["id"]: r for r in _rows("throughput", "dlperf2021megatron")}
    assert len(rows) == len(DLPERF_MEGATRON)
    for case, (nodes, gpn, dp, tp, pp, mb, gb, h, a, layers, ms, tflops) in DLPERF_MEGATRON.items():
        (r,) = [x for x in rows.values() if x["id"].endswith(f"-{nodes}n{gpn}g-dp{dp}tp{tp}pp{pp}")
                and x["model"]["d_model"] == h and x["model"]["layers"] == layers]
        assert r["published"] == round(gb * 2048 / (ms / 1000), 1) and r["metric"] == "tokens_per_s"
        eq3 = 96 * gb * 2048 * layers * h * h * (1 + 2048 / (6 * h) + 51200 / (16 * layers * h))
        assert eq3 / (ms / 1000) / (nodes * gpn) / 1e12 == pytest.approx(tflops, abs=0.006), case
        assert r["model"]["vocab"] == -(-50257 // (128 * tp)) * 128 * tp and r["model"]["heads"] == a
        assert (r["nodes"], r["gpus_per_node"], r["tp"], r["pp"], r["micro_batch"], r["global_batch"]) == \
            (nodes, gpn, tp, pp, mb, gb)
        assert {k: float(v) for k, v in r.get("cluster", {}).items()} == \
            ({"inter_node_bytes_per_s": 1.5e9} if nodes > 1 else {})
        model, cluster, strategy, workload = _setup(r)
        est = estimate(model, cluster, strategy, workload)
        assert (strategy.engine, strategy.zero, strategy.recompute, strategy.precision, strategy.attention) == \
            ("megatron", 0, "full", "fp16", "eager")
        assert (strategy.sequence_parallel, strategy.overlap_grad_comm, strategy.pp_schedule) == (False, False, "1f1b")
        assert est.layout.dp == dp and est.fits and r["fit"] is False and r["device"] == "v100-16gb"


# ---- source (2026-12-04): OneFlow DLPerf's DeepSpeed 0.3.0 runs (DeepSpeed/Megatron-LM/README.md, e6cbac7) of
# DeepSpeedExamples' Megatron GPT-2 small on the dlperf2021megatron cluster. (nodes, stage) -> samples/s
DLPERF_DS = {(1, 0): 198.6, (1, 1): 195.8, (2, 0): 269, (2, 1): 261, (4, 0): 533, (4, 1): 506}
HELD_OUT = HELD_OUT + ("dlperf2020deepspeed",)
# reached at arrival (HEAD bcb0df2, stored constants): ZeRO-0 +31.3 / +48.8 / +48.9%, ZeRO-1 +15.8 / +37.7 / +40.9% on
# 1 / 2 / 4 nodes (issue flags only +55..+68%: kernels eager, cuBLAS 10); mean 38.9%, max 48.9%. The runs lose 32% per
# GPU from one node to two, the model 23%; the model's ZeRO-1 step is 13% slower than its ZeRO-0 one, the runs' 1.4%
NEW_SOURCE_BOUNDS.update({"dlperf2020deepspeed": (0.51, 0.64)})


def test_dlperf_deepspeed_rows_are_the_readme_table_at_the_script():
    """samples/s x 1024 tokens; 4 x 1024 per GPU, 8 GPUs a node, no accumulation, no checkpointing; ZeRO 0 / 1 as
    deepspeed2020zerotut models DeepSpeed 0.3 on the same Megatron GPT-2 code line; one EDR NIC a node."""
    rows = _rows("throughput", "dlperf2020deepspeed")
    assert {(r["nodes"], r["zero"]) for r in rows} == set(DLPERF_DS)
    for r in rows:
        assert r["published"] == round(DLPERF_DS[r["nodes"], r["zero"]] * 1024, 1) and r["metric"] == "tokens_per_s"
        assert (r["micro_batch"], r["global_batch"], r["gpus_per_node"]) == (4, 32 * r["nodes"], 8)
        assert {k: float(v) for k, v in r.get("cluster", {}).items()} == \
            ({"inter_node_bytes_per_s": 1.5e9} if r["nodes"] > 1 else {})
        model, cluster, strategy, workload = _setup(r)
        assert (model.d_model, model.num_layers, model.vocab_size, workload.seq_len) == (768, 12, 50304, 1024)
        assert (strategy.engine, strategy.recompute, strategy.kernels, strategy.attention, strategy.cublas) == \
            ("deepspeed", "none", "eager", "eager", "10")
        assert strategy.overlap_grad_comm is False and r["fit"] is False and r["device"] == "v100-16gb"
        assert estimate(model, cluster, strategy, workload).fits


# ---- source2 (2026-12-04): Lightning Thunder's Lit-GPT example (examples/lit-gpt/README.md at 07da9a31): open_llama_3b
# in bf16-true at 2 x 2048 tokens per GPU, FSDP1 over 2 A100-SXM4-40GB, 45 timed iterations. (GPUs, stage, method)
# -> seconds
THUNDER_LITGPT = {(2, 2, "eager"): 26.05, (2, 3, "eager"): 26.33, (2, 2, "inductor"): 21.71,
                  (2, 3, "inductor"): 21.76}
HELD_OUT = HELD_OUT + ("thunderlitgpt2024",)
# reached at arrival (HEAD e384919, stored constants): eager -10.3 / -9.7% (stage 2 / 3), Inductor -10.7 / -11.0%;
# mean 10.4%, max 11.0% (issue flags only +6.1, +6.6, -11.6, -11.9%). The model's AdamW step stands for the scripts'
# SGD (~19 ms of a 480-580 ms step; unmodelled sgd_optimizer); its eager-minus-fused time (105 ms) matches the runs'
# Eager-minus-Inductor (97 ms)
NEW_SOURCE_BOUNDS.update({"thunderlitgpt2024": (0.14, 0.15)})


def test_thunder_litgpt_rows_are_the_readme_tables_at_the_scripts():
    """45 timed iterations of 2 x 2048 tokens per GPU; open_llama_3b as Lit-GPT's config; a bf16 model without
    autocast (optimizer_dtype bf16, gradients reduced in bf16); FSDP1 with one unit per block as engine fsdp."""
    rows = _rows("throughput", "thunderlitgpt2024")  # the single-device rows left out: AdamW states do not fit 40 GB
    assert len(rows) == len(THUNDER_LITGPT)
    for r in rows:
        gpus, method = r["gpus_per_node"], "inductor" if r["id"].endswith("inductor") else "eager"
        seconds = THUNDER_LITGPT[gpus, r["zero"], method]
        assert r["published"] == round(45 * 2 * gpus * 2048 / seconds) and r["metric"] == "tokens_per_s"
        assert (r["nodes"], r["micro_batch"], r["global_batch"]) == (1, 2, 2 * gpus)
        model, cluster, strategy, workload = _setup(r)
        assert (model.d_model, model.num_layers, model.vocab_size, workload.seq_len) == (3200, 26, 32000, 2048)
        assert (strategy.engine, strategy.recompute, strategy.precision, strategy.attention) == \
            ("fsdp", "none", "bf16", "flash")
        assert (strategy.optimizer_dtype, strategy.grad_reduce) == ("bf16", "compute")
        assert strategy.kernels == ("fused" if method == "inductor" else "eager")
        assert r["fit"] is False and r["device"] == "a100-40gb"
        assert set(r["unmodelled"]) == {"bf16_rmsnorm"}
        assert (strategy.optimizer_kind, strategy.optimizer_loop) == ("sgd", "per-tensor")  # SGD(foreach=False)
        assert estimate(model, cluster, strategy, workload).fits


# the README's Memory column of the same cells (GB = max_memory_allocated / 1e9): (stage, method) -> GB
THUNDER_LITGPT_MEM_GB = {(2, "eager"): 27.67, (3, "eager"): 21.23, (2, "inductor"): 24.31, (3, "inductor"): 17.86}
# reached at arrival (HEAD b60e1ea + optimizer_kind, stored constants): +13.6 / +15.8% eager (stage 2 / 3), +18.1 /
# +22.4% Inductor


def test_thunder_litgpt_memory_rows_are_the_readme_memory_column_of_the_throughput_rows():
    """Each measured row is its throughput row's run (model, layout, batch, software: SGD, no state) with the
    README's Memory in GB of 1e9 bytes, read as max_memory_allocated (no whole-model load: Fabric builds the model
    on the host); the model over-prices every cell, by less than a quarter."""
    data = load()
    base = {r["id"]: r for r in _rows("throughput", "thunderlitgpt2024")}
    rows = _rows("memory", "thunderlitgpt2024")
    assert {r["id"] for r in rows} == {k + "-memory" for k in base}
    for r in rows:
        b = base[r["id"].removesuffix("-memory")]
        method = "inductor" if b["id"].endswith("inductor") else "eager"
        assert r["published_gb"] == THUNDER_LITGPT_MEM_GB[b["zero"], method]
        assert r["measured"] and r["measured_as"] == "allocated" and not r.get("whole_model_load")
        assert all(r.get(k) == b.get(k) for k in ("model", "device", "nodes", "gpus_per_node", "micro_batch",
                                                  "global_batch", "recompute", "engine", "zero", "precision",
                                                  "software"))
        row = memory_row(r, data["sources"])
        assert row.check == "measured" and 0.10 < row.predicted / row.published - 1 < 0.25


# ---- source4 (2026-12-04): OLMo-core's README as updated in e27ba745 (2024-11-05): the 1B re-timed at micro-batch 8
# with a compiled loss, and a Llama 3 8B shape at the dolma2 vocabulary. row -> (TPS per device, d_model, layers,
# KV heads, SwiGLU hidden, micro-batch)
OLMO_NOV = {"olmocore-1b-mb8-8xh100": (55000, 2048, 18, 16, 5632, 8),
            "olmocore-llama8b-8xh100": (9500, 4096, 32, 8, 14336, 2)}
# nanoT5's 'Efficiency statistics' TF32 rows (8501daf6): row -> (~seconds per step, compile)
NANOT5_TF32 = {"nanot5-base-a100-tf32-eager": (1.39, False), "nanot5-base-a100-tf32-compile": (0.95, True)}
HELD_OUT = HELD_OUT + ("olmocore2024nov", "nanot52023tf32")
# reached at arrival (HEAD e4a1e61, stored constants): olmocore2024nov 1B -8.9%, 8B -4.2% (issue flags only -14.5 /
# -5.3%: torch's fp32 logits copy where the compiled loss fuses it); nanot52023tf32 eager -10.6%, compiled -3.8%
# (issue flags only -72.8 / -81.4%: tf32 is no issue flag)
NEW_SOURCE_BOUNDS.update({"olmocore2024nov": (0.09, 0.12), "nanot52023tf32": (0.10, 0.14)})


def test_olmo_core_november_rows_are_the_readme_and_scripts():
    """TPS per device x 8 GPUs (the launcher default, as olmocore2024); the scripts' micro-batch and 1024 x 4096
    tokens per step; llama3_8B's SwiGLU width by llama_like's rounding; FSDP2 without checkpointing, compiled."""
    rows = _rows("throughput", "olmocore2024nov")
    assert {r["id"] for r in rows} == set(OLMO_NOV)
    for r in rows:
        tps, d, layers, kv, hidden, mb = OLMO_NOV[r["id"]]
        model, cluster, strategy, workload = _setup(r)
        assert r["published"] == tps * cluster.world_size and cluster.world_size == 8
        assert (model.d_model, model.num_layers, model.d_ff, model.vocab_size) == (d, layers, hidden, 100352)
        assert r["model"]["kv_heads"] == kv
        assert (strategy.micro_batch, workload.global_batch, workload.seq_len) == (mb, 1024, 4096)
        assert (strategy.engine, strategy.zero, strategy.recompute, strategy.kernels, strategy.cross_entropy) == \
            ("fsdp", 3, "none", "fused", "fused")
        assert r["fit"] is False and r["device"] == "h100-80gb" and estimate(model, cluster, strategy, workload).fits
    assert 1024 * -(-int(int(8 * 4096 / 3) * 1.3) // 1024) == 14336  # llama_like, hidden_size_multiplier 1.3


def test_nanot5_tf32_rows_are_the_efficiency_table():
    """128 x 512 encoder tokens per ~step; fp32 on TF32 Tensor Cores at grad acc 2; otherwise nanot52023's rows."""
    rows = _rows("throughput", "nanot52023tf32")
    assert {r["id"] for r in rows} == set(NANOT5_TF32)
    base = {r["id"].rsplit("-", 1)[1]: r for r in _rows("throughput", "nanot52023")}
    for r in rows:
        seconds, compiled = NANOT5_TF32[r["id"]]
        assert r["published"] == round(128 * 512 / seconds) and r["metric"] == "source_tokens_per_s"
        model, cluster, strategy, workload = _setup(r)
        assert (strategy.precision, strategy.tf32, strategy.micro_batch, workload.global_batch) == \
            ("fp32", True, 64, 128)
        twin = base["compile" if compiled else "eager"]
        assert r["model"] == twin["model"] and r["device"] == twin["device"] == "a100-80gb"
        assert {k: v for k, v in r["software"].items() if k != "tf32"} == twin["software"]
        assert r["fit"] is False and estimate(model, cluster, strategy, workload).fits


# ---- source5 (2026-12-04): OPT-175B, metaseq's launcher at 4d9a8632 (fairscale FSDP no-reshard + Megatron TP 8) on
# the paper's 992 A100 80GB; 147 TFLOP/s = the final chronicle's 4.30e23 FLOPs over ~33 days on 1024 GPUs
HELD_OUT = HELD_OUT + ("opt2022",)
# reached at arrival (HEAD c5ac6c9, stored constants): +8.9% with the software then expressible, +6.2% with the issue
# flags only, both predicted not to fit (93.4 of 85.9 GB); +8.1% and 60.0 GB once the saved inputs are distributed
NEW_SOURCE_BOUNDS.update({"opt2022": (0.11, 0.11)})


def test_opt_row_is_the_metaseq_launcher_and_the_chronicle_s_flops():
    """(2^21 tokens // dp 124) // 2048 = micro-batch 8, no accumulation; the chronicle's 4.30e23 FLOPs over 300B tokens
    is Megatron's hardware count with recomputation; the checkpointed inputs split over tp 8 let it fit."""
    (r,) = _rows("throughput", "opt2022")
    model, cluster, strategy, workload = _setup(r)
    dp = cluster.world_size // strategy.tp
    assert (cluster.world_size, strategy.tp, dp) == (992, 8, 124)
    assert strategy.micro_batch == (2**21 // dp) // 2048 == 8 and workload.global_batch == 8 * dp
    assert (strategy.engine, strategy.zero, strategy.recompute, strategy.precision) == ("fsdp", 2, "full", "fp16")
    assert strategy.distribute_saved_activations and not strategy.sequence_parallel
    assert (strategy.recompute_early_stop, strategy.grad_reduce, strategy.attention) == ("off", "compute", "eager")
    l, h, s, v = 96, 12288, 2048, 50272
    per_token = 96 * l * h**2 * (1 + s / (6 * h) + v / (16 * l * h))
    assert 4.30e23 / 300e9 == pytest.approx(per_token, rel=0.01)
    assert round(4.30e23 / (33 * 86400 * 1024) / 1e12) == r["published"] == 147
    from dataclasses import replace

    whole = replace(strategy, distribute_saved_activations=False)
    assert estimate(model, cluster, strategy, workload).fits and not estimate(model, cluster, whole, workload).fits


# ---- source5: torchtitan's 2024-12 H100 file, Tables 4 and 5 (compile + Float8; 2D 70B, 3D 405B with the 1F1B and
# Interleaved 1F1B schedules): row -> (TPS per GPU, GPUs, pp schedule, AsyncTP)
TT_ND = {"tt-llama31-70b-h100-256-fp8-2d": (829, 256, "1f1b", False),
         "tt-llama31-70b-h100-256-fp8-2d-asynctp": (876, 256, "1f1b", True),
         "tt-llama31-405b-h100-512-fp8-1f1b": (100, 512, "1f1b", True),
         "tt-llama31-405b-h100-512-fp8-interleaved": (128, 512, "interleaved", True)}
HELD_OUT = HELD_OUT + ("torchtitan2024h100nd",)
# reached at arrival (HEAD 1e0192b, stored constants): 70B -3.0 / +2.3%, 405B +12.0 / +13.5% (issue flags only
# -3.0 / -8.2 / -2.0 / -0.7%)
NEW_SOURCE_BOUNDS.update({"torchtitan2024h100nd": (0.10, 0.18)})


def test_torchtitan_2d_3d_rows_are_tables_4_and_5_at_torchtitan_s_pipeline_defaults():
    """TPS/GPU x GPUs; 405B: microbatches = pp (local batch 32 / 8 = 4), generate_split_points' layers per rank
    (1F1B: 15 + 16 x 6 + 15; the 16 interleaved stages 7, 8 x 14, 7 looped over 8 ranks give the same per rank)."""
    rows = _rows("throughput", "torchtitan2024h100nd")
    assert {r["id"] for r in rows} == set(TT_ND)

    def split(layers: int, stages: int) -> list[int]:  # torchtitan 9dec370a generate_split_points
        base, extra = divmod(layers, stages)
        sizes = [base] + [base + 1 if i < extra else base for i in range(stages - 2)]
        return sizes + [layers - sum(sizes)]

    for r in rows:
        tps, gpus, schedule, async_tp = TT_ND[r["id"]]
        model, cluster, strategy, workload = _setup(r)
        assert r["published"] == tps * gpus == tps * cluster.world_size and workload.seq_len == 8192
        assert (strategy.precision, strategy.recompute, strategy.kernels, strategy.tp) == ("fp8", "full", "fused", 8)
        assert strategy.tp_comm_overlap is async_tp and strategy.pp_schedule == schedule
        if strategy.pp > 1:
            v = strategy.virtual_stages
            chunks = split(model.num_layers, strategy.pp * v)
            per_rank = tuple(sum(chunks[k * strategy.pp + rank] for k in range(v)) for rank in range(strategy.pp))
            assert strategy.stage_layers == per_rank == (15,) + (16,) * 6 + (15,)
            assert (strategy.zero, strategy.gradient_sync, strategy.micro_batch) == (2, "last", 32 // 8)
            assert workload.global_batch == 32 * (cluster.world_size // (8 * 8))
        else:
            assert (strategy.zero, strategy.micro_batch, workload.global_batch) == (3, 16, 512)
        assert r["fit"] is False and estimate(model, cluster, strategy, workload).fits


TT_ND_GIB = {"tt-llama31-70b-h100-256-fp8-2d": 71.9, "tt-llama31-70b-h100-256-fp8-2d-asynctp": 67.6,
             "tt-llama31-405b-h100-512-fp8-1f1b": 82.5, "tt-llama31-405b-h100-512-fp8-interleaved": 72.7}


def test_torchtitan_2d_3d_memory_rows_are_the_tables_memory_column():
    """Memory(GiB) = peak reserved, max over GPUs (the busiest rank: memory_row's reserved reading), same
    configuration as the throughput rows. Arrival (HEAD 7975525): 70B -25.9 / -21.1% (the model holds 46.7 GB of
    activations and 4.7 GB of allocator cache beside ~6 GB of states; the runs read 20 / 15 GB more), 405B -1.9 /
    +15.1% (the model's interleaved peak 2.9 GB above its 1F1B one, the runs' 9.8 GiB below: not located)."""
    data = load()
    throughput = {r["id"]: r for r in _rows("throughput", "torchtitan2024h100nd")}
    rows = _rows("memory", "torchtitan2024h100nd")
    assert {r["id"] for r in rows} == {k + "-memory" for k in TT_ND_GIB}
    for r in rows:
        twin = throughput[r["id"].removesuffix("-memory")]
        assert r["published_gb"] == round(TT_ND_GIB[twin["id"]] * 2**30 / 1e9, 2)
        assert r["measured"] and r["measured_as"] == "reserved" and "measured_stage" not in r
        assert all(r.get(k) == twin.get(k) for k in ("model", "device", "nodes", "gpus_per_node", "tp", "pp",
                                                      "micro_batch", "global_batch", "recompute", "engine", "zero",
                                                      "precision", "software"))
        row = memory_row(r, data["sources"])
        assert row.check == "measured" and abs(row.error) < 0.30, r["id"]


# ---- source5: torchtitan's Trainy H200 file (cbccb387): Llama 3.1 8B FSDP2 on 4 / 8 nodes, compile + Float8, the
# command stated in full. nodes -> (TPS per GPU, Memory GiB)
TRAINY = {4: (10938, 47.96), 8: (10753, 46.97)}
HELD_OUT = HELD_OUT + ("torchtitan2025trainy",)
# reached at arrival (HEAD 683252d, stored constants): -13.3 / -12.5% (issue flags only the same); memory +41.3 / +40.3%
NEW_SOURCE_BOUNDS.update({"torchtitan2025trainy": (0.17, 0.18)})


def test_trainy_h200_rows_are_the_stated_command_and_table():
    """local batch 2 x 8192 on every GPU, FSDP2 over all of them, op-level AC, compile + Float8; TPS/GPU x GPUs and
    Memory GiB x 1.0737 (peak reserved) at the 100th iteration."""
    data = load()
    rows = _rows("throughput", "torchtitan2025trainy")
    mem = {r["id"].removesuffix("-memory"): r for r in _rows("memory", "torchtitan2025trainy")}
    assert {r["nodes"] for r in rows} == set(TRAINY) and set(mem) == {r["id"] for r in rows}
    for r in rows:
        tps, gib = TRAINY[r["nodes"]]
        model, cluster, strategy, workload = _setup(r)
        assert r["published"] == tps * cluster.world_size and workload.global_batch == 2 * cluster.world_size
        assert (strategy.engine, strategy.zero, strategy.recompute, strategy.precision, strategy.kernels) == \
            ("fsdp", 3, "op", "fp8", "fused") and workload.seq_len == 8192 and r["device"] == "h200"
        assert estimate(model, cluster, strategy, workload).fits
        m = mem[r["id"]]
        assert m["published_gb"] == round(gib * 2**30 / 1e9, 2) and m["measured_as"] == "reserved"
        assert all(m.get(k) == r.get(k) for k in ("model", "device", "nodes", "gpus_per_node", "micro_batch",
                                                   "global_batch", "recompute", "engine", "zero", "precision",
                                                   "software"))
        # arrival +41.3 / +40.3% with the eager loss; the loss compiled as e7c0cae9 runs it (memory3): +0.5 / -1.4%
        assert r["software"]["cross_entropy"] == "torch-compiled"
        assert abs(memory_row(m, data["sources"]).error) < 0.05


# ---- source5: the async TP file's float8 tensorwise rows (2887250b): TPS per GPU of each bf16 twin's table cell
ASYNCTP_FP8 = {"tt-asynctp-fp8-llama3-70b-256-vanilla": 809.8, "tt-asynctp-fp8-llama3-70b-256-async": 942.4,
               "tt-asynctp-fp8-llama3-8b-64-vanilla": 5078.1, "tt-asynctp-fp8-llama3-8b-64-async": 5570.1}
HELD_OUT = HELD_OUT + ("torchtitan2025asynctpfp8",)
# reached at arrival (stored constants): -0.7 / -4.9 / +4.3 / +1.1% (issue flags only -0.7 / -14.6 / +4.3 / -4.9%)
NEW_SOURCE_BOUNDS.update({"torchtitan2025asynctpfp8": (0.05, 0.07)})


def test_asynctp_float8_rows_are_the_bf16_rows_in_fp8():
    """Each row is its torchtitan2025asynctp twin (same layout, batch, recompute, software) with precision fp8 and the
    table's float8 tensorwise TPS/GPU x GPUs."""
    twins = {r["id"]: r for r in _rows("throughput", "torchtitan2025asynctp")}
    rows = _rows("throughput", "torchtitan2025asynctpfp8")
    assert {r["id"] for r in rows} == set(ASYNCTP_FP8)
    for r in rows:
        twin = twins[r["id"].replace("-fp8-", "-")]
        assert r["precision"] == "fp8" and twin["precision"] == "bf16"
        assert all(r[k] == twin[k] for k in ("model", "device", "nodes", "gpus_per_node", "tp", "micro_batch",
                                              "global_batch", "recompute", "engine", "zero", "software"))
        model, cluster, strategy, workload = _setup(r)
        assert r["published"] == round(ASYNCTP_FP8[r["id"]] * cluster.world_size)
        assert r["fit"] is False and estimate(model, cluster, strategy, workload).fits


# ---- source6: NeMo 24.07's performance summary (NeMo docs, 8e3d65dc), FP8 on DGX H100: row -> (GPUs, GBS, MBS, TP,
# PP, CP, VP, tokens/s/GPU, model TFLOP/s/GPU), the table's cells
NEMO2407 = {"gpt3-5b-64g": (64, 2048, 4, 1, 1, 1, 1, 23406, 765),
            "gpt3-20b-64g": (64, 256, 2, 2, 1, 1, 1, 5851, 750),
            "gpt3-175b-128g": (128, 256, 1, 4, 8, 1, 6, 716, 771),
            "gpt3-175b-512g": (512, 2048, 2, 4, 8, 1, 6, 825, 888),
            "llama2-7b-8g": (8, 128, 1, 1, 1, 1, 1, 16934, 780), "llama2-13b-16g": (16, 128, 1, 1, 4, 1, 10, 8715, 760),
            "llama2-70b-64g": (64, 128, 1, 4, 4, 1, 20, 1728, 768),
            "nemotron-8b-64g": (64, 256, 4, 2, 1, 1, 1, 12507, 643),
            "nemotron-22b-64g": (64, 256, 2, 2, 4, 1, 10, 4312, 562),
            "nemotron-340b-128g": (128, 32, 1, 8, 8, 1, 12, 326, 686),
            "llama3-8b-cp2-8g": (8, 128, 1, 1, 1, 2, 1, 12273, 711),
            "llama3-70b-cp2-64g": (64, 128, 1, 4, 4, 2, 5, 1524, 734)}
HELD_OUT = HELD_OUT + ("nemo2407perf",)
# reached at arrival (HEAD 2dee03d, stored constants): 6.0% mean, 17.3% max (Nemotron-8B; GPT3-5B +11.5, Llama3-8B
# +15.5: the d 4096 FP8 rows), issue flags only 5.5% / 16.0%
NEW_SOURCE_BOUNDS.update({"nemo2407perf": (0.075, 0.21)})


def _nemo_flops_per_token(m: dict) -> int:
    """NeMo's model FLOPs per token (the table's TFLOP column): 6 x (block + head parameters) + 12 x L x d x seq."""
    d, layers, heads = m["d_model"], m["layers"], m["heads"]
    if m.get("family") == "llama":
        head_dim = d // heads
        attention = d * head_dim * (heads + 2 * m["kv_heads"]) + d * d  # q, k, v and the output projection
        block = attention + (2 if m.get("ffn") == "relu2" else 3) * d * m["d_ff"]  # squared ReLU: no gate
    else:
        block = 12 * d * d
    return 6 * (layers * block + m["vocab"] * d) + 12 * layers * d * m["seq"]


def test_nemo2407_rows_are_the_table_and_their_shapes_give_its_flop_column():
    """Each row is its table cell (GPUs, batch, layout, tokens/s/GPU x GPUs, FP8 under engine megatron ZeRO-1), and
    its shape reproduces the table's model TFLOP/s/GPU from its tokens/s/GPU within 0.2% -- a wrong layer count,
    hidden size, FFN width or query-group count would miss it by more (vocabulary padding is below it)."""
    rows = _rows("throughput", "nemo2407perf")
    assert {r["id"].removeprefix("nemo2407-fp8-") for r in rows} == set(NEMO2407)
    for r in rows:
        gpus, gbs, mbs, tp, pp, cp, vp, tps, tflops = NEMO2407[r["id"].removeprefix("nemo2407-fp8-")]
        model, cluster, strategy, workload = _setup(r)
        assert (cluster.world_size, workload.global_batch, r["micro_batch"]) == (gpus, gbs, mbs)
        assert (r.get("tp", 1), r.get("pp", 1), r.get("cp", 1), r["software"].get("virtual_stages", 1)) == \
            (tp, pp, cp, vp)
        assert r["published"] == tps * gpus and r["fit"] is False and r["device"] == "h100-80gb"
        assert (strategy.engine, strategy.zero, strategy.precision) == ("megatron", 1, "fp8")
        assert tps * _nemo_flops_per_token(r["model"]) / 1e12 == pytest.approx(tflops, rel=0.002), r["id"]
        # the dgxc recipes' software (FP8 weights, bf16 gradient reduce-scatter): every run that ran fits in 80 GB
        assert r["software"]["fp8_params"] and r["software"]["grad_reduce"] == "compute"
        assert estimate(model, cluster, strategy, workload).fits, r["id"]


# ---- source6: Megatron-Bridge's performance summary, DGX-H100 FP8-CS rows of the 25.11 (5776a6d9) and 26.04.01
# (21d102f5) tables: row -> (GPUs, GBS, TP, PP, CP, VP, tokens/s/GPU, model TFLOP/s/GPU, tolerance of the FLOP check)
MBRIDGE = {"mbridge2511-fp8cs-llama3-70b-64g": (64, 128, 4, 8, 1, 5, 1602, 719, 0.002),
           "mbridge2511-fp8cs-llama31-405b-1024g": (1024, 512, 8, 8, 2, 8, 292, 737, 0.002),
           # the table's two cells disagree: 731 TFLOP/s is 1,629 tokens/s/GPU by its own count (the tokens cell kept)
           "mbridge2604-fp8cs-llama3-70b-64g-gbs256": (64, 256, 4, 8, 1, 5, 1664, 731, 0.025),
           "mbridge2604-fp8cs-llama31-405b-1024g-gbs1536": (1024, 1536, 8, 8, 2, 8, 328, 827, 0.002)}
HELD_OUT = HELD_OUT + ("mbridgeperf",)
# reached at arrival (HEAD ffce12a, stored constants): -5.3 / +11.7 / -8.0 / +0.9%, mean 6.5%, max 11.7% (issue flags
# only -5.3 / +11.3 / -8.0 / +0.8%)
NEW_SOURCE_BOUNDS.update({"mbridgeperf": (0.085, 0.15)})


def test_mbridge_rows_are_the_table_with_its_causal_flop_count():
    """Each row is its H100 table cell (tokens/s/GPU x GPUs, the FP8_CS preset's layout and batch, FP8 weights and a
    bf16 reduce-scatter under engine megatron ZeRO-1), fits in 80 GB, and its shape gives the table's model TFLOP/s:
    Megatron-Bridge counts causal attention, 6 x (block + head parameters at the unpadded 128,256) + 6 L d s."""
    rows = _rows("throughput", "mbridgeperf")
    assert {r["id"] for r in rows} == set(MBRIDGE)
    for r in rows:
        gpus, gbs, tp, pp, cp, vp, tps, tflops, tol = MBRIDGE[r["id"]]
        model, cluster, strategy, workload = _setup(r)
        assert (cluster.world_size, workload.global_batch, r["micro_batch"], workload.seq_len) == (gpus, gbs, 1, 8192)
        assert (r["tp"], r["pp"], r.get("cp", 1), r["software"]["virtual_stages"]) == (tp, pp, cp, vp)
        assert r["published"] == tps * gpus and r["fit"] is False and r["device"] == "h100-80gb"
        assert (strategy.engine, strategy.zero, strategy.precision) == ("megatron", 1, "fp8")
        assert r["software"]["fp8_params"] and r["software"]["grad_reduce"] == "compute"
        assert set(r["unmodelled"]) == {"overlap_p2p_comm", "fp8_current_scaling"}
        m = r["model"]
        assert m["vocab"] == -(-128256 // (128 * tp)) * 128 * tp  # should_pad_vocab: a multiple of 128 x TP
        flops = _nemo_flops_per_token({**m, "vocab": 128256}) - 6 * m["layers"] * m["d_model"] * m["seq"]
        assert tps * flops / 1e12 == pytest.approx(tflops, rel=tol), r["id"]
        assert estimate(model, cluster, strategy, workload).fits, r["id"]


# ---- source6: SmolLM3's whole pre-training run (blog + smollm a48fa612): 11.2T tokens on 384 H100 in 24 days
HELD_OUT = HELD_OUT + ("smollm3blog2025",)
# reached at arrival (HEAD 3e8563f, stored constants): -7.4% (issue flags only +3.9%)
NEW_SOURCE_BOUNDS.update({"smollm3blog2025": (0.10, 0.10)})


def test_smollm3_row_is_the_runs_average_with_its_stage_config():
    """tokens/s = 11.2e12 / (24 days x 86,400 s); the step is the config's 192 replicas x 3 x 4096 = the blog's 2.36M
    tokens on TP 2 (48 nodes of 8 H100), ZeRO-0 with SP, on the playbook's fitted EFA cluster; it fits in 80 GB."""
    (r,) = _rows("throughput", "smollm3blog2025")
    model, cluster, strategy, workload = _setup(r)
    assert r["published"] == round(11.2e12 / (24 * 86400)) and r["metric"] == "tokens_per_s"
    assert workload.global_batch * workload.seq_len == 2_359_296 and cluster.world_size == 384 == 192 * r["tp"]
    assert (strategy.engine, strategy.zero, strategy.tp, strategy.micro_batch, strategy.sequence_parallel) == \
        ("megatron", 0, 2, 3, True)
    playbook = next(p for p in _rows("throughput", "nanotron2025playbook") if p["zero"] == 0)
    assert r["cluster"] == playbook["cluster"] and r["model"]["tied"] and r["model"]["kv_heads"] == 4
    assert set(r["unmodelled"]) == {"tp_linear_async_communication", "document_masked_attention"}
    assert estimate(model, cluster, strategy, workload).fits

