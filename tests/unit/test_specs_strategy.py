"""Strategy execution options: validation, defaults (today's behaviour), label and dict round trip."""

import json

import pytest

from scalestudy.errors import ScalestudyError
from scalestudy.specs.strategy import Strategy, Workload, resolve_layout


def test_defaults_keep_todays_behaviour_and_label():
    s = Strategy(tp=2, micro_batch=4)
    assert (s.attention, s.sequence_parallel, s.overlap_grad_comm) == ("flash", True, True)
    assert (s.pp_schedule, s.virtual_stages, s.stage_layers) == ("1f1b", 1, ())
    assert s.label == "ds-z0 tp2 pp1 mb4 bf16"


def test_options_appear_in_label_and_round_trip_through_json():
    s = Strategy(engine="ddp", tp=8, pp=4, attention="eager", sequence_parallel=False, overlap_grad_comm=False,
                 pp_schedule="interleaved", virtual_stages=2, stage_layers=(10, 10, 10, 10))
    assert s.label.endswith("attn-eager no-sp sync-grad interleaved-v2 stages 10/10/10/10")
    back = Strategy.from_dict(json.loads(json.dumps(s.to_dict())))
    assert back == s and isinstance(back.stage_layers, tuple)
    assert Strategy.from_dict({"zero": 2}) == Strategy(zero=2)  # rows stored before the new fields


@pytest.mark.parametrize("kwargs, match", [
    ({"attention": "sdpa"}, "unknown attention 'sdpa'"),
    ({"pp_schedule": "zb"}, "unknown pp_schedule 'zb'"),
    ({"pp": 4, "pp_schedule": "interleaved"}, "needs virtual_stages >= 2"),
    ({"pp_schedule": "interleaved", "virtual_stages": 2}, "needs pp >= 2"),
    ({"pp": 2, "virtual_stages": 2}, "virtual_stages 2 needs pp_schedule interleaved"),
    ({"virtual_stages": 0}, "virtual_stages must be an integer >= 1"),
    ({"pp": 2, "stage_layers": (3, 3, 3)}, "lists 3 stages, pp is 2"),
    ({"pp": 2, "stage_layers": (0, 6)}, "at least 1 layer"),
    ({"sequence_parallel": "yes"}, "sequence_parallel must be true or false"),
    ({"engine": "fsdp", "zero": 3, "offload_optimizer": "cpu"}, "FSDP offloads parameters and optimizer"),
    ({"engine": "fsdp", "zero": 3, "offload_optimizer": "nvme", "offload_params": "nvme"}, "no nvme"),
    ({"engine": "ddp", "offload_optimizer": "cpu"}, "optimizer offload needs DeepSpeed"),
])
def test_invalid_options_are_one_line_errors(kwargs, match):
    with pytest.raises(ScalestudyError, match=match):
        Strategy(**kwargs)


def test_option_errors_name_their_options_as_keys_and_as_the_flags_a_command_gives():
    """The message names an option by its field (the YAML key); a command-line surface renames exactly the options
    the error lists, as whole names: pp is not renamed inside pp_schedule, nor a dotted key of DeepSpeed's."""
    from scalestudy.errors import OptionError

    with pytest.raises(OptionError) as pipeline:
        Strategy(pp_schedule="gpipe")
    assert str(pipeline.value) == ("the gpipe pipeline schedule needs pp >= 2 (at pp 1 there is no pipeline to "
                                   "schedule: leave pp_schedule at 1f1b)")
    assert pipeline.value.renamed({"pp": "--pp", "pp_schedule": "--pp-schedule"}) == (
        "the gpipe pipeline schedule needs --pp >= 2 (at --pp 1 there is no pipeline to schedule: leave "
        "--pp-schedule at 1f1b)")
    assert pipeline.value.renamed({"pp_schedule": "pp_schedule (--pp-schedule)"}).endswith(
        "needs pp >= 2 (at pp 1 there is no pipeline to schedule: leave pp_schedule (--pp-schedule) at 1f1b)")
    with pytest.raises(OptionError) as accum:
        Strategy(engine="fsdp", zero=3, grad_accum_dtype="fp32")
    assert accum.value.renamed({"grad_accum_dtype": "--grad-accum-dtype"}) == (
        "--grad-accum-dtype fp32 describes DeepSpeed's data_types.grad_accum_dtype, not fsdp")
    with pytest.raises(OptionError) as overlap:  # the prose's "sequence-parallel" is not the option
        Strategy(tp=2, tp_comm_overlap=True, sequence_parallel=False)
    assert overlap.value.renamed({"tp_comm_overlap": "--tp-comm-overlap", "sequence_parallel": "--sequence-parallel"}
                                 ) == ("--tp-comm-overlap overlaps the sequence-parallel all-gathers / reduce-scatters "
                                       "with the GEMMs: it needs --sequence-parallel (Megatron-LM asserts the same)")


