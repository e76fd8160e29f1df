"""The training model's init: untied T5 heads start with unit-variance logits (first loss ~ ln vocab)."""

import math

import torch

from scalestudy.engine.models import build_model
from scalestudy.specs.model import PRESETS


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
