"""Provenance of the published sources added for issue 11 (Megatron-LM H100 README, torchtitan A100 / H100): every
row is the configuration its source states, converted as its source string says, and held out of the fit."""

import math
import re
from dataclasses import fields

import pytest

from scalestudy.costmodel.constants import stored
from scalestudy.costmodel.estimate import estimate
from scalestudy.costmodel.published import _setup, load, memory_row, throughput_row
from scalestudy.errors import ScalestudyError
from scalestudy.specs.hardware import get_device
from scalestudy.specs.strategy import Strategy

HELD_OUT = ("megatron2024", "torchtitan2024", "torchtitan2024h100", "nemo2022jun", "bigscience2022prequel", "ibmfms2024",
            "internlm2023", "tinyllama2023")

# Megatron-LM README images/model_table.png (commit f2e5db40): model size label -> per-GPU model TFLOP/s, MFU
MEGATRON = {"1.7b": (408.8, 0.41), "7.1b": (465.9, 0.47), "16b": (489.1, 0.49), "32b": (459.6, 0.46),
            "70b": (419.7, 0.42), "119b": (420.5, 0.43), "177b": (432.8, 0.44), "314b": (474.4, 0.48),
            "462b": (459.9, 0.47)}
# torchtitan: tokens/s per GPU as the tables state (docs/performance.md @ 1ea476e9; benchmarks/llama3_h100_202412)
TORCHTITAN_TPS = {"tt-llama2-13b-a100-64": 2162, "tt-llama2-70b-a100-64": 353, "tt-llama3-70b-a100-64": 331,
                  "tt-llama3-8b-a100-64-sacop": 2973, "tt-llama2-13b-a100-64-sacop": 1904,
                  "tt-llama3-8b-h100-8-sacop": 5762, "tt-llama3-8b-h100-128-sacop": 5605,
                  "tt-llama3-8b-h100-8-sacop-compile": 6667, "tt-llama3-8b-h100-128-sacop-compile": 6514}
# torchtitan model sizes (billions of parameters, untied head) and measured peak reserved memory (GiB)
TORCHTITAN_SIZE = {"llama2-13b": 13.0, "llama2-70b": 69.0, "llama3-70b": 70.6, "llama3-8b": 8.0}
TORCHTITAN_GIB = {"tt-llama3-8b-h100-8-memory": 82.4, "tt-llama3-8b-h100-128-memory": 67.0}
# BigScience chronicles-prequel.md 'Rebalancing layers' (2022-02-28): (hidden, layers, tp, pp, mbs, heads) -> (GB, s/it)
PREQUEL = {(14336, 70, 8, 12, 2, 64): (40, 121.63), (14336, 70, 4, 12, 2, 64): (59, 102.03),
           (14336, 70, 4, 12, 2, 112): (59, 104.50), (14336, 70, 4, 12, 4, 64): (73, 102.27),
           (13312, 82, 8, 12, 4, 64): (52, 111.79), (13312, 82, 4, 12, 2, 64): (63, 104.45),
           (13312, 82, 4, 12, 4, 64): (74, 104.82), (12288, 100, 8, 6, 2, 64): (61, 139.72),
           (12288, 100, 8, 6, 4, 64): (72, 120.96), (12288, 106, 4, 12, 2, 64): (67, 116.54)}
# IBM fms-fsdp README at ea662fe: tokens/s per GPU on 128 A100 / 96 H100, Llama 2 34B and 70B, FSDP, full AC
FMS = {"fms-llama2-34b-a100-128": 700, "fms-llama2-34b-h100-96": 1550, "fms-llama2-70b-a100-128": 370,
       "fms-llama2-70b-h100-96": 800}
# NeMo launcher README at d4317ddd (2022-07-14), 7.1.2: nodes -> tokens per second
NEMO_JUL = {"5b": {1: 39543, 2: 79128, 5: 195047, 9: 344523, 10: 383500, 18: 670254, 20: 731791},
            "175b": {16: 20642, 32: 38025, 128: 141306}}

