"""bf16/fp16 on a CPU is allowed by measurement: both machines of FACTS.md, injected; the real probe; the cache."""

from __future__ import annotations

import pytest

from scalestudy.errors import ScalestudyError
from scalestudy.engine import cpu_precision as cp

# FACTS.md: AVX2 EPYC (bf16 emulated ~1.3 GFLOP/s) and AMX Xeon (bf16 ~74 vs fp32 ~88 GFLOP/s per rank)
EPYC_AVX2 = ({"fp32": 80.0, "bf16": 1.3, "fp16": 1.3}, frozenset({"avx2", "fma"}))
XEON_AMX = ({"fp32": 88.0, "bf16": 74.0, "fp16": 70.0},
            frozenset({"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "avx512_fp16", "amx_fp16"}))


def test_flags_come_from_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Some Xeon\nflags\t\t: fpu avx2 avx512_bf16 amx_bf16\n")
    assert cp.cpu_flags(info) >= {"avx512_bf16", "amx_bf16"} and cp.cpu_model(info) == "Some Xeon"
    assert cp.native_flags("bf16", cp.cpu_flags(info)) == ["avx512_bf16", "amx_bf16"]
    assert cp.cpu_flags(tmp_path / "missing") == frozenset()


def test_emulated_bf16_is_refused_naming_the_measurement():
    v = cp.verdict("bf16", *EPYC_AVX2)
    assert not v.allowed and v.ratio == pytest.approx(1.3 / 80)
    line = v.refusal()
    assert "\n" not in line and line.endswith("use --precision fp32")
    assert "no avx512_bf16/amx_bf16; bf16 matmul 1.3 GFLOP/s = 0.016x fp32 (80 GFLOP/s)" in line


def test_native_bf16_is_allowed_and_unmeasured_is_not():
    v = cp.verdict("bf16", *XEON_AMX)
    assert v.allowed and v.refusal() is None and "avx512_bf16, amx_bf16 present" in v.evidence()
    assert "0.84x fp32" in v.evidence()
    assert not cp.verdict("bf16", {}, XEON_AMX[1]).allowed  # flags alone do not decide: no measurement, no bf16
    assert cp.verdict("fp32", {}, frozenset()).allowed
    assert [line.split(":")[1].split()[0] for line in cp.summary(*XEON_AMX)] == ["allowed", "allowed"]


@pytest.mark.parametrize("machine, allowed", [(EPYC_AVX2, False), (XEON_AMX, True)])
def test_the_run_check_follows_the_machine(monkeypatch, machine, allowed):
    measured, flags = machine
    monkeypatch.setattr(cp, "measured_matmul", lambda **_: measured)
    monkeypatch.setattr(cp, "cpu_flags", lambda *_: flags)
    if allowed:
        cp.check_precision("bf16", cuda=False)
    else:
        with pytest.raises(ScalestudyError, match=r"bf16 matmul 1\.3 GFLOP/s = 0\.016x fp32"):
            cp.check_precision("bf16", cuda=False)
    cp.check_precision("bf16", cuda=True)  # GPUs are not asked
    cp.check_precision("fp32", cuda=False)


def test_measurement_is_cached_per_cpu(tmp_path, monkeypatch):
    monkeypatch.setenv("SCALESTUDY_CACHE_DIR", str(tmp_path))
    calls = []
    monkeypatch.setattr(cp, "probe", lambda: calls.append(1) or {"fp32": 80.0, "bf16": 1.3})
    assert cp.measured_matmul() == {"fp32": 80.0, "bf16": 1.3}
    assert cp.measured_matmul() == {"fp32": 80.0, "bf16": 1.3} and calls == [1]
    assert (tmp_path / "cpu_precision.json").is_file()
    cp.measured_matmul(refresh=True)
    assert calls == [1, 1]


def test_the_real_probe_measures_every_precision():
    gflops = cp.probe()
    assert set(gflops) == {"fp32", "bf16", "fp16"} and all(v > 0 for v in gflops.values())
    assert gflops["fp32"] > 1.0  # any CPU multiplies fp32 faster than 1 GFLOP/s on one thread


def test_calibrate_says_what_train_will_allow(monkeypatch, capsys):
    from scalestudy.cli.plan import print_cpu_precision

    calls = []
    monkeypatch.setattr(cp, "measured_matmul", lambda **kw: calls.append(kw) or EPYC_AVX2[0])
    monkeypatch.setattr(cp, "cpu_flags", lambda *_: EPYC_AVX2[1])
    monkeypatch.setenv("COLUMNS", "200")  # one sentence a line (an 80-column terminal wraps them at spaces)
    print_cpu_precision()
    out = capsys.readouterr().out.splitlines()
    assert calls == [{"refresh": True}]  # calibrate re-measures
    assert out[0].startswith("bf16 on this CPU: refused for `scalestudy train` (no avx512_bf16/amx_bf16; bf16 matmul "
                             "1.3 GFLOP/s = 0.016x fp32")
    assert out[1].startswith("fp16 on this CPU: refused") and "cpu_precision.json" in out[2]
