"""The one place that turns a ModelSpec into a Hugging Face config and model (torch, transformers: engine only;
the torch-free parsing of config.json files is `scalestudy.specs.hf_config`, the presets `scalestudy.specs.presets`).

Transformers 5.x forces `tie_word_embeddings=True` inside `T5Config` and `MT5Config` (their `__post_init__`
overwrites it), so a config that says "untied" still builds a tied LM head: mt5-base comes out 390M instead of the
published 582M. `build_hf_model` builds the model and then unties the head itself, so T5 v1.1 / mT5 presets get
their real architecture.
"""

from __future__ import annotations

import torch
import transformers

from scalestudy.specs.hf_config import to_hf_config
from scalestudy.specs.model import ModelSpec


# Transformers' classes by model type, as names: each is imported on its first attribute access, so a rank imports
# only its own model's modules (a dict of the classes imported all seven families, ~0.1 CPU-s per rank).
CONFIG_CLASSES = {"t5": "T5Config", "mt5": "MT5Config", "gpt2": "GPT2Config", "llama": "LlamaConfig",
                  "mistral": "MistralConfig", "qwen2": "Qwen2Config", "nemotron": "NemotronConfig"}
MODEL_CLASSES = {"t5": "T5ForConditionalGeneration", "mt5": "MT5ForConditionalGeneration", "gpt2": "GPT2LMHeadModel",
                 "llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
                 "nemotron": "NemotronForCausalLM"}


def build_hf_config(spec: ModelSpec, attn_implementation: str | None = None):
    """A transformers config object for `spec` (T5Config / MT5Config / GPT2Config / LlamaConfig); with
    `attn_implementation` ("sdpa", "eager": specs.model.hf_attn_implementation) the attention the model runs
    (None: Transformers' default).

    For T5-family specs the returned config may still say `tie_word_embeddings=True` (transformers forces it);
    `build_hf_model` corrects the model and its config afterwards. For T5 the constructor argument still decides
    `scale_decoder_outputs` (original T5 scales the decoder output by d_model**-0.5 because its head is tied).
    """
    fields = dict(to_hf_config(spec))
    kind = fields.pop("model_type")
    if kind == "gpt2" and spec.vocab_size <= 50256:
        # GPT-2's default bos/eos id 50256 lies outside small (our 8k) vocabularies: use scalestudy's eos id 1
        fields.update(bos_token_id=1, eos_token_id=1)
    cls = getattr(transformers, CONFIG_CLASSES[kind])
    config = cls(**fields)
    if attn_implementation is not None:
        config._attn_implementation = attn_implementation
    return config


def _model_class(spec: ModelSpec):
    return getattr(transformers, MODEL_CLASSES[spec.hf_type or spec.family])


def _untie_lm_head(model, config, draw: bool = True) -> None:
    """Give the model its own LM head (HF's init for untied heads: normal(0, initializer_factor)); `draw=False`
    leaves its values to the initialiser that runs next."""
    shared = model.get_input_embeddings().weight
    head = torch.nn.Parameter(torch.empty_like(shared))
    if draw and head.device.type != "meta":
        with torch.no_grad():
            head.normal_(mean=0.0, std=getattr(config, "initializer_factor", 1.0))
    model.lm_head.weight = head
    model.config.tie_word_embeddings = False
    # Keep the input-embedding ties (encoder/decoder embed_tokens -> shared), drop the head's, so a later
    # `tie_weights()` (save/load, resize) cannot re-tie the head.
    tied = getattr(model, "all_tied_weights_keys", None)
    if isinstance(tied, dict):
        model.all_tied_weights_keys = {k: v for k, v in tied.items() if not k.startswith("lm_head")}


def build_hf_model(spec: ModelSpec, device=None, initialise: bool = True, attn_implementation: str | None = None):
    """The transformers model for `spec`, with the head tied or untied exactly as `spec.tie_word_embeddings` says.

    `device` is anything `torch.device` accepts ("meta" builds shapes only, for counting parameters).
    `initialise=False`: modules and ties only, no value drawn (the constructors' own random inits are skipped, as
    Transformers does when loading weights); engine/models.py then runs the one initialiser every engine and layout
    shares (`initialise_weights`).
    """
    config = build_hf_config(spec, attn_implementation)
    with torch.device(device or "cpu"):
        if initialise:
            model = _model_class(spec)(config)
        else:
            from transformers.initialization import no_init_weights

            with no_init_weights():  # also skips post_init's init_weights (initialisation and tying)
                model = _model_class(spec)(config)
            model.tie_weights()
        if not spec.tie_word_embeddings and model.lm_head.weight is model.get_input_embeddings().weight:
            _untie_lm_head(model, config, draw=initialise)
    if attn_implementation is not None and model.config._attn_implementation != attn_implementation:
        from scalestudy.errors import ScalestudyError

        raise ScalestudyError(f"{spec.name}: Transformers built {model.config._attn_implementation} attention, not "
                              f"the {attn_implementation} asked for")
    return model


@torch.no_grad()
def initialise_hf_weights(model, on_module=None) -> None:
    """Hugging Face's initialiser (`PreTrainedModel.initialize_weights`) over a model built with `initialise=False`:
    every module's `_init_weights`, children before parents, each sub-model's own rule for its modules.

    `on_module(module, init)`, when given, is called instead of `init(module)` for every module, in this order
    (engine/parallel/meta_init.py gives the module's parameters real storage just for that call).
    """
    from transformers import PreTrainedModel
    from transformers.initialization import guard_torch_init_functions

    custom = model.is_custom_code()

    def visit(module, init) -> None:
        for child in module.children():
            visit(child, child._initialize_weights if isinstance(child, PreTrainedModel) else init)
        if on_module is None:
            init(module, custom)
        else:
            on_module(module, lambda m: init(m, custom))

    with guard_torch_init_functions():
        visit(model, model._initialize_weights)


def hf_param_count(model) -> int:
    """Parameters of a torch module, shared (tied) tensors counted once (`parameters()` deduplicates)."""
    return sum(p.numel() for p in model.parameters())