# InternLM doc/en/train_performance.md at c18bec93, 'Throughput Measurement', zero1=-1 rows: tp -> {GPUs: TGS}
INTERNLM_TGS = {1: {8: 4062, 16: 3842, 32: 3752, 64: 3690, 128: 3571, 256: 3209, 512: 2861, 1024: 2271},
                2: {8: 3822, 16: 3595, 32: 3475, 64: 3438, 128: 3308, 256: 3094, 512: 2992, 1024: 2785}}

def _rows(kind: str, source: str | None = None) -> list[dict]:
    return [r for r in load()[kind] if r["source"] in HELD_OUT and (source is None or r["source"] == source)]


def test_new_sources_name_version_hardware_and_conversion():
    sources = load()["sources"]
    for key in HELD_OUT:
        text = sources[key]
        assert re.search(r"commit [0-9a-f]{8}", text), key  # the version the numbers were read at
        assert re.search(r"H100|A100", text) and re.search(r"[Nn]ot stated", text), key  # assumptions said
        assert "fit: false" in text, key  # says why it is held out
    assert {r["source"] for r in load()["throughput"]} >= set(HELD_OUT)


def test_held_out_list_is_the_yaml_one():
    assert tuple(load()["held_out_sources"]) == HELD_OUT


def test_held_out_rows_are_never_fitted_and_their_devices_exist():
    for r in _rows("throughput"):
        assert r.get("fit", True) is False, r["id"]
    for r in _rows("throughput") + _rows("memory"):
        get_device(r["device"])
    assert not set(HELD_OUT) & set(stored().fitted_on)


def test_unmodelled_flags_are_really_not_strategy_options():
    """A flag a run used that Strategy cannot express is listed per row; once Strategy gains it, move it into the
    row's `software` (and reconsider fit: false)."""
    options = {f.name for f in fields(Strategy)}
    listed = {flag for r in _rows("throughput") for flag in r.get("unmodelled", [])}
    assert listed == {"overlap_p2p_comm"}
    assert not listed & options
    for r in _rows("throughput", "megatron2024"):  # the README's stated flags, now Strategy options
        sw = r["software"]
        assert (r["engine"], r["zero"], sw["overlap_grad_comm"], sw["overlap_param_gather"]) == \
            ("megatron", 1, True, True)
        assert sw.get("tp_comm_overlap", False) == (r["tp"] > 1)
        assert ("overlap_p2p_comm" in r.get("unmodelled", [])) == (sw.get("pp_schedule") == "interleaved")


def test_megatron_core_h100_out_of_sample():
    """Held-out Megatron-Core r0.8 H100 runs with the distributed optimizer, --overlap-param-gather and
    --tp-comm-overlap modelled (engine megatron): within 10% mean / 32% max (reached 8.9% / 29.0% with the H100
    GEMM ceiling from its measured MAMF rather than a constant fitted on H100 rows; the tp 8 pp 1 row -29%: its fp32
    gradient reduce-scatter has one micro-batch's backward to hide behind at micro-batch 1);
    the published 314B and 462B runs fit in 80 GB (6 + 12/d bytes per parameter)."""
    data = load()
    errs = [abs(throughput_row(r, data["sources"]).error) for r in _rows("throughput", "megatron2024")]
    assert sum(errs) / len(errs) < 0.10 and max(errs) < 0.32
    for r in _rows("throughput", "megatron2024"):
        assert estimate(*_setup(r)).fits, r["id"]


