"""The report's scaling section: fits with CIs and extrapolation, jump flags, PNGs; reads a real study store."""

import numpy as np

from scalestudy.scaling import report_section
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
    section = report_section(rows, tmp_path / "plots", n_boot=30)
    md, html, pngs = section
    assert "### compute law" in md and "### chinchilla law" in md
    assert "| alpha |" in md and "95% CI (bootstrap, 30 refits)" in md
    assert "Extrapolation to C = " in md and "compute-optimal N = " in md
    assert "| accuracy |" in md and "forecast" in md  # the step is flagged
    assert "loss: follows a smooth trend" in md
    assert "<table>" in html and "<img" not in html  # the caller embeds the PNGs
    assert [p.name for p in pngs] == ["scaling_compute.png", "scaling_chinchilla.png"]
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in pngs) and section.plots == pngs


def test_section_from_a_study_store_reports_why_a_law_is_not_fitted(tmp_path):
    with Store(tmp_path) as store:
        for j, r in enumerate(_rows(sizes=1, token_counts=5, noise=0.0)):
            store.record_trial({"trial_id": f"t{j}", "status": "OK", "model": "t5-tiny", "params": int(r["params"]),
                                "tokens": r["tokens"], "flops": r["flops"], "loss": r["loss"], "lr": 1e-3})
        store.record_trial({"trial_id": "oom", "status": "OOM", "model": "t5-big", "params": 10**9})
    md, html, pngs = report_section(tmp_path, n_boot=20, target_params=1e8, target_tokens=1e11)
    assert "5 finished runs" in md
    assert "### compute law" in md and "Extrapolation to N = 1e+08 parameters" in md
    assert "_Not fitted: chinchilla law needs runs at 2 or more model sizes" in md
    assert pngs == []
