"""The measured profile of this CPU, cached per machine: what `local-cpu` predictions use (demo, study, plan,
estimate).

`local-cpu.yaml` holds one machine's numbers, but CPUs differ between machines and the static file has no
framework-overhead terms, which dominate small models (issue 11: the demo's predicted step times were off by a
median 68%). The first prediction for `local-cpu` therefore measures this machine once (engine/cpu_profile.py:
micro-benchmarks on 2 ranks, timed plain-PyTorch training steps, each engine timed on 1 and on 2 ranks through
scalestudy's backends; ~4 min on a 2-core machine, PROFILE_MINUTES) and caches the profile in
$SCALESTUDY_CACHE_DIR (default ~/.cache/scalestudy)/cpu_profile-<machine key>.yaml; later predictions read it.
SCALESTUDY_CPU_PROFILE=static keeps the static file (no measurement). Torch-free: the measuring runs in a
subprocess.
"""

from __future__ import annotations

import hashlib
import os
import platform
import pwd
import re
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass, replace
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
PROFILE_FORMAT = 15  # 3: tensor/pipeline-parallel overheads;
#                    5: + a DTensor collective timed on nproc ranks (parallel_profile.py);
#                    6: + copy bandwidth vs buffer size and the optimizer step vs parameters and tensors (microbench.py);
#                    7: + gloo collective ratios by message size (calibrate.collective_ratio_curves);
#                    8: + copies into fresh buffers vs size, gloo collectives at 64 and 128 MB (microbench.py)
#                    9: + each engine's step() timed apart from its passes ("<engine>-<zero>/step", per step)
#                   10: the plain-step fit keeps the per-micro-batch / per-sublayer split only where the
#                       timings separate them (fit_overhead_terms), the split said in the profile's source
#                   11: the fit prices the plain HF T5 steps with eager element-wise kernels and T5's own loss
#                       (specs/strategy.software_defaults), as plan prices train's runs (specs/run.as_trained)
#                   12: train's FSDP reduce-scatters every micro-batch, pipelined too (settings gradient_sync): its
#                       "fsdp-<zero>@multi" overheads were measured with the reduce-scatter in the last one only
#                   13: timings less the run-queue wait other processes caused (engine/cpu_wait.py), the best of
#                       interleaved repeats, the profile's quality in its note (ProfileQuality)
#                   14: measured with glibc's malloc thresholds pinned, as the CPU ranks run (host_allocator.py):
#                       ZeRO-3's step no longer faults its ~13 MB buffers in again as often as the process's history says
#                   15: each engine's one-rank terms carry what the plain-step fit misses per micro-batch of
#                       t5-tiny's own step at the engines' shape (engine/cpu_profile.fit_miss), timed in the plain rounds


def machine_key() -> str:
    """What makes a profile reusable: its format, host, CPU model, core count, threads per rank, torch version."""
    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = "none"
    text = "|".join((f"format {PROFILE_FORMAT}", platform.node(), _cpu_model(), str(os.cpu_count()), os.environ.get("OMP_NUM_THREADS", "1"),
                     torch_version))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cache_root() -> Path:
    """$SCALESTUDY_CACHE_DIR, else ~/.cache/scalestudy -- with the account's home directory when HOME is empty
    (Path.home() then gives the working directory or "/": a cache nobody would look for)."""
    if os.environ.get("SCALESTUDY_CACHE_DIR"):
        return Path(os.environ["SCALESTUDY_CACHE_DIR"])
    home = os.environ.get("HOME") or pwd.getpwuid(os.getuid()).pw_dir
    return Path(home) / ".cache" / "scalestudy"


def profile_path() -> Path:
    return cache_root() / f"cpu_profile-{machine_key()}.yaml"


# HF T5's micro-batch runs ~80 operators outside its sublayers (two embeddings, both stacks' relative-position
# buckets, final norms, LM head, loss) against ~24 per sublayer (self-attention ~32, cross-attention ~32, feed-forward
# ~13, averaged over a block pair's five): ~3.5 sublayers' worth, each passed 3 times (forward, backward as two).
# The split between the per-micro-batch and the per-sublayer overhead that the fit falls back to when the timed steps
# cannot tell them apart (see fit_overhead_terms).
MICROSTEP_SUBLAYER_PASSES = 10.5
SEPARATED_T = 2.0  # an overhead counts as measured when it is at least this many standard errors above 0