def test_megatron_rows_are_the_readme_table():
    rows = _rows("throughput", "megatron2024")
    assert len(rows) == len(MEGATRON)
    for r in rows:
        label = r["id"].removeprefix("megatron-h100-")
        tflops, mfu = MEGATRON[label]
        assert r["published"] == tflops and abs(tflops / 989 - mfu) < 0.006  # MFU column = TFLOP/s / 989
        assert r["metric"] == "model_tflops_per_device" and r["model"]["vocab"] == 131072 and r["model"]["seq"] == 4096
        model, cluster, strategy, workload = _setup(r)
        assert cluster.world_size // (strategy.tp * strategy.pp) == 48  # data-parallel size 48 throughout
        # untied embeddings reproduce the stated sizes: 12 L h^2 + 2 V h (+ positions, norms, biases)
        est = estimate(model, cluster, strategy, workload)
        assert est.params_total / 1e9 == pytest.approx(float(label[:-1]), rel=0.035)
        if strategy.pp > 1:  # interleaved, one layer per model chunk
            assert strategy.pp_schedule == "interleaved" and strategy.virtual_stages * strategy.pp == model.num_layers


def test_torchtitan_rows_are_the_tables_converted():
    for r in _rows("throughput", "torchtitan2024") + _rows("throughput", "torchtitan2024h100"):
        model, cluster, strategy, workload = _setup(r)
        assert r["published"] == TORCHTITAN_TPS[r["id"]] * cluster.world_size  # tokens/s per GPU x GPUs
        assert strategy.engine == "fsdp" and strategy.zero == 3 and strategy.tp == strategy.pp == 1
        est = estimate(model, cluster, strategy, workload)
        name = re.match(r"tt-(llama\d-\d+b)", r["id"]).group(1)
        assert est.params_total / 1e9 == pytest.approx(TORCHTITAN_SIZE[name], abs=0.05)
        assert r["recompute"] == "op" if "-sacop" in r["id"] else r["recompute"] in ("none", "full")
        # compile = false in every train_configs toml; norm_type fused_rmsnorm in llama2_13b / llama3_8b at 1ea476e9,
        # rmsnorm in the 70B tomls and at 9dec370a (H100); the H100 tables' torch.compile rows fuse each block
        fused_norm = r["source"] == "torchtitan2024" and "70b" not in r["id"]
        eager = "eager-fused-norm" if fused_norm else "eager"
        assert strategy.kernels == ("fused" if r["id"].endswith("-compile") else eager)
    for r in _rows("memory", "torchtitan2024h100"):
        assert r["measured"] and r["published_gb"] == pytest.approx(TORCHTITAN_GIB[r["id"]] * 2**30 / 1e9, abs=0.01)


def test_torchtitan_fsdp_out_of_sample():
    """Held-out FSDP runs: every A100 row within 11% now that op-level AC is modelled (recompute op; reached max
    8.0%, was 15.3% with op AC approximated as selective; 10.5% once the eager element-wise kernels of torchtitan
    without torch.compile are counted -- kernels: eager on the 70B rows, -7.7 -> -10.5%: what is left there is not
    element-wise); the H100 rows, at the hosts' 500 W limit, within 16% (reached +26/+29% with fused kernels, was
    +42/+46%; +11.8/+14.5% with kernels: eager, torchtitan's composed fp32 RMSNorm); their measured peak memory
    within 20%
    (reached -15/-17%, was +52/+66%; torchtitan reports the caching allocator's peak reserved bytes, the model
    counts tensors); the H100 scaling from 1 to 16 nodes (per-GPU throughput 5762 -> 5605, memory -15.4 GiB as
    model states shard 16x wider) within a few percent."""
    data = load()
    for r in _rows("throughput", "torchtitan2024"):
        assert abs(throughput_row(r, data["sources"]).error) < 0.11, r["id"]
    for r in _rows("memory", "torchtitan2024h100"):
        assert abs(memory_row(r, data["sources"]).error) < 0.20, r["id"]
    one, sixteen, one_c, sixteen_c = (throughput_row(r, data["sources"])
                                      for r in _rows("throughput", "torchtitan2024h100"))
    assert abs(one.error) < 0.16 and abs(sixteen.error) < 0.16
    # torch.compile (fused element-wise kernels): the published gain is +15.7 / +16.2%; eager vs fused predicts
    # +12.8 / +12.8% (reached +9.0 / +11.0% error on the compiled rows)
    assert abs(one_c.error) < 0.15 and abs(sixteen_c.error) < 0.15
    for eager, compiled in ((one, one_c), (sixteen, sixteen_c)):
        assert abs(compiled.predicted / eager.predicted - compiled.published / eager.published) < 0.05
    per_gpu = [row.predicted / n for row, n in ((one, 8), (sixteen, 128))]
    assert per_gpu[1] / per_gpu[0] == pytest.approx(5605 / 5762, abs=0.04)  # reached: 0.948 vs 0.973
    mem = []
    for r in _rows("memory", "torchtitan2024h100"):
        model, cluster, strategy, workload = _setup(r)
        mem.append(estimate(model, cluster, strategy, workload).memory.total / 2**30)
    assert mem[0] - mem[1] == pytest.approx(82.4 - 67.0, rel=0.15)  # reached: 14.1 GiB vs 15.4 GiB
    assert all(math.isfinite(m) for m in mem)


