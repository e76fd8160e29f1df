"""Plan = reality for published runs: every throughput row of costmodel/published.yaml, typed as a user would type it
(`scalestudy estimate` flags, the model as a Hugging Face config.json or a model YAML, interconnect overrides in a
cluster YAML), prints exactly the prediction `scalestudy validate` reports for that row, and `scalestudy plan` with
the same flags ranks that strategy with the same prediction (issue 11: other published runs are checked through
`estimate` and `plan` with the flags set to each run's software).

The command line and the config.json are built here from the row's published configuration, independently of
published.py's own row-building (the model YAML is read by the function published.py uses, specs.model.from_shape),
so a setting that only validate can express, or that the two read differently, fails this test.
"""

from __future__ import annotations

import json

import pytest
import yaml

from scalestudy.cli import main
from scalestudy.costmodel.memory import cublas_workspace_bytes, nccl_buffer_bytes
from scalestudy.costmodel.published import load, validation_rows
from scalestudy.specs.hardware import get_device
from scalestudy.specs.strategy import Strategy

# validate's metric -> where `estimate --json` prints the same figure
JSON_METRIC = {"hardware_tflops_per_device": ("throughput", "hardware_tflops_per_device"),
               "model_tflops_per_device": ("throughput", "model_tflops_per_device"),
               "mfu": ("mfu",),
               "tokens_per_s": ("throughput", "tokens_per_s"),
               "source_tokens_per_s": ("throughput", "source_tokens_per_s")}

# the keys of a published row's `model:` that model_config writes into a config.json (or --seq-len / --target-len)
MODEL_KEYS = {"family", "d_model", "layers", "heads", "vocab", "seq", "target", "d_ff", "kv_heads", "ffn", "tied",
              "d_kv"}


def model_config(m: dict) -> dict:
    """The Hugging Face config.json of a published model description (the architecture a paper states)."""
    assert set(m) <= MODEL_KEYS, f"model key(s) {set(m) - MODEL_KEYS}: say here which config.json field states it"
    family = m.get("family", "gpt")
    if family == "t5":
        return {"model_type": "t5", "vocab_size": m["vocab"], "d_model": m["d_model"], "d_kv": m["d_kv"],
                "d_ff": m["d_ff"], "num_layers": m["layers"], "num_decoder_layers": m["layers"],
                "num_heads": m["heads"], "feed_forward_proj": m["ffn"], "tie_word_embeddings": m["tied"]}
    if family == "llama" and m.get("ffn") == "gelu":  # Falcon (HF FalconConfig)
        return {"model_type": "falcon", "vocab_size": m["vocab"], "hidden_size": m["d_model"],
                "num_hidden_layers": m["layers"], "num_attention_heads": m["heads"], "new_decoder_architecture": True,
                "num_kv_heads": m.get("kv_heads") or m["heads"], "ffn_hidden_size": m["d_ff"],
                "max_position_embeddings": m["seq"], "tie_word_embeddings": m.get("tied", False)}
    if family == "llama":  # Llama layout, or Nemotron's squared-ReLU FFN (HF NemotronConfig)
        nemotron = m.get("ffn") == "relu2"
        cfg = {"model_type": "nemotron" if nemotron else "llama", "vocab_size": m["vocab"],
               "hidden_size": m["d_model"], "intermediate_size": m["d_ff"], "num_hidden_layers": m["layers"],
               "num_attention_heads": m["heads"], "num_key_value_heads": m.get("kv_heads") or m["heads"],
               "max_position_embeddings": m["seq"], "tie_word_embeddings": m.get("tied", False)}
        if nemotron:
            cfg["hidden_act"] = "relu2"
        return cfg
    return {"model_type": "gpt2", "vocab_size": m["vocab"], "n_embd": m["d_model"], "n_layer": m["layers"],
            "n_head": m["heads"], "n_positions": m["seq"], "activation_function": m.get("ffn", "gelu"),
            "tie_word_embeddings": m.get("tied", True)}


def option_flags(name: str, value) -> list[str]:
    """One strategy option as its estimate flag (same name, dashes)."""
    flag = "--" + name.replace("_", "-")
    if isinstance(value, bool):
        return [flag if value else "--no-" + name.replace("_", "-")]
    if isinstance(value, (list, tuple)):
        return [flag, ",".join(map(str, value))]
    return [flag, str(value)]


