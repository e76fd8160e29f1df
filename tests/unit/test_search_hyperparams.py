"""Hyperparameter search logic with a cheap synthetic objective (no training): TPE finds the best lr per proxy,
ASHA prunes bad trials, the best-lr trend recovers the planted power law, the search resumes, bad specs error."""

import json
import math

import pytest

from scalestudy.errors import ScalestudyError
from scalestudy.search.hyperparams import Pruned, TrialFailed, parse_search, run_search
from scalestudy.scaling.trend import power_trend
from scalestudy.study.predict import trial_param_count


def _spec(trials=10, **search):
    raw = {
        "name": "synthetic", "model": ["t5-tiny", "t5-mini", "t5-micro"], "engine": "ddp", "nproc": 1,
        "micro_batch": 4, "seq_len": 32, "target_len": 8,
        "search": {"target_model": "mt5-xxl", "trials_per_model": trials, "budget_tokens": 6400,
                   "min_resource": 0.2, "reduction_factor": 3, "seed": 0,
                   "space": {"lr": {"low": 1e-4, "high": 1e-1, "log": True}, "global_batch": [4, 8],
                             "warmup_steps": [0, 2], "precision": ["fp32", "bf16"]}, **search},
    }
    return parse_search(raw)


def best_lr(n):  # planted optimum: lr* = 0.02 (N / 1e6)^-1 (steep, so that 3 proxies 12x apart resolve it)
    return 0.02 * (n / 1e6) ** -1.0


class Synthetic:
    """Loss curve L(t) = 2 + (1 + 2 log(lr/lr*)^2 + bf16 penalty) * (1 + 3 (1 - t)); reported per 20% of budget."""

    def __init__(self):
        self.calls, self.pruned = 0, 0

    def __call__(self, trial, report):
        self.calls += 1
        n = trial_param_count(trial)
        quality = 1 + 2 * math.log(trial.lr / best_lr(n)) ** 2 + (1.0 if trial.precision == "bf16" else 0.0)
        quality += 0.05 * (trial.global_batch == 4)
        for pct in range(20, 101, 20):
            loss = 2 + quality * (1 + 3 * (1 - pct / 100))
            if pct < 100 and report(pct, loss):
                self.pruned += 1
                raise Pruned(f"pruned at {pct}%")
        return loss


def test_search_finds_planted_optimum_prunes_and_extrapolates(tmp_path):
    runner = Synthetic()
    result = run_search(_spec(trials=10), tmp_path, runner=runner)
    assert runner.calls == 30 and runner.pruned >= 6  # ASHA stopped a good share of the trials
    for m in result["models"]:
        best = m["best"]
        assert best is not None and m["trials"]["pruned"] >= 2
        assert abs(math.log(best["params"]["lr"] / best_lr(m["params"]))) < 1.0, m  # 3 decades searched
        assert best["params"]["precision"] == "fp32"
    lr_trend = result["trends"]["lr"]
    assert lr_trend["exponent"] == pytest.approx(-1.0, abs=0.4)
    from scalestudy.costmodel.params import param_count
    from scalestudy.specs.presets import get_model

    target = float(param_count(get_model("mt5-xxl")))
    assert result["target_params"] == lr_trend["target_params"] == target
    # the extrapolation is the fitted line evaluated at the target, fitted on the proxies' best lr
    assert lr_trend["target_value"] == pytest.approx(lr_trend["coef"] * target ** lr_trend["exponent"], rel=1e-9)
    sizes = [m["params"] for m in result["models"]]
    bests = [m["best"]["params"]["lr"] for m in result["models"]]
    assert lr_trend["exponent"] == pytest.approx(power_trend(sizes, bests)["exponent"], rel=1e-12)
    truth = best_lr(target)
    assert abs(math.log(lr_trend["target_value"] / truth)) < 2.5  # 340x beyond the largest proxy
    saved = json.loads((tmp_path / "search.json").read_text())
    assert saved["models"] == result["models"] and (tmp_path / "search.sqlite").is_file()
    # Re-running resumes: the Optuna studies already hold their trials, nothing runs again.
    again = Synthetic()
    assert run_search(_spec(trials=10), tmp_path, runner=again)["models"] == result["models"]
    assert again.calls == 0


def test_failed_trials_are_recorded_not_fatal(tmp_path):
    def flaky(trial, report):
        if trial.lr > 1e-2:
            raise TrialFailed("FAILED: loss is NaN")
        return 3.0 + trial.lr

    spec = _spec(trials=4)
    spec.study = type(spec.study)(**{**spec.study.__dict__, "trials": spec.study.trials[:1]})  # one proxy
    result = run_search(spec, tmp_path, runner=flaky)
    assert len(result["models"]) == 1 and "error" in result["trends"]["lr"]
    for m in result["models"]:
        assert m["trials"].get("fail", 0) + m["trials"].get("complete", 0) == 4
        assert m["best"] is None or m["best"]["params"]["lr"] <= 1e-2


def test_power_trend_exact_and_interval():
    n = [1e6, 1e7, 1e8]
    tr = power_trend(n, [best_lr(x) for x in n], target=1e10)
    assert tr["exponent"] == pytest.approx(-1.0) and tr["target_value"] == pytest.approx(best_lr(1e10))
    noisy = power_trend(n, [best_lr(x) * f for x, f in zip(n, (1.2, 0.8, 1.1))], target=1e10)
    lo, hi = noisy["target_pi"]
    assert lo < best_lr(1e10) < hi and noisy["exponent_ci"][0] < -1.0 < noisy["exponent_ci"][1]
    assert tr["note"] is None and "did not resolve" in power_trend(n, [3e-3] * 3, target=1e10)["note"]
    with pytest.raises(ScalestudyError, match="2 distinct model sizes"):
        power_trend([1e6, 1e6], [1e-3, 2e-3])


@pytest.mark.parametrize("change, message", [
    ({"budget_tokens": None}, "budget_tokens"),
    ({"space": {"lr": {"low": 1e-2, "high": 1e-3}}}, "0 < low < high"),
    ({"space": {"momentum": [0.9]}}, "search.space takes"),
    ({"space": {"global_batch": [3]}}, "not divisible"),
    ({"space": {"warmup_steps": [100]}}, "warm-up 100 steps"),
    ({"target_model": "gpt-17"}, "unknown model"),
    ({"bogus": 1}, "unknown search key"),
])
def test_bad_search_specs(change, message):
    with pytest.raises(ScalestudyError, match=message):
        _spec(**change)


def test_each_trial_line_states_its_units():
    """`scalestudy search` printed 'lr 0.00206 batch 4 warm-up 0 fp32: final loss 4.565': a loss without its unit,
    a batch and a warm-up without theirs."""
    lines = []
    spec = _spec(trials=6)
    spec.study = type(spec.study)(**{**spec.study.__dict__, "trials": spec.study.trials[:1]})  # one proxy
    import tempfile

    with tempfile.TemporaryDirectory() as out:
        run_search(spec, out, runner=Synthetic(), log=lines.append)
    done = [x for x in lines if "final loss" in x]
    pruned = [x for x in lines if "pruned at" in x]
    assert done and pruned
    assert all(x.endswith(" nats/token") and " sequences, warm-up " in x and " steps, " in x for x in done), done
    assert all(" sequences: pruned at " in x for x in pruned), pruned
