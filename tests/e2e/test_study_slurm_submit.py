"""The Slurm executor's submit -> run -> collect loop against fake `sbatch`/`squeue`/`srun`/`scontrol` commands.

The fake sbatch runs every array task of the generated script (the real script, under bash) in the background; the
fake srun stands in for the GPU job: one trial finishes and writes the training contract's files, one runs out of
memory, one is lost (its batch script is killed, as by scancel or a node failure, before it writes an exit code).
"""

from __future__ import annotations

import os
import textwrap

from scalestudy.study.runner import run_study
from scalestudy.study.spec import parse_spec
from scalestudy.study.store import Store

FAKES = {
    "sbatch": r"""
        #!/bin/bash
        script="${@: -1}"
        last=$(sed -n 's/^#SBATCH --array=0-\([0-9]*\)$/\1/p' "$script")
        jid=$(( 10#$(date +%N) % 90000 + 10000 ))  # 10#: a leading 0 is not octal
        for i in $(seq 0 "$last"); do
          SLURM_ARRAY_TASK_ID=$i SLURM_JOB_ID=$((jid * 100 + i)) SLURM_JOB_NODELIST=node001 SLURM_NNODES=1 \
            bash "$script" >/dev/null 2>&1 &
          echo "$! ${jid}_$i" >> "$FAKE_SLURM/pids"
        done
        echo "$jid"
    """,
    "squeue": r"""
        #!/bin/bash
        # like `squeue -h -r -t all -o "%i|%T|N/A|%r|%e"`: running tasks only (finished ones are purged at once).
        # Its first answer is a transient failure, as a busy controller gives: it must not fail a running trial.
        if [ ! -e "$FAKE_SLURM/squeue-failed" ]; then
          touch "$FAKE_SLURM/squeue-failed"
          echo "squeue: error: slurm_load_jobs error: Socket timed out on send/recv operation" >&2
          exit 1
        fi
        while read -r pid task; do
          kill -0 "$pid" 2>/dev/null && echo "$task|RUNNING|N/A|None|NONE"
        done < "$FAKE_SLURM/pids"
        exit 0
    """,
    # a cluster without accounting (no slurmdbd): squeue is all there is
    "sacct": "#!/bin/sh\necho 'sacct: error: Slurm accounting storage is disabled' >&2\nexit 1\n",
    "scontrol": "#!/bin/sh\necho node001\n",
    "srun": r"""
        #!/bin/bash
        for a in "$@"; do [ "$prev" = "--config" ] && cfg="$a"; prev="$a"; done
        dir=$(dirname "$cfg")
        zero=$(sed -n 's/^ *zero: //p' "$cfg")
        echo "srun $*"
        case "$zero" in
          1) for s in 1 2 3; do echo "{\"step\": $s, \"loss\": $((10 - s)).0, \"step_s\": 0.5}" >> "$dir/metrics.jsonl"; done
             echo '{"status": "ok", "median_step_s": 0.5, "median_tokens_per_s": 8000.0, "final_loss": 7.0,
                    "peak_mem_bytes": 3.0e10}' > "$dir/summary.json" ;;
          2) echo "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB"; exit 1 ;;
          3) script=$(ps -o ppid= -p $PPID | tr -d ' '); kill -9 "$PPID" "$script" ;;
        esac
    """,
}


def test_submit_run_and_collect_with_fake_slurm(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in FAKES.items():
        (bin_dir / name).write_text(textwrap.dedent(body).lstrip())
        (bin_dir / name).chmod(0o755)
    (tmp_path / "pids").touch()
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SLURM", str(tmp_path))
    spec = parse_spec({"name": "fake-cluster", "executor": "slurm", "device": "a100-80gb", "model": "mt5-base",
                       "engine": "deepspeed", "zero": [1, 2, 3], "nodes": 1, "nproc": 8, "micro_batch": 2,
                       "global_batch": 64, "precision": "bf16", "seq_len": 512, "target_len": 114, "steps": 3,
                       "warmup": 1, "timeout_s": 60, "slurm": {"poll_s": 0.5, "lost_grace_s": 0}})
    out = tmp_path / "study"
    result = run_study(spec, out, progress=False)
    assert result.counts == {"OK": 1, "OOM": 1, "FAILED": 1, "TIMEOUT": 0}
    with Store(out) as store:
        rows = {r["zero"]: r for r in store.trials()}
        assert rows[1]["step_s"] == 0.5 and rows[1]["loss"] == 7.0 and rows[1]["pred_step_s"] > 0
        assert [m["step"] for m in store.metrics(rows[1]["trial_id"])] == [1, 2, 3]
        assert rows[2]["status"] == "OOM" and "CUDA out of memory" in rows[2]["error_tail"]
        assert rows[3]["status"] == "FAILED" and "ended without writing its exit code" in rows[3]["error_tail"]
        assert "no record in squeue or sacct" in rows[3]["error_tail"]
        log = (out / "trials" / rows[1]["trial_id"] / "train.log").read_text()
        assert "torchrun --nnodes 1 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint node001:" in log
        assert len(store.get_meta("slurm_jobs")) == 1
    # re-running submits nothing new: every trial has its row
    again = run_study(spec, out, progress=False)
    assert again.skipped_finished == 3
    with Store(out) as store:
        assert len(store.get_meta("slurm_jobs")) == 1 and len(store.trials()) == 3