def estimate_argv(r: dict, folder) -> list[str]:
    """The `scalestudy estimate --json` command line of one published row."""
    m = r["model"]
    config = folder / f"{r['id']}.json"
    config.write_text(json.dumps(model_config(m)))
    if r.get("cluster"):  # interconnect measured by the source: a cluster YAML (bytes/s per device)
        cluster = folder / f"{r['id']}.yaml"
        cluster.write_text("\n".join([f"device: {r['device']}", f"nodes: {r['nodes']}",
                                      f"gpus_per_node: {r['gpus_per_node']}"]
                                     + [f"{k}: {v}" for k, v in r["cluster"].items()]) + "\n")
        where = ["--cluster", str(cluster)]
    else:
        where = ["--gpu", r["device"], "--nodes", str(r["nodes"]), "--gpus-per-node", str(r["gpus_per_node"])]
    argv = ["estimate", "--model", str(config), *where, "--engine", r["engine"], "--zero", str(r.get("zero", 0)),
            "--tp", str(r.get("tp", 1)), "--pp", str(r.get("pp", 1)), "--micro-batch", str(r["micro_batch"]),
            "--global-batch", str(r["global_batch"]), "--seq-len", str(m["seq"]), "--recompute", r["recompute"],
            "--precision", r.get("precision", "bf16")]
    if r.get("cp", 1) > 1:  # context parallelism: a degree of the layout, as tp and pp
        argv += ["--cp", str(r["cp"])]
    if m.get("target"):
        argv += ["--target-len", str(m["target"])]
    software = dict(r.get("software", {}))
    # choices plan searches unless told: stated, as a paper states them
    software.setdefault("offload_optimizer", "none")
    software.setdefault("offload_params", "none")
    for knob in ("recompute_early_stop", "kernels", "cross_entropy", "optimizer_loop", "lm_head",
                 "grad_buckets"):  # space.TRAIN_KNOBS:
        software.setdefault(knob, "engine")  # plan's own default is what `train` runs
    if r.get("pp", 1) > 1:
        software.setdefault("pp_schedule", "1f1b")
    for name, value in software.items():
        argv += option_flags(name, value)
    return argv + ["--json"]


def figure(out: dict, metric: str) -> float:
    """validate's metric as `estimate --json` prints it."""
    value = out
    for key in JSON_METRIC[metric]:
        value = value[key]
    return value


def cli_predicted(rows: list[dict]) -> dict[str, float]:
    """validate's prediction of each throughput row as the CLI prints it: a row whose source's table counted another
    batch than the run's (`counted_batch`, published._metric) is scaled back to the run's own global batch."""
    predicted = {row.id: row.predicted for row in validation_rows() if row.kind == "throughput"}
    return {r["id"]: predicted[r["id"]] * r["global_batch"] / r.get("counted_batch", r["global_batch"]) for r in rows}


def test_every_published_row_is_an_estimate_command_line(capsys, tmp_path):
    """Each row twice: the model as a config.json, and as a model YAML of the row's own shape keys."""
    data = load()
    predicted = cli_predicted(data["throughput"])
    failures = []
    for r in data["throughput"]:
        shape = tmp_path / f"{r['id']}-shape.yaml"
        shape.write_text(yaml.safe_dump({k: v for k, v in r["model"].items() if k != "target"}))
        as_json = estimate_argv(r, tmp_path)
        for argv in (as_json, [as_json[0], "--model", str(shape), *as_json[3:]]):
            with pytest.raises(SystemExit) as exc:
                main(argv)
            out = capsys.readouterr()
            if exc.value.code:
                failures.append(f"{r['id']} ({argv[2]}): exit {exc.value.code}: {out.err.strip()}")
                continue
            try:
                value = figure(json.loads(out.out), r["metric"])
            except KeyError:
                failures.append(f"{r['id']}: estimate --json prints no {r['metric']}")
                continue
            if abs(value - predicted[r["id"]]) > 1e-9 * abs(predicted[r["id"]]):
                failures.append(f"{r['id']} ({argv[2]}): estimate {value!r} vs validate {predicted[r['id']]!r} "
                                f"({r['metric']})")
    assert not failures, f"{len(failures)} of {len(data['throughput'])} rows:\n" + "\n".join(failures)


