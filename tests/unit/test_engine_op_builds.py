"""Start-up phases that take a minute say so: which DeepSpeed ops a run will JIT-compile, and the line announcing it."""

from __future__ import annotations

from scalestudy.engine import op_builds


def test_pending_builds_follow_the_extension_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.setattr(op_builds, "_prebuilt", lambda name: False)
    assert op_builds.pending_builds("deepspeed", "cpu", cuda=False) == ["deepspeed_shm_comm", "cpu_adam"]
    assert op_builds.pending_builds("deepspeed", "none", cuda=False) == ["deepspeed_shm_comm"]
    assert op_builds.pending_builds("fsdp", "none", cuda=False) == [] and op_builds.pending_builds(
        "deepspeed", "cpu", cuda=True) == []
    (tmp_path / "py311_cpu" / "deepspeed_shm_comm").mkdir(parents=True)
    (tmp_path / "py311_cpu" / "deepspeed_shm_comm" / "deepspeed_shm_comm.so").write_bytes(b"")
    (tmp_path / "cpu_adam").mkdir()
    (tmp_path / "cpu_adam" / "lock").write_text("")  # a build in progress or broken: not built
    assert op_builds.pending_builds("deepspeed", "cpu", cuda=False) == ["cpu_adam"]
    line = op_builds.announcement(["deepspeed_shm_comm", "cpu_adam"])
    assert "deepspeed_shm_comm and cpu_adam once on this machine (~2 min; cached in " + str(tmp_path) in line


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
