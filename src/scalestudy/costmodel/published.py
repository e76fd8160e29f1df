"""Published measurements (published.yaml) and the predicted-vs-published comparison behind `scalestudy validate`.

Every row is predicted from its configuration alone through the public `estimate` API; nothing is tuned per row.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from importlib import resources

import yaml

from scalestudy.costmodel.estimate import estimate
from scalestudy.costmodel.memory import activation_parts, layer_activation_bytes, zero_model_states
from scalestudy.specs.hardware import ClusterSpec, get_device
from scalestudy.specs.model import ModelSpec
from scalestudy.specs.strategy import Strategy, Workload


@dataclass(frozen=True)
class Row:
    id: str
    kind: str  # "throughput" or "memory"
    metric: str
    unit: str
    published: float
    predicted: float
    source: str
    config: str
    source_key: str = ""

    @property
    def error(self) -> float:
        """Signed relative error (predicted - published) / published."""
        return (self.predicted - self.published) / self.published


@lru_cache(maxsize=1)
def load() -> dict:
    text = (resources.files("scalestudy.costmodel") / "published.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


def gpt_spec(row_id: str, m: dict) -> ModelSpec:
    """A GPT-style model (GELU FFN of width 4d, learned positions, tied head) from a published configuration."""
    d, heads = int(m["d_model"]), int(m["heads"])
    return ModelSpec(name=row_id, family="gpt2", vocab_size=int(m["vocab"]), d_model=d, num_layers=int(m["layers"]),
                     num_heads=heads, d_kv=d // heads, d_ff=4 * d, ffn="gelu", tie_word_embeddings=True,
                     max_position_embeddings=int(m["seq"]))


_UNITS = {"hardware_tflops_per_device": "TFLOP/s/device (hardware FLOPs)",
          "model_tflops_per_device": "TFLOP/s/device (model FLOPs)", "mfu": "MFU (model FLOPs / peak)"}


def throughput_row(r: dict, sources: dict, efficiency_scale: float = 1.0) -> Row:
    model = gpt_spec(r["id"], r["model"])
    device = get_device(r["device"])
    if efficiency_scale != 1.0:
        device = replace(device, matmul_efficiency=[[d, f * efficiency_scale] for d, f in device.matmul_efficiency])
    cluster = ClusterSpec(device=device, nodes=int(r["nodes"]), gpus_per_node=int(r["gpus_per_node"]),
                          name=r["device"])
    strategy = Strategy(engine=r["engine"], zero=int(r.get("zero", 0)), tp=int(r.get("tp", 1)), pp=int(r.get("pp", 1)),
                        micro_batch=int(r["micro_batch"]), recompute=r["recompute"], precision=r.get("precision", "bf16"),
                        **r.get("software", {}))
    workload = Workload(global_batch=int(r["global_batch"]), seq_len=int(r["model"]["seq"]))
    est = estimate(model, cluster, strategy, workload)
    predicted = getattr(est, r["metric"])
    config = (f"{est.params_total / 1e9:.1f}B {r['device']} x{cluster.world_size} tp{strategy.tp} pp{strategy.pp} "
              f"dp{est.layout.dp} mb{strategy.micro_batch} gb{workload.global_batch} {strategy.label.split()[0]} "
              f"rc-{strategy.recompute}")
    return Row(r["id"], "throughput", r["metric"], _UNITS[r["metric"]], float(r["published"]), float(predicted),
               sources[r["source"]], config, r["source"])


def memory_row(r: dict, sources: dict) -> Row:
    if "params" in r:
        w, g, o = zero_model_states(float(r["params"]), int(r["dp"]), int(r["zero"]), "bf16")
        predicted = (w + g + o) / 1e9
        config = f"{float(r['params']) / 1e9:g}B params, N_d={r['dp']}, ZeRO stage {r['zero']}"
        metric = "model states per device"
    else:
        gpt3 = gpt_spec("gpt3-175b", {"d_model": 12288, "layers": 96, "heads": 96, "vocab": 51200, "seq": 2048})
        _, dec = activation_parts(gpt3, 1, 2048, 0, "bf16", False)
        predicted = layer_activation_bytes(dec, int(r["tp"]), bool(r["sp"]), r["recompute"]) / 1e9
        config = f"GPT-3 175B layer, s=2048 b=1, tp{r['tp']}{' +sp' if r['sp'] else ''}, recompute {r['recompute']}"
        metric = "activations per layer"
    return Row(r["id"], "memory", metric, "GB (1e9 bytes)", float(r["published_gb"]), predicted,
               sources[r["source"]], config, r["source"])


def validation_rows() -> list[Row]:
    data = load()
    sources = data["sources"]
    return [throughput_row(r, sources) for r in data["throughput"]] + \
        [memory_row(r, sources) for r in data["memory"]]


def summary(rows: list[Row]) -> dict:
    tp = [abs(r.error) for r in rows if r.kind == "throughput"]
    mem = [abs(r.error) for r in rows if r.kind == "memory"]
    return {"throughput_rows": len(tp), "throughput_mean_abs_error": sum(tp) / len(tp),
            "throughput_max_abs_error": max(tp), "memory_rows": len(mem),
            "memory_max_abs_error": max(mem) if mem else 0.0}


def cross_source_check(fit_sources: tuple[str, ...], test_sources: tuple[str, ...]) -> dict:
    """Out-of-sample check of the calibration: refit one global scale of the GEMM efficiency tables on the rows
    of `fit_sources` only (golden-section search on mean |error|), then report the error on `test_sources`."""
    data = load()
    fit = [r for r in data["throughput"] if r["source"] in fit_sources]
    test = [r for r in data["throughput"] if r["source"] in test_sources]

    def mean_err(rows, scale):
        return sum(abs(throughput_row(r, data["sources"], scale).error) for r in rows) / len(rows)

    lo, hi = 0.6, 1.4
    g = (5 ** 0.5 - 1) / 2
    for _ in range(30):
        a, b = hi - g * (hi - lo), lo + g * (hi - lo)
        if mean_err(fit, a) < mean_err(fit, b):
            hi = b
        else:
            lo = a
    scale = (lo + hi) / 2
    errs = [abs(throughput_row(r, data["sources"], scale).error) for r in test]
    return {"fit_sources": list(fit_sources), "test_sources": list(test_sources), "scale": scale,
            "test_rows": len(errs), "test_mean_abs_error": sum(errs) / len(errs), "test_max_abs_error": max(errs)}
