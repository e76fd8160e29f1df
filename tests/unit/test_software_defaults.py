"""specs/strategy.software_fill, the table behind estimate's and plan's "engine" software (software_defaults)."""

import itertools

import pytest

from scalestudy.costmodel.engine_software import engine_meanings
from scalestudy.costmodel.estimate import estimate
from scalestudy.specs.hardware import get_device, make_cluster
from scalestudy.specs.presets import get_model
from scalestudy.specs.strategy import (COST_MODEL_ENGINES, ENGINES, Strategy, Workload, software_defaults,
                                       software_fill)


def _reference_fill(fields: dict, encoder_decoder: bool, kind: str) -> dict:
    """What software_fill must return, straight from software_defaults: each knob left at "engine" whose default is
    not "engine", attention_kernel under flash only."""
    wanted = software_defaults(fields["engine"], encoder_decoder, fields["tp"], fields["pp"], kind)
    return {name: value for name, value in wanted.items() if fields[name] == "engine" and value != "engine"
            and (name != "attention_kernel" or fields["attention"] == "flash")}


def test_software_fill_is_software_defaults_for_every_engine_layout_model_and_named_knob():
    """The memoised lookup and its all-named fast path give what software_defaults says, in any call order (the
    table is keyed on tp = pp = 1 or not, which is all software_defaults reads of the layout)."""
    engines = list(ENGINES) + list(COST_MODEL_ENGINES)
    layouts = [(1, 1), (2, 1), (1, 2), (4, 4)]
    named = {"kernels": "fused", "cross_entropy": "fused", "attention_kernel": "fa2", "recompute_early_stop": "off"}
    checked = 0
    for _ in range(2):  # the second pass reads the table the first filled
        for engine, (tp, pp), encoder_decoder, kind, attention, given in itertools.product(
                engines, layouts, (False, True), ("", "gpt2", "llama"), ("flash", "eager"),
                itertools.product((False, True), repeat=len(named))):
            if encoder_decoder and kind:
                continue  # hf_decoder names no kind for an encoder-decoder
            fields = {"engine": engine, "tp": tp, "pp": pp, "attention": attention,
                      **{name: named[name] if g else "engine" for name, g in zip(named, given)}}
            assert software_fill(fields, encoder_decoder, kind) == _reference_fill(fields, encoder_decoder, kind)
            checked += 1
    assert checked == 2 * 5 * 4 * 4 * 2 * 16


def test_a_llama_on_deepspeed_is_hugging_faces_without_tp_or_pp_and_megatron_deepspeeds_with():
    """The llama kind changes the defaults on deepspeed only: at tp = pp = 1 transformers' LlamaForCausalLM (eager
    kernels, the causal-LM loss on logits.float()), with tp / pp Megatron-DeepSpeed's Llama (apex's fused RMSNorm,
    SwiGLU and rotary as torch ops: eager-fused-norm; its vocabulary-parallel loss); elsewhere fused kernels and
    the engine's loss, as for a Megatron-style GPT on deepspeed."""
    fields = {"engine": "deepspeed", "tp": 1, "pp": 1, "attention": "flash", "kernels": "engine",
              "cross_entropy": "engine", "attention_kernel": "engine", "recompute_early_stop": "engine"}
    assert software_fill(fields, False, "llama") == {"kernels": "eager", "cross_entropy": "torch",
                                                     "recompute_early_stop": "on"}
    for change in ({"tp": 2}, {"pp": 2}, {"tp": 4, "pp": 8}):
        assert software_fill({**fields, **change}, False, "llama") == {"kernels": "eager-fused-norm"}
    for change in ({"engine": "fsdp"}, {"engine": "ddp"}, {"engine": "megatron"}, {"engine": "megatron", "tp": 2}):
        assert software_fill({**fields, **change}, False, "llama") == {"kernels": "fused"}
    assert software_fill(fields, False, "") == software_fill({**fields, "tp": 2}, False, "") == {"kernels": "fused"}


def test_on_hopper_the_sdpa_engines_price_fa2_and_megatron_cudnn():
    """The fused attention kernel an "engine" default prices on H100 / H200 (engines.yaml attention_kernel, no device
    fallback there): FA2 for ddp / fsdp / deepspeed -- SDPA's flash backend or the flash-attn package, what their
    published Hopper runs ran; a current torch's cuDNN preference is a run's --attention-kernel cudnn
    (docs/costmodel-validation.md, defaults2 and the fourth defaults pass: cuDNN as the default took issue-flags-only
    11.63 -> 13.94%) -- and cuDNN for megatron, whose Transformer Engine prefers FusedAttention over FlashAttention
    (FA3 included) on sm >= 90. FA3 is no engine's default (opt-in in torch, transformers and TE alike)."""
    for name in ("h100-80gb", "h200"):
        device = get_device(name)
        for engine, zero in (("ddp", 0), ("fsdp", 3), ("deepspeed", 2)):
            assert engine_meanings(Strategy(engine=engine, zero=zero), device)["attention_kernel"] == "fa2", engine
        assert engine_meanings(Strategy(engine="megatron", zero=1), device)["attention_kernel"] == "cudnn"


@pytest.mark.parametrize("engine, zero", [("deepspeed", 3), ("ddp", 0)])
def test_a_hugging_face_model_early_stops_its_full_recompute_as_the_current_transformers_does(engine, zero):
    """transformers 5.x checkpoints with use_reentrant False by default (modeling_utils._activation_checkpointing_
    enable), so a Hugging Face model's full recompute on deepspeed / ddp (T5, the GPT-2 kind, a Llama on deepspeed)
    stops before each block's FFN output projection: "engine" prices it as "on", less compute than "off" (the
    reentrant checkpoints of transformers 4.x, Megatron and DeepSpeed's own). A Megatron-style GPT (`ffn: gelu`) on
    the same engine, and the same T5 with tensor parallelism, keep the engine's reentrant default (off)."""
    cluster = make_cluster("a100-80gb", 1, 8)

    def compute_s(model_name, early_stop, tp=1):
        st = Strategy(engine=engine, zero=zero, tp=tp, recompute="full", recompute_early_stop=early_stop)
        return estimate(get_model(model_name), cluster, st, Workload(64 // tp, 512)).compute_s

    for hf_model in ("t5-base", "gpt2") + (("llama-7b",) if engine == "deepspeed" else ()):
        on, engine_default, off = (compute_s(hf_model, v) for v in ("on", "engine", "off"))
        assert engine_default == pytest.approx(on, rel=1e-12) and off > on * 1.001, hf_model
    assert compute_s("gpt3-1.3b", "engine") == pytest.approx(compute_s("gpt3-1.3b", "off"), rel=1e-12)
    if engine == "deepspeed":  # with tp a T5 on deepspeed is no Hugging Face model (Megatron-DeepSpeed's)
        assert compute_s("t5-base", "engine", tp=2) == pytest.approx(compute_s("t5-base", "off", tp=2), rel=1e-12)
