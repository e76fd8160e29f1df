"""The training model's init: untied T5 heads start with unit-variance logits (first loss ~ ln vocab)."""

import dataclasses
import math

import torch

from scalestudy.engine.models import build_model
from scalestudy.specs.presets import PRESETS


def test_untied_t5_head_is_fan_in_initialised_and_first_loss_is_near_uniform():
    spec = PRESETS["t5-tiny"]
    model = build_model(spec, seed=0)
    assert model.lm_head.weight.data_ptr() != model.shared.weight.data_ptr()  # untied
    std = model.lm_head.weight.std().item()
    assert abs(std - spec.d_model ** -0.5) < 0.05 * spec.d_model ** -0.5, std
    g = torch.Generator().manual_seed(0)
    inputs = torch.randint(3, spec.vocab_size - 100, (4, 32), generator=g)
    labels = torch.randint(3, spec.vocab_size - 100, (4, 8), generator=g)
    with torch.no_grad():
        loss = model(input_ids=inputs, labels=labels).loss.item()
    # Within 1 nat of the uniform guess ln(8192) = 9.01; Transformers' own std-1.0 head gives 40-80 nats here.
    assert abs(loss - math.log(spec.vocab_size)) < 1.0, loss


def test_strategy_attention_is_the_attention_the_model_runs():
    """flash -> PyTorch SDPA, eager -> the materialised softmax: the model is built with it (Transformers would
    otherwise pick SDPA for both), and both compute the same loss from the same weights."""
    import pytest

    from scalestudy.engine.hf_model import _model_class
    from scalestudy.errors import ScalestudyError
    from scalestudy.specs.model import SDPA_TYPES, hf_attn_implementation

    g = torch.Generator().manual_seed(0)
    for name in ("t5-tiny", "gpt2-tiny", "llama-tiny"):
        spec = PRESETS[name]
        models = {a: build_model(spec, seed=1, attention=a) for a in ("flash", "eager")}
        assert {a: m.config._attn_implementation for a, m in models.items()} == {"flash": "sdpa", "eager": "eager"}
        ids = torch.randint(3, spec.vocab_size, (2, 16), generator=g)
        labels = ids[:, :8].contiguous() if spec.is_encoder_decoder else ids
        with torch.no_grad():
            losses = [m(input_ids=ids, labels=labels).loss.item() for m in models.values()]
        assert losses[0] == pytest.approx(losses[1], rel=1e-5), (name, losses)
    # the torch-free list the run config checks against is what the installed Transformers offers
    for kind, spec in (("t5", PRESETS["t5-tiny"]), ("gpt2", PRESETS["gpt2-tiny"]), ("llama", PRESETS["llama-tiny"])):
        assert _model_class(spec)._supports_sdpa == (kind in SDPA_TYPES)
    other = dataclasses.replace(PRESETS["llama-tiny"], hf_type="xlnet")  # a class without SDPA
    with pytest.raises(ScalestudyError, match="attention flash needs PyTorch SDPA.*use attention eager"):
        hf_attn_implementation(other, "flash")
    assert hf_attn_implementation(other, "eager") == "eager"
    cost_only = dataclasses.replace(PRESETS["llama-tiny"], hf_type="bloom")  # config.json read for estimate/plan
    with pytest.raises(ScalestudyError, match="cost model only"):
        hf_attn_implementation(cost_only, "eager")