@dataclass(frozen=True)
class OverheadFit:
    """The plain-PyTorch fit: compute scale, seconds per step, per micro-batch, per sublayer pass, and how the
    per-micro-batch / per-sublayer split was set ("measured": the timings separate the two; "op-count ratio": they
    do not, and the split is MICROSTEP_SUBLAYER_PASSES)."""

    scale: float
    step_s: float
    microstep_s: float
    layer_s: float
    split: str

    def note(self) -> str:
        how = ("separated by the timings" if self.split == "measured" else
               f"not separable in these timings: per micro-batch fixed at {MICROSTEP_SUBLAYER_PASSES:g} sublayer "
               "passes (operator count)")
        return (f"compute x{self.scale:.3g}; per step {self.step_s * 1e3:.2f} ms, per micro-batch "
                f"{self.microstep_s * 1e3:.2f} ms, per sublayer pass {self.layer_s * 1e6:.0f} us ({how})")


def _nonnegative_fit(cols, y, weights):
    """Weighted least squares, every column but the first (the compute scale) kept >= 0 by dropping the most
    negative and refitting; -> (coefficients, columns kept, standard errors of the kept ones)."""
    import numpy as np

    a = np.asarray(cols, dtype=float) * weights[:, None]
    b = y * weights
    active = list(range(a.shape[1]))
    while True:
        sol = np.linalg.lstsq(a[:, active], b, rcond=None)[0]
        negative = [j for j, v in zip(active, sol) if j > 0 and v < 0]
        if not negative:
            break
        active.remove(min(negative, key=lambda j: sol[active.index(j)]))
    coef = np.zeros(a.shape[1])
    coef[active] = sol
    dof = len(b) - len(active)
    resid = b - a[:, active] @ sol
    s2 = float(resid @ resid) / dof if dof > 0 else float("inf")
    se = np.full(a.shape[1], np.inf)
    try:
        se[active] = np.sqrt(np.clip(np.diag(s2 * np.linalg.pinv(a[:, active].T @ a[:, active])), 0.0, None))
    except ValueError:  # inf x 0 with no residual dof: nothing is separated
        pass
    return coef, active, se


def _separated(coef, se, j) -> bool:
    return bool(coef[j] > 0 and coef[j] > SEPARATED_T * se[j])


def fit_overhead_terms(points: list[tuple[float, int, int, float]]) -> OverheadFit:
    """(compute scale, per step, per micro-batch, per sublayer pass) from timed steps [(cost-model step s without
    overheads, accumulation, sublayers, measured s), ...]:
        measured = scale x predicted + step + accumulation x (micro-batch + 3 x sublayers x sublayer pass),
    non-negative least squares on relative errors (load from other processes stretches a timing by a factor, so a
    long step is not trusted more than a short one). The per-micro-batch and per-sublayer columns are near-collinear
    in the plain-step design (depth and accumulation change both), and repeated profiles of one machine came back
    as 407 us per sublayer and 0 per micro-batch, then 0 and 8.4 ms. So the split is kept only when both terms are
    at least SEPARATED_T standard errors above 0; otherwise one per-micro-batch overhead is fitted with the split
    fixed at the operator-count ratio MICROSTEP_SUBLAYER_PASSES, and the per-step overhead (plain PyTorch's clip +
    AdamW are priced by the optimizer micro-benchmark) is kept only where it too stands out of the noise. The scale
    is kept in [0.5, 3] (beyond that the micro-benchmarks and the timed steps saw different machines)."""
    import numpy as np

    y = np.array([m for _, _, _, m in points], dtype=float)
    weights = 1.0 / y
    coef, active, se = _nonnegative_fit([[p, 1.0, acc, 3.0 * acc * sub] for p, acc, sub, _ in points], y, weights)
    split = "measured"
    if not (_separated(coef, se, 2) and _separated(coef, se, 3)):
        split = "op-count ratio"
        cols = [[p, 1.0, acc * (MICROSTEP_SUBLAYER_PASSES + 3.0 * sub)] for p, acc, sub, _ in points]
        joint, active, se = _nonnegative_fit(cols, y, weights)
        if not _separated(joint, se, 1):
            joint, _, _ = _nonnegative_fit([[row[0], row[2]] for row in cols], y, weights)
            joint = np.array([joint[0], 0.0, joint[1]])
        coef = np.array([joint[0], joint[1], MICROSTEP_SUBLAYER_PASSES * joint[2], joint[2]])
    return OverheadFit(scale=float(min(3.0, max(0.5, coef[0]))), step_s=max(0.0, float(coef[1])),
                       microstep_s=max(0.0, float(coef[2])), layer_s=max(0.0, float(coef[3])), split=split)


