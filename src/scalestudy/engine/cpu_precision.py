"""May `scalestudy train` run bf16 (or fp16) on this CPU? Decided by measurement, not by assumption.

CPUs differ: an AVX2-only EPYC multiplies bf16 matrices at ~1.3 GFLOP/s (emulated, ~60x slower than fp32), while a
CPU with AVX-512 BF16 or AMX runs them about as fast as fp32 or faster (FACTS.md). The rule: a low precision is
allowed on a CPU when its measured matmul throughput is at least MIN_FRACTION of fp32's on the same machine and
matrix size; otherwise `train` refuses it in one line that names the measurement. The CPU's flags (lscpu /
/proc/cpuinfo: avx512_bf16, amx_bf16, avx512_fp16, amx_fp16) are reported beside the measurement to explain it.

The measurement (one thread, 512 x 512 matmul, about a second; `scalestudy.engine.precision_probe`) runs once per
CPU model and torch version and is cached in $SCALESTUDY_CACHE_DIR (default ~/.cache/scalestudy)/cpu_precision.json;
`scalestudy calibrate` refreshes it. Torch-free (the probe runs in a child process), so the launcher checks
before starting any rank.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from scalestudy.atomicfile import write_text_atomic
from scalestudy.costmodel.cpu_profile import cache_root
from scalestudy.errors import ScalestudyError

MIN_FRACTION = 0.5  # low-precision matmul must reach half of fp32's throughput to count as "real" support
NATIVE_FLAGS = {"bf16": ("avx512_bf16", "amx_bf16"), "fp16": ("avx512_fp16", "amx_fp16")}
CPUINFO = Path("/proc/cpuinfo")


def cpu_flags(cpuinfo: Path = CPUINFO) -> frozenset[str]:
    """The CPU's feature flags (the 'flags' line of /proc/cpuinfo, which lscpu prints too); empty if unreadable."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def cpu_model(cpuinfo: Path = CPUINFO) -> str:
    try:
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                return value.strip()
    except OSError:
        pass
    return "unknown CPU"


def native_flags(precision: str, flags: frozenset[str]) -> list[str]:
    """The flags giving native `precision` matmul that this CPU has (e.g. ['avx512_bf16'])."""
    return [f for f in NATIVE_FLAGS.get(precision, ()) if f in flags]


@dataclass(frozen=True)
class PrecisionVerdict:
    precision: str
    native: tuple[str, ...]  # native-support flags present
    gflops: float | None  # measured matmul GFLOP/s in this precision (None: not measured)
    fp32_gflops: float | None

    @property
    def ratio(self) -> float | None:
        if self.gflops is None or not self.fp32_gflops:
            return None
        return self.gflops / self.fp32_gflops

    @property
    def allowed(self) -> bool:
        return self.precision == "fp32" or (self.ratio is not None and self.ratio >= MIN_FRACTION)

    def evidence(self) -> str:
        """'avx512_bf16 present; bf16 matmul 483 GFLOP/s = 7.5x fp32 (64.1 GFLOP/s), 512x512, 1 thread'."""
        flags = "/".join(NATIVE_FLAGS.get(self.precision, ()))
        has = f"{', '.join(self.native)} present" if self.native else f"no {flags}"
        if self.ratio is None:
            return f"{has}; {self.precision} matmul not measured"
        return (f"{has}; {self.precision} matmul {self.gflops:.3g} GFLOP/s = {self.ratio:.2g}x fp32 "
                f"({self.fp32_gflops:.3g} GFLOP/s), 512x512, 1 thread")

    def refusal(self) -> str | None:
        """None when allowed; else the one-line reason `train` prints."""
        if self.allowed:
            return None
        return (f"--precision {self.precision} needs a GPU or a CPU whose {self.precision} matmul reaches "
                f"{MIN_FRACTION:g}x fp32's speed; this CPU: {self.evidence()}: use --precision fp32")


def verdict(precision: str, measured: dict[str, float] | None, flags: frozenset[str]) -> PrecisionVerdict:
    """The decision for `precision` from measured GFLOP/s per precision ({'fp32': 64, 'bf16': 483, ...})."""
    measured = measured or {}
    return PrecisionVerdict(precision, tuple(native_flags(precision, flags)), measured.get(precision),
                            measured.get("fp32"))


def cache_file() -> Path:
    return cache_root() / "cpu_precision.json"


def _cache_key() -> str:
    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = "none"
    relevant = sorted(f for names in NATIVE_FLAGS.values() for f in names if f in cpu_flags())
    return f"{cpu_model()} | {','.join(relevant) or 'no native low-precision flags'} | torch {torch_version}"


def _read_cache() -> dict:
    """The cache as {key: {precision: GFLOP/s}}; a file that is not that (another program's, hand-edited, cut
    short) counts as empty: the CPU is measured again and the entry rewritten."""
    try:
        cache = json.loads(cache_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(cache, dict):
        return {}
    return {key: entry for key, entry in cache.items() if isinstance(entry, dict) and entry and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in entry.values())}


def store_measurement(gflops: dict[str, float]) -> None:
    """Remember this CPU's measurement (from the probe or `scalestudy calibrate`)."""
    cache = _read_cache()
    cache[_cache_key()] = {k: float(v) for k, v in gflops.items()}
    try:
        cache_file().parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(cache_file(), json.dumps(cache, indent=2) + "\n")
    except OSError:
        pass  # a read-only home: measure again next time


def probe(python: str = sys.executable) -> dict[str, float]:
    """Run the matmul probe in a child process (keeps this module torch-free); GFLOP/s per precision."""
    try:
        res = subprocess.run([python, "-m", "scalestudy.engine.precision_probe"], capture_output=True, text=True,
                             timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
        return {k: float(v) for k, v in json.loads(res.stdout.strip().splitlines()[-1]).items()}
    except (OSError, subprocess.SubprocessError, ValueError, IndexError, AttributeError):
        return {}


def measured_matmul(*, refresh: bool = False) -> dict[str, float]:
    """GFLOP/s per precision on this CPU: cached, else measured now (about a second, said on stderr)."""
    cached = _read_cache().get(_cache_key())
    if cached and not refresh:
        return cached
    print("measuring this CPU's bf16/fp16 vs fp32 matmul speed once (a few seconds; cached in "
          f"{cache_file()})...", file=sys.stderr, flush=True)
    gflops = probe()
    if gflops:
        store_measurement(gflops)
    return gflops


def cpu_precision_refusal(precision: str) -> str | None:
    """None when `precision` may run on this CPU, else the one-line reason (measured here, cached)."""
    if precision == "fp32":
        return None
    return verdict(precision, measured_matmul(), cpu_flags()).refusal()


def check_precision(precision: str, *, cuda: bool) -> None:
    """Refuse (ScalestudyError, one line) a low precision on a CPU where it is emulated: a run ~60x slower than
    fp32 would give meaningless throughput numbers, so no silent fall-back either. GPUs are not asked."""
    if not cuda:
        refusal = cpu_precision_refusal(precision)
        if refusal:
            raise ScalestudyError(refusal)


def summary(measured: dict[str, float], flags: frozenset[str]) -> list[str]:
    """One line per low precision: allowed or refused for `scalestudy train` on this CPU, and the evidence."""
    lines = []
    for precision in NATIVE_FLAGS:
        v = verdict(precision, measured, flags)
        word = "allowed" if v.allowed else "refused"
        lines.append(f"{precision} on this CPU: {word} for `scalestudy train` ({v.evidence()}; rule: "
                     f">= {MIN_FRACTION:g}x fp32)")
    return lines
