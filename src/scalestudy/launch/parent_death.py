"""A child process that dies with its parent: Linux's parent-death signal (PR_SET_PDEATHSIG).

Even `kill -9` of the parent then takes the child down, so no training rank or trial keeps running as an orphan
(reparented to PID 1) that finishes a run and races a `--resume` started meanwhile.
"""

from __future__ import annotations

import ctypes
import os
import signal

PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int, signum: int = signal.SIGTERM) -> bool:
    """Ask the kernel to send `signum` to this process when its parent dies; False if the parent `parent_pid` is
    already gone (the caller should exit). Where prctl is missing (not Linux), nothing is armed and True returned."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0)
    except (OSError, AttributeError):
        return True
    return os.getppid() == parent_pid  # checked after arming: the parent may have died before prctl took effect
