"""`validate`: predicted vs published, leave-one-source-out. Bounds asserted are the ones the model reaches."""

import yaml
from importlib import resources

from scalestudy.costmodel.constants import FITTED, stored
from scalestudy.costmodel.kernel_counts import block_kernels
from scalestudy.costmodel.published import BOUNDS, fit, fit_rows, load, summary, validation_rows
from scalestudy.costmodel.step import compute_times
from scalestudy.specs.hardware import get_device
from scalestudy.specs.presets import get_model


def test_published_rows_cover_the_required_kinds():
    data = load()
    thr = data["throughput"]
    assert len(thr) >= 40 and len({r["source"] for r in thr}) >= 6
    zero3_nodes = {r["nodes"] for r in thr if r.get("zero") == 3 or r["engine"] == "fsdp"}
    assert len(zero3_nodes) >= 3  # ZeRO-3 / FSDP at several node counts
    assert any(r["model"].get("family") == "t5" for r in thr)  # encoder-decoder runs
    assert any(r.get("tp", 1) > 1 and r.get("pp", 1) > 1 for r in thr)  # decoder runs with TP and PP


def _calibrated(rows):
    """Rows of the sources the bounds below were set on (held-out sources: tests/unit/test_published_sources.py)."""
    held = set(load().get("held_out_sources", []))
    return [r for r in rows if (r.source_key if hasattr(r, "source_key") else r["source"]) not in held]


def test_in_sample_error_with_the_stored_constants():
    s = summary(_calibrated(validation_rows()))
    # max: NeMo 22.08's GPT-3 175B rows (+35%, fit: false since the rows refute the software path the code shows)
    # reached: 0.098 / 0.349; 0.094 / 0.363 since the per-block overhead is kernels x a per-kernel constant (the max
    # row, NeMo 22.08 GPT-3 175B at 8 nodes, +34.9 -> +36.3%: its Megatron blocks launch fewer kernels than the old
    # constant charged them)
    assert s["throughput_mean_abs_error"] < 0.105 and s["throughput_max_abs_error"] < 0.375


def test_issue_flags_only_view_of_the_defaults():
    """validate's secondary line: every row with only issue 11's flags of its software set (published.ISSUE_FLAGS),
    every other option at its default (specs/strategy.software_defaults). HF T5 runs are priced as such by default:
    nanoT5's eager run +165% -> +17% when T5 on ddp resolved to eager kernels and its own loss (2026-12-02)."""
    from scalestudy.costmodel.published import ISSUE_FLAGS, issue_flags_only, predict

    view = issue_flags_only()
    # reached 0.130 (970 rows): 0.1254 with the constants the old coordinate descent left near its start, 0.130 with
    # the objective's minimum (published.fit since 2026-12-04) -- the fit moved, not the model; 0.119 on 514 rows
    assert view["rows"] == len(load()["throughput"]) and view["mean_abs_error"] < 0.135
    nanot5 = next(r for r in load()["throughput"] if r["id"] == "nanot5-base-a100-bf16-eager")
    stripped = {**nanot5, "software": {k: v for k, v in nanot5["software"].items() if k in ISSUE_FLAGS}}
    assert abs(predict(stripped) / nanot5["published"] - 1) < 0.2


def test_memory_rows_are_labelled_and_formula_checks_match():
    rows = [r for r in _calibrated(validation_rows()) if r.kind == "memory"]
    formula = [r for r in rows if r.check == "formula"]
    measured = [r for r in rows if r.check == "measured"]
    assert len(formula) >= 8 and all("formula check" in r.metric for r in formula)
    assert all(abs(r.error) < 0.005 for r in formula)  # ZeRO Table 1 is rounded to 3 significant digits
    assert measured and all(abs(r.error) < 0.08 for r in measured)  # reached: BLOOM -2.2% (nvidia-smi: + NCCL, cuBLAS)


def test_every_row_names_its_source():
    sources = load()["sources"]
    for r in validation_rows():
        assert r.source == sources[r.source_key]


def test_stored_constants_say_what_they_were_fitted_on_and_are_that_fit(leave_one_source_out_result):
    text = (resources.files("scalestudy.costmodel") / "calibration.yaml").read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    rows = fit_rows()
    assert set(data["fitted_on"]) == {r["source"] for r in rows} and data["fitted_rows"] == len(rows)
    assert not any(r["id"].startswith("narayanan-zero3") for r in rows)  # issue 11's acceptance rows: never fitted
    # calibration.yaml holds exactly what `validate --refit` prints (fit(fit_rows()), computed by validate's own
    # leave-one-source-out run), to the 4 digits stored. A change that moves the fit rows' predictions moves this
    # fit: run `scalestudy validate --refit` and store the values it prints.
    on_all = leave_one_source_out_result["refitted_on_all"]
    assert all(abs(on_all[k] / v - 1) < 5e-4 for k, v in stored().values().items()), (on_all, stored().values())