def test_nemo_july_tables_and_gpt_vocab_padding():
    rows = _rows("throughput", "nemo2022jun")
    assert len(rows) == sum(len(v) for v in NEMO_JUL.values())
    for r in rows:
        size = "175b" if "175b" in r["id"] else "5b"
        assert r["published"] == NEMO_JUL[size][r["nodes"]] and r["metric"] == "tokens_per_s"
        assert (r["tp"], r.get("pp", 1), r["global_batch"]) == ((8, 8, 1536) if size == "175b" else (2, 1, 1440))
    # NeMo pads the GPT-2 BPE (50,257) to a multiple of make_vocab_size_divisible_by (128) x tp
    gpt = [r for r in load()["throughput"] if r["source"] in ("nemo2022", "nemo2022jun") and "family" not in r["model"]]
    assert len(gpt) == 21
    for r in gpt:
        multiple = 128 * r.get("tp", 1)
        assert r["model"]["vocab"] == math.ceil(50257 / multiple) * multiple, r["id"]


def test_bigscience_prequel_rows_are_the_tables():
    thr, mem = _rows("throughput", "bigscience2022prequel"), _rows("memory", "bigscience2022prequel")
    assert len(thr) == len(mem) == len(PREQUEL)
    for r in thr + mem:
        m = r["model"]
        key = (m["d_model"], m["layers"], r["tp"], r["pp"], r["micro_batch"], m["heads"])
        gb, sec_it = PREQUEL[key]
        assert r["nodes"] * r["gpus_per_node"] == 384 and r["global_batch"] == 2048 and m["vocab"] == 250880
        if "published_gb" in r:
            assert r["measured"] and r["published_gb"] == gb
        else:
            assert r["published"] == round(2048 * 2048 / sec_it)  # global batch x seq / (s per iteration)
        # 'type:transformer|embedding': (layers + 2) slots over pp, the embedding taking one at each end
        stages = r["software"]["stage_layers"]
        slots = (m["layers"] + 2) // r["pp"]
        assert stages == [slots - 1] + [slots] * (r["pp"] - 2) + [slots - 1] and sum(stages) == m["layers"]


def test_ibm_fms_rows_are_the_readme_converted():
    rows = _rows("throughput", "ibmfms2024")
    assert {r["id"] for r in rows} == set(FMS)
    for r in rows:
        model, cluster, strategy, workload = _setup(r)
        assert r["published"] == FMS[r["id"]] * cluster.world_size and workload.global_batch == 2 * cluster.world_size
        assert (strategy.engine, strategy.zero, strategy.recompute, workload.seq_len) == ("fsdp", 3, "full", 4096)
        assert strategy.kernels == "eager"  # use_torch_compile False; fms's composed fp32 RMSNorm and rotary
        size = estimate(model, cluster, strategy, workload).params_total / 1e9
        assert size == pytest.approx(33.7 if "34b" in r["id"] else 69.0, abs=0.1)