@pytest.mark.parametrize("shape,needle", [
    ({"d_model": 64, "layers": 2, "heads": 4, "vocab": 512, "seq": 128, "dff": 256}, "unknown model key(s) dff"),
    ({"d_model": 64, "layers": 2, "heads": 4, "vocab": 512, "seq": 128, "d_ff": 256}, "llama / t5 keys"),
    ({"family": "llama", "d_model": 64, "layers": 2, "heads": 4, "vocab": 512}, "needs d_ff"),
    ({"family": "llama", "d_model": 64, "layers": 0, "heads": 4, "vocab": 512, "d_ff": 9}, "layers must be a whole"),
    ({"family": "llama", "d_model": 64, "layers": 2, "heads": 4, "vocab": 512, "d_ff": 9, "ffn": "geglu"}, "swiglu"),
    ({"family": "t5", "d_model": 64, "layers": 2, "heads": 4, "vocab": 512, "d_kv": 16, "d_ff": 9, "ffn": "x"},
     "feed_forward_proj"),
    ({"family": "mamba", "d_model": 64}, "family must be gpt, llama or t5"),
    ({"d_model": 64, "layers": 2, "heads": 4, "vocab": 512, "seq": 128, "tied": "no"}, "tied must be true or false"),
    ([1, 2], "needs a mapping"),
])
def test_bad_model_yaml_is_one_line(capsys, tmp_path, shape, needle):
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(shape))
    _estimate_refuses(capsys, path, needle)


def _estimate_refuses(capsys, path, needle: str) -> None:
    """`estimate --model path` exits 2 with one error line holding `needle`."""
    with pytest.raises(SystemExit) as exc:
        main(["estimate", "--model", str(path)])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and needle in err and len(err.strip().splitlines()) == 1, err


def _estimate(r: dict, folder, capsys) -> dict:
    with pytest.raises(SystemExit):
        main(estimate_argv(r, folder))
    return json.loads(capsys.readouterr().out)


def test_plan_holds_a_published_runs_software_fixed(capsys, tmp_path):
    """`plan` with the same flags (each a single value) ranks exactly the published strategy and predicts what
    validate does, for every row (the cost-model-only engines megatron and internlm too: plan searches them when
    --engine names them)."""
    rows = load()["throughput"]
    predicted = cli_predicted(rows)
    failures = []
    for r in rows:
        argv = ["plan", *estimate_argv(r, tmp_path)[1:], "--top", "1"]
        with pytest.raises(SystemExit) as exc:
            main(argv)
        out = capsys.readouterr()
        best = json.loads(out.out)["candidates"][:1] if not exc.value.code else []
        if not best:
            if "no strategy fits" in out.err and not _estimate(r, tmp_path, capsys)["fits"]:
                continue  # a run the model says does not fit (validate still predicts its speed): plan rules it out
            failures.append(f"{r['id']}: plan found no strategy (exit {exc.value.code}: {out.err.strip()})")
        elif abs(figure(best[0]["estimate"], r["metric"]) - predicted[r["id"]]) > 1e-9 * predicted[r["id"]]:
            failures.append(f"{r['id']}: plan picks {best[0]['label']}: {figure(best[0]['estimate'], r['metric'])} "
                            f"vs validate {predicted[r['id']]}")
    assert not failures, f"{len(failures)} of {len(rows)} rows:\n" + "\n".join(failures)