def fit_overheads(points: list[tuple[float, int, int, float]]) -> tuple[float, float, float, float]:
    """(compute scale, per step, per micro-batch, per sublayer pass): `fit_overhead_terms` without its split note."""
    fit = fit_overhead_terms(points)
    return fit.scale, fit.step_s, fit.microstep_s, fit.layer_s


# A profile is "measured under load" when other processes held the CPU for more than NOISY_WAIT of its timed runs
# (the timings leave that out, engine/cpu_wait.py, but not what the same load does through shared caches and
# memory, nor all of it between synchronised ranks: at load 7 here a plain t5-tiny step took 71-85 ms less its
# run-queue wait, 61 ms at load 1; a busy loop alone left it unchanged), or when its plain steps' best two rounds
# still disagreed by more than NOISY_SPREAD after the extra rounds (engine/cpu_profile.py MAX_ROUNDS). Profiles here:
# load 1.0 waited 0.016, spread 0.049; ambient load 4-7 waited 0.60-0.61, spread 0.06-0.12.
NOISY_WAIT, NOISY_SPREAD = 0.35, 0.08
_QUALITY = re.compile(r"quality: waited ([0-9.]+|inf), spread ([0-9.]+|inf), rounds (\d+), attempt (\d+)")


@dataclass(frozen=True)
class ProfileQuality:
    """How quiet the machine was while the profile was measured (engine/cpu_profile.measure writes it into the
    profile's note): the share of its timed wall time other processes held the CPU (`waited`), the plain steps'
    disagreement between their two best rounds (`spread`), how many rounds were run, and how many measurements of
    this machine it stands for (`attempt`: the kept one's number, raised when a later one was not kept)."""

    waited: float
    spread: float
    rounds: int
    attempt: int = 1

    def text(self) -> str:
        return (f"quality: waited {self.waited:.3f}, spread {self.spread:.3f}, rounds {self.rounds}, "
                f"attempt {self.attempt}")

    @classmethod
    def parse(cls, text: str) -> ProfileQuality | None:
        m = _QUALITY.search(text)
        return m and cls(float(m[1]), float(m[2]), int(m[3]), int(m[4]))

    def noise(self) -> float:
        """> 1: measured under load (the larger, the worse)."""
        return max(self.waited / NOISY_WAIT, self.spread / NOISY_SPREAD)

    def why(self) -> str:
        return (f"other processes held the CPU {self.waited:.0%} of its timed runs (noisy above {NOISY_WAIT:.0%}) "
                f"and its best repeats were {self.spread:.0%} apart (noisy above {NOISY_SPREAD:.0%})")


def profile_quality(path: Path) -> ProfileQuality | None:
    """The quality line of a cached profile's note (None: none there, e.g. written by hand)."""
    try:
        with open(path, encoding="utf-8") as fh:
            head = fh.readline()
    except (OSError, UnicodeDecodeError):  # not text: the profile's reader says so, in one line
        return None
    return ProfileQuality.parse(head) if head.startswith("#") else None


# engine/cpu_profile.py starts each line that says how far it got with this; _run_profile shows those lines (with
# the time so far) and keeps the rest of its output for a failure's message. (~5 min passed in silence before.)
PROGRESS_MARK = "scalestudy-cpu-profile:"


def _run_profile(path: Path, attempt: int, timeout_s: float, ops, log=None) -> None:
    import threading
    import time

    from scalestudy.op_locks import lock_hint

    from scalestudy.host_allocator import pinned_allocator_env

    # glibc's malloc thresholds pinned as the CPU ranks have them (engine/launch.py worker_env): the timed steps'
    # page faults then do not depend on what the profile's process timed before them (scalestudy/host_allocator.py)
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"), **pinned_allocator_env(),
               PYTHONUNBUFFERED="1")  # stdout in order with stderr: a failure's last line is its traceback's
    cmd = [sys.executable, "-m", "scalestudy.engine.cpu_profile", "--output", str(path), "--attempt", str(attempt)]
    start, last = time.monotonic(), []
    # one pipe for both streams, read by one thread: a child that fills the unread one of two pipes would block
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def pump() -> None:
        for line in proc.stdout:
            if line.startswith(PROGRESS_MARK):
                if log:
                    log(f"  {time.monotonic() - start:4.0f} s  {line[len(PROGRESS_MARK) + 1:].rstrip()}")
            elif line.strip():
                last[:] = [line.strip()]

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise ScalestudyError(f"CPU profile measurement timed out after {timeout_s:.0f} s{lock_hint(ops)}") from None
    finally:
        reader.join(timeout=5.0)
    if proc.returncode != 0 or not path.is_file():
        raise ScalestudyError(f"CPU profile measurement failed (exit {proc.returncode}): {(last or ['no output'])[0]}")


