"""Specs: presets, config.json round trip, hardware data files, clusters, strategies (pure Python)."""

import json

import pytest

from scalestudy.errors import ScalestudyError
from scalestudy.specs.hardware import device_names, get_device, load_cluster, make_cluster
from scalestudy.specs.hf_config import from_hf_config, to_hf_config
from scalestudy.specs.presets import PRESETS, get_model
from scalestudy.specs.strategy import Strategy, Workload, resolve_layout


@pytest.mark.parametrize("name", list(PRESETS))
def test_config_json_round_trip(tmp_path, name):
    spec = PRESETS[name]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(to_hf_config(spec)))
    back = from_hf_config(path)
    assert back.to_dict() | {"name": name, "source": ""} == spec.to_dict()
    assert back.source == str(path.resolve())  # where the model came from travels with it
    assert get_model(str(tmp_path)).d_model == spec.d_model  # a folder holding config.json works too


def test_unknown_and_broken_models(tmp_path):
    with pytest.raises(ScalestudyError, match="unknown model 'mt5-huge'"):
        get_model("mt5-huge")
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(ScalestudyError, match="not valid JSON"):
        from_hf_config(bad)
    bad.write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(ScalestudyError, match="unsupported model_type"):
        from_hf_config(bad)


def test_every_device_file_loads_with_numeric_fields():
    for name in device_names():
        d = get_device(name)
        assert all(isinstance(v, float) and v > 0 for v in d.peak_flops.values())
        assert d.memory_bytes > 0 and d.hbm_bytes_per_s > 0 and d.intra_node_bytes_per_s > 0
        effs = [f for _, f in d.matmul_efficiency]
        assert d.matmul_peak_fraction or effs  # the fitted curve x a measured ceiling, or a measured table
        assert 0 <= d.matmul_peak_fraction <= 1
        assert effs == sorted(effs) and all(0 < f <= 1 for f in effs)  # monotone fractions of peak
    assert "local-cpu" in device_names() and get_device("local-cpu").kind == "cpu"


def test_cluster_file_with_custom_bandwidth(tmp_path):
    p = tmp_path / "cluster.yaml"
    p.write_text("device: h100-80gb\nnodes: 2\ngpus_per_node: 4\ninter_node_bytes_per_s: 12.5e9\n")
    c = load_cluster(p)
    assert c.world_size == 8 and c.inter_bw == 12.5e9 and c.intra_bw == get_device("h100-80gb").intra_node_bytes_per_s
    p.write_text("device: h100-80gb\nbogus: 1\n")
    with pytest.raises(ScalestudyError, match="unknown field"):
        load_cluster(p)
    p.write_text("device: {name: x, memory_bytes: -5}\n")
    with pytest.raises(ScalestudyError):
        load_cluster(p)
    with pytest.raises(ScalestudyError, match="unknown device"):
        make_cluster("tpu-v9")


def test_strategy_and_layout_validation():
    with pytest.raises(ScalestudyError, match="supports zero stage"):
        Strategy(engine="ddp", zero=3)
    with pytest.raises(ScalestudyError, match="parameter offload needs"):
        Strategy(zero=2, offload_params="cpu")
    lay = resolve_layout(Strategy(tp=2, pp=2, micro_batch=2), 16, 64, gpus_per_node=8, num_heads=8, num_layers=8)
    assert (lay.dp, lay.grad_accum) == (4, 8)
    assert Workload(8, 512, 114).tokens_per_step == 8 * 626


# the datasheet fields a device YAML must give (flow style, left open for the keys a test adds)
# the smallest figures a device may have (memory: 1 MiB .. 1 PiB since fuzz round 4; rates >= 1 per second)
MINIMAL_DEVICE = ("{name: x, memory_bytes: 8.0e+10, peak_flops: {bf16: 1.0}, hbm_bytes_per_s: 1, pcie_bytes_per_s: 1, "
                  "intra_node_bytes_per_s: 1, intra_node_latency_s: 0, inter_node_bytes_per_s: 1, "
                  "inter_node_latency_s: 0, host_memory_bytes: 1.0e+12, cpu_adam_params_per_s: 1, ")


def test_a_device_must_say_how_fast_its_gemms_run(tmp_path):
    """An unknown GEMM family, or neither a family nor a measured table, used to mean 50% of peak unsaid: now a
    one-line error naming the known families; every shipped device resolves to a real curve or table."""
    from scalestudy.costmodel.efficiency import matmul_efficiency
    from scalestudy.specs.hardware import gemm_families

    assert set(gemm_families()) >= {"a100", "hopper"}
    for name in device_names():
        assert matmul_efficiency(get_device(name), 4096.0) != 0.5, name  # not the old silent fallback
    base = MINIMAL_DEVICE
    p = tmp_path / "cluster.yaml"
    for extra, match in (("matmul_efficiency: [], family: blackwell}", "'blackwell'"),
                         ("matmul_efficiency: []}", "no GEMM efficiency: name a family")):
        _cluster_refused(p, f"device: {base}{extra}\n", match)
    p.write_text(f"device: {base}matmul_efficiency: [[64, 0.3], [4096, 0.8]]}}\n")  # a measured table: fine
    assert load_cluster(p).device.matmul_efficiency == [[64, 0.3], [4096, 0.8]]


