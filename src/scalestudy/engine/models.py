"""Randomly initialised Hugging Face models from a ModelSpec (T5/mT5, GPT-2, Llama); never a hub download.

Every engine builds its model through `build_model` on the host with `torch.manual_seed(seed)` first, so all
engines start from bit-identical weights (DeepSpeed's `zero.Init` would draw different ones: FACTS.md). The values
come from one routine, `initialise_weights` (Hugging Face's initialiser over the built, tied model, then the untied
T5 head's fan-in draw); the FSDP and tp/pp backends build on the meta device and replay the same routine, in the
same order, filling only their own shards (engine/parallel/meta_init.py).
The one place that turns a spec into a Transformers model is `scalestudy.engine.hf_model.build_hf_model`
(it keeps mT5 heads untied, which `MT5Config` alone no longer does).
"""

from __future__ import annotations

import torch

from scalestudy.engine.hf_model import build_hf_model, initialise_hf_weights
from scalestudy.errors import ScalestudyError
from scalestudy.specs.model import ModelSpec, hf_attn_implementation


def build_model(spec: ModelSpec, *, seed: int, recompute: str = "none", dropout: float = 0.0,
                device: str | None = None, attention: str = "flash") -> torch.nn.Module:
    """The model in fp32 on the host, in train mode; `recompute="full"` checkpoints every layer's activations;
    `attention` is Strategy.attention (flash: PyTorch SDPA, eager: materialised softmax; specs.model.HF_ATTENTION).

    `device="meta"`: shapes only, nothing drawn; the caller initialises (engine/parallel/meta_init.py) after
    `torch.manual_seed(seed)`, as here.
    """
    torch.manual_seed(seed)
    model = build_hf_model(spec, device=device, initialise=False,
                           attn_implementation=hf_attn_implementation(spec, attention))
    if device != "meta":
        initialise_weights(model)
    set_dropout(model, dropout)
    model.config.use_cache = False  # no KV cache in training (and HF refuses it with checkpointing)
    if recompute == "full":
        # Non-reentrant checkpointing works with DDP, ZeRO-3 hooks and FSDP2 alike.
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    elif recompute != "none":
        raise ScalestudyError(f"recompute {recompute!r} is not available for Hugging Face models (none or full)")
    return model.float().train()


def initialise_weights(model: torch.nn.Module, on_module=None) -> None:
    """The initial weights of every engine and layout, drawn from the current random stream in a fixed order:
    Hugging Face's initialiser over the model as built (ties in place), then the untied T5 head's fan-in draw.
    `on_module`: see `initialise_hf_weights` (the meta-device replay)."""
    initialise_hf_weights(model, on_module)
    init_untied_t5_head(model)


def init_untied_t5_head(model: torch.nn.Module) -> None:
    """Fan-in init (std d_model^-0.5) for an untied T5/mT5 LM head, as Mesh TensorFlow's dense layers do.

    Transformers draws it with std 1.0, so logits start with std ~sqrt(d_model) and a tiny T5's first loss is
    40-80 nats instead of ~ln(vocab): small proxies then spend their whole budget undoing the init.
    """
    config = model.config
    if config.is_encoder_decoder and not config.tie_word_embeddings:
        with torch.no_grad():
            model.lm_head.weight.normal_(mean=0.0, std=config.d_model ** -0.5)


# Dropout rates that HF attention layers keep as plain floats (T5Attention.dropout, LlamaAttention.attention_dropout).
FLOAT_DROPOUTS = ("dropout", "attention_dropout")
CONFIG_DROPOUTS = ("dropout_rate", "resid_pdrop", "embd_pdrop", "attn_pdrop", "attention_dropout")


def set_dropout(model: torch.nn.Module, rate: float) -> None:
    """One dropout rate everywhere: nn.Dropout modules, float rates inside attention layers, and the config."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = rate
        for name in FLOAT_DROPOUTS:
            if isinstance(getattr(module, name, None), float):
                setattr(module, name, rate)
    for name in CONFIG_DROPOUTS:
        if hasattr(model.config, name):
            setattr(model.config, name, rate)


def model_inputs(batch: dict, device: torch.device, pad_id: int = 0) -> dict:
    """Numpy micro-batch -> model keyword arguments (attention mask from padding)."""
    input_ids = torch.as_tensor(batch["input_ids"], dtype=torch.long, device=device)
    labels = torch.as_tensor(batch["labels"], dtype=torch.long, device=device)
    return {"input_ids": input_ids, "attention_mask": (input_ids != pad_id).long(), "labels": labels}