def test_estimate_json_states_the_unit_of_every_figure(capsys, tmp_path):
    """A checker reads the right number: each throughput figure, MFU/HFU and the step time say what they count
    (model vs hardware FLOPs, encoder-only vs all tokens); a Nemotron config.json (squared ReLU) is a model too."""
    config = tmp_path / "nemotron.json"
    config.write_text(json.dumps({"model_type": "nemotron", "vocab_size": 256000, "hidden_size": 6144,
                                  "intermediate_size": 24576, "num_hidden_layers": 32, "num_attention_heads": 48,
                                  "num_key_value_heads": 8, "max_position_embeddings": 4096}))
    with pytest.raises(SystemExit):
        main(["estimate", "--model", str(config), "--gpu", "h100-80gb", "--nodes", "2", "--engine", "megatron",
              "--tp", "2", "--pp", "2", "--seq-len", "4096", "--global-batch", "64", "--json"])
    d = json.loads(capsys.readouterr().out)
    figures = [f"throughput.{k}" for k in d["throughput"]] + ["mfu", "hfu", "time.step_s", "memory.device_total_bytes"]
    assert all(d["units"][k] for k in figures)
    assert "model FLOP" in d["units"]["throughput.model_tflops_per_device"]
    assert "recomputation counted" in d["units"]["throughput.hardware_tflops_per_device"]
    assert d["strategy"]["engine"] == "megatron" and 15e9 < d["params_total"] < 16.5e9  # Nemotron-4 15B
    # nvidia-smi's figure: the tensor total + NCCL's buffers of this rank's tp/dp/pipeline groups + cuBLAS workspace
    mem, h100 = d["memory"], get_device("h100-80gb")
    buffers = (nccl_buffer_bytes(Strategy(engine="megatron", tp=2, pp=2), d["layout"]["dp"], 8, h100)
               + cublas_workspace_bytes(h100))
    assert buffers > 0 and mem["device_total_bytes"] == pytest.approx(mem["per_device_bytes"] + buffers)
    with pytest.raises(SystemExit):  # plan states them once for all its candidates
        main(["plan", "--model", str(config), "--gpu", "h100-80gb", "--nodes", "2", "--engine", "megatron", "--tp", "2",
              "--seq-len", "4096", "--global-batch", "64", "--top", "2", "--json"])
    plan = json.loads(capsys.readouterr().out)
    assert plan["units"] == d["units"] and not any("units" in c["estimate"] for c in plan["candidates"])
    assert all(c["estimate"]["memory"]["device_total_bytes"] > c["estimate"]["memory"]["per_device_bytes"]
               for c in plan["candidates"])
    config.write_text(json.dumps({**json.loads(config.read_text()), "hidden_act": "silu"}))
    with pytest.raises(SystemExit) as exc:
        main(["estimate", "--model", str(config)])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "hidden_act 'silu'" in err and len(err.strip().splitlines()) == 1


def test_falcon_config_is_a_cost_model_only_llama_block(capsys, tmp_path):
    """Falcon-7B's config.json (multi-query, GELU 4d): estimated as a llama-family block with one K/V head and a
    non-gated GELU, the same model as the shape YAML `family: llama, ffn: gelu, kv_heads: 1`; train refuses it."""
    from scalestudy.specs.model import hf_attn_implementation
    from scalestudy.specs.presets import get_model
    from scalestudy.errors import ScalestudyError

    config = tmp_path / "falcon.json"
    config.write_text(json.dumps({"model_type": "falcon", "vocab_size": 65024, "hidden_size": 4544,
                                  "num_hidden_layers": 32, "num_attention_heads": 71, "parallel_attn": True}))
    shape = tmp_path / "falcon.yaml"
    shape.write_text(yaml.safe_dump({"family": "llama", "d_model": 4544, "layers": 32, "heads": 71, "kv_heads": 1,
                                     "d_ff": 18176, "ffn": "gelu", "vocab": 65024, "seq": 2048, "tied": True}))
    out = []
    for model in (config, shape):
        with pytest.raises(SystemExit):
            main(["estimate", "--model", str(model), "--gpu", "a100-40gb", "--seq-len", "2048", "--zero", "3",
                  "--json"])
        out.append(json.loads(capsys.readouterr().out))
    assert out[0]["params_total"] == out[1]["params_total"] and 6.9e9 < out[0]["params_total"] < 6.95e9
    assert out[0]["time"]["step_s"] == out[1]["time"]["step_s"]
    with pytest.raises(ScalestudyError, match="cost model only"):
        hf_attn_implementation(get_model(str(config)), "eager")


