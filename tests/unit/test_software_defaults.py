"""specs/strategy.software_fill, the table behind estimate's and plan's "engine" software (software_defaults)."""

import itertools

from scalestudy.costmodel.engine_software import engine_meanings
from scalestudy.specs.hardware import get_device
from scalestudy.specs.strategy import COST_MODEL_ENGINES, ENGINES, Strategy, software_defaults, software_fill


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
    named = {"kernels": "fused", "cross_entropy": "fused", "attention_kernel": "fa2"}
    checked = 0
    for _ in range(2):  # the second pass reads the table the first filled
        for engine, (tp, pp), encoder_decoder, kind, attention, given in itertools.product(
                engines, layouts, (False, True), ("", "gpt2", "llama"), ("flash", "eager"),
                itertools.product((False, True), repeat=3)):
            if encoder_decoder and kind:
                continue  # hf_decoder names no kind for an encoder-decoder
            fields = {"engine": engine, "tp": tp, "pp": pp, "attention": attention,
                      **{name: named[name] if g else "engine" for name, g in zip(named, given)}}
            assert software_fill(fields, encoder_decoder, kind) == _reference_fill(fields, encoder_decoder, kind)
            checked += 1
    assert checked == 2 * 5 * 4 * 4 * 2 * 8


def test_a_llama_on_deepspeed_is_hugging_faces_without_tp_or_pp_and_megatron_deepspeeds_with():
    """The llama kind changes the defaults on deepspeed only: at tp = pp = 1 transformers' LlamaForCausalLM (eager
    kernels, the causal-LM loss on logits.float()), with tp / pp Megatron-DeepSpeed's Llama (apex's fused RMSNorm,
    SwiGLU and rotary as torch ops: eager-fused-norm; its vocabulary-parallel loss); elsewhere fused kernels and
    the engine's loss, as for a Megatron-style GPT on deepspeed."""
    fields = {"engine": "deepspeed", "tp": 1, "pp": 1, "attention": "flash", "kernels": "engine",
              "cross_entropy": "engine", "attention_kernel": "engine"}
    assert software_fill(fields, False, "llama") == {"kernels": "eager", "cross_entropy": "torch"}
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
