"""Suite-wide defaults.

`local-cpu` predictions normally measure this machine once (~1 min, cached; costmodel/cpu_profile.py). Tests keep
the static `local-cpu.yaml` so their numbers do not depend on the machine or its load; a test that exercises the
measured profile sets SCALESTUDY_CPU_PROFILE itself (monkeypatch.delenv / setenv).

One `ninja` for every process of the suite: DeepSpeed JIT-compiles its C++ ops (shm_comm, cpu_adam) with the first
`ninja` on PATH into one shared cache, and two ninja versions (the venv's pip wheel, 1.13, and a system one, 1.11)
each read the other's build log as stale and rebuild the op from scratch at every switch (~30-100 s each). The tests
that run emitted launch scripts or Slurm jobs put the venv's bin first on PATH (as `source .venv/bin/activate`
does), the others inherit the caller's PATH: so every process here finds the venv's ninja first -- only ninja,
nothing else of the venv is added to PATH.

On a machine without those ops compiled for this environment (engine/op_builds.built_for_this_environment: a fresh
clone's CI venv finds the builds of another venv in the shared cache, and torch recompiles them for its own paths), a
session with real multi-process runs compiles them in the background at nice 19, one core, from its start
(tests/_prebuild_ops.py): the single-process tests before the first DeepSpeed run leave the second core idle, and the
~2.5 min of compiling leave the critical path.
"""

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("SCALESTUDY_CPU_PROFILE", "static")


def _venv_ninja_first_on_path() -> None:
    ninja = Path(sys.executable).with_name("ninja")
    if not ninja.is_file():
        return
    shim = tempfile.mkdtemp(prefix="scalestudy-tests-ninja-")
    atexit.register(shutil.rmtree, shim, ignore_errors=True)
    os.symlink(ninja, os.path.join(shim, "ninja"))
    os.environ["PATH"] = shim + os.pathsep + os.environ.get("PATH", "")


_venv_ninja_first_on_path()
_BACKGROUND: list[subprocess.Popen] = []
DEEPSPEED_OPS = ("deepspeed_shm_comm", "cpu_adam")


def pytest_collection_finish(session) -> None:
    """Start compiling DeepSpeed's CPU ops in the background when this session runs real multi-process tests and
    they are not compiled for this environment yet (module docstring). Not waited for, never killed: a build cut
    short would leave torch's build lock behind, and every later run would wait on it."""
    if not any(item.get_closest_marker("dist") for item in session.items):
        return
    from scalestudy.engine.op_builds import built_for_this_environment  # one rule with train's announcement

    if all(built_for_this_environment(name) for name in DEEPSPEED_OPS):
        return
    nice = [shutil.which("nice"), "-n", "19"] if shutil.which("nice") else []
    _BACKGROUND.append(subprocess.Popen([*nice, sys.executable, str(Path(__file__).with_name("_prebuild_ops.py"))],
                                        env={**os.environ, "MAX_JOBS": "1"}, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        start_new_session=True))


@pytest.fixture
def suite_builds_finished() -> None:
    """Wait for this session's background op builds (pytest_collection_finish) before a test that times real runs:
    a newcomer's machine compiles nothing beside them, and a compile still running here counts as others' load --
    the README demo then re-measures the trials it disturbed (up to its 150 s budget) or keeps their slower
    timings. Returns at once when nothing was started or the builds are done."""
    for proc in _BACKGROUND:
        try:
            proc.wait(timeout=600)
        except subprocess.TimeoutExpired:  # not killed (see above): the runs then wait on its lock as before
            pass


@pytest.fixture(scope="session")
def leave_one_source_out_result() -> dict:
    """`validate`'s leave-one-source-out refit (published.leave_one_source_out: one fit per distinct fit set, 7
    today, 15-40 s on 2 cores) computed once per session: the refit is pure (the published rows and the unfitted
    constants; published.fit never reads the fitted ones' stored values), so tests/unit/test_costmodel_validate.py
    asserts its numbers and the e2e validate prints render the same result (tests/e2e/conftest.py
    validate_refits_once)."""
    from scalestudy.costmodel.published import leave_one_source_out

    return leave_one_source_out()


@pytest.fixture(scope="session")
def bundled_tokenizer(tmp_path_factory) -> str:
    """The bundled corpus's tokenizer (8192 tokens), trained once per session for every test that trains on the
    bundled corpus and passes --tokenizer (the tokenizer does not depend on the sequence lengths)."""
    from scalestudy.engine.data.pipeline import DataConfig, prepare

    out = tmp_path_factory.mktemp("bundled-tokenizer")
    prepare(DataConfig(seq_len=64, target_len=16), out, write=True)
    return str(out / "tokenizer.json")


def _deepspeed_ops_root() -> str:
    """Where `train`'s ranks keep DeepSpeed's JIT-built ops (engine/launch.py's TORCH_EXTENSIONS_DIR default)."""
    return os.environ.get("TORCH_EXTENSIONS_DIR", os.path.expanduser("~/.cache/torch_extensions"))


@pytest.fixture(scope="session")
def deepspeed_rank_env():
    """The environment of one gloo rank of a real in-process DeepSpeed probe on CPU, as env(rank, world, port); the
    test is skipped where that is not cheap: DeepSpeed's CPU comm backend JIT-builds its shm op on first use (~1 min),
    so such probes run only where the build is cached (in CI: by _prebuild_ops in the background)."""
    try:
        import deepspeed  # noqa: F401
    except Exception as exc:  # pragma: no cover - the venv has it
        pytest.skip(f"deepspeed not importable: {exc}")
    from scalestudy.engine.op_builds import built_for_this_environment

    root = Path(_deepspeed_ops_root())
    if not built_for_this_environment("deepspeed_shm_comm", root) or (root / "deepspeed_shm_comm" / "lock").exists():
        pytest.skip("DeepSpeed's shm_comm op is not built for this environment (or is being built) in "
                    "TORCH_EXTENSIONS_DIR")

    def env(rank: int, world: int, port: int) -> dict:
        return dict(os.environ, DS_ACCELERATOR="cpu", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                    WORLD_SIZE=str(world), LOCAL_RANK=str(rank), OMP_NUM_THREADS="1",
                    TORCH_EXTENSIONS_DIR=_deepspeed_ops_root(),  # the venv's ninja first: op_builds.pin_ninja
                    PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))

    return env