# A profile is measured again only once the machine has gone quiet (other processes busy on at most QUIET_CORES cores
# over 2 s, waiting up to QUIET_WAIT_S): under a steady load a second measurement sees the same load and doubles the
# first prediction's wait (here a busy loop beside the profile: 345 s measured noisy, then 345 s more for the same).
# A noisy cached profile is measured again when the demo (local_cpu_profile's remeasure_noisy) finds the machine quiet,
# up to MAX_ATTEMPTS measurements in all.
QUIET_CORES, QUIET_WAIT_S, MAX_ATTEMPTS = 0.25, 30.0, 3
PROFILE_OPS = ("deepspeed_shm_comm",)  # the profile times DeepSpeed on CPU without offload: shm_comm only


def _machine_quiet(max_wait_s: float) -> bool:
    from scalestudy.machine_load import wait_until_quiet

    return wait_until_quiet(QUIET_CORES, max_wait_s)


def _set_attempt(path: Path, attempt: int) -> None:
    """Count a measurement that was not kept in the kept profile's quality line (bounds the re-measurements)."""
    text = path.read_text(encoding="utf-8")
    head, _, rest = text.partition("\n")
    tmp = path.with_name(f"{path.stem}.count-{os.getpid()}.yaml")
    tmp.write_text(re.sub(r"attempt \d+", f"attempt {attempt}", head, count=1) + "\n" + rest, encoding="utf-8")
    os.replace(tmp, path)


def _measure_again(path: Path, first: ProfileQuality, timeout_s: float, ops, log) -> None:
    """Measure once more beside `path` and keep the quieter of the two (`path` only ever holds a whole profile)."""
    attempt = first.attempt + 1
    again = path.with_name(f"{path.stem}.attempt{attempt}-{os.getpid()}.yaml")
    try:
        _run_profile(again, attempt, timeout_s, ops, log)
        second = profile_quality(again)
        if second is not None and second.noise() < first.noise():
            os.replace(again, path)
            from scalestudy.specs.hardware import get_device

            get_device.cache_clear()  # devices are cached by path: this process may have read the old profile
        else:
            _set_attempt(path, attempt)
    except ScalestudyError as exc:  # the first profile stands
        if log:
            log(f"second CPU profile measurement failed, the first is kept: {exc}")
    finally:
        again.unlink(missing_ok=True)


# What the profile is said to take before it starts (README.md and docs/estimate-schema.md say the same): its own header
# timed 215 s on a 2-core machine at load average 1.8 (2026-12-04) and 233 s at 2.4 (2026-12-03), engines on 1 and 2
# ranks most of it; each DeepSpeed op it compiles first adds ~1 min. (It said ~2 min, the time of an older profile.)
PROFILE_MINUTES = 4

# How long one measurement may run before it counts as hung (a stale op-build lock, a dead rank): ~2-5 min on a quiet
# machine, but 903-1026 s at load average 4-7 (2026-12-02) and 1432 s at load 9-10 (2026-12-03, benchmarks/RESULTS.md),
# where a 600 s limit failed the demo after ten minutes of measuring.
PROFILE_TIMEOUT_S = 1800.0


@contextmanager
def _one_measurer(path: Path, log):
    """Hold the profile folder's lock while measuring: two commands that both find no profile (the demo, and an
    `estimate --gpu local-cpu` typed in another terminal meanwhile) measured this CPU at once, each the other's load
    (2026-12-04, 2 cores: both profiles 'measured under load', other processes 62% of their timed runs). The second
    waits and reads the first's profile. flock on the folder (no lock file beside the profile): the kernel releases
    it when its holder dies; a filesystem without flock measures unlocked, as before."""
    import fcntl

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path.parent, os.O_RDONLY)
    except OSError:  # a folder it cannot open: measured unlocked, and the profile's own write says why in one line
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if log:
                log(f"another scalestudy command is measuring this CPU into {path.parent}: waiting for its profile...")
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            pass
        yield
    finally:
        os.close(fd)  # releases the lock


def measure_profile(path: Path, *, log=None, timeout_s: float = PROFILE_TIMEOUT_S) -> Path:
    """Run engine/cpu_profile.py in a subprocess (torch stays out of this process); one-line error on failure. A
    profile measured under load (`ProfileQuality.noise` > 1) is measured once more, beside it, if the machine goes
    quiet within QUIET_WAIT_S, and the quieter of the two kept: `path` only ever holds a whole profile (both are
    written to a temporary file and renamed). One command measures at a time (_one_measurer); one that waited for
    another's measurement takes its profile."""
    with _one_measurer(path, log):
        if path.is_file():  # measured by the command this one waited for
            return path
        return _measure_profile(path, log, timeout_s)


