"""`scalestudy fit` end to end: CSV in, JSON/table/PNG out; degenerate input is one line on stderr and exit 2."""

import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from _cli import run_cli

from scalestudy.cli import main


def _write_csv(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


def _chinchilla_csv(path, noise=0.005):
    rng = np.random.default_rng(0)
    rows = []
    for i, n in enumerate(np.logspace(7.5, 9.5, 4)):
        for d in np.logspace(9, 11, 4):
            loss = (1.69 + 406.4 / n**0.34 + 410.7 / d**0.28) * np.exp(noise * rng.normal())
            rows.append({"model": f"m{i}", "params": n, "tokens": d, "flops": 6 * n * d, "loss": loss})
    return _write_csv(path, rows)


def _cli(*args):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "scalestudy", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=120)


def test_fit_json_and_plot(tmp_path, capsys):
    # In this process (the real process is test_degenerate_inputs_exit_2_with_one_line's): the same entry point.
    src = _chinchilla_csv(tmp_path / "runs.csv")
    png = tmp_path / "fit.png"
    code, out, err = run_cli(capsys, ["fit", str(src), "--law", "chinchilla", "--budget-flops", "5.76e23",
                                      "--bootstrap", "20", "--json", "--plot", str(png)])
    assert code in (0, None), err
    data = json.loads(out)
    assert data["law"] == "chinchilla" and data["n_runs"] == 16
    assert set(data["coef"]) == {"E", "A", "B", "alpha", "beta"}
    assert abs(data["coef"]["alpha"] - 0.34) < 0.05 and abs(data["coef"]["E"] - 1.69) < 0.15
    for name, (lo, hi) in data["ci"].items():
        assert lo <= data["coef"][name] <= hi, name
    pred = data["prediction"]
    assert 6 * pred["params_opt"] * pred["tokens_opt"] == pytest.approx(5.76e23, rel=1e-9)
    assert pred["loss_pi"][0] <= pred["loss"] <= pred["loss_pi"][1]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_fit_reads_a_spreadsheet_csv_with_a_byte_order_mark(tmp_path, capsys):
    """Excel's "CSV UTF-8" starts with a BOM: it stuck to the first column's name ('\\ufeffloss': missing column)."""
    src = _chinchilla_csv(tmp_path / "runs.csv")
    lines = src.read_text().splitlines(keepends=True)
    header = lines[0].rstrip("\r\n").split(",")
    order = [header.index("loss")] + [i for i in range(len(header)) if header[i] != "loss"]  # loss first
    bom = tmp_path / "excel.csv"
    bom.write_bytes(b"\xef\xbb\xbf" + "".join(",".join(line.rstrip("\r\n").split(",")[i] for i in order) + "\n"
                                             for line in lines).encode())
    code, out, err = run_cli(capsys, ["fit", str(bom), "--law", "compute", "--bootstrap", "2", "--json"])
    assert code in (0, None), err
    assert json.loads(out)["n_runs"] == 16


def test_fit_table_output_compute_law(tmp_path, capsys):
    src = _chinchilla_csv(tmp_path / "runs.csv")
    try:
        main(["fit", str(src), "--law", "compute", "--target-params", "1e10", "--target-tokens", "2e11",
              "--bootstrap", "20"])
    except SystemExit as exc:  # typer exits 0 after a command
        assert exc.code in (0, None)
    out = capsys.readouterr().out
    assert "L(C) = a * C^(-b) + L_inf" in out and "L_inf" in out
    assert "predicted loss" in out and "nats/token" in out and "C = 1.2e+22 FLOPs" in out


def test_degenerate_inputs_exit_2_with_one_line(tmp_path, capsys):
    single = _write_csv(tmp_path / "single.csv", [
        {"params": 1e8, "tokens": 10 ** (9 + i / 3), "flops": 6e8 * 10 ** (9 + i / 3), "loss": 3 - i / 10}
        for i in range(6)])
    nonpos = _write_csv(tmp_path / "neg.csv", [{"flops": 10 ** (17 + i), "loss": 1 - i / 2} for i in range(5)])
    missing = _write_csv(tmp_path / "missing.csv", [{"params": 1e8, "tokens": 1e9} for _ in range(5)])
    # A real process once (exit status, stderr), the other cases in-process through the same entry point.
    proc = _cli("fit", single, "--law", "chinchilla", "--bootstrap", "0")
    assert proc.returncode == 2, proc.stderr
    assert "2 or more model sizes" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    for path, law, needle in ((nonpos, "compute", "must be positive"),
                              (missing, "compute", "missing column 'loss'"),
                              (tmp_path / "nope.csv", "compute", "no such file")):
        with pytest.raises(SystemExit) as exc:
            main(["fit", str(path), "--law", law, "--bootstrap", "0"])
        err = capsys.readouterr().err
        assert exc.value.code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
