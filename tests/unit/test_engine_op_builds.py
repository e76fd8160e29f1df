"""Start-up phases that take a minute say so: which DeepSpeed ops a run will JIT-compile, and the line announcing it."""

from __future__ import annotations

import os

from scalestudy import op_locks
from scalestudy.engine import op_builds


def test_pending_builds_follow_the_extension_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.setattr(op_builds, "_prebuilt", lambda name: False)
    assert op_builds.pending_builds("deepspeed", "cpu", cuda=False) == ["deepspeed_shm_comm", "cpu_adam"]
    assert op_builds.pending_builds("deepspeed", "none", cuda=False) == ["deepspeed_shm_comm"]
    assert op_builds.pending_builds("fsdp", "none", cuda=False) == [] and op_builds.pending_builds(
        "deepspeed", "cpu", cuda=True) == []
    _cached_build(tmp_path / "py311_cpu", "deepspeed_shm_comm", op_locks.package_dirs())
    # torch's folder when TORCH_EXTENSIONS_DIR is unset; the runs set it (engine/train.py), so torch builds anew
    assert op_builds.pending_builds("deepspeed", "none", cuda=False) == ["deepspeed_shm_comm"]
    _cached_build(tmp_path, "deepspeed_shm_comm", op_locks.package_dirs())
    (tmp_path / "cpu_adam").mkdir()
    (tmp_path / "cpu_adam" / "lock").write_text("")  # a build in progress or broken: not built
    assert op_builds.pending_builds("deepspeed", "cpu", cuda=False) == ["cpu_adam"]
    line = op_builds.announcement(["deepspeed_shm_comm", "cpu_adam"])
    assert "deepspeed_shm_comm and cpu_adam for this Python environment (~2 min; cached in " + str(tmp_path) in line


def _cached_build(root, name, package_dirs, so_first=False):
    """What torch.utils.cpp_extension leaves in <root>/<op> after a JIT build by the environment whose torch and
    DeepSpeed packages are `package_dirs`: build.ninja (flags and sources naming them) and the linked .so."""
    torch_dir, deepspeed_dir = package_dirs
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.so").write_bytes(b"")
    (folder / "build.ninja").write_text(
        f"cflags = -DTORCH_EXTENSION_NAME={name} -I{deepspeed_dir}/ops/csrc/includes -isystem {torch_dir}/include\n"
        f"ldflags = -shared -L{torch_dir}/lib -lc10 -ltorch_cpu -ltorch -ltorch_python\n"
        f"build {name}.o: compile {deepspeed_dir}/ops/csrc/{name}.cpp\nbuild {name}.so: link {name}.o\n")
    older, newer = (folder / "build.ninja", folder / f"{name}.so") if not so_first else (
        folder / f"{name}.so", folder / "build.ninja")
    os.utime(older, (1_700_000_000, 1_700_000_000))
    os.utime(newer, (1_700_000_100, 1_700_000_100))


def test_an_op_another_environment_built_is_announced_as_a_build(tmp_path, monkeypatch):
    """torch rewrites <op>/build.ninja with the loading environment's torch and DeepSpeed paths and ninja recompiles
    every object (minutes): an op built by another venv sharing the cache (a second clone's, a fresh clone's CI) is
    pending here, so the run announces it instead of going silent; one built here is not."""
    import torch  # the real packages of this environment, as train's ranks find them
    import deepspeed

    here = op_locks.package_dirs()
    assert here == [os.path.dirname(torch.__file__), os.path.dirname(deepspeed.__file__)]
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.setattr(op_builds, "_prebuilt", lambda name: False)
    other = ["/other/clone/.venv/lib/python3.11/site-packages/" + os.path.basename(d) for d in here]
    _cached_build(tmp_path, "deepspeed_shm_comm", other)
    _cached_build(tmp_path, "cpu_adam", here)
    assert op_builds.pending_builds("deepspeed", "cpu", cuda=False) == ["deepspeed_shm_comm"]
    # a whole path: this environment's directories under another root (/elsewhere/<this prefix>/...) are not these
    _cached_build(tmp_path, "deepspeed_shm_comm", ["/elsewhere" + d for d in here])
    assert not op_builds.built_for_this_environment("deepspeed_shm_comm")
    _cached_build(tmp_path, "deepspeed_shm_comm", here)
    assert op_builds.pending_builds("deepspeed", "cpu", cuda=False) == []
    # build.ninja rewritten for this environment after the .so was linked: a rebuild that has not finished
    _cached_build(tmp_path, "cpu_adam", here, so_first=True)
    assert op_builds.pending_builds("deepspeed", "cpu", cuda=False) == ["cpu_adam"]
    (tmp_path / "deepspeed_shm_comm" / "build.ninja").unlink()  # nothing says whose build it is: torch decides
    assert not op_builds.built_for_this_environment("deepspeed_shm_comm")


def test_the_cpu_profile_says_it_compiles_an_op_another_environment_built(tmp_path, monkeypatch):
    """The profile's subprocess output is captured, so the line before it says when its first DeepSpeed backend will
    compile shm_comm (not built for this environment) -- minutes the user would otherwise wait in silence."""
    from scalestudy.costmodel import cpu_profile

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.setattr(cpu_profile, "_run_profile", lambda *a: None)
    monkeypatch.setattr(cpu_profile, "profile_quality", lambda path: None)
    here = op_locks.package_dirs()
    _cached_build(tmp_path, "deepspeed_shm_comm", ["/other/clone/.venv/lib/" + os.path.basename(d) for d in here])
    logs = []
    cpu_profile.measure_profile(tmp_path / "p.yaml", log=logs.append)
    assert "(~5 min after compiling DeepSpeed's deepspeed_shm_comm for this Python environment; cached in" in logs[0]
    _cached_build(tmp_path, "deepspeed_shm_comm", here)
    logs.clear()
    cpu_profile.measure_profile(tmp_path / "p.yaml", log=logs.append)
    assert "measuring this CPU once for the cost model (~4 min; cached in" in logs[0]


