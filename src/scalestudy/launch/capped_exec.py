"""Start one trial process: apply the memory cap and the parent-death signal, then exec the trial command.

Used as `python -m scalestudy.launch.capped_exec MEMORY_LIMIT_BYTES PARENT_PID -- CMD...` by the trial process
(launch/process.py; instead of a `preexec_fn`, which is unsafe while the runner's progress display has threads running).
- MEMORY_LIMIT_BYTES > 0 sets RLIMIT_AS (address space) for the trial and every process it starts, so a trial
  that needs more fails with an out-of-memory error (how tests force an OOM without filling the machine).
- PR_SET_PDEATHSIG: if the runner dies (even by SIGKILL) the trial receives SIGTERM instead of running on as an
  orphan; the next `study run` also kills any leftover of this study by its environment marker.
"""

from __future__ import annotations

import os
import resource
import signal
import sys

from scalestudy.launch.parent_death import die_with_parent


def _set_parent_death_signal(parent_pid: int) -> None:
    if not die_with_parent(parent_pid, signal.SIGTERM):  # the runner died before prctl took effect
        sys.exit(143)


def main(argv: list[str]) -> None:
    if len(argv) < 4 or argv[2] != "--":
        sys.exit("usage: python -m scalestudy.launch.capped_exec MEMORY_LIMIT_BYTES PARENT_PID -- CMD...")
    limit, parent, cmd = int(argv[0]), int(argv[1]), argv[3:]
    if limit > 0:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    if parent > 0:
        _set_parent_death_signal(parent)
    os.execvp(cmd[0], cmd)


if __name__ == "__main__":
    main(sys.argv[1:])