def test_a_users_device_yaml_without_the_mechanism_keys_takes_the_documented_defaults(tmp_path):
    """nvme_fraction_of_pcie / compute_slowdown_under_comm / process_memory_bytes (docs/estimate-schema.md 'Device
    YAML'): left out -> 0.25 / 0.189 / by kind, as every shipped GPU YAML states them with their sources; a bad value
    is a one-line error."""
    base = MINIMAL_DEVICE + "matmul_efficiency: [[64, 0.3]]"
    p = tmp_path / "cluster.yaml"
    p.write_text(f"device: {base}}}\n")
    dev = load_cluster(p).device
    assert (dev.nvme_fraction_of_pcie, dev.compute_slowdown_under_comm) == (0.25, 0.189)
    assert dev.process_memory_bytes == 1 << 30
    p.write_text(f"device: {base}, kind: cpu}}\n")
    assert load_cluster(p).device.process_memory_bytes == 350 << 20  # a CPU rank's imports, not a CUDA context
    for name in device_names():
        if get_device(name).kind == "gpu":
            assert get_device(name).compute_slowdown_under_comm == 0.189, name
    for extra, match in ((", nvme_fraction_of_pcie: 0}", "nvme_fraction_of_pcie must be in"),
                         (", compute_slowdown_under_comm: 11}", "compute_slowdown_under_comm must be in")):
        _cluster_refused(p, f"device: {base}{extra}\n", match)


def _cluster_refused(path, text: str, match: str) -> None:
    """A cluster YAML of `text` is refused with a one-line error matching `match`."""
    path.write_text(text)
    with pytest.raises(ScalestudyError, match=match) as info:
        load_cluster(path)
    assert "\n" not in str(info.value)


def test_power_limit_from_cluster_yaml_and_bad_power_fields(tmp_path):
    """A cluster's power_limit_w runs its devices at that board limit (one device object per limit); a device whose
    YAML has no clock-vs-power data refuses it; malformed power fields are one-line errors."""
    p = tmp_path / "cluster.yaml"
    p.write_text("device: h100-80gb\nnodes: 1\ngpus_per_node: 8\npower_limit_w: 500\n")
    c = load_cluster(p)
    assert c.device.power_limit_w == 500 and c.device is load_cluster(p).device
    assert c.to_dict()["device"] == "h100-80gb" and c.to_dict()["power_limit_w"] == 500
    for body, match in (("device: a100-80gb\npower_limit_w: 300\n", "does not say how its clock"),
                        ("device: h100-80gb\npower_limit_w: 0\n", "must be > 0"),
                        ("device: h100-80gb\npower_limit_w: 10\n", "below the lowest limit .* covers \\(400 W\\)"),
                        ("device: h100-80gb\npower_limit_w: lots\n", "must be a number"),
                        ("device: {name: x, memory_bytes: 1, peak_flops: {bf16: 1.0}, matmul_efficiency: [], "
                         "hbm_bytes_per_s: 1, pcie_bytes_per_s: 1, intra_node_bytes_per_s: 1, intra_node_latency_s: 0, "
                         "inter_node_bytes_per_s: 1, inter_node_latency_s: 0, host_memory_bytes: 1, "
                         "cpu_adam_params_per_s: 1, family: hopper}\n", "needs matmul_peak_fraction"),
                        ("device: {name: x, memory_bytes: 1, peak_flops: {bf16: 1.0}, matmul_efficiency: [], "
                         "hbm_bytes_per_s: 1, pcie_bytes_per_s: 1, intra_node_bytes_per_s: 1, intra_node_latency_s: 0, "
                         "inter_node_bytes_per_s: 1, inter_node_latency_s: 0, host_memory_bytes: 1, "
                         "cpu_adam_params_per_s: 1, matmul_peak_fraction: 0.8, power_limit_w: 500}\n",
                         "needs clock_mhz and power_clock_mhz"),
                        ("device: {name: x, memory_bytes: 1, peak_flops: {bf16: 1.0}, matmul_efficiency: [], "
                         "hbm_bytes_per_s: 1, pcie_bytes_per_s: 1, intra_node_bytes_per_s: 1, intra_node_latency_s: 0, "
                         "inter_node_bytes_per_s: 1, inter_node_latency_s: 0, host_memory_bytes: 1, "
                         "cpu_adam_params_per_s: 1, matmul_peak_fraction: 0.8, flash_attention_fraction: {fa2: 1.5}}\n",
                         "flash_attention_fraction values are fractions of peak"),
                        ("device: {name: x, memory_bytes: 1, peak_flops: {bf16: 1.0}, matmul_efficiency: [], "
                         "hbm_bytes_per_s: 1, pcie_bytes_per_s: 1, intra_node_bytes_per_s: 1, intra_node_latency_s: 0, "
                         "inter_node_bytes_per_s: 1, inter_node_latency_s: 0, host_memory_bytes: 1, "
                         "cpu_adam_params_per_s: 1, matmul_peak_fraction: 0.8, flash_attention_fraction: 0.35}\n",
                         "flash_attention_fraction must map kernels")):
        p.write_text(body)
        with pytest.raises(ScalestudyError, match=match):
            load_cluster(p)
