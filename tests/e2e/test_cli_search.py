"""`scalestudy search` end to end through the study runner's process machinery, with a stand-in trainer that follows
the training contract (DIR/metrics.jsonl per step, DIR/summary.json, exit 0) via the spec's `command_template`:
trials really run as processes, pruned ones are killed, finished ones land in the study store, and the best runs
feed `scalestudy fit`. (The real `scalestudy train` version is benchmarks/bench_scaling_e2e.py.)"""

import json

import pytest
import yaml
from _cli import run_cli

TRAINER = r'''
import argparse, json, math, os, time
p = argparse.ArgumentParser()
p.add_argument("--lr", type=float); p.add_argument("--steps", type=int); p.add_argument("--output")
a = p.parse_args()
os.makedirs(a.output, exist_ok=True)
quality = 1 + 2 * math.log(a.lr / 3e-3) ** 2
with open(os.path.join(a.output, "metrics.jsonl"), "w") as fh:
    for step in range(1, a.steps + 1):
        loss = 2 + quality * (1 + 3 * (1 - step / a.steps))
        fh.write(json.dumps({"step": step, "loss": loss}) + "\n"); fh.flush()
        time.sleep(0.03)
with open(os.path.join(a.output, "summary.json"), "w") as fh:
    json.dump({"status": "ok", "final_loss": loss, "steps": a.steps}, fh)
'''


@pytest.mark.slow
def test_search_runs_trial_processes_prunes_and_feeds_fit(tmp_path, capsys, monkeypatch):
    trainer = tmp_path / "trainer.py"
    trainer.write_text(TRAINER)
    spec = {
        "name": "stand-in", "model": ["t5-tiny", "t5-mini"], "engine": "ddp", "nproc": 1, "micro_batch": 4,
        "seq_len": 32, "target_len": 8, "timeout_s": 120,
        "command_template": f"{{python}} {trainer} --lr {{lr}} --steps {{steps}} --output {{output}}",
        "search": {"target_model": "mt5-xxl", "trials_per_model": 4, "budget_tokens": 4800, "min_resource": 0.2,
                   "reduction_factor": 2, "seed": 0,
                   "space": {"lr": {"low": 1e-4, "high": 1e-1}, "global_batch": [4, 8], "warmup_steps": [0, 2]}},
    }
    spec_path = tmp_path / "search.yaml"
    spec_path.write_text(yaml.safe_dump(spec))
    elsewhere = tmp_path / "elsewhere"  # relative spec and --output, from a cwd that is not the spec's folder
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the search in this process (cli.main): its trials are the real processes here
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    code, stdout, stderr = run_cli(capsys, ["search", "../search.yaml", "--output", "out", "--json"])
    out = elsewhere / "out"
    assert code == 0, stderr
    result = json.loads(stdout)
    assert [m["model"] for m in result["models"]] == ["t5-tiny", "t5-mini"]
    pruned = sum(m["trials"].get("pruned", 0) for m in result["models"])
    complete = sum(m["trials"].get("complete", 0) for m in result["models"])
    assert pruned >= 1 and complete + pruned == 8
    for m in result["models"]:
        assert m["best"]["loss"] < 4.0 and 1e-3 < m["best"]["params"]["lr"] < 1e-2
    # Pruned trials were killed part-way: their metrics stop before the end; finished ones are in the store.
    import sqlite3

    con = sqlite3.connect(out / "study.sqlite")
    rows = con.execute("SELECT status, steps, loss, tokens, flops, params FROM trials").fetchall()
    con.close()
    assert len(rows) == complete and all(r[0] == "OK" and r[2] is not None and r[3] > 0 for r in rows)
    lines = [sum(1 for _ in open(d / "metrics.jsonl")) for d in (out / "trials").iterdir()]
    assert any(n < 30 for n in lines)  # budget 4800 tokens = 30 steps at batch 4, 15 at batch 8
    # The trend is fitted on the proxies' best lr (two sizes: the line passes through both) and evaluated at
    # mt5-xxl's parameter count (the stand-in's optimum, 3e-3, does not depend on size).
    trend = result["trends"]["lr"]
    for m in result["models"]:
        assert trend["coef"] * m["params"] ** trend["exponent"] == pytest.approx(m["best"]["params"]["lr"], rel=1e-6)
    assert trend["target_value"] == pytest.approx(trend["coef"] * trend["target_params"] ** trend["exponent"],
                                                  rel=1e-9)
    from scalestudy.costmodel.params import param_count
    from scalestudy.specs.presets import get_model

    assert trend["target_params"] == result["target_params"] == float(param_count(get_model("mt5-xxl")))
    # The best runs table feeds the scaling-law fit; the search directory itself is a study for `fit` too.
    # (`fit` in this process: its own real process is test_cli_fit's)
    code, fit_out, fit_err = run_cli(capsys, ["fit", str(out / "best_runs.csv"), "--law", "compute", "--bootstrap",
                                              "10", "--json"])
    assert code in (0, None), fit_err
    assert json.loads(fit_out)["n_runs"] == 8  # 2 proxies x 4 budget fractions


def test_search_bad_spec_is_one_line(tmp_path, capsys):
    # In this process: the spec is refused before any trial process starts.
    spec_path = tmp_path / "bad.yaml"
    spec_path.write_text(yaml.safe_dump({"model": ["t5-tiny"], "search": {"space": {}}}))
    code, _, err = run_cli(capsys, ["search", str(spec_path), "--output", str(tmp_path / "o")])
    assert code == 2 and "budget_tokens" in err and "Traceback" not in err
    assert err.strip().count("\n") == 0, err