def test_fsdp_cpu_offload_is_allowed():
    s = Strategy(engine="fsdp", zero=3, offload_optimizer="cpu", offload_params="cpu")
    assert s.label.startswith("fsdp-z3+optcpu+paramcpu")


def test_stage_split_spreads_the_remainder_or_takes_explicit_counts():
    assert Strategy(pp=4).stage_split(30) == (8, 8, 7, 7)
    assert Strategy(pp=2, stage_layers=(11, 13)).stage_split(24) == (11, 13)
    with pytest.raises(ScalestudyError, match="cannot fill pp 4 x virtual_stages 2"):
        Strategy(pp=4, pp_schedule="interleaved", virtual_stages=2).stage_split(6)
    # layer counts need not divide pp any more
    assert resolve_layout(Strategy(pp=4), 8, 16, num_layers=30).pp == 4


def test_with_micro_batch_is_the_checked_strategy_at_another_micro_batch():
    s = Strategy(engine="fsdp", zero=3, tp=2, pp=2, micro_batch=1, recompute="full")
    other = s.with_micro_batch(8)
    assert other == Strategy(engine="fsdp", zero=3, tp=2, pp=2, micro_batch=8, recompute="full")
    assert hash(other) == hash(s.replace(micro_batch=8)) and s.micro_batch == 1
    with pytest.raises(ScalestudyError, match="micro_batch"):
        s.with_micro_batch(0)


