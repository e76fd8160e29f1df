"""Stale torch-extension build locks: found before a DeepSpeed CPU run instead of waiting on them forever.

torch JIT-compiles an op (DeepSpeed's deepspeed_shm_comm, cpu_adam) under a file lock, <build dir>/lock
(torch.utils.file_baton.FileBaton): the builder creates it (O_CREAT | O_EXCL), keeps it open while it compiles and
deletes it when done; every other process polls until the file is gone, with no timeout. A builder that is killed
(Ctrl-C, a timeout, the OOM killer) leaves the file behind, and every later DeepSpeed run on the machine then hangs
without a word (the CPU profile died after 600 s with no hint). Torch-free and engine-free: the cost model's CPU
profile checks it too (costmodel/cpu_profile.py), and whether an op's cached build is this environment's
(built_for_this_environment: another environment's is recompiled).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from pathlib import Path

from scalestudy.errors import ScalestudyError

DEEPSPEED_CPU_OPS = ("deepspeed_shm_comm", "cpu_adam")  # what DeepSpeed JIT-compiles on CPU (engine/op_builds.py)
# A lock no visible process holds is removed only when also older than this: 3x the slowest op build seen here
# (shm_comm, 189 s on a loaded 2-core machine), so a build by a process this one cannot see (another container or
# user sharing the cache) is never cut from under it. A younger unheld lock is refused with the fix instead.
STALE_AFTER_S = 600


def extensions_dir() -> Path:
    """Where torch builds and caches JIT ops (scalestudy's runs set TORCH_EXTENSIONS_DIR to this)."""
    return Path(os.environ.get("TORCH_EXTENSIONS_DIR") or Path.home() / ".cache" / "torch_extensions")


def package_dirs() -> list[str]:
    """Where this environment's torch and DeepSpeed packages live, found as `import` finds them (sys.path) but
    without importing them: the launcher stays light."""
    dirs = []
    for package in ("torch", "deepspeed"):
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.submodule_search_locations:
            dirs.append(os.path.abspath(next(iter(spec.submodule_search_locations))))
    return dirs


def built_for_this_environment(name: str, root: Path | None = None) -> bool:
    """Whether loading op `name` from the extensions cache `root` (default: extensions_dir()) will not compile it.

    torch.utils.cpp_extension writes <root>/<op>/build.ninja for every JIT load (only when its text changes) and runs
    ninja, which recompiles every object whose command line changed. That text names the loading environment's torch
    (-isystem <torch>/include, -L<torch>/lib) and DeepSpeed (-I and sources under <deepspeed>/ops/csrc), so a build
    made by another environment sharing the cache (a second clone's venv, a fresh clone's CI venv) is recompiled from
    scratch by the first load here: minutes, silently. Built means: the .so is there, no older than build.ninja (torch
    rewrote it and the build has not finished), and build.ninja names this environment's torch and DeepSpeed
    directories as whole paths (a clone at /ci/home/.venv/... is not under /home/.venv/)."""
    folder = (root or extensions_dir()) / name
    try:
        if (folder / f"{name}.so").stat().st_mtime < (folder / "build.ninja").stat().st_mtime:
            return False
        text = (folder / "build.ninja").read_text(errors="replace")
    except OSError:  # no build, or no build.ninja to tell whose it is
        return False
    paths = {token.removeprefix("-I").removeprefix("-L") for token in text.split()}
    return all(any(path == package or path.startswith(package + os.sep) for path in paths)
               for package in package_dirs())


def build_locks(names: tuple[str, ...] = DEEPSPEED_CPU_OPS) -> list[Path]:
    """The lock files present for these ops: <dir>/<op>/lock (TORCH_EXTENSIONS_DIR set) and <dir>/py<ver>_cpu/<op>/lock
    (torch's default layout when it is not)."""
    root = extensions_dir()
    found = []
    for name in names:
        found += [p for p in [root / name / "lock", *sorted(root.glob(f"*/{name}/lock"))] if p.is_file()]
    return found


def lock_holders(lock: Path) -> tuple[list[int], bool]:
    """(pids with `lock` open, whether every process's open files could be read). The builder keeps the lock's file
    descriptor open for the whole build (FileBaton.try_acquire .. release), so a live build shows up in
    /proc/<pid>/fd; the match is by device and inode, not by path (symlinked or bind-mounted homes)."""
    try:
        target = os.stat(lock)
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:  # the lock is gone, or no /proc (not Linux): nothing can be proven
        return [], False
    holders, complete = [], True
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except FileNotFoundError:  # exited meanwhile
            continue
        except OSError:  # another user's process: unreadable
            complete = False
            continue
        for fd in fds:
            link = f"/proc/{pid}/fd/{fd}"
            try:
                if os.path.basename(os.readlink(link)) != "lock":
                    continue
                st = os.stat(link)
            except OSError:
                continue
            if (st.st_dev, st.st_ino) == (target.st_dev, target.st_ino):
                holders.append(int(pid))
                break
    return holders, complete


def _unheld(lock: Path) -> tuple[float, bool] | None:
    """(age s, whether every process was inspected) of a lock no visible process holds; None while a build holds it
    or the file turned over during the scan. The lock is stat'ed before and after the scan: a file that existed,
    unchanged, through the whole scan was created before it, so a live creator had it open all the time and was seen."""
    try:
        before = os.stat(lock)
    except OSError:
        return None
    holders, complete = lock_holders(lock)
    try:
        after = os.stat(lock)
    except OSError:
        return None  # released meanwhile: a build finished
    if holders or (before.st_ino, before.st_mtime_ns) != (after.st_ino, after.st_mtime_ns):
        return None
    return time.time() - after.st_mtime, complete


def clear_stale_locks(names: tuple[str, ...] = DEEPSPEED_CPU_OPS) -> list[Path]:
    """Before a DeepSpeed CPU run: remove a provably stale build lock of these ops (no process holds it, every
    process inspected, older than STALE_AFTER_S) and say so on stderr; refuse in one line with the fix when a lock
    no visible process holds cannot be proven stale; leave locks of running builds alone. Returns the removed."""
    removed = []
    for lock in build_locks(names):
        state = _unheld(lock)
        if state is None:
            continue
        age, complete = state
        if complete and age >= STALE_AFTER_S:
            lock.unlink(missing_ok=True)
            print(f"removed a stale torch extension build lock {lock} ({age / 60:.0f} min old, no process holds it: "
                  "left by a killed build; the op is rebuilt)", file=sys.stderr, flush=True)
            removed.append(lock)
        elif complete or age >= STALE_AFTER_S:
            raise ScalestudyError(stale_lock_message(lock, age))
        # else: young, and some processes could not be inspected: possibly a build in progress -- torch waits on it
    return removed


def stale_lock_message(lock: Path, age_s: float | None = None) -> str:
    old = f" ({age_s:.0f} s old)" if age_s is not None else ""
    return (f"torch extension build lock {lock}{old} blocks DeepSpeed (it waits on it forever; a killed build leaves "
            f"it): remove {lock} if no build is running")


def lock_hint(names: tuple[str, ...] = DEEPSPEED_CPU_OPS) -> str:
    """'; likely cause: <the lock message>' when a build lock of these ops exists, else '' (for timeout errors)."""
    locks = build_locks(names)
    return f"; likely cause: {stale_lock_message(locks[0])}" if locks else ""
