"""GPU check of the vocabulary terms of step._head_s for NeMo 1.x Megatron T5 / mT5 (docs/costmodel-validation.md,
'Vocabulary costs, third pass'): one micro-batch of the head path on one tensor-parallel rank, as NeMo v1.8.2 runs it
after the decoder -- the biased logits GEMM over the tied V/tp x h table, the fp32 upcast, a vocabulary-parallel
cross-entropy with the passes apex's kernel makes (max, shift, exp in place, sum, normalise in place; backward:
minus one at the target, product with the incoming gradient in place, cast back), the logits GEMM's backward, the
table's two embedding lookups (encoder and decoder share it: each backward a dense V/tp x h table) and the fp32
main-gradient add of the O2 hook. The ops are written here from that description, not taken from apex.

Prints per shape the measured milliseconds of forward + backward and the model's _head_s for the same shape (GEMMs
at the calibrated curve + cross-entropy + bias + V x d gradient bytes at the device YAML's HBM rate), and, for the
T5 / mT5 pair of one shape, both premiums: the NeMo 22.05 tables' is 84 ms per micro-batch on an A100 (PyTorch 1.12),
the model's 32 ms. A premium measured near the model's on today's PyTorch says the published one is the old
software's; one near the tables' names the passes that cost it (--profile prints the kernel table).

    .venv/bin/python benchmarks/bench_vocab_head.py [--device a100-80gb] [--profile] [--cpu]

--cpu runs tiny shapes on the CPU (a smoke test of the script; its times mean nothing).
"""

from __future__ import annotations

import argparse
import time

import torch

from scalestudy.costmodel.constants import stored
from scalestudy.costmodel.step import _head_s
from scalestudy.specs.hardware import get_device
from scalestudy.specs.model import ModelSpec

# (name, micro-batch, encoder tokens, decoder tokens, d_model, vocabulary, tp): the nemo2022may 3B pair (tp 2) and
# the nemo2022mt5small 170M row (tp 1)
SHAPES = [
    ("t5-3b nemo 22.05", 24, 512, 128, 2048, 29184, 2),
    ("mt5-3b nemo 22.05", 24, 512, 128, 2048, 250112, 2),
    ("mt5-170m nemo conv", 64, 512, 128, 512, 250112, 1),
]


class _VocabParallelCE(torch.autograd.Function):
    """Per-token loss over fp32 logits with the passes of Megatron's vocabulary-parallel cross-entropy (one rank)."""

    @staticmethod
    def forward(ctx, logits, target):
        shifted = logits - logits.max(dim=-1).values.unsqueeze(-1)
        rows = torch.arange(target.numel(), device=logits.device)
        picked = shifted[rows, target].clone()
        torch.exp(shifted, out=shifted)
        total = shifted.sum(dim=-1)
        shifted.div_(total.unsqueeze(-1))
        ctx.save_for_backward(shifted, target)
        return torch.log(total) - picked

    @staticmethod
    def backward(ctx, grad):
        softmax, target = ctx.saved_tensors
        rows = torch.arange(target.numel(), device=softmax.device)
        softmax[rows, target] -= 1.0
        softmax.mul_(grad.unsqueeze(-1))
        return softmax, None


def _step(x, table, bias, main_grad, enc_ids, dec_ids, labels) -> None:
    emb = torch.nn.functional.embedding(enc_ids, table).sum() + torch.nn.functional.embedding(dec_ids, table).sum()
    logits = torch.nn.functional.linear(x, table, bias)
    loss = _VocabParallelCE.apply(logits.float(), labels).mean() + 0.0 * emb.float()
    loss.backward()
    main_grad.add_(table.grad)  # the O2 hook: fp32 main gradient += the summed 16-bit gradient
    table.grad = bias.grad = x.grad = None


def _time(args_, profile: bool) -> float:
    """Median seconds of one micro-batch's head path over 5 runs after 2 warm-ups."""
    times = []
    for i in range(7):
        if args_[0].is_cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        _step(*args_)
        if args_[0].is_cuda:
            torch.cuda.synchronize()
        if i >= 2:
            times.append(time.perf_counter() - start)
    if profile:
        with torch.profiler.profile() as prof:
            _step(*args_)
        print(prof.key_averages().table(sort_by="self_cuda_time_total" if args_[0].is_cuda else "self_cpu_time_total",
                                        row_limit=15))
    return sorted(times)[len(times) // 2]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="a100-80gb", help="device YAML the model's figures use")
    ap.add_argument("--profile", action="store_true", help="print the kernel table of one micro-batch per shape")
    ap.add_argument("--cpu", action="store_true", help="smoke-run tiny shapes on the CPU")
    args = ap.parse_args()
    if not args.cpu and not torch.cuda.is_available():
        raise SystemExit("needs a CUDA GPU (or --cpu for a smoke run)")
    dev = torch.device("cpu" if args.cpu else "cuda")
    dtype = torch.float32 if args.cpu else torch.bfloat16
    spec, cal = get_device(args.device), stored()
    print(f"# torch {torch.__version__}, {torch.cuda.get_device_name() if dev.type == 'cuda' else 'cpu'}; model "
          f"figures for {args.device}; ms per micro-batch of the head path on one tensor-parallel rank")
    print("shape | V/tp | measured ms | model ms")
    measured, modelled = {}, {}
    for name, mb, enc, dec, d, vocab, tp in SHAPES:
        if args.cpu:
            mb, enc, dec, d, vocab = 2, 16, 8, 32, vocab // 1000
        v = vocab // tp
        gen = torch.Generator(device=dev).manual_seed(0)
        x = torch.randn(mb * dec, d, device=dev, dtype=dtype, generator=gen, requires_grad=True)
        table = torch.nn.Parameter(0.02 * torch.randn(v, d, device=dev, dtype=dtype, generator=gen))
        bias = torch.nn.Parameter(torch.zeros(v, device=dev, dtype=dtype))
        main_grad = torch.zeros(v, d, device=dev, dtype=torch.float32)
        enc_ids, dec_ids, labels = (torch.randint(0, v, (n,), device=dev, generator=gen)
                                    for n in (mb * enc, mb * dec, mb * dec))
        measured[name] = _time((x, table, bias, main_grad, enc_ids, dec_ids, labels), args.profile)
        model = ModelSpec(name=name, family="t5", vocab_size=vocab, d_model=d, num_layers=1, num_decoder_layers=1,
                          num_heads=max(1, d // 64), d_kv=64, d_ff=4 * d, ffn="gated-gelu", tie_word_embeddings=True)
        modelled[name] = _head_s(model, spec, "bf16", tp, mb, enc, dec, cal, "engine", True)[0]
        print(f"{name} | {v} | {measured[name] * 1e3:.2f} | {modelled[name] * 1e3:.2f}")
    t5, mt5 = SHAPES[0][0], SHAPES[1][0]
    print(f"mT5 - T5 premium per micro-batch: measured {(measured[mt5] - measured[t5]) * 1e3:.2f} ms, model "
          f"{(modelled[mt5] - modelled[t5]) * 1e3:.2f} ms (NeMo 22.05 tables on A100: ~84 ms)")


if __name__ == "__main__":
    main()
