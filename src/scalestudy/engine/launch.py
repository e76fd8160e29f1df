"""Start the training workers on this machine through torchrun's launcher.

The calling process becomes torchrun's launcher (`elastic_launch`, standalone c10d rendezvous on a free port, so
concurrent runs never collide); the workers run `python -m scalestudy.engine.train --config DIR/train_config.yaml`,
the resolved RunConfig. Everything checkable is checked here first, so bad input fails in one line before any
worker starts. Cluster command text (multi-node torchrun, Slurm) is rendered by scalestudy.launch.commands.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import uuid
from pathlib import Path

from scalestudy.launch.commands import CONFIG_NAME, RUN_DIRS, WORKER_MODULE
from scalestudy.engine.checkpoint_record import check_resumable, check_same_data
from scalestudy.engine.cpu_precision import check_precision
from scalestudy.host_allocator import pin_host_allocator
from scalestudy.engine.op_builds import check_build_locks, pin_ninja
from scalestudy.specs.run import RunConfig, check_not_users_files, drops_vocab_size, trained_vocab_size
from scalestudy.errors import OptionError, ScalestudyError
from scalestudy.outputs import check_output_dir


class TrainingFailed(ScalestudyError):
    """A worker failed; the message is its one-line reason ("out of memory: ..." for OOM)."""


class TrainingInterrupted(ScalestudyError):
    """The launcher got SIGTERM/SIGINT: the ranks were stopped; exit status 128 + signal number, as a shell does."""

    def __init__(self, signum: int, out: Path) -> None:
        import signal

        self.exit_code = 128 + int(signum)
        super().__init__(f"training interrupted by {signal.Signals(signum).name}: ranks stopped; the last "
                         f"checkpoint in {out}/checkpoints is kept (continue with --resume)")


def threads_per_rank(nproc: int, cuda: bool, cores: int) -> int:
    """CPU ranks: one thread each (the ranks are the parallelism; the CPU profile is measured so). GPU ranks: the
    host's cores split between them, as `deepspeed --bind_cores_to_rank` does -- with one thread, DeepSpeed's CPU
    Adam (optimizer offload) would run at 1/cores of the host rate the cost model prices (torchrun's default is 1)."""
    return max(1, cores // max(1, nproc)) if cuda else 1


def worker_env(nproc: int) -> None:
    """Environment the workers inherit: threads per rank unless set; without GPUs CPU DeepSpeed and glibc's malloc
    thresholds pinned (a step's page faults otherwise depend on what the rank allocated before it)."""
    import torch

    cuda = torch.cuda.is_available()
    os.environ.setdefault("OMP_NUM_THREADS", str(threads_per_rank(nproc, cuda, os.cpu_count() or 1)))
    if not cuda:
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
        pin_host_allocator()  # glibc's malloc thresholds as the CPU profile timed them (scalestudy/host_allocator.py)
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(Path.home() / ".cache" / "torch_extensions"))
    pin_ninja()  # the ranks build DeepSpeed's ops with the environment's ninja (engine/op_builds.py)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from scalestudy.engine.train import LAUNCHER_PID_ENV

    os.environ[LAUNCHER_PID_ENV] = str(os.getpid())  # each rank arms a parent-death signal on this process


# What a run writes in its directory (data preparation, the workers' config, the metrics and summary)
RUN_FILES = ("tokenizer.json", "tokenizer.meta.json", "tokens.npz", "data.json", CONFIG_NAME, "metrics.jsonl",
             "summary.json")


def check_before_start(cfg: RunConfig) -> Path:
    """The checks of a local run that need neither torch nor the device: the configuration, --nnodes, the output
    directory and --resume. `scalestudy train` makes them before importing torch (2-15 s of a refusal's time
    otherwise); nothing is written. Returns DIR."""
    cfg.validate()
    if cfg.workload.nnodes != 1:
        raise ScalestudyError(f"--nnodes {cfg.workload.nnodes}: run on a cluster with the commands from "
                              "--print-launch")
    # a directory in a file's place, or a file in a folder's: refused before writing
    out = check_output_dir(cfg.output.dir, files=RUN_FILES, dirs=RUN_DIRS)
    if not cfg.output.resume and (out / "metrics.jsonl").exists():
        raise ScalestudyError(f"--output {out} already holds a run: add --resume to continue it or choose a new DIR")
    # the run writes its config, data and summary there (its tokenizer too unless --tokenizer names one): none may be
    # a user's; a DIR killed while preparing its data is scalestudy's by its marked JSON or a study's trial.yaml
    written = tuple(name for name in RUN_FILES if name != "metrics.jsonl"
                    and not (cfg.data.tokenizer and name.startswith("tokenizer.")))
    check_not_users_files(out, "--output", written, marked=("trial.yaml", "data.json", "tokenizer.meta.json"))
    if cfg.output.resume:  # before anything is written: a finished run's summary must survive a refused resume
        check_resumable(out, cfg.workload.steps, cfg.world_size, cfg.strategy.to_dict(), cfg.display_name)
        _check_resumed_vocab(cfg, out)
        _check_resumed_metrics(out)
    return out


def _check_resumed_metrics(out: Path) -> None:
    """--resume keeps DIR/metrics.jsonl's rows up to the checkpoint, read by rank 0 once the run has started: a FIFO
    there waited forever, bytes that are not UTF-8 failed the rank with a traceback after DIR's config was rewritten
    and its summary dropped. (Lines that are not JSON are a crash's cut line: skipped, as before.)"""
    path = out / "metrics.jsonl"
    if not os.path.lexists(path):
        return
    if not path.is_file():
        raise ScalestudyError(f"--resume: {path} is not a regular file (a FIFO, a device or a broken link): restore "
                              "the run's metrics.jsonl, or train from scratch in a new --output")
    try:
        with open(path, encoding="utf-8") as fh:
            for _ in fh:
                pass
    except UnicodeDecodeError:
        raise ScalestudyError(f"--resume: {path} is damaged (not UTF-8 text): restore the run's metrics.jsonl, or "
                              "train from scratch in a new --output") from None


def _check_resumed_vocab(cfg: RunConfig, out: Path) -> None:
    """--resume without --tokenizer continues with DIR/tokenizer.json (prepare_output): another --vocab-size than the
    one it was trained at would be refused by every rank, after DIR's config was rewritten and its summary dropped."""
    own = out / "tokenizer.json"
    vocab = cfg.data.vocab_size
    if cfg.data.tokenizer is not None or not own.is_file():
        return
    if drops_vocab_size(str(own), vocab):  # the rule the ranks apply (check_data_fields)
        trained = trained_vocab_size(str(own))
        raise OptionError(f"--resume continues with {own}{f', trained at vocab_size {trained}' if trained else ''}: "
                          f"vocab_size {vocab} would change nothing -- drop it (or train anew into another output "
                          "directory)", "vocab_size")


def prepare_output(cfg: RunConfig) -> RunConfig:
    """Validate, create DIR, prepare the data once (tokenizer -> DIR/tokenizer.json); the workers' resolved config."""
    out = check_before_start(cfg)
    import torch

    cuda = torch.cuda.is_available()
    check_precision(cfg.strategy.precision, cuda=cuda)  # bf16 on a CPU: only where measured fast
    if not cuda:  # CPU ranks read this machine's cached profile for their peak (engine/probe.py): a damaged one is
        from scalestudy.costmodel.cpu_profile import local_cpu_profile  # refused here, not after DIR is written

        local_cpu_profile(measure=False)
    # before anything is written: a stale op build lock would make every rank wait forever (engine/op_builds.py)
    check_build_locks(cfg.strategy.engine, cfg.strategy.offload_optimizer, cuda)
    tokenizer = cfg.data.tokenizer
    if tokenizer is None and cfg.output.resume and (out / "tokenizer.json").is_file():
        tokenizer = str((out / "tokenizer.json").resolve())
    created = _first_missing(out)
    had = {name for name in RUN_FILES if os.path.lexists(out / name)}
    out.mkdir(parents=True, exist_ok=True)
    try:
        if cfg.output.resume:  # the checkpoint's data, checked before DIR's token cache, summary or config change
            check_same_data(out, _prepare_data(cfg, tokenizer, out, write=False), cfg.optimizer.seed)
        _prepare_data(cfg, tokenizer, out)
    except BaseException:
        if created is not None:  # bad data or tokenizer: leave no empty run directory behind
            shutil.rmtree(created, ignore_errors=True)
        else:  # an existing DIR keeps what it held: the token cache written before a refusal (check_vocab) goes
            for name in set(RUN_FILES) - had:
                (out / name).unlink(missing_ok=True)
        raise
    (out / "summary.json").unlink(missing_ok=True)  # only a finished run may leave a summary
    failures = out / ".failures"
    for stale in failures.glob("*.txt") if failures.is_dir() else []:
        stale.unlink()
    # absolute: DIR/train_config.yaml is read again by --config, which takes relative paths from DIR itself
    return cfg.resolved().replace(tokenizer=tokenizer or str((out / "tokenizer.json").resolve()))


def _first_missing(path: Path) -> Path | None:
    """The outermost directory of `path` that does not exist yet (what mkdir(parents=True) creates), or None."""
    missing = None
    for candidate in [path, *path.absolute().parents]:
        if candidate.exists():
            break
        missing = candidate
    return missing


def _prepare_data(cfg: RunConfig, tokenizer: str | None, out: Path, write: bool = True) -> str:
    """Tokenizer and token cache for the workers (DIR/tokenizer.json, tokens.npz; without `write` only read),
    checked against the model; the prepared data's fingerprint."""
    from scalestudy.engine.data.pipeline import check_vocab, prepare
    from scalestudy.engine.train import data_config

    prepared = prepare(data_config(cfg, tokenizer), out, write=write)
    check_vocab(cfg.model_spec(), prepared.vocab_size)
    return prepared.fingerprint


def run_local(cfg: RunConfig) -> dict:
    """Train on this machine with `workload.nproc` ranks; return DIR/summary.json as a dict."""
    import json

    wcfg = prepare_output(cfg)
    out = Path(cfg.output.dir)
    config_path = out / CONFIG_NAME
    wcfg.write_yaml(config_path)  # the resolved configuration of the run, read by every worker
    worker_env(cfg.workload.nproc)
    _launch(cfg.workload.nproc, [str(config_path)], out)
    summary = out / "summary.json"
    if not summary.is_file():
        raise TrainingFailed("training ended without writing summary.json")
    return json.loads(summary.read_text(encoding="utf-8"))


def _launch(nproc: int, config_args: list[str], out: Path) -> None:
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    # torchrun's own failure report is a page of text; ours is the worker's one-line reason.
    for name in list(logging.root.manager.loggerDict):  # each elastic module's logger carries its own level
        if name.startswith(("torch.distributed.elastic", "torch.distributed.launcher")):
            logging.getLogger(name).setLevel(logging.CRITICAL)
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=nproc, run_id=f"scalestudy-{uuid.uuid4().hex[:8]}",
                          rdzv_backend="c10d", rdzv_endpoint="localhost:0", max_restarts=0, monitor_interval=0.2)
    from torch.distributed.elastic.multiprocessing.api import SignalException

    oom_before = oom_kills()
    try:
        elastic_launch(config, sys.executable)("-m", WORKER_MODULE, "--config", *config_args)
    except ChildFailedError as exc:
        raise TrainingFailed(failure_reason(out, exc.failures, oom_before)) from None
    except SignalException as exc:  # SIGTERM/SIGINT: torchrun's agent has already stopped the ranks
        raise TrainingInterrupted(exc.sigval, out) from None


def oom_kills() -> int | None:
    """The kernel's count of OOM-killer kills since boot (/proc/vmstat), or None where it cannot be read."""
    try:
        for line in Path("/proc/vmstat").read_text(encoding="utf-8").splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def failure_reason(out: Path, failures: dict, oom_kills_before: int | None = None) -> str:
    """The first worker's own reason, or what its exit code says. A SIGKILL is called out of memory only when the
    kernel's OOM-killer count rose during the run (or cannot be read); otherwise something else killed the rank."""
    folder = out / ".failures"
    reasons = sorted(folder.glob("rank*.txt")) if folder.is_dir() else []
    if reasons:
        return reasons[0].read_text(encoding="utf-8").strip()
    first = min(failures.items())[1] if failures else None
    code = getattr(first, "exitcode", None)
    if code in (-9, 137):
        after = oom_kills()
        if oom_kills_before is not None and after is not None and after == oom_kills_before:
            return "a worker was killed by SIGKILL from outside (not the OOM killer: the kernel's oom_kill count " \
                   "did not change)"
        return "out of memory: a worker was killed by SIGKILL (the kernel's OOM killer, most likely)"
    return f"a training worker failed (exit code {code}); see its output above"
