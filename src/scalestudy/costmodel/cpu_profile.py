"""The measured profile of this CPU, cached per machine: what `local-cpu` predictions use (demo, study, plan,
estimate).

`local-cpu.yaml` holds one machine's numbers, but CPUs differ between machines and the static file has no
framework-overhead terms, which dominate small models (issue 11: the demo's predicted step times were off by a
median 68%). The first prediction for `local-cpu` therefore measures this machine once (engine/cpu_profile.py:
micro-benchmarks on 2 ranks, timed plain-PyTorch training steps, each engine timed on 1 and on 2 ranks through
scalestudy's backends; ~1.5-2 min on an idle 2-core machine) and caches the profile in
$SCALESTUDY_CACHE_DIR (default ~/.cache/scalestudy)/cpu_profile-<machine key>.yaml; later predictions read it.
SCALESTUDY_CPU_PROFILE=static keeps the static file (no measurement). Torch-free: the measuring runs in a
subprocess.
"""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
import sys
from dataclasses import replace
from importlib import metadata
from pathlib import Path

from scalestudy.errors import ScalestudyError
from scalestudy.specs.hardware import ClusterSpec, DeviceSpec

STATIC_NAME = "local-cpu"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# Raise when engine/cpu_profile.py measures or fits differently: profiles cached by an older version are re-measured.
PROFILE_FORMAT = 9  # 3: tensor/pipeline-parallel overheads; 5: + a DTensor collective timed on nproc ranks (parallel_profile.py);
#                    6: + copy bandwidth vs buffer size and the optimizer step vs parameters and tensors (microbench.py);
#                    7: + gloo collective ratios by message size (calibrate.collective_ratio_curves);
#                    8: + copies into fresh buffers vs size, gloo collectives at 64 and 128 MB (microbench.py)
#                    9: + each engine's step() timed apart from its passes ("<engine>-<zero>/step", per step)


def machine_key() -> str:
    """What makes a profile reusable: its format, host, CPU model, core count, threads per rank, torch version."""
    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = "none"
    text = "|".join((f"format {PROFILE_FORMAT}", platform.node(), _cpu_model(), str(os.cpu_count()), os.environ.get("OMP_NUM_THREADS", "1"),
                     torch_version))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def profile_path() -> Path:
    root = os.environ.get("SCALESTUDY_CACHE_DIR") or Path.home() / ".cache" / "scalestudy"
    return Path(root) / f"cpu_profile-{machine_key()}.yaml"


def fit_overheads(points: list[tuple[float, int, int, float]]) -> tuple[float, float, float, float]:
    """(compute scale, per step, per micro-batch, per sublayer pass) from timed steps [(cost-model step s without
    overheads, accumulation, sublayers, measured s), ...]: least squares of
    measured = scale x predicted + step + accumulation x (micro-batch + 3 x sublayers x sublayer pass);
    an overhead that comes out negative is dropped and the rest refitted; the scale is kept in [0.5, 3] (beyond
    that the micro-benchmarks and the timed steps saw different machines: load from other processes)."""
    import numpy as np

    cols = [[p, 1.0, acc, 3.0 * acc * sub] for p, acc, sub, _ in points]
    y = np.array([m for _, _, _, m in points])
    active = [0, 1, 2, 3]
    coef = np.zeros(4)
    for _ in range(4):
        a = np.array([[row[j] for j in active] for row in cols])
        sol = np.linalg.lstsq(a, y, rcond=None)[0]
        coef = np.zeros(4)
        coef[active] = sol
        negative = [j for j in active[1:] if coef[j] < 0]
        if not negative:
            break
        active.remove(min(negative, key=lambda j: coef[j]))
    scale = float(min(3.0, max(0.5, coef[0])))
    return scale, max(0.0, float(coef[1])), max(0.0, float(coef[2])), max(0.0, float(coef[3]))


def measure_profile(path: Path, *, log=None, timeout_s: float = 600.0) -> Path:
    """Run engine/cpu_profile.py in a subprocess (torch stays out of this process); one-line error on failure."""
    if log:
        log(f"measuring this CPU once for the cost model (~2 min; cached in {path})...")
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    try:
        proc = subprocess.run([sys.executable, "-m", "scalestudy.engine.cpu_profile", "--output", str(path)],
                              env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise ScalestudyError(f"CPU profile measurement timed out after {timeout_s:.0f} s") from None
    if proc.returncode != 0 or not path.is_file():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ScalestudyError(f"CPU profile measurement failed (exit {proc.returncode}): {tail[0]}")
    return path


def local_cpu_profile(*, measure: bool = True, log=None) -> DeviceSpec | None:
    """This machine's measured profile (measured now when absent and `measure`), or None (static wanted)."""
    from scalestudy.costmodel.calibrate import load_profile

    if os.environ.get("SCALESTUDY_CPU_PROFILE", "").lower() == "static":
        return None
    path = profile_path()
    if not path.is_file():
        if not measure:
            return None
        measure_profile(path, log=log)
    return load_profile(path)


def measured_cluster(cluster: ClusterSpec, *, log=None) -> ClusterSpec:
    """`cluster` with the static `local-cpu` device replaced by this machine's measured profile."""
    if cluster.device.name != STATIC_NAME or cluster.device.kind != "cpu":
        return cluster
    device = local_cpu_profile(log=log)
    return cluster if device is None else replace(cluster, device=device)
