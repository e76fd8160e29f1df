"""Model FLOPs utilisation (MFU): one definition for the cost model's prediction and the engine's measurement.

    MFU = model FLOPs per optimizer step / (devices x peak FLOP/s per device x seconds per optimizer step)

- model FLOPs: `scalestudy.costmodel.flops.training_flops(..., recompute="none")` (FLOPS_CONVENTION below);
  recomputation is work, not progress, so it is left out (hardware FLOPs utilisation, HFU, counts it);
- peak: the device's dense (no sparsity) peak for the precision the matmuls actually run in: bf16 / fp16 on
  tensor cores; fp32 at the fp32 peak, because PyTorch >= 1.12 leaves TF32 matmuls off unless the run turns them on
  (`torch.backends.cuda.matmul.allow_tf32`, Strategy.tf32); the TF32 peak only when it does and the device has TF32
  Tensor Cores (Ampere on; a V100 runs fp32 at its fp32 peak whatever the flag). Dividing true-fp32 work by the TF32
  peak would understate MFU 8x on an A100 (156 vs 19.5 TFLOP/s). The step-time model prices the GEMMs at the same
  peak (costmodel/step.compute_times). fp8 runs (costmodel/fp8.py): the device's FP8 dense peak, the precision the
  blocks' linear GEMMs run in (H100 1,979 TFLOP/s), although the attention core and LM head run in bf16 -- the
  convention of NVIDIA's DGX Cloud benchmarking READMEs ('MFU = GBS x model flops / step / GPUs / 1979E+12' for
  FP8); torchtitan and most FP8 blog tables divide by the bf16 peak instead: half our figure. The printout names
  the peak it divides by.
On CPU the peak is a measured fp32 matmul rate (engine/probe.py; hardware profiles from `calibrate`).
"""

from __future__ import annotations



def flops_convention(encoder_decoder: bool = True) -> str:
    """The model-FLOPs convention in words. The lengths clause only where there are two lengths: a decoder-only
    model has one sequence, and 'encoder and decoder' on its estimate read as if it had an encoder."""
    lengths = "; encoder and decoder at their own lengths" if encoder_decoder else ""
    return ("model FLOPs = 3 x forward (backward = 2 x forward), 2 FLOPs per multiply-add of every matmul: weights, "
            f"attention scores and values over the full square, LM head{lengths}; no recomputation")


FLOPS_CONVENTION = flops_convention()  # for runs of either kind (a study's report, train's summary)
MFU_CONVENTION = (f"MFU = model FLOPs per optimizer step / (devices x dense peak FLOP/s of the precision the matmuls "
                  f"run in x seconds per step; fp8 runs: the FP8 peak of their linear GEMMs); {FLOPS_CONVENTION}")


def peak_precision(precision: str, *, tf32_matmul: bool = False, peaks=None) -> str:
    """The `peak_flops` entry of a device that a run in `precision` is measured against: "tf32" for fp32 matmuls
    with TF32 allowed, unless the device's `peaks` (its peak_flops, when given) state no TF32 rate -- a GPU without
    TF32 Tensor Cores ignores the flag."""
    tf32 = precision == "fp32" and tf32_matmul and (peaks is None or "tf32" in peaks)
    return "tf32" if tf32 else precision


def flops_utilization(flops_per_step: float, step_s: float, devices: int, peak_flops_per_device: float) -> float:
    """Fraction (0..1) of `devices` devices' peak that `flops_per_step` in `step_s` seconds per step use: MFU with model
    FLOPs, HFU with hardware FLOPs (recomputation included)."""
    return flops_per_step / (step_s * devices * peak_flops_per_device)
