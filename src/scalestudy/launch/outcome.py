"""How a finished trial process ended: OK / OOM / FAILED / TIMEOUT, keeping the tail of its output.

OOM is recognised from the text engines print (PyTorch "CUDA out of memory" / OutOfMemoryError, the CPU
allocator's "can't allocate memory", Python's MemoryError, std::bad_alloc, the contract's "out of memory" line
of `scalestudy train`) or from a SIGKILL while a memory cap is in force (the kernel's OOM killer and cgroup
limits kill with SIGKILL and print nothing).
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass

OOM_PATTERNS = re.compile(
    r"out of memory|OutOfMemoryError|MemoryError|can't allocate memory|Cannot allocate memory|std::bad_alloc"
    r"|CUBLAS_STATUS_ALLOC_FAILED|oom-kill",
    re.IGNORECASE,
)
# torchrun reports a worker killed by a signal as "exitcode  : -9 (pid: ...)" / "Signal 9 (SIGKILL)".
SIGKILL_TEXT = re.compile(r"exitcode\s*:\s*-9\b|Signal 9 \(SIGKILL\)")
TAIL_LINES = 40
TAIL_CHARS = 4000


@dataclass(frozen=True)
class Outcome:
    status: str  # OK / OOM / FAILED / TIMEOUT
    reason: str  # one line
    error_tail: str  # last lines of the output ("" when OK)


def tail(text: str, lines: int = TAIL_LINES, chars: int = TAIL_CHARS) -> str:
    kept = "\n".join(text.rstrip().splitlines()[-lines:])
    return kept[-chars:]


def killed_by_sigkill(returncode: int | None, output: str) -> bool:
    # Popen gives -9; a shell or srun reports 128 + 9 = 137.
    return returncode in (-signal.SIGKILL, 128 + signal.SIGKILL) or bool(SIGKILL_TEXT.search(output))


def classify_outcome(returncode: int | None, output: str, *, timed_out: bool, has_summary: bool,
             memory_capped: bool = False) -> Outcome:
    """The outcome of one trial from its exit status, its output and whether it wrote summary.json."""
    if timed_out:
        return Outcome("TIMEOUT", "exceeded its timeout; process group killed", tail(output))
    if returncode == 0 and has_summary:
        return Outcome("OK", "", "")
    if has_summary:  # training finished and was summarised; a crash in teardown does not void the measurement
        return Outcome("OK", f"exited with status {returncode} after writing summary.json (teardown)", tail(output))
    if OOM_PATTERNS.search(output):
        return Outcome("OOM", "ran out of memory", tail(output))
    if memory_capped and killed_by_sigkill(returncode, output):
        return Outcome("OOM", "killed by SIGKILL under a memory cap", tail(output))
    if returncode == 0:
        return Outcome("FAILED", "exited 0 but wrote no summary.json", tail(output))
    return Outcome("FAILED", f"exited with status {returncode}", tail(output))
