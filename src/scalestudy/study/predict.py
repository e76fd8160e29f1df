"""The cost model's prediction for a trial, stored beside the measurement (pred_* columns)."""

from __future__ import annotations

import sys

from scalestudy.costmodel.cpu_profile import measured_cluster
from scalestudy.costmodel.estimate import estimate
from scalestudy.costmodel.flops import training_flops
from scalestudy.costmodel.params import param_count
from scalestudy.errors import ScalestudyError
from scalestudy.wrapped import say
from scalestudy.specs.hardware import make_cluster
from scalestudy.specs.presets import get_model


def cluster_for(trial, device: str):
    """Local CPU trials: one node of `nproc` ranks of this machine's measured CPU profile (measured once, cached:
    costmodel/cpu_profile.py); clusters: nodes x GPUs."""
    return measured_cluster(make_cluster(device, trial.nodes, trial.nproc),
                            log=lambda msg: say(msg, sys.stderr))


def predict(trial, device: str) -> dict:
    """pred_* columns and the full Estimate as JSON; `pred_error` says why when the cost model cannot answer."""
    try:
        est = estimate(get_model(trial.model), cluster_for(trial, device), trial.strategy, workload_of(trial))
    except ScalestudyError as exc:
        return {"pred_error": str(exc)}
    except Exception as exc:  # noqa: BLE001 - a cost-model bug must not stop a sweep; it is recorded instead
        return {"pred_error": f"cost model failed: {type(exc).__name__}: {exc}"}
    record = est.to_dict()
    return {
        "pred_step_s": float(est.step_s),
        "pred_tokens_per_s": float(est.tokens_per_s),
        "pred_per_device_bytes": float(est.per_device_bytes),
        "pred_mfu": float(est.mfu),
        "pred_model_states_bytes": float(record["memory"]["model_states_bytes"]),
        "pred_fits": int(bool(est.fits)),
        "prediction_json": record,
    }


def workload_of(trial):
    return trial.workload


def trial_param_count(trial) -> int:
    """Parameters of the trial's model (the cost model's count, tied embeddings once)."""
    return int(param_count(get_model(trial.model)))


def run_flops(trial) -> float:
    """Model FLOPs of the whole run: training_flops of one optimizer step x steps."""
    return float(training_flops(get_model(trial.model), workload_of(trial), recompute="none")) * trial.steps

