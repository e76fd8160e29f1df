"""Compile DeepSpeed's CPU ops (shm_comm, then cpu_adam) once, in the background of a test session (tests/conftest.py).

On a fresh machine the first DeepSpeed run compiles shm_comm (~1 min of one core; in the suite: inside the README
demo's CPU profile) and the first optimizer-offload run cpu_adam (~1.5 min; the shared multi-process launch), both
on the suite's critical path, while the single-process tests before them leave the second core idle. Built exactly
as the runs build them: the trials' op environment (engine/cpu_profile.trial_op_environment: DS_ACCELERATOR=cpu, the
trials' TORCH_EXTENSIONS_DIR, the environment's ninja) and DeepSpeed's own builders (the ones deepspeed.comm and
DeepSpeedCPUAdam load). A run that needs an op while it is being built waits on torch's build lock, as a second run
would; if this fails, the first run that needs the op builds it, as without this.
"""

from __future__ import annotations

import contextlib
import io
import sys

# DeepSpeed's builder names, in the order the suite first needs them (the demo's profile, then the offload runs)
BUILDERS = ("ShareMemCommBuilder", "CPUAdamBuilder")


def main() -> int:
    from scalestudy.engine.cpu_profile import trial_op_environment

    trial_op_environment()
    import torch

    if torch.cuda.is_available():  # GPU machines build other ops, not timed here
        return 0
    import deepspeed.ops
    from deepspeed.accelerator import get_accelerator

    for name in BUILDERS:
        builder = get_accelerator().create_op_builder(name)
        if builder is None or not deepspeed.ops.__compatible_ops__.get(builder.NAME, False):
            continue  # DeepSpeed will not load it here either
        with contextlib.redirect_stdout(io.StringIO()):
            builder.load(verbose=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
