"""The report's scaling section: fits with CIs and extrapolation, jump flags, PNGs; reads a real study store."""

import numpy as np

from scalestudy.report.scaling_section import report_section
from scalestudy.study.store import Store


def _rows(sizes=4, token_counts=3, noise=0.01):
    rng = np.random.default_rng(0)
    rows = []
    for i, n in enumerate(np.logspace(7, 9, sizes)):
        for d in np.logspace(9, 10.5, token_counts):
            loss = (1.69 + 406.4 / n**0.34 + 410.7 / d**0.28) * np.exp(noise * rng.normal())
            rows.append({"model": f"m{i}", "params": n, "tokens": d, "flops": 6 * n * d, "loss": loss})
    return rows


def test_section_from_rows_with_jump_and_plots(tmp_path):
    rows = _rows()
    for r in rows:  # an "emergent" metric: flat, then a step at large compute
        r["accuracy"] = 0.02 * (r["flops"] / 6e16) ** 0.02 if r["flops"] < 1e19 else 0.5
    section = report_section(rows, tmp_path / "plots", n_boot=20)
    md, html, pngs = section
    assert "### compute law" in md and "### chinchilla law" in md
    assert "| alpha |" in md and "95% CI (bootstrap, 20 refits)" in md
    assert "| coefficient | value | 95% CI (bootstrap, 20 refits) |\n|---|---:|---:|" in md  # numbers right-aligned
    assert '<td class="num">[' in html
    assert "Extrapolation to C = " in md and "compute-optimal N = " in md
    assert "| accuracy |" in md and "forecast" in md  # the step is flagged
    assert "loss: follows a smooth trend" in md
    assert "<table>" in html and "<img" not in html  # the caller embeds the PNGs
    assert [p.name for p in pngs] == ["scaling_compute.png", "scaling_chinchilla.png"]
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in pngs) and section.pngs == pngs


def test_section_from_a_study_store_reports_why_a_law_is_not_fitted(tmp_path):
    with Store(tmp_path) as store:
        for j, r in enumerate(_rows(sizes=1, token_counts=5, noise=0.0)):
            store.record_trial({"trial_id": f"t{j}", "status": "OK", "model": "t5-tiny", "params": int(r["params"]),
                                "tokens": r["tokens"], "flops": r["flops"], "loss": r["loss"], "lr": 1e-3})
        store.record_trial({"trial_id": "oom", "status": "OOM", "model": "t5-big", "params": 10**9})
    md, html, pngs = report_section(tmp_path, n_boot=20, target_params=1e8, target_tokens=1e11)
    assert "5 rows: finished runs" in md
    assert "### compute law" in md and "Extrapolation to N = 1e+08 parameters" in md
    assert "_Not fitted: chinchilla law needs runs at 2 or more model sizes" in md
    assert pngs == []


def test_section_of_a_search_directory_summarises_the_search_and_fits_best_runs(tmp_path):
    import csv
    import json

    rows = _rows(sizes=3, token_counts=4)
    with open(tmp_path / "best_runs.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    result = {
        "objective": "final training loss (nats/token) after 3200 tokens", "sampler": "Optuna TPE (seed 0)",
        "pruner": "ASHA", "target_model": "mt5-xxl",
        "models": [{"model": "t5-tiny", "params": 3.3e6, "trials": {"complete": 2, "pruned": 1},
                    "best": {"params": {"lr": 3e-3, "global_batch": 8, "warmup_steps": 2, "precision": "fp32"},
                             "loss": 5.1}},
                   {"model": "t5-mini", "params": 1.4e7, "trials": {"fail": 3}, "best": None}],
        "trends": {"lr": {"coef": 0.5, "exponent": -0.3, "exponent_ci": None, "level": 0.95,
                          "target_params": 1.3e10, "target_value": 4e-4, "target_pi": None},
                   "global_batch": {"error": "a trend needs at least 2 model sizes, got 1"}},
    }
    (tmp_path / "search.json").write_text(json.dumps(result))
    md, html, _ = report_section(tmp_path, n_boot=10, laws=("compute",))
    assert "### Hyperparameter search on proxies" in md and "| t5-tiny | 3.3e+06 | 0.003 | 8 | 2 | fp32 |" in md
    assert "| t5-mini | 1.4e+07 | - |" in md and "0/0/3" in md
    assert "extrapolated to mt5-xxl (N = 1.3e+10): 0.0004" in md and "not fitted (a trend needs" in md
    assert "12 rows: the best trial of each proxy" in md and "<h3>Hyperparameter search on proxies</h3>" in html


def test_section_survives_runs_the_laws_cannot_describe(tmp_path):
    # Bigger models worse, as on CPU proxies trained for a few steps: wild bootstrap refits, no optimum.
    rows = [{"params": n, "tokens": d, "flops": 2.3 * n * d, "loss": 10 + 3 * np.log10(n / 3e6) - np.log10(d / 1e3)}
            for n in (3.3e6, 1.4e7, 3.8e7) for d in (8e2, 1.6e3, 2.4e3, 3.2e3)]
    md, _, pngs = report_section(rows, tmp_path, n_boot=20, laws=("chinchilla",))
    assert "### chinchilla law" in md and len(pngs) == 1 and pngs[0].stat().st_size > 0