# Published dense architectures as their Hugging Face config.json states them (the keys Transformers'
# configuration_*.py reads) and the parameter count their model card / paper gives.
PUBLISHED_CONFIGS = {
    "opt-175b": ({"model_type": "opt", "hidden_size": 12288, "num_hidden_layers": 96, "num_attention_heads": 96,
                  "ffn_dim": 49152, "vocab_size": 50272, "max_position_embeddings": 2048,
                  "word_embed_proj_dim": 12288, "do_layer_norm_before": True}, 175e9),  # Zhang et al. 2022, Table 1
    "bloom-176b": ({"model_type": "bloom", "n_embed": 14336, "n_layer": 70, "n_head": 112, "vocab_size": 250880},
                   176_247_271_424),  # bigscience/bloom model card
    "mpt-7b": ({"model_type": "mpt", "d_model": 4096, "n_layers": 32, "n_heads": 32, "expansion_ratio": 4,
                "max_seq_len": 2048, "vocab_size": 50432, "no_bias": True, "learned_pos_emb": True,
                "attn_config": {"alibi": True, "attn_type": "multihead_attention"}}, 6.7e9),  # mosaicml/mpt-7b card
    "mpt-30b": ({"model_type": "mpt", "d_model": 7168, "n_layers": 48, "n_heads": 64, "expansion_ratio": 4,
                 "max_seq_len": 8192, "vocab_size": 50432, "no_bias": True,
                 "attn_config": {"alibi": True}}, 30e9),  # mosaicml/mpt-30b card
    "gpt-neox-20b": ({"model_type": "gpt_neox", "hidden_size": 6144, "num_hidden_layers": 44,
                      "num_attention_heads": 64, "intermediate_size": 24576, "vocab_size": 50432, "rotary_pct": 0.25,
                      "use_parallel_residual": True, "max_position_embeddings": 2048, "tie_word_embeddings": False},
                     20_554_567_680),  # Black et al. 2022 / EleutherAI/gpt-neox-20b card
    "gpt-j-6b": ({"model_type": "gptj", "n_embd": 4096, "n_layer": 28, "n_head": 16, "rotary_dim": 64,
                  "vocab_size": 50400, "n_positions": 2048, "activation_function": "gelu_new"},
                 6_053_381_344),  # EleutherAI/gpt-j-6b card
    "gemma-7b": ({"model_type": "gemma", "hidden_size": 3072, "intermediate_size": 24576, "num_hidden_layers": 28,
                  "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256, "vocab_size": 256000,
                  "hidden_act": "gelu", "max_position_embeddings": 8192}, 8_538_074_112),  # Gemma report Table 2
    "gemma-2-9b": ({"model_type": "gemma2", "hidden_size": 3584, "intermediate_size": 14336, "num_hidden_layers": 42,
                    "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256, "vocab_size": 256000,
                    "hidden_activation": "gelu_pytorch_tanh", "sliding_window": 4096}, 9_241_705_984),  # Gemma 2 rep.
    "qwen2-7b": ({"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
                  "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
                  "tie_word_embeddings": False, "sliding_window": 131072}, 7.61e9),  # Qwen/Qwen2-7B card
    "mistral-7b": ({"model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                    "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000,
                    "sliding_window": 4096}, 7_241_732_096),  # mistralai/Mistral-7B-v0.1 (HF count)
    "qwen3-8b": ({"model_type": "qwen3", "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
                  "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
                  "hidden_act": "silu", "attention_bias": False, "tie_word_embeddings": False}, 8.2e9),  # Qwen/Qwen3-8B
    "qwen3-0.6b": ({"model_type": "qwen3", "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
                    "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
                    "tie_word_embeddings": True}, 0.6e9),  # Qwen/Qwen3-0.6B card: heads 16 x 128 wider than 1024
    "phi-3-mini": ({"model_type": "phi3", "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 32,
                    "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32064,
                    "hidden_act": "silu", "tie_word_embeddings": False}, 3.8e9),  # microsoft/Phi-3-mini-4k-instruct
    "olmo-2-7b": ({"model_type": "olmo2", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                   "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 100352,
                   "tie_word_embeddings": False}, 7.3e9),  # allenai/OLMo-2-1124-7B
    "bart-large": ({"model_type": "bart", "d_model": 1024, "encoder_layers": 12, "decoder_layers": 12,
                    "encoder_attention_heads": 16, "decoder_attention_heads": 16, "encoder_ffn_dim": 4096,
                    "decoder_ffn_dim": 4096, "activation_function": "gelu", "vocab_size": 50265,
                    "max_position_embeddings": 1024}, 406e6),  # facebook/bart-large (Lewis et al. 2020)
    "mbart-large-50": ({"model_type": "mbart", "d_model": 1024, "encoder_layers": 12, "decoder_layers": 12,
                        "encoder_attention_heads": 16, "decoder_attention_heads": 16, "encoder_ffn_dim": 4096,
                        "decoder_ffn_dim": 4096, "activation_function": "gelu", "vocab_size": 250054,
                        "max_position_embeddings": 1024}, 611e6),  # facebook/mbart-large-50 (Tang et al. 2020)
}


