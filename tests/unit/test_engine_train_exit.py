"""A rank that finished its run leaves without the interpreter's finalization (engine/train.py exit_now): its
exit handlers run and its output is flushed, the objects still alive are not torn down (with torch, transformers and
DeepSpeed loaded that took a rank 7-13 s on a busy 2-core machine), and the exit status is 0."""

from __future__ import annotations

import subprocess
import sys
import time

SCRIPT = """
import atexit, sys, time
from scalestudy.engine.train import exit_now

class SlowToFinalize:
    def __del__(self):
        time.sleep(30)

keep = SlowToFinalize()
atexit.register(lambda: print("exit handler ran"))
print("written before the exit", end="")
sys.stderr.write("and to stderr")
exit_now()
"""


def test_exit_now_runs_exit_handlers_flushes_and_skips_finalization():
    start = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    took = time.perf_counter() - start
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout == "written before the exitexit handler ran\n"
    assert res.stderr.endswith("and to stderr")
    assert took < 25, f"the interpreter's finalization ran ({took:.0f} s: the object's 30 s __del__)"


def test_a_rank_whose_run_file_the_os_refuses_leaves_one_line_not_a_traceback(tmp_path, monkeypatch, capsys):
    """A file where the run makes a folder (DIR/tb, DIR/checkpoints) or a full disk, met by a rank the launch scripts
    started (they skip `scalestudy train`'s checks): the OS's reason naming the file, no traceback; exit status 1."""
    import pytest

    from scalestudy.engine import train

    for name, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "localhost",
                        "MASTER_PORT": "29500"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv(train.LAUNCHER_PID_ENV, raising=False)
    monkeypatch.chdir(tmp_path)

    def refused(path):
        raise FileExistsError(17, "File exists", "run/tb")

    def leave(code):
        raise SystemExit(code)

    monkeypatch.setattr(train.RunConfig, "from_yaml", staticmethod(refused))
    monkeypatch.setattr(train.os, "_exit", leave)
    with pytest.raises(SystemExit) as exited:
        train.main(["--config", "run/train_config.yaml"])
    assert exited.value.code == 1
    assert "Traceback" not in capsys.readouterr().err
    assert (tmp_path / ".failures" / "rank0.txt").read_text() == "File exists: run/tb"


def test_a_rank_interrupted_by_ctrl_c_exits_130_without_a_traceback(tmp_path, monkeypatch, capsys):
    """fuzz7: Ctrl-C reaches every process of the terminal's group, the ranks too: each printed a KeyboardInterrupt
    traceback of wherever it was (a Transformers import, a step) above the launcher's one line. The rank leaves
    quietly with 128 + SIGINT and no failure record: the launcher reports the interrupt, torchrun stops the ranks."""
    import pytest

    from scalestudy.engine import train

    for name, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "localhost",
                        "MASTER_PORT": "29500"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv(train.LAUNCHER_PID_ENV, raising=False)
    monkeypatch.chdir(tmp_path)

    def interrupted(path):
        raise KeyboardInterrupt

    def leave(code):
        raise SystemExit(code)

    monkeypatch.setattr(train.RunConfig, "from_yaml", staticmethod(interrupted))
    monkeypatch.setattr(train.os, "_exit", leave)
    with pytest.raises(SystemExit) as exited:
        train.main(["--config", "run/train_config.yaml"])
    assert exited.value.code == 130
    assert "Traceback" not in capsys.readouterr().err
    assert not (tmp_path / ".failures").exists()