def test_the_fit_never_reads_the_stored_constants(monkeypatch, leave_one_source_out_result):
    """published.fit starts from a fixed grid (costmodel/fit_search.py), never from calibration.yaml's values, so no
    leave-one-source-out fold depends on them (until 2026-12-04 each fold started at the stored values, fitted WITH
    the source it predicts, and stopped on a kink near them)."""
    from scalestudy.costmodel import published

    folds = {r["source"]: r["refitted"] for r in leave_one_source_out_result["rows"]}
    cal = stored()  # share -10%, per-kernel time / 2: the same fold, to the last bit
    moved = cal.replace_values({"gemm.share": cal.gemm_share * 0.9, "kernel_overhead_s": cal.kernel_overhead_s / 2})
    monkeypatch.setattr(published, "stored", lambda: moved)
    monkeypatch.setattr(published, "_GRID_ERRORS", {})  # the grid's table priced again, under the moved values
    assert fit(fit_rows(exclude_source="nemo2022")).values() == folds["nemo2022"]
    # a fold keeps the measured half_dim (tests/unit/test_gemm_half_dim_measured.py): it is not in what a fold refits
    assert set(folds["mosaicml2023"]) == set(FITTED) == {"gemm.share", "kernel_overhead_s"}


def test_leave_one_source_out_headline(leave_one_source_out_result):
    res = leave_one_source_out_result  # validate's own refit, once per session (tests/conftest.py)
    assert res["sources"] >= 6 and res["row_count"] >= 40
    # each source is predicted by constants fitted without it
    for row in res["rows"]:
        assert row["source"] not in {r["source"] for r in fit_rows(exclude_source=row["source"])}
    errs = [abs(r["error"]) for r in _calibrated(res["rows"])]
    # reached: 0.110 / 0.336 (0.103 / 0.350 before 7b5358e pooled the NICs for DeepSpeed's gradient collectives,
    # comm.bus_time: the NeMo 22.08 5B fit rows, then labelled deepspeed zero 1, lost the 32-node drop per-GPU rails
    # gave them; relabelled to what they ran, megatron zero 1, 628dd52)
    assert sum(errs) / len(errs) < 0.115 and max(errs) < 0.37
    # Megatron-LM Table 1 at the micro-batches, DDP and schedule of the authors' scripts (published.yaml)
    # reached: 0.060 (was 0.104); 0.084 since its 3 ZeRO-3 rows are priced by the DeepSpeed they ran (before 0.5.5:
    # per-parameter list collectives in series, zero3_fetch per-param-sync, +9 / +24 / +20%) instead of a one-NIC
    # effective rate no code explained (+15 / +1 / -3%); the 6 Megatron rows are unchanged
    assert res["by_source"]["narayanan2021"]["mean_abs_error"] < 0.10
    # No constant is per device (FITTED), so no fold keeps a value fitted on the source it predicts: leaving out
    # MosaicML, the only fitted source with H100 rows, refits the shared GEMM share on A100 rows alone and its H100
    # rows are predicted from that share x the H100's measured matmul ceiling (device data)
    assert not any(dev in name for name in FITTED for dev in ("a100", "hopper", "h100", "v100"))
    mosaic = next(r for r in res["rows"] if r["id"] == "mpt-7b-8xh100")
    assert all(mosaic["refitted"][k] != v for k, v in stored().values().items() if v)
    # the per-kernel constant stays within its physical bounds in every fold (the free per-block constant it
    # replaced went from 0.43 ms to 1.05 ms without nemo2022). Between folds it moved 13.4-40 us (x 2.99) while
    # half_dim was fitted too (without MosaicML the minimum was at the other end of the share / half_dim valley,
    # 0.916 / 600, where fewer of the fixed seconds are per kernel); half_dim is measured since (gemmcurve)
    per_kernel = {r["refitted"]["kernel_overhead_s"] for r in res["rows"]}
    lo, hi = BOUNDS["kernel_overhead_s"]
    assert all(lo <= k <= hi for k in per_kernel) and max(per_kernel) / min(per_kernel) < 3.2


def test_block_kernels_follow_the_kernel_path_and_block_kind():
    """Kernels a block launches (costmodel/kernel_counts.py): eager PyTorch launches more than a fused path, eager
    attention more than one flash kernel, a decoder block with cross-attention more than an encoder block, backward
    more than forward; the fixed time they cost does not shrink with tensor parallelism or fewer tokens."""
    path = {k: block_kernels("llama", "swiglu", False, True, k, True)[1]
            for k in ("fused", "eager-fused-norm", "eager")}
    assert path["fused"] < path["eager-fused-norm"] < path["eager"]  # (fwd, bwd) compared as tuples
    assert block_kernels("gpt2", "gelu", False, False, "fused", True)[1] < \
        block_kernels("gpt2", "gelu", False, False, "fused", False)[1]
    enc, dec = block_kernels("t5", "gated-gelu", True, False, "fused", False)
    assert enc[0] < dec[0] and enc[1] < dec[1] and all(f < b for f, b in (enc, dec))
    model, dev, cal = get_model("t5-small"), get_device("a100-80gb"), stored()

    def fixed(tp, mb):  # seconds beyond the GEMMs and bytes: the difference to a zero per-kernel constant
        zero = cal.replace_values({**cal.values(), "kernel_overhead_s": 0.0})
        a, b = (compute_times(model, dev, "bf16", tp, mb, 512, 128, "none", True, False, c) for c in (cal, zero))
        return a.forward - b.forward, a.backward - b.backward

    assert all(abs(x - y) < 1e-12 for x, y in zip(fixed(1, 8), fixed(2, 32)))
    f, b = fixed(1, 8)
    e, d = block_kernels("t5", model.ffn, True, False, "fused", True)
    assert abs(f - cal.kernel_overhead_s * (model.num_layers * e[0] + model.num_decoder_layers * d[0])) < 1e-12
