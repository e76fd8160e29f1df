"""DeepSpeed's C++ ops that a run JIT-compiles on first use, so that start-up says so instead of going silent.

On CPU, DeepSpeed builds `deepspeed_shm_comm` when it initialises (~53 s here) and `cpu_adam` for optimizer offload
(~75 s); torch caches the result in $TORCH_EXTENSIONS_DIR (default ~/.cache/torch_extensions), so only the first run
on a machine pays (FACTS.md) -- per environment: a build another environment (venv) made in the same cache is
recompiled by the first run here (built_for_this_environment), and announced as a build. Two environments sharing
the cache (two clones' venvs) therefore rebuild each other's ops at every switch; one cache folder per environment
would end that but makes every existing user rebuild once, so the default stays shared and the README says to give
each clone its own TORCH_EXTENSIONS_DIR. Ops prebuilt into the DeepSpeed install (DS_BUILD_*=1 pip install) are not
rebuilt.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from scalestudy.op_locks import build_locks, built_for_this_environment, clear_stale_locks, extensions_dir

BUILD_S = {"deepspeed_shm_comm": 53, "cpu_adam": 75}  # measured on this project's 2-core machines


def pin_ninja() -> None:
    """Put the ninja installed beside this Python (the `ninja` wheel; torch builds DeepSpeed's ops with the first
    `ninja` on PATH) first on this process's PATH, for the ranks it starts: one ninja whether or not the user
    activated the environment. Two versions (the environment's 1.13, a system 1.11) each discard the other's build
    log, so every switch rebuilt shm_comm from scratch (69-189 s each, 5 times in 30 min on a shared machine)."""
    bindir = str(Path(sys.executable).parent)
    path = os.environ.get("PATH", "")
    if (Path(bindir) / "ninja").is_file() and path.split(os.pathsep)[0] != bindir:
        os.environ["PATH"] = bindir + os.pathsep + path


def _prebuilt(name: str) -> bool:
    try:
        from deepspeed.git_version_info import installed_ops
    except ImportError:
        return False
    return bool(installed_ops.get(name))


def _deepspeed_cpu_ops(engine: str, offload_optimizer: str, cuda: bool) -> list[str]:
    """The ops DeepSpeed loads for this run, prebuilt or JIT (none on GPU: not measured there)."""
    if engine != "deepspeed" or cuda:
        return []
    return ["deepspeed_shm_comm"] + (["cpu_adam"] if offload_optimizer == "cpu" else [])


def pending_builds(engine: str, offload_optimizer: str, cuda: bool) -> list[str]:
    """The ops this run will compile before its first step."""
    return [name for name in _deepspeed_cpu_ops(engine, offload_optimizer, cuda)
            if not _prebuilt(name) and not built_for_this_environment(name)]


def check_build_locks(engine: str, offload_optimizer: str, cuda: bool) -> None:
    """Before the ranks start: a stale build lock of an op this run JIT-loads is removed (stderr) or refused in one
    line (op_locks.clear_stale_locks) -- torch would wait on it forever. DeepSpeed (to skip prebuilt ops: no lock
    taken) is imported only when a lock is there: the launcher stays light."""
    wanted = _deepspeed_cpu_ops(engine, offload_optimizer, cuda)
    if build_locks(tuple(wanted)):
        clear_stale_locks(tuple(name for name in wanted if not _prebuilt(name)))


def announcement(names: list[str]) -> str:
    """'DeepSpeed compiles its C++ op deepspeed_shm_comm for this Python environment (~1 min; cached in ...) ...' --
    not 'once on this machine': another environment's build in the same cache is compiled again."""
    total = sum(BUILD_S.get(n, 60) for n in names)
    return (f"DeepSpeed compiles its C++ op{'s' if len(names) > 1 else ''} {' and '.join(names)} for this Python "
            f"environment (~{max(1, round(total / 60))} min; cached in {extensions_dir()}): training starts after "
            "that...")
