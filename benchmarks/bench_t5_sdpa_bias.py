"""GPU check of costmodel/attention_bias.py: one T5 self-attention call under PyTorch SDPA, as transformers 5.x runs it
(a float [1, heads, s, s] position-bias mask that requires grad), against the same call without a mask (the
FlashAttention-2 kernel the cost model priced before). Prints, per shape: which backends accept the masked call
(FlashAttention must refuse it: sdp_utils check_for_attn_mask), forward + backward milliseconds and the peak bytes
each call adds, beside the cost model's figures for the same call (attention core at the device YAML's
flash_attention_fraction fa2 / mem-efficient cap, plus bias_pass_bytes / bias_memory_bytes per call).

    .venv/bin/python benchmarks/bench_t5_sdpa_bias.py [--device h200] [--cpu]

--cpu runs the same code on the CPU's math path (a smoke test of the script; its times mean nothing).
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from scalestudy.costmodel.attention_bias import bias_memory_bytes, bias_pass_bytes
from scalestudy.specs.hardware import get_device
from scalestudy.specs.model import ModelSpec

SHAPES = [  # (name, batch, heads, seq, head dim): T5 v1.1 base / mT5-XXL encoder calls at the seed study's length
    ("t5-base s512 b8", 8, 12, 512, 64),
    ("mt5-xxl s512 b4", 4, 64, 512, 64),
    ("t5-3b s1024 b2", 2, 32, 1024, 128),
]


def _one_layer_model(heads: int, head_dim: int) -> ModelSpec:
    """One encoder layer for attention_bias's per-call figures (a target length of 0: no decoder calls)."""
    return ModelSpec(name="one-layer", family="t5", vocab_size=32, d_model=heads * head_dim, num_layers=1,
                     num_decoder_layers=1, num_heads=heads, d_kv=head_dim, d_ff=64, ffn="relu",
                     tie_word_embeddings=True)


def _mask(table):
    """create_position_bias_mask's per-call mask: compute_bias's permuted [1, heads, q, k] view made contiguous."""
    return table.permute(2, 0, 1).unsqueeze(0).contiguous()


def _call(q, k, v, table, backends) -> tuple[float, int]:
    """(seconds, peak bytes above the inputs) of forward + backward of one SDPA call, median of 5 after 2 warm-ups."""
    times, peak = [], 0
    for i in range(7):
        for t in (q, k, v, table):
            if t is not None:
                t.grad = None
        if q.is_cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
        start = time.perf_counter()
        with sdpa_kernel(backends):
            mask = _mask(table) if table is not None else None
            torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask).sum().backward()
        if q.is_cuda:
            torch.cuda.synchronize()
            peak = max(peak, torch.cuda.max_memory_allocated() - base)
        if i >= 2:
            times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2], peak


def _accepts(q, k, v, table, backend) -> bool:
    try:
        with sdpa_kernel([backend]):
            torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=_mask(table))
        return True
    except RuntimeError:
        return False


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="h200", help="device YAML whose caps the model figures use")
    ap.add_argument("--cpu", action="store_true", help="smoke-run on the CPU's math path")
    args = ap.parse_args()
    if not args.cpu and not torch.cuda.is_available():
        raise SystemExit("needs a CUDA GPU (or --cpu for a smoke run)")
    dev = torch.device("cpu" if args.cpu else "cuda")
    dtype = torch.float32 if args.cpu else torch.bfloat16
    spec = get_device(args.device)
    peak = spec.peak("bf16")
    masked = [SDPBackend.MATH] if args.cpu else [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
                                                  SDPBackend.MATH]
    print(f"# torch {torch.__version__}, {torch.cuda.get_device_name() if dev.type == 'cuda' else 'cpu'}; model caps "
          f"from {args.device}: {spec.flash_attention_fraction}; times fwd + bwd of one call in ms, memory in MB")
    print("shape | flash accepts mask | mem-eff accepts mask | ms no mask | ms bias | MB no mask | MB bias | "
          "model ms fa2 | model ms mem-eff + bias | model MB bias")
    for name, b, h, s, d in (SHAPES[:1] if args.cpu else SHAPES):
        if args.cpu:
            b, s = 1, 64
        q, k, v = (torch.randn(b, h, s, d, device=dev, dtype=dtype, requires_grad=True) for _ in range(3))
        bias = torch.randn(s, s, h, device=dev, dtype=dtype, requires_grad=True)  # the bucketed table's lookup
        flash_ok = False if args.cpu else _accepts(q, k, v, bias, SDPBackend.FLASH_ATTENTION)
        eff_ok = False if args.cpu else _accepts(q, k, v, bias, SDPBackend.EFFICIENT_ATTENTION)
        t0, m0 = _call(q, k, v, None, masked)
        t1, m1 = _call(q, k, v, bias, masked)
        flops = 3.5 * 4 * b * h * s * s * d  # forward + a 2.5x backward (flops.attention_backward_factor)
        model = _one_layer_model(h, d)
        fwd_b, bwd_b = bias_pass_bytes(model, b, s, 0, 1, "none")
        fa2 = flops / (peak * spec.flash_attention_fraction.get("fa2", 1.0))
        eff = flops / (peak * spec.flash_attention_fraction.get("mem-efficient", 1.0)) + (
            fwd_b + bwd_b) / spec.hbm_bytes_per_s
        print(f"{name} | {flash_ok} | {eff_ok} | {t0 * 1e3:.3f} | {t1 * 1e3:.3f} | {m0 / 1e6:.1f} | {m1 / 1e6:.1f} | "
              f"{fa2 * 1e3:.3f} | {eff * 1e3:.3f} | {bias_memory_bytes(model, b, s, 0, 1, 'none') / 1e6:.1f}")


if __name__ == "__main__":
    main()
