"""Parameter counts: our formula == Transformers' meta-device model, for every preset `train` builds (the
cost-model-only OPT / BLOOM / MPT / Falcon presets: their published counts, test_presets.py); mT5 has an untied
head."""

import pytest

from scalestudy.costmodel.params import param_breakdown, param_count
from scalestudy.engine.hf_model import build_hf_model, hf_param_count
from scalestudy.specs.model import COST_MODEL_TYPES
from scalestudy.specs.presets import PRESETS, get_model

pytest.importorskip("transformers")

BUILT = [name for name, spec in PRESETS.items() if (spec.hf_type or spec.family) not in COST_MODEL_TYPES]


@pytest.fixture(scope="module")
def meta_models():
    return {name: build_hf_model(PRESETS[name], device="meta") for name in BUILT}


@pytest.mark.parametrize("name", BUILT)
def test_param_count_equals_transformers(meta_models, name):
    assert param_count(PRESETS[name]) == hf_param_count(meta_models[name])


@pytest.mark.parametrize("name,millions", [("mt5-base", 582), ("mt5-large", 1230), ("mt5-xl", 3740),
                                           ("mt5-xxl", 12920)])
def test_published_mt5_sizes(meta_models, name, millions):
    # Xue et al. 2021 / Benington et al. 2023: 582M, 1.23B, 3.74B, 12.92B (rounded as published)
    n = hf_param_count(meta_models[name])
    step = 1e6 if millions < 1000 else 1e7
    assert round(n / step) * step == millions * 1e6


def test_mt5_base_head_is_untied(meta_models):
    m = meta_models["mt5-base"]
    assert m.lm_head.weight is not m.shared.weight
    assert m.encoder.embed_tokens.weight is m.shared.weight  # the input embeddings stay shared
    assert m.config.tie_word_embeddings is False
    # a later tie_weights() (save/load, resize) must not re-tie the head
    m.tie_weights()
    assert m.lm_head.weight is not m.shared.weight
    assert hf_param_count(m) == 582_401_280


def test_untied_head_is_real_on_cpu():
    spec = get_model("t5-tiny")  # v1.1-style, untied, 8k vocabulary
    m = build_hf_model(spec)
    assert m.lm_head.weight is not m.shared.weight
    assert m.lm_head.weight.device.type == "cpu"
    assert float(m.lm_head.weight.detach().std()) > 0.5  # initialised (HF: normal(0, initializer_factor)), not empty
    assert hf_param_count(m) == param_count(spec)


def test_original_t5_stays_tied(meta_models):
    m = meta_models["t5-small"]
    assert m.lm_head.weight is m.shared.weight
    assert param_breakdown(PRESETS["t5-small"]).lm_head == 0
