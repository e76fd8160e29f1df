"""The cost model's prediction for a trial, stored beside the measurement (pred_* columns)."""

from __future__ import annotations

from scalestudy.errors import ScalestudyError
from scalestudy.specs.hardware import make_cluster
from scalestudy.specs.model import get_model


def cluster_for(trial, device: str):
    """Local CPU trials: one node of `nproc` ranks of the measured `local-cpu` device; clusters: nodes x GPUs."""
    return make_cluster(device, trial.nodes, trial.nproc)


def predict(trial, device: str) -> dict:
    """pred_* columns and the full Estimate as JSON; `pred_error` says why when the cost model cannot answer."""
    try:
        from scalestudy.costmodel.estimate import estimate
    except ImportError as exc:
        return {"pred_error": f"cost model unavailable: {exc}"}
    try:
        est = estimate(get_model(trial.model), cluster_for(trial, device), trial.strategy, workload_of(trial))
    except ScalestudyError as exc:
        return {"pred_error": str(exc)}
    except Exception as exc:  # noqa: BLE001 - a cost-model bug must not stop a sweep; it is recorded instead
        return {"pred_error": f"cost model failed: {type(exc).__name__}: {exc}"}
    return {
        "pred_step_s": float(est.step_s),
        "pred_tokens_per_s": float(est.tokens_per_s),
        "pred_per_device_bytes": float(est.per_device_bytes),
        "pred_mfu": float(est.mfu),
        "pred_model_states_bytes": _model_states(est),
        "pred_fits": int(bool(est.fits)),
        "prediction_json": est.to_dict() if hasattr(est, "to_dict") else None,
    }


def workload_of(trial):
    return trial.workload


def param_count(trial) -> int | None:
    try:
        from scalestudy.costmodel.params import param_count as count
    except ImportError:
        return None
    return int(count(get_model(trial.model)))


def run_flops(trial) -> float | None:
    """Model FLOPs of the whole run: training_flops of one optimizer step x steps."""
    try:
        from scalestudy.costmodel.flops import training_flops
    except ImportError:
        return None
    return float(training_flops(get_model(trial.model), workload_of(trial), recompute="none")) * trial.steps


def _model_states(est) -> float | None:
    try:
        return float(est.to_dict()["memory"]["model_states_bytes"])
    except (AttributeError, KeyError, TypeError, ValueError):
        return None
