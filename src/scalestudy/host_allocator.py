"""glibc malloc's thresholds pinned for CPU ranks and the CPU profile, so that a step's time does not depend on what
the process allocated before it (torch-free: the cost model's profile launcher reads it too).

glibc adjusts two thresholds as a process runs (malloc(3), mallopt M_MMAP_THRESHOLD / M_TRIM_THRESHOLD): a buffer
at least the mmap threshold is mmapped and unmapped again when freed; freeing one raises the threshold to its size
(up to 32 MB on 64-bit: DEFAULT_MMAP_THRESHOLD_MAX) and the heap's trim threshold to twice that, and heap memory
above the trim threshold at the top of the heap goes back to the kernel. Either way the next buffer of that size is
faulted in again, page by page, zeroed by the kernel. How often that happens then depends on the sizes the process
happened to free earlier. Measured (1-rank DeepSpeed ZeRO-3 t5-tiny, mb 2, acc 2, fp32, one thread, 2-core EPYC):
a fresh trial process (engine/train.py train_step's calls) re-faults up to six ~13 MB buffers (3,190 pages each: the
size of the flat fp32 partition and its gradient) every step, mostly all six (19.1k minor faults per step, 268-300 ms
at load 1-4); the CPU profile, timing the same step after its plain-PyTorch steps and other engines, two to five of
them (6.4k-16k faults, 247-286 ms best of 3), so the demo's ZeRO-3 trials ran 9-18% slower than the profile
predicted. With both thresholds fixed (MMAP_THRESHOLD_BYTES,
TRIM_THRESHOLD_BYTES) the same steps fault 0-15 pages per step after the second, in a fresh process and after the
plain steps alike: the profile then times what the trials run (A/B, same load, profile best-of-3 vs trial median:
249 vs 252 ms and 247 vs 270 ms pinned; 270 vs 268 and 286 vs 300 ms not).
Setting either threshold turns glibc's adjustment off (mp_.no_dyn_threshold), hence both: the trim threshold alone
leaves the mmap threshold at its 128 KB start and every larger buffer mmapped (35.8k faults per step, measured).
Where the user's environment sets them, theirs win; other C libraries ignore the variables.
"""

from __future__ import annotations

import os

# Buffers up to glibc's own largest dynamic threshold (32 MB on 64-bit) come from the heap ...
MMAP_THRESHOLD_BYTES = 32 << 20
# ... and the heap keeps up to 1 GB of freed memory at its top for the next step instead of returning it.
TRIM_THRESHOLD_BYTES = 1 << 30
ALLOCATOR_ENV = {"MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD_BYTES),
                 "MALLOC_TRIM_THRESHOLD_": str(TRIM_THRESHOLD_BYTES)}


def pinned_allocator_env(environ=None) -> dict[str, str]:
    """ALLOCATOR_ENV less what `environ` (os.environ) already sets: the variables to add for a new process."""
    env = os.environ if environ is None else environ
    return {k: v for k, v in ALLOCATOR_ENV.items() if k not in env}


def pin_host_allocator(environ=None) -> None:
    """Set ALLOCATOR_ENV in `environ` (os.environ) where unset: processes started from it read them at start-up
    (glibc reads them once; this process keeps its own)."""
    env = os.environ if environ is None else environ
    env.update(pinned_allocator_env(env))