def test_the_cpu_profile_times_deepspeed_with_the_trials_op_cache(tmp_path, monkeypatch):
    """torch builds a JIT op in TORCH_EXTENSIONS_DIR/<op> when it is set and in ~/.cache/torch_extensions/py<ver>_cpu/
    <op> when not: the CPU profile (the demo's first step) must give DeepSpeed the trials' folder, or a newcomer's demo
    compiles shm_comm twice."""
    import os

    from scalestudy.engine.cpu_profile import trial_op_environment
    from scalestudy.launch.process import trial_environment

    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("TORCH_EXTENSIONS_DIR", "DS_ACCELERATOR"):  # a newcomer's shell; restored after the test
        monkeypatch.delenv(name, raising=False)
    trials = trial_environment()
    trial_op_environment()
    assert os.environ["TORCH_EXTENSIONS_DIR"] == trials["TORCH_EXTENSIONS_DIR"] == str(op_builds.extensions_dir())
    assert os.environ["DS_ACCELERATOR"] == "cpu"


def test_the_environments_own_ninja_comes_first_for_the_ranks(tmp_path, monkeypatch):
    """Activated or not, every run builds DeepSpeed's ops with one ninja (two versions rebuild at each switch)."""
    import os
    import sys

    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "ninja").write_text("")
    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    op_builds.pin_ninja()
    op_builds.pin_ninja()  # once only
    assert os.environ["PATH"] == f"{tmp_path / 'bin'}:/usr/bin:/bin"
    (tmp_path / "bin" / "ninja").unlink()  # no ninja beside this Python (a system install): PATH untouched
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    op_builds.pin_ninja()
    assert os.environ["PATH"] == "/usr/bin:/bin"


def test_a_stale_op_build_lock_is_one_line_not_a_silent_hang(tmp_path, monkeypatch, capsys):
    """torch waits forever on <op>/lock (FileBaton, no timeout) when a killed build left it: a DeepSpeed CPU run
    refuses in one line naming the file and the fix, removes it when provably stale (nobody holds it, old), and
    leaves the lock of a live build (its builder holds it open) alone; no lock: nothing."""
    import os
    import time

    import pytest

    from scalestudy.costmodel import cpu_profile
    from scalestudy.errors import ScalestudyError

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.setattr(op_builds, "_prebuilt", lambda name: False)
    op_builds.check_build_locks("deepspeed", "cpu", cuda=False)  # no lock: nothing
    assert op_locks.lock_hint() == "" and capsys.readouterr().err == ""
    lock = tmp_path / "py311_cpu" / "deepspeed_shm_comm" / "lock"  # torch's default layout
    lock.parent.mkdir(parents=True)
    lock.write_text("")
    op_builds.check_build_locks("fsdp", "none", cuda=False)  # runs that load no DeepSpeed op ignore it
    fd = os.open(lock, os.O_RDONLY)  # a live build holds its lock open (FileBaton.try_acquire): found in /proc
    try:
        assert op_locks.lock_holders(lock)[0] == [os.getpid()]
        op_builds.check_build_locks("deepspeed", "none", cuda=False)  # torch waits for that build: fine
    finally:
        os.close(fd)
    scan = {"complete": True}  # every process inspected, none holds it (as root here; not assumed)
    monkeypatch.setattr(op_locks, "lock_holders", lambda path: ([], scan["complete"]))
    with pytest.raises(ScalestudyError) as refused:  # young, nobody holds it: refused, not removed
        op_builds.check_build_locks("deepspeed", "none", cuda=False)
    line = str(refused.value)
    assert "\n" not in line and f"remove {lock} if no build is running" in line and lock.exists()
    with pytest.raises(ScalestudyError, match="blocks DeepSpeed"):  # the CPU profile checks before measuring
        cpu_profile.measure_profile(tmp_path / "profile.yaml", timeout_s=1)
    assert f"likely cause: torch extension build lock {lock}" in op_locks.lock_hint()  # for the profile's timeout
    old = time.time() - op_locks.STALE_AFTER_S - 60
    os.utime(lock, (old, old))
    op_builds.check_build_locks("deepspeed", "none", cuda=False)  # old and nobody holds it: provably stale
    assert not lock.exists()
    assert f"removed a stale torch extension build lock {lock}" in capsys.readouterr().err
    cpu_adam = tmp_path / "cpu_adam" / "lock"
    cpu_adam.parent.mkdir()
    cpu_adam.write_text("")
    os.utime(cpu_adam, (old, old))
    scan["complete"] = False  # another user's processes unreadable: an old lock is refused (not provable), kept
    with pytest.raises(ScalestudyError, match="cpu_adam/lock"):
        op_builds.check_build_locks("deepspeed", "cpu", cuda=False)
    assert cpu_adam.exists()
    os.utime(cpu_adam)  # young: perhaps an unseen process's build in progress -- torch may wait for it
    assert op_builds.check_build_locks("deepspeed", "cpu", cuda=False) is None and cpu_adam.exists()