def _measure_profile(path: Path, log, timeout_s: float) -> Path:
    from scalestudy.op_locks import built_for_this_environment, clear_stale_locks

    clear_stale_locks(PROFILE_OPS)  # torch would wait on a stale build lock until the timeout below
    if log:
        # the profile's output is captured: a DeepSpeed op it compiles first (not built for this environment, e.g.
        # another venv's build in the cache, which torch recompiles) is said here or the minutes pass silently
        pending = [op for op in PROFILE_OPS if not built_for_this_environment(op)]
        build = f" after compiling DeepSpeed's {' and '.join(pending)} for this Python environment" if pending else ""
        log(f"measuring this CPU once for the cost model (~{PROFILE_MINUTES + len(pending)} min{build}; cached in "
            f"{path})...")
    _run_profile(path, 1, timeout_s, PROFILE_OPS, log)
    first = profile_quality(path)
    if first is None or first.noise() <= 1.0:
        return path
    if not _machine_quiet(QUIET_WAIT_S):
        if log:
            log(f"the CPU profile was measured under load: {first.why()}; the machine is still busy, so it is kept "
                "and measured again when a later demo finds the machine quiet")
        return path
    if log:
        log(f"the CPU profile was measured under load: {first.why()}; measuring once more...")
    _measure_again(path, first, timeout_s, PROFILE_OPS, log)
    return path


def remeasure_if_noisy(path: Path, *, log=None, timeout_s: float = PROFILE_TIMEOUT_S) -> None:
    """A cached profile measured under load is measured again now if the machine is quiet (no waiting) and it has
    had fewer than MAX_ATTEMPTS measurements; the quieter kept."""
    quality = profile_quality(path)
    if quality is None or quality.noise() <= 1.0 or quality.attempt >= MAX_ATTEMPTS or not _machine_quiet(0.0):
        return
    if log:
        log(f"this machine's cached CPU profile was measured under load ({quality.why()}); the machine is quiet "
            f"now: measuring it again (~{PROFILE_MINUTES} min)...")
    _measure_again(path, quality, timeout_s, PROFILE_OPS, log)


_WARNED: set = set()


def warn_if_noisy(path: Path, log) -> None:
    """One line per process when the cached profile was measured under load: its predictions may be slow."""
    quality = profile_quality(path)
    if log is None or quality is None or quality.noise() <= 1.0 or path in _WARNED:
        return
    _WARNED.add(path)
    log(f"note: this machine's CPU profile was measured under load: {quality.why()}; predictions may be off. "
        f"Delete {path} to measure it again when the machine is quieter.")


def static_profile_wanted() -> bool:
    """SCALESTUDY_CPU_PROFILE=static: predictions keep the static local-cpu file, nothing is measured."""
    return os.environ.get("SCALESTUDY_CPU_PROFILE", "").lower() == "static"


def check_profile_cache() -> None:
    """One line when this machine's profile would be measured (not static, not cached) into a cache file that cannot
    be written: a refusal before a minutes-long measurement (and before a command makes its outputs), not after."""
    if not static_profile_wanted() and not profile_path().is_file():
        from scalestudy.outputs import check_output_file

        check_output_file(profile_path(), "SCALESTUDY_CACHE_DIR: the CPU profile")


def local_cpu_profile(*, measure: bool = True, log=None, remeasure_noisy: bool = False) -> DeviceSpec | None:
    """This machine's measured profile (measured now when absent and `measure`), or None (static wanted). With
    `remeasure_noisy` (a command about to time real runs: the demo, before its trials), a cached profile measured
    under load is measured again first if the machine is quiet now (`remeasure_if_noisy`); every other use reads
    the cache as it is (a 2 s quiet check per prediction would add up)."""
    from scalestudy.costmodel.calibrate import load_profile

    if static_profile_wanted():
        return None
    path = profile_path()
    if not path.is_file():
        if not measure:
            return None
        check_profile_cache()
        measure_profile(path, log=log)
    elif measure and remeasure_noisy:
        remeasure_if_noisy(path, log=log)
    warn_if_noisy(path, log)
    return load_profile(path)


def measured_cluster(cluster: ClusterSpec, *, log=None) -> ClusterSpec:
    """`cluster` with the static `local-cpu` device replaced by this machine's measured profile."""
    if cluster.device.name != STATIC_NAME or cluster.device.kind != "cpu":
        return cluster
    device = local_cpu_profile(log=log)
    return cluster if device is None else replace(cluster, device=device)