def test_held_out_rows_state_their_precision_and_fp8_is_refused():
    """fp8 is not modelled: every held-out row says its precision (all bf16 here), and an fp8 row is refused in one
    line instead of being predicted as bf16."""
    for r in _rows("throughput") + [m for m in _rows("memory") if "engine" in m]:
        assert r["precision"] == "bf16", r["id"]
    fp8 = dict(_rows("throughput", "torchtitan2024h100")[0], precision="fp8")
    with pytest.raises(ScalestudyError, match="fp8 training is not modelled"):
        _setup(fp8)


def test_internlm_rows_are_the_doc_table():
    """InternLM-7B, ZeRO-1 over all data-parallel ranks (zero1=-1), 8-1024 A100 over 4x100Gb RoCE per node: every
    row is the doc's TGS x GPUs with the doc's micro-batching (16,384 tokens per GPU per step at every scale)."""
    rows = _rows("throughput", "internlm2023")
    assert len(rows) == sum(len(v) for v in INTERNLM_TGS.values())
    for r in rows:
        model, cluster, strategy, workload = _setup(r)
        gpus = cluster.world_size
        assert r["published"] == INTERNLM_TGS[strategy.tp][gpus] * gpus and r["metric"] == "tokens_per_s"
        assert (strategy.engine, strategy.zero, strategy.recompute, strategy.micro_batch) == \
            ("internlm", 1, "none", 2 * strategy.tp)
        assert strategy.overlap_grad_comm and not strategy.overlap_param_gather  # broadcast_params(overlap=False)
        assert workload.global_batch * workload.seq_len // gpus == 16384  # micro_num 4 x micro_bsz x 2048 / tp
        # '4 * 100Gb RoCE' per node = 6.25e9 B/s per GPU; one node needs no override
        assert (gpus == 8) == ("cluster" not in r)
        assert float(r.get("cluster", {}).get("inter_node_bytes_per_s", 6.25e9)) == 6.25e9
        assert estimate(model, cluster, strategy, workload).params_total / 1e9 == pytest.approx(7.32, abs=0.01)


def test_internlm_zero1_scaling_out_of_sample():
    """Held-out ZeRO-1 data-parallel scaling on a 4-NIC-per-node cluster (engine internlm: bf16 all-reduce buckets
    and one broadcast per owner over the node's NICs): one node within 10% (reached +2.2 / +5.6%), up to 128 GPUs
    within 15% (tp 1 +3%, tp 2 +7..+11%); beyond, the model is too fast by up to 23% (1024 GPUs, tp 1): the
    per-owner broadcast latency grows with dp but less than published. Bounds: reached values plus a margin."""
    data = load()
    errs = {r["id"]: throughput_row(r, data["sources"]).error for r in _rows("throughput", "internlm2023")}
    assert all(abs(e) < 0.10 for k, e in errs.items() if k.endswith("-8g"))
    assert all(abs(e) < 0.15 for k, e in errs.items() if int(k.rsplit("-", 1)[1][:-1]) <= 128)
    assert sum(map(abs, errs.values())) / len(errs) < 0.10 and max(map(abs, errs.values())) < 0.26  # 0.084 / 0.230


def test_tinyllama_row_is_the_readme_figure():
    """TinyLlama 1.1B (GQA 4 groups, d 2048): '24k tokens per second per A100-40G GPU' with FSDP, no recomputation,
    the pretrain script's 8 devices x micro-batch 8 x 2048; a small-hidden model predicted within 5% (reached -1.9%)."""
    (r,) = _rows("throughput", "tinyllama2023")
    model, cluster, strategy, workload = _setup(r)
    assert r["published"] == 24000 * cluster.world_size == 192000
    assert (strategy.engine, strategy.zero, strategy.recompute, strategy.micro_batch, workload.seq_len) == \
        ("fsdp", 3, "none", 8, 2048)
    assert estimate(model, cluster, strategy, workload).params_total / 1e9 == pytest.approx(1.10, abs=0.01)
    assert abs(throughput_row(r, load()["sources"]).error) < 0.05
