"""TensorBoard gets the per-step throughput scalars, the resolved config as text, and hparams with the results."""

from __future__ import annotations

from scalestudy.engine import metrics
from scalestudy.specs.run import RunConfig


def _events(tb_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(str(tb_dir), size_guidance={"tensors": 0, "scalars": 0})
    ea.Reload()
    return ea


def test_tensorboard_holds_scalars_config_and_hparams(tmp_path):
    from tensorboard.plugins.hparams import plugin_data_pb2

    config = RunConfig().replace(engine="ddp", lr=3e-3, data=["a.txt"]).resolved().to_dict()
    logger = metrics.MetricsLogger(tmp_path, True, 2, 0, False, "ddp", config)
    for step in (1, 2):
        logger.log({"step": step, "loss": 9.0 - step, "lr": 1e-3, "step_s": 0.5, "tokens_per_s": 400.0,
                    "samples_per_s": 8.0, "model_tflops": 0.012, "mfu": 0.2, "peak_mem_bytes": 1e6, "rss_bytes": 1e8})
    logger.close()
    metrics.write_hparams(tmp_path, config, {"steps": 2, "final_loss": 7.0, "median_tokens_per_s": 400.0,
                                             "median_samples_per_s": 8.0, "median_model_tflops": 0.012,
                                             "median_mfu": None})
    ea = _events(tmp_path / "tb")
    scalars = ea.Tags()["scalars"]
    assert {"train/samples_per_s", "train/model_tflops", "train/tokens_per_s", "train/loss"} <= set(scalars)
    assert [e.value for e in ea.Scalars("train/samples_per_s")] == [8.0, 8.0]
    assert {"hparam/final_loss", "hparam/median_tokens_per_s"} <= set(scalars) and "hparam/median_mfu" not in scalars
    text = ea.Tensors("run/config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "engine: ddp" in text and "lr: 0.003" in text and "a.txt" in text
    start = [plugin_data_pb2.HParamsPluginData.FromString(v).session_start_info
             for v in ea.PluginTagToContent("hparams").values()
             if plugin_data_pb2.HParamsPluginData.FromString(v).HasField("session_start_info")][0]
    assert start.hparams["strategy/engine"].string_value == "ddp"
    assert start.hparams["optimizer/lr"].number_value == 0.003
    assert start.hparams["data/files"].string_value == '["a.txt"]'


def test_flat_hparams_keep_only_tensorboard_types():
    flat = metrics.flat_hparams({"a": {"b": 1, "c": None, "d": [1, 2]}, "e": True})
    assert flat == {"a/b": 1, "a/c": "none", "a/d": "[1, 2]", "e": True}


def test_unqueued_step_is_the_median_of_each_step_less_its_wait():
    # per step (step_s, queued_s): each less its wait 0.40 / 0.50 / 0.55 -> median 0.50; the median step less the
    # median wait would say 0.55 - 0.0 = 0.55. The warm-up step is left out; a run without waits has none.
    rows = [{"step_s": 9.0, "queued_s": 0.0}, {"step_s": 1.0, "queued_s": 0.6}, {"step_s": 0.5, "queued_s": 0.0},
            {"step_s": 0.55, "queued_s": 0.0}]
    summary = metrics.summarize(rows, warmup=1)
    assert summary["median_step_s"] == 0.55
    assert summary["median_unqueued_step_s"] == 0.5
    assert metrics.summarize([{"step_s": 0.5}], warmup=0)["median_unqueued_step_s"] is None


def test_a_wait_longer_than_its_step_takes_the_step_not_more():
    # another rank's wait window can outlast this rank's step clock: a step never counts below zero
    rows = [{"step_s": 0.5, "queued_s": 0.7}, {"step_s": 0.4, "queued_s": 0.9}, {"step_s": 1.0, "queued_s": 0.2}]
    assert metrics.summarize(rows, warmup=0)["median_unqueued_step_s"] == 0.0