@pytest.mark.parametrize("model, strategy, kernels, cross_entropy, kernel", [
    # a T5 / mT5 on deepspeed / ddp / fsdp without tp / pp is Hugging Face's T5: eager kernels, its own loss, and
    # under flash SDPA's memory-efficient kernel (transformers 5.x: its position bias is a float mask)
    ("mt5-xxl", Strategy(zero=2), "eager", "hf", "mem-efficient"),
    ("t5-base", Strategy(engine="ddp"), "eager", "hf", "mem-efficient"),
    ("t5-base", Strategy(engine="fsdp", zero=3), "eager", "hf", "mem-efficient"),
    ("t5-base", Strategy(engine="ddp", attention="eager"), "eager", "hf", "engine"),  # kernel read under flash only
    # a decoder whose FFN activation only Hugging Face composes (GPT-2's gelu_new) there is HF's GPT-2: eager
    # kernels and the current transformers' causal-LM loss on logits.float() (torch); the attention kernel stays
    ("gpt2", Strategy(zero=2), "eager", "torch", "engine"),
    ("gpt2", Strategy(engine="fsdp", zero=3), "eager", "torch", "engine"),
    ("gpt2", Strategy(engine="ddp", kernels="fused"), "fused", "torch", "engine"),  # a named value is kept
    # with tp / pp (Megatron / NeMo T5s), on megatron, and for other decoders: fused, the engine's loss
    ("t5-base", Strategy(engine="ddp", tp=2), "fused", "engine", "engine"),
    ("t5-base", Strategy(engine="megatron", zero=1), "fused", "engine", "engine"),
    ("gpt2", Strategy(zero=1, tp=2), "fused", "engine", "engine"),
    ("gpt2", Strategy(engine="megatron", zero=1), "fused", "engine", "engine"),
    ("llama-7b", Strategy(engine="fsdp", zero=3), "fused", "engine", "engine"),
    ("llama-7b", Strategy(engine="ddp"), "fused", "engine", "engine"),
    # a Llama on deepspeed without tp / pp is transformers' LlamaForCausalLM (DeepSpeed trains the client's model):
    # eager kernels and the causal-LM loss on logits.float(); with tp / pp it is Megatron-DeepSpeed's: apex's fused
    # RMSNorm, SwiGLU and rotary as torch ops, its vocabulary-parallel loss
    ("llama-7b", Strategy(zero=3), "eager", "torch", "engine"),
    ("llama-7b", Strategy(zero=1, offload_optimizer="cpu"), "eager", "torch", "engine"),
    ("llama-7b", Strategy(zero=1, tp=2), "eager-fused-norm", "engine", "engine"),
    ("llama-7b", Strategy(zero=1, pp=2), "eager-fused-norm", "engine", "engine"),
    ("llama-7b", Strategy(engine="megatron", zero=1, tp=2), "fused", "engine", "engine"),
    ("llama-7b", Strategy(zero=3, kernels="fused"), "fused", "torch", "engine"),  # Liger: kernels named, loss not
    # values given are kept
    ("mt5-xxl", Strategy(zero=2, kernels="fused", cross_entropy="torch"), "fused", "torch", "mem-efficient"),
    ("mt5-xxl", Strategy(zero=2, attention_kernel="fa2"), "eager", "hf", "fa2"),
    ("gpt2", Strategy(engine="ddp", kernels="eager", cross_entropy="hf"), "eager", "hf", "engine"),
])
def test_software_defaults_depend_on_engine_model_and_layout(model, strategy, kernels, cross_entropy, kernel):
    """specs/strategy.py 'Software defaults': estimate resolves "engine" and prints the software it priced."""
    from scalestudy.costmodel.estimate import estimate
    from scalestudy.specs.hardware import make_cluster
    from scalestudy.specs.presets import get_model
    from scalestudy.specs.strategy import Workload, software_assumed

    spec = get_model(model)
    w = Workload(8 // strategy.tp, 512, 114 if spec.is_encoder_decoder else 0)
    got = estimate(spec, make_cluster("a100-80gb", 1, 8), strategy, w).strategy
    assert (got.kernels, got.cross_entropy, got.attention_kernel) == (kernels, cross_entropy, kernel)
    # built unchecked: the same strategy (a Hugging Face model's early stop too: test_software_defaults.py)
    assert got == strategy.replace(kernels=kernels, cross_entropy=cross_entropy, attention_kernel=kernel,
                                   recompute_early_stop=got.recompute_early_stop)
    assert f"kernels {kernels}, cross_entropy {cross_entropy}" in software_assumed(got)


def test_hf_decoder_is_keyed_on_the_activation_only_hugging_face_composes():
    """The GPT-2 presets and a GPT-2-style config.json (gelu_new / gelu_fast) are Hugging Face's GPT-2; a Llama-family
    decoder is taken for transformers' Llama (where its engine trains the client's model: software_defaults); a
    published GPT shape written with Megatron's one-kernel GELU (from_shape's default ffn gelu) or a T5 is neither."""
    from scalestudy.specs.model import from_shape
    from scalestudy.specs.presets import get_model
    from scalestudy.specs.strategy import hf_decoder

    shape = {"d_model": 768, "layers": 12, "heads": 12, "vocab": 50257, "seq": 1024}
    assert hf_decoder(get_model("gpt2")) == hf_decoder(from_shape("g", {**shape, "ffn": "gelu_fast"}, "test")) == "gpt2"
    llama = from_shape("l", {**shape, "family": "llama", "d_ff": 2048}, "test")
    assert hf_decoder(get_model("llama-7b")) == hf_decoder(llama) == "llama"
    assert not hf_decoder(from_shape("g", shape, "test"))
    assert not hf_decoder(from_shape("g", {**shape, "ffn": "gelu_pytorch_tanh"}, "test"))
    assert not any(hf_decoder(get_model(m)) for m in ("t5-base", "mt5-xxl"))


@pytest.mark.parametrize("kwargs, gathered, label", [
    # unset, overlap_param_gather is the engine's: megatron's distributed optimizer overlaps the parameter gather
    # with the forward when the gradient reduction overlaps the backward (Megatron-Bridge CommOverlapConfig, NeMo)
    ({"engine": "megatron", "zero": 1}, True, ""),
    ({"engine": "megatron", "zero": 2}, True, ""),
    ({"engine": "megatron", "zero": 1, "overlap_grad_comm": False}, False, " sync-grad"),
    ({"engine": "megatron", "zero": 0}, False, ""),
    ({"engine": "deepspeed", "zero": 1}, False, ""),  # DeepSpeed has no such overlap
    ({"engine": "fsdp", "zero": 3}, False, ""),
    # named values are kept; the label names them where they differ from the engine's default
    ({"engine": "megatron", "zero": 1, "overlap_param_gather": False}, False, " no-ovl-param-gather"),
    ({"engine": "deepspeed", "zero": 2, "overlap_param_gather": True}, True, " ovl-param-gather"),
    ({"engine": "megatron", "zero": 2, "overlap_param_gather": False}, False, " no-ovl-param-gather"),
])
def test_overlap_param_gather_defaults_to_the_engines(kwargs, gathered, label):
    st = Strategy(**kwargs)
    assert st.overlap_param_gather is gathered and st._options_label() == label
    assert Strategy.from_dict(st.to_dict()) == st  # resolved once: a bool from then on


@pytest.mark.parametrize("kwargs, overlapped, label", [
    # unset, tp_comm_overlap is the engine's: on for megatron's distributed optimizer with sequence parallelism at
    # tp > 1 and the gradient reduction overlapped (the layout of NVIDIA's Megatron-Core recipes that turn on
    # Transformer Engine's userbuffers: Megatron-Bridge CommOverlapConfig(tp_comm_overlap=True), dgxc, Megatron-LM's
    # H100 table), off elsewhere -- and never a refusal where there is no sequence parallelism
    ({"engine": "megatron", "zero": 1, "tp": 4}, True, ""),
    ({"engine": "megatron", "zero": 1, "tp": 4, "sequence_parallel": False}, False, " no-sp"),
    ({"engine": "megatron", "zero": 1, "tp": 4, "overlap_grad_comm": False}, False, " sync-grad"),
    ({"engine": "megatron", "zero": 0, "tp": 4}, False, ""),
    ({"engine": "megatron", "zero": 2, "tp": 4}, False, ""),
    ({"engine": "megatron", "zero": 1, "tp": 1}, False, ""),
    ({"engine": "fsdp", "zero": 3, "tp": 4}, False, ""),  # torch async TP: torchtitan's opt-in
    # named values are kept; the label names them where they differ from the engine's default
    ({"engine": "megatron", "zero": 1, "tp": 4, "tp_comm_overlap": False}, False, " no-tp-comm-overlap"),
    ({"engine": "fsdp", "zero": 3, "tp": 4, "tp_comm_overlap": True}, True, " tp-comm-overlap"),
])
def test_tp_comm_overlap_defaults_to_the_engines(kwargs, overlapped, label):
    st = Strategy(**kwargs)
    assert st.tp_comm_overlap is overlapped and st._options_label() == label
    assert Strategy.from_dict(st.to_dict()) == st  # resolved once: a bool from then on
    if kwargs.get("tp_comm_overlap") is None:  # a copy of the unresolved fields without SP resolves it afresh
        assert Strategy.from_dict({**st.unresolved_dict(), "sequence_parallel": False}).tp_comm_overlap is False


@pytest.mark.parametrize("kwargs, all_reduce, label", [
    # unset, zero1_all_reduce is DeepSpeed's: its ZeRO-1 all-reduces each gradient bucket (<= 0.12: contiguous
    # gradients forced off; later: allreduce_and_scatter under use_multi_rank_bucket_allreduce); no effect elsewhere
    ({"engine": "deepspeed", "zero": 1}, True, ""),
    ({"engine": "deepspeed", "zero": 1, "zero1_all_reduce": False}, False, " z1-reduce"),
    ({"engine": "deepspeed", "zero": 2}, False, ""),
    ({"engine": "ddp", "zero": 1}, False, ""),
])
def test_zero1_all_reduce_defaults_to_deepspeeds(kwargs, all_reduce, label):
    from scalestudy.specs.run import check_cost_model_only

    st = Strategy(**kwargs)
    assert st.zero1_all_reduce is all_reduce and st._options_label() == label
    assert Strategy.from_dict(st.to_dict()) == st
    if all_reduce or kwargs["engine"] != "deepspeed" or kwargs["zero"] != 1:
        check_cost_model_only(st)  # what train's DeepSpeed 0.19 runs
    else:
        with pytest.raises(ScalestudyError, match="zero1_all_reduce"):
            check_cost_model_only(st)


@pytest.mark.parametrize("strategy, shown", [
    # estimate's "software assumed" line names what each "engine" knob is priced as (costmodel/engine_software.py)
    (Strategy(engine="megatron", zero=1, tp=2, attention="flash"),
     ["cross_entropy engine (Megatron vocab-parallel, fp32 copies)", "optimizer_loop engine (fused update)",
      "grad_reduce engine (fp32)", "attention_kernel engine (cudnn)", "optimizer_dtype engine (fp32)"]),
    (Strategy(zero=0, precision="bf16", attention="flash"),
     ["optimizer_loop engine (fused update in FP16_Optimizer)", "grad_reduce engine (bf16)",
      "attention_kernel engine (fa2)"]),
    (Strategy(zero=0, precision="fp16"), ["optimizer_loop engine (fused update in FP16_Optimizer)"]),
    (Strategy(engine="fsdp", zero=3, recompute="full"),  # gpt2 there is HF's GPT-2: its eager kernels and loss
     ["kernels eager, cross_entropy torch,", "optimizer_loop engine (fused update, torch AdamW fused)",
      "grad_reduce engine (fp32)", "recompute_early_stop on"]),  # transformers 5.x: non-reentrant checkpoints
    (Strategy(engine="ddp", tp=2), ["kernels fused, cross_entropy engine (torch, fp32 copies)"]),
    (Strategy(zero=2, offload_optimizer="cpu", cross_entropy="fused"),
     ["cross_entropy fused,", "optimizer_loop engine (host Adam)"]),  # a named value stands alone
])
def test_estimate_names_what_engine_knobs_are_priced_as(strategy, shown, monkeypatch, capsys):
    from scalestudy.cli.costmodel import _print_estimate
    from scalestudy.costmodel.estimate import estimate
    from scalestudy.specs.hardware import make_cluster
    from scalestudy.specs.presets import get_model

    est = estimate(get_model("gpt2"), make_cluster("a100-80gb", 1, 8), strategy,
                   Workload(8 // strategy.tp, 512))
    monkeypatch.setenv("COLUMNS", "80")
    _print_estimate(est)
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80
    line = " ".join(out.split("software assumed: ", 1)[1].split("layout:", 1)[0].split())  # rich's wraps undone
    for part in shown:
        assert part in line


def test_tensor_parallelism_spans_whole_nodes_only_where_the_caller_prices_it():
    # train / study / the plan search keep a tensor-parallel group inside a node; the cost model (tp_across_nodes)
    # takes a multiple of the devices per node, and neither boundary admits a tp that splits a node unevenly
    with pytest.raises(ScalestudyError, match=r"^tp 16 exceeds 8 devices per node"):
        resolve_layout(Strategy(tp=16), 32, 2, gpus_per_node=8)
    lay = resolve_layout(Strategy(tp=16), 32, 2, gpus_per_node=8, tp_across_nodes=True)
    assert (lay.tp, lay.dp, lay.grad_accum) == (16, 2, 1)
    with pytest.raises(ScalestudyError, match=r"^tp 12 is not a multiple of 8 devices per node"):
        resolve_layout(Strategy(tp=12), 24, 2, gpus_per_node=8, tp_across_nodes=True)
    with pytest.raises(ScalestudyError, match=r"^tp 3 does not divide 8 devices per node"):
        resolve_layout(Strategy(tp=3), 24, 8, gpus_per_node=8, tp_across_nodes=True)


def test_megatron_labels_name_each_zero_stage():
    # plan printed Megatron's distributed optimizer (zero 1) and Megatron-FSDP optim_grads (zero 2) as the same
    # "mcore-distopt" row twice
    labels = [Strategy(engine="megatron", zero=z).label.split()[0] for z in (0, 1, 2)]
    assert labels == ["mcore", "mcore-distopt", "mcore-fsdp-z2"]