def test_published_hf_configs_count_their_real_parameters(capsys, tmp_path):
    """Each published config.json gives its model card's parameter count within 1%, estimate prints that count,
    train refuses the cost-model-only types in one line, umT5 is mT5's block, and a MoE config is refused."""
    from scalestudy.costmodel.params import param_count
    from scalestudy.errors import ScalestudyError
    from scalestudy.specs.model import COST_MODEL_TYPES, hf_attn_implementation
    from scalestudy.specs.presets import PRESETS, get_model

    for name, (cfg, published) in PUBLISHED_CONFIGS.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(cfg))
        spec = get_model(str(path))
        assert abs(param_count(spec) / published - 1) < 0.01, (name, param_count(spec))
        with pytest.raises(SystemExit):
            main(["estimate", "--model", str(path), "--gpu", "a100-80gb", "--nodes", "8", "--zero", "3", "--json"])
        assert json.loads(capsys.readouterr().out)["params_total"] == param_count(spec)
        if cfg["model_type"] in COST_MODEL_TYPES:
            with pytest.raises(ScalestudyError, match="cost model only"):
                hf_attn_implementation(spec, "eager")
    umt5 = tmp_path / "umt5-xxl.json"
    umt5.write_text(json.dumps({"model_type": "umt5", "d_model": 4096, "d_kv": 64, "d_ff": 10240, "num_layers": 24,
                                "num_heads": 64, "feed_forward_proj": "gated-gelu", "vocab_size": 256384,
                                "tie_word_embeddings": False}))
    assert param_count(get_model(str(umt5))) == param_count(PRESETS["mt5-xxl"].with_vocab(256384))
    mixtral = tmp_path / "mixtral.json"
    mixtral.write_text(json.dumps({**PUBLISHED_CONFIGS["mistral-7b"][0], "model_type": "mixtral",
                                   "num_local_experts": 8}))
    with pytest.raises(SystemExit) as exc:
        main(["estimate", "--model", str(mixtral)])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "mixture of experts" in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("cfg, needle", [
    ({"model_type": "bart", "d_model": 1024, "encoder_layers": 12, "decoder_layers": 12,
      "encoder_attention_heads": 16, "decoder_attention_heads": 8, "encoder_ffn_dim": 4096, "vocab_size": 50265},
     "one head count and FFN width for both stacks"),
    ({"model_type": "marian", "d_model": 512, "encoder_layers": 6, "decoder_layers": 6, "encoder_attention_heads": 8,
      "encoder_ffn_dim": 2048, "vocab_size": 58101, "share_encoder_decoder_embeddings": False},
     "separate decoder embedding"),
    ({"model_type": "qwen3", "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 2,
      "num_attention_heads": 16, "vocab_size": 1000, "hidden_act": "relu"}, "only its gated SiLU"),
    ({"model_type": "phi3", "hidden_size": 1000, "intermediate_size": 3072, "num_hidden_layers": 2,
      "num_attention_heads": 16, "vocab_size": 1000}, "not divisible by num_attention_heads"),
])
def test_llama_like_and_bart_like_configs_refuse_what_they_cannot_price(capsys, tmp_path, cfg, needle):
    """A config of a cost-model-only architecture the block cannot price is one line and exit 2, naming why."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    _estimate_refuses(capsys, path, needle)
