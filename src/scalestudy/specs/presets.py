"""The model presets: published architectures by name (`PRESETS`), each with the paper or config.json it is read
from, and `get_model`, which turns a preset name, a config.json or a model YAML into a ModelSpec (specs/model.py).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from scalestudy.errors import ScalestudyError
from scalestudy.specs.hf_config import from_hf_config
from scalestudy.specs.model import FALCON, SHAPE_KEYS, ModelSpec, from_shape


def _t5(name: str, d_model: int, d_kv: int, d_ff: int, heads: int, layers: int, *, v1_1: bool = False,
        vocab: int = 32128, ffn: str = "") -> ModelSpec:
    # Original T5: ReLU FFN and a head tied to the input embedding. T5 v1.1 / mT5: gated-GELU (UL2: `ffn`
    # gated-silu), untied head.
    return ModelSpec(
        name=name, family="t5", vocab_size=vocab, d_model=d_model, num_layers=layers, num_decoder_layers=layers,
        num_heads=heads, d_kv=d_kv, d_ff=d_ff, ffn=ffn or ("gated-gelu" if v1_1 else "relu"),
        tie_word_embeddings=not v1_1,
    )


def _mt5(name: str, d_model: int, d_ff: int, heads: int, layers: int, kind: str = "") -> ModelSpec:
    # mT5 (Xue et al. 2021): T5 v1.1 architecture, 250,112-token vocabulary, untied LM head. umT5 (kind "umt5"):
    # the same blocks over 256,384 tokens.
    return ModelSpec(
        name=name, family="mt5", vocab_size=256384 if kind == "umt5" else 250112, d_model=d_model, num_layers=layers,
        num_decoder_layers=layers, num_heads=heads, d_kv=64, d_ff=d_ff, ffn="gated-gelu", tie_word_embeddings=False,
        hf_type=kind,
    )


def _gpt2(name: str, d_model: int, layers: int, heads: int, vocab: int = 50257, positions: int = 1024) -> ModelSpec:
    return ModelSpec(
        name=name, family="gpt2", vocab_size=vocab, d_model=d_model, num_layers=layers, num_heads=heads,
        d_kv=d_model // heads, d_ff=4 * d_model, ffn="gelu_new", tie_word_embeddings=True,
        max_position_embeddings=positions,
    )


def _llama(name: str, d_model: int, d_ff: int, layers: int, heads: int, kv_heads: int = 0, vocab: int = 32000,
           positions: int = 2048, *, kind: str = "", head_dim: int = 0, tied: bool = False) -> ModelSpec:
    """A Llama-layout decoder (RMSNorm, rotary, gated FFN of d_ff, no biases) as `from_hf_config` reads a config of
    model_type `kind` ("": llama; mistral, qwen2 with its q/k/v biases; the cost-model-only gemma, gemma2 and
    LLAMA_LIKE_TYPES); heads of `head_dim` where the config states one (Gemma, Qwen3), else d_model / heads."""
    return ModelSpec(
        name=name, family="llama", vocab_size=vocab, d_model=d_model, num_layers=layers, num_heads=heads,
        num_kv_heads=0 if kv_heads == heads else kv_heads, d_kv=head_dim or d_model // heads, d_ff=d_ff,
        ffn="swiglu", tie_word_embeddings=tied, max_position_embeddings=positions,
        attention_bias="qkv" if kind == "qwen2" else "none", hf_type=kind,
    )


def _rotary_gelu_preset(name: str, kind: str, d_model: int, layers: int, heads: int, vocab: int) -> ModelSpec:
    """GPT-NeoX (gpt_neox: biased attention) / GPT-J (gptj: unbiased q/k/v/out): rotary, a biased non-gated GELU
    FFN of 4 d_model, untied head, 2,048-token context; as `_gpt_neox` / `_gptj` read their config.json. Cost model
    only."""
    return ModelSpec(
        name=name, family="llama", vocab_size=vocab, d_model=d_model, num_layers=layers, num_heads=heads,
        d_kv=d_model // heads, d_ff=4 * d_model, ffn="gelu", tie_word_embeddings=False, max_position_embeddings=2048,
        attention_bias="all" if kind == "gpt_neox" else "none", mlp_bias=True, hf_type=kind,
    )


def _byt5(name: str, d_model: int, d_ff: int, heads: int, encoder: int, decoder: int) -> ModelSpec:
    """ByT5 (Xue et al. 2022): the T5 v1.1 block (gated-GELU, untied head, heads of 64) over 384 byte ids (256 bytes,
    3 specials, padded), an encoder three times the decoder's depth; model_type t5, so `train` builds it."""
    return ModelSpec(
        name=name, family="t5", vocab_size=384, d_model=d_model, num_layers=encoder, num_decoder_layers=decoder,
        num_heads=heads, d_kv=64, d_ff=d_ff, ffn="gated-gelu", tie_word_embeddings=False,
    )


def _seq2seq(name: str, kind: str, d_model: int, layers: int, heads: int, d_ff: int, vocab: int,
             act: str) -> ModelSpec:
    """A BART-style encoder-decoder (SEQ2SEQ_TYPES) as `_bart_like` reads its config.json: `layers` encoder and
    decoder blocks, the non-gated FFN of `act`, head tied to the shared embedding. Cost model only."""
    return ModelSpec(
        name=name, family="t5", vocab_size=vocab, d_model=d_model, num_layers=layers, num_decoder_layers=layers,
        num_heads=heads, d_kv=d_model // heads, d_ff=d_ff, ffn=act, tie_word_embeddings=True, hf_type=kind,
    )


# Megatron-LM pads the GPT-2 BPE vocabulary (50,257) to a multiple of 128 x tensor-parallel size 8: 51,200
# (Narayanan et al. 2021 Sec. 5, Shoeybi et al. 2019; --make-vocab-size-divisible-by 128). The GPT-3-shape presets
# take the padded 51,200: every published throughput figure of these shapes was measured with a padded embedding
# (costmodel/published.yaml narayanan2021, narayanan2021t2, megatron2021readme, korthikanti2022, smith2022 say
# vocab 51200), so `--model gpt3-175b` predicts what those rows predict. The 943 padding rows are <0.01% of the
# 175B (0.6% of the 125M); a run with the unpadded 50,257 (or NeMo's 50,688) is a model YAML with its `vocab`.
MEGATRON_GPT_VOCAB = 51200


def _gpt3(name: str, d_model: int, layers: int, heads: int, positions: int = 2048) -> ModelSpec:
    """A GPT-3-style decoder as published rows write it (specs.model.from_shape, family gpt): GELU FFN of 4 d_model
    (one kernel: Megatron's fused bias-GeLU), learned positions of the 2,048-token context, tied head."""
    return ModelSpec(
        name=name, family="gpt2", vocab_size=MEGATRON_GPT_VOCAB, d_model=d_model, num_layers=layers, num_heads=heads,
        d_kv=d_model // heads, d_ff=4 * d_model, ffn="gelu", tie_word_embeddings=True,
        max_position_embeddings=positions,
    )


def _opt(name: str, d_model: int, layers: int, heads: int) -> ModelSpec:
    """OPT (Zhang et al. 2022): the gpt2 block with a ReLU FFN of 4 d_model, vocabulary 50,272, 2,048 learned
    positions + OPT's offset of 2, tied head; as `_opt` reads facebook/opt-* config.json. Cost model only."""
    return ModelSpec(
        name=name, family="gpt2", vocab_size=50272, d_model=d_model, num_layers=layers, num_heads=heads,
        d_kv=d_model // heads, d_ff=4 * d_model, ffn="relu", tie_word_embeddings=True,
        max_position_embeddings=2048 + 2, hf_type="opt",
    )


def _alibi_gpt(name: str, kind: str, d_model: int, layers: int, heads: int, vocab: int) -> ModelSpec:
    """BLOOM / MPT: the gpt2 block (GELU FFN of 4 d_model, tied head) with ALiBi, so no position table; as `_bloom`
    / `_mpt` read their config.json. Cost model only."""
    return ModelSpec(
        name=name, family="gpt2", vocab_size=vocab, d_model=d_model, num_layers=layers, num_heads=heads,
        d_kv=d_model // heads, d_ff=4 * d_model, ffn="gelu", tie_word_embeddings=True, max_position_embeddings=0,
        hf_type=kind,
    )


def _falcon_preset(name: str, d_model: int, layers: int, heads: int, kv_heads: int) -> ModelSpec:
    """Falcon (tiiuae/falcon-*): rotary, kv_heads K/V heads, non-gated GELU FFN of 4 d_model, no biases, tied
    head, vocabulary 65,024, 2,048-token context; as `_falcon` reads its config.json. Cost model only."""
    return ModelSpec(
        name=name, family="llama", vocab_size=65024, d_model=d_model, num_layers=layers, num_heads=heads,
        num_kv_heads=kv_heads, d_kv=d_model // heads, d_ff=4 * d_model, ffn="gelu", tie_word_embeddings=True,
        max_position_embeddings=2048, hf_type=FALCON,
    )


def _by_name(specs: list[ModelSpec]) -> dict[str, ModelSpec]:
    """The presets by name; a name given twice (one would silently replace the other) stops the import."""
    named = {s.name: s for s in specs}
    twice = sorted({s.name for s in specs if [t.name for t in specs].count(s.name) > 1})
    if twice:
        raise ValueError(f"preset names given twice: {', '.join(twice)}")
    return named


# Hyperparameters from the published Hugging Face configs (google/mt5-*, t5-*, google/t5-v1_1-xxl, gpt2*,
# Llama 1 7B/13B, Llama 2 70B). Tiny presets (vocabulary 8192, our bundled tokenizer) are CPU proxies.
PRESETS: dict[str, ModelSpec] = _by_name(
    [
        _mt5("mt5-small", 512, 1024, 6, 8),
        _mt5("mt5-base", 768, 2048, 12, 12),
        _mt5("mt5-large", 1024, 2816, 16, 24),
        _mt5("mt5-xl", 2048, 5120, 32, 24),
        _mt5("mt5-xxl", 4096, 10240, 64, 24),
        _t5("t5-small", 512, 64, 2048, 8, 6),
        _t5("t5-base", 768, 64, 3072, 12, 12),
        _t5("t5-large", 1024, 64, 4096, 16, 24),
        _t5("t5-3b", 1024, 128, 16384, 32, 24),
        _t5("t5-11b", 1024, 128, 65536, 128, 24),
        _t5("t5-v1_1-xxl", 4096, 64, 10240, 64, 24, v1_1=True),
        _gpt2("gpt2", 768, 12, 12),
        _gpt2("gpt2-medium", 1024, 24, 16),
        _gpt2("gpt2-large", 1280, 36, 20),
        _gpt2("gpt2-xl", 1600, 48, 25),
        _llama("llama-7b", 4096, 11008, 32, 32),
        _llama("llama-13b", 5120, 13824, 40, 40),
        _llama("llama-70b", 8192, 28672, 80, 64, kv_heads=8, positions=4096),
        # GPT-3 (Brown et al. 2020, Table 2.1: n_layers, d_model, n_heads, n_ctx 2048), vocabulary Megatron's 51,200
        # (MEGATRON_GPT_VOCAB). Two cells of the table do not multiply out and are taken as Megatron-LM / NeMo's
        # GPT-3 configs take them: XL's "24 heads of d_head 128" at d_model 2048 -> 16 heads of 128; 13B's d_model
        # "5140" with 40 heads of 128 -> 5120.
        _gpt3("gpt3-125m", 768, 12, 12),
        _gpt3("gpt3-350m", 1024, 24, 16),
        _gpt3("gpt3-760m", 1536, 24, 16),
        _gpt3("gpt3-1.3b", 2048, 24, 16),
        _gpt3("gpt3-2.7b", 2560, 32, 32),
        _gpt3("gpt3-6.7b", 4096, 32, 32),
        _gpt3("gpt3-13b", 5120, 40, 40),
        _gpt3("gpt3-175b", 12288, 96, 96),
        # MT-NLG 530B (Smith et al. 2022, Sec. 3.1 / Table 1 of Narayanan et al. 2021): 105 layers, hidden 20480,
        # 128 heads, seq 2048, Megatron's vocabulary 51,200
        _gpt3("mt-nlg-530b", 20480, 105, 128),
        # BLOOM (BigScience 2022, bigscience/bloom config.json): 70 layers, hidden 14336, 112 heads, ALiBi,
        # vocabulary 250,880 (250,680 padded); its embedding LayerNorm (2 d) is not counted. Cost model only.
        _alibi_gpt("bloom-176b", "bloom", 14336, 70, 112, 250880),
        # OPT (Zhang et al. 2022, Table 1: layers, heads, d_model). OPT-350M is left out: its 512-wide embedding
        # projected to d_model 1024 (word_embed_proj_dim) is not modelled. Cost model only.
        _opt("opt-125m", 768, 12, 12),
        _opt("opt-1.3b", 2048, 24, 32),
        _opt("opt-2.7b", 2560, 32, 32),
        _opt("opt-6.7b", 4096, 32, 32),
        _opt("opt-13b", 5120, 40, 40),
        _opt("opt-30b", 7168, 48, 56),
        _opt("opt-66b", 9216, 64, 72),
        _opt("opt-175b", 12288, 96, 96),
        # Llama 2 (Touvron et al. 2023b, Table 1 + meta-llama/Llama-2-*-hf config.json): context 4096; the 70B has
        # grouped-query attention (8 K/V heads). llama-70b above is the same 70B.
        _llama("llama2-7b", 4096, 11008, 32, 32, positions=4096),
        _llama("llama2-13b", 5120, 13824, 40, 40, positions=4096),
        _llama("llama2-70b", 8192, 28672, 80, 64, kv_heads=8, positions=4096),
        # Llama 3 (Llama Team 2024, 'The Llama 3 Herd of Models' Table 3: layers, model / FFN dimension, heads,
        # 8 K/V heads), vocabulary 128,256 as meta-llama/Meta-Llama-3* config.json (the table's "128,000" + 256
        # special tokens), pre-training context 8192
        _llama("llama3-8b", 4096, 14336, 32, 32, kv_heads=8, vocab=128256, positions=8192),
        _llama("llama3-70b", 8192, 28672, 80, 64, kv_heads=8, vocab=128256, positions=8192),
        _llama("llama3-405b", 16384, 53248, 126, 128, kv_heads=8, vocab=128256, positions=8192),
        # MPT (MosaicML 2023, mosaicml/mpt-7b and mpt-30b config.json: d_model, n_layers, n_heads, expansion_ratio
        # 4, vocabulary 50,432, ALiBi, no_bias: its biases, < 0.1% of the weights, are counted). Cost model only.
        _alibi_gpt("mpt-7b", "mpt", 4096, 32, 32, 50432),
        _alibi_gpt("mpt-30b", "mpt", 7168, 48, 64, 50432),
        # Falcon (Almazrouei et al. 2023; tiiuae/falcon-7b: 32 layers, hidden 4544, 71 heads, multi-query;
        # falcon-40b: 60 layers, hidden 8192, 128 heads, 8 K/V groups). Parallel attention + MLP priced as the
        # sequential block. Cost model only.
        _falcon_preset("falcon-7b", 4544, 32, 71, 1),
        _falcon_preset("falcon-40b", 8192, 60, 128, 8),
        # T5 v1.1 (google/t5-v1_1-* config.json) and Flan-T5 (Chung et al. 2022; google/flan-t5-*, the same
        # architectures): gated-GELU, untied head, vocabulary 32,128
        _t5("t5-v1_1-small", 512, 64, 1024, 6, 8, v1_1=True),
        _t5("t5-v1_1-base", 768, 64, 2048, 12, 12, v1_1=True),
        _t5("t5-v1_1-large", 1024, 64, 2816, 16, 24, v1_1=True),
        _t5("t5-v1_1-xl", 2048, 64, 5120, 32, 24, v1_1=True),
        _t5("flan-t5-small", 512, 64, 1024, 6, 8, v1_1=True),
        _t5("flan-t5-base", 768, 64, 2048, 12, 12, v1_1=True),
        _t5("flan-t5-large", 1024, 64, 2816, 16, 24, v1_1=True),
        _t5("flan-t5-xl", 2048, 64, 5120, 32, 24, v1_1=True),
        _t5("flan-t5-xxl", 4096, 64, 10240, 64, 24, v1_1=True),
        # UL2 20B (Tay et al. 2022; google/ul2 config.json): 32 + 32 layers, d_model 4096, 16 heads of d_kv 256,
        # gated-SiLU FFN of 16384, untied head, vocabulary 32,128
        _t5("ul2-20b", 4096, 256, 16384, 16, 32, v1_1=True, ffn="gated-silu"),
        # Mistral 7B (Jiang et al. 2023, Table 1: dim 4096, n_layers 32, head_dim 128, hidden_dim 14336, n_heads
        # 32, n_kv_heads 8, vocab 32000; mistralai/Mistral-7B-v0.1 config.json: context 32768). Its sliding window
        # (4096) is priced as full attention.
        _llama("mistral-7b", 4096, 14336, 32, 32, kv_heads=8, positions=32768, kind="mistral"),
        # Llama 1 33B and 65B (Touvron et al. 2023a, Table 2: dimension, heads, layers; SwiGLU hidden 17920 / 22016
        # of meta-llama/llama's model.py at 1076b9c5, costmodel/published.yaml llama1paper2023); Hugging Face names
        # them llama-30b / llama-65b
        _llama("llama-30b", 6656, 17920, 60, 52),
        _llama("llama-65b", 8192, 22016, 80, 64),
        # Llama 3.1 (Llama Team 2024, Table 3: the Llama 3 shapes above; meta-llama/Llama-3.1-* config.json:
        # max_position_embeddings 131072)
        _llama("llama3.1-8b", 4096, 14336, 32, 32, kv_heads=8, vocab=128256, positions=131072),
        _llama("llama3.1-70b", 8192, 28672, 80, 64, kv_heads=8, vocab=128256, positions=131072),
        _llama("llama3.1-405b", 16384, 53248, 126, 128, kv_heads=8, vocab=128256, positions=131072),
        # GPT-NeoX-20B (Black et al. 2022, Table 1; EleutherAI/gpt-neox-20b config.json: hidden 6144, 44 layers, 64
        # heads, intermediate 24576, vocabulary 50,432). Cost model only.
        _rotary_gelu_preset("gpt-neox-20b", "gpt_neox", 6144, 44, 64, 50432),
        # Pythia (Biderman et al. 2023, Table 1: layers, model dim, heads; EleutherAI/pythia-* config.json:
        # intermediate 4 d, vocabulary 50,304 (6.9B: 50,432; 12B: 50,688), untied). Cost model only.
        _rotary_gelu_preset("pythia-70m", "gpt_neox", 512, 6, 8, 50304),
        _rotary_gelu_preset("pythia-160m", "gpt_neox", 768, 12, 12, 50304),
        _rotary_gelu_preset("pythia-410m", "gpt_neox", 1024, 24, 16, 50304),
        _rotary_gelu_preset("pythia-1b", "gpt_neox", 2048, 16, 8, 50304),
        _rotary_gelu_preset("pythia-1.4b", "gpt_neox", 2048, 24, 16, 50304),
        _rotary_gelu_preset("pythia-2.8b", "gpt_neox", 2560, 32, 32, 50304),
        _rotary_gelu_preset("pythia-6.9b", "gpt_neox", 4096, 32, 32, 50432),
        _rotary_gelu_preset("pythia-12b", "gpt_neox", 5120, 36, 40, 50688),
        # GPT-J-6B (Wang & Komatsuzaki 2021; EleutherAI/gpt-j-6b config.json: n_embd 4096, n_layer 28, n_head 16,
        # vocabulary 50,400). Cost model only.
        _rotary_gelu_preset("gpt-j-6b", "gptj", 4096, 28, 16, 50400),
        # Qwen2 / Qwen2.5 (Qwen/Qwen2-7B, Qwen2-72B, Qwen2.5-7B/14B/32B/72B config.json: hidden, intermediate,
        # layers, heads, K/V heads, vocabulary 152,064, context 131072, q/k/v biases, untied)
        _llama("qwen2-7b", 3584, 18944, 28, 28, kv_heads=4, vocab=152064, positions=131072, kind="qwen2"),
        _llama("qwen2-72b", 8192, 29568, 80, 64, kv_heads=8, vocab=152064, positions=131072, kind="qwen2"),
        _llama("qwen2.5-7b", 3584, 18944, 28, 28, kv_heads=4, vocab=152064, positions=131072, kind="qwen2"),
        _llama("qwen2.5-14b", 5120, 13824, 48, 40, kv_heads=8, vocab=152064, positions=131072, kind="qwen2"),
        _llama("qwen2.5-32b", 5120, 27648, 64, 40, kv_heads=8, vocab=152064, positions=131072, kind="qwen2"),
        _llama("qwen2.5-72b", 8192, 29568, 80, 64, kv_heads=8, vocab=152064, positions=131072, kind="qwen2"),
        # Qwen3 dense (Qwen Team 2025, Table 1: layers, heads Q / KV, tie embedding; Qwen/Qwen3-* config.json:
        # hidden, intermediate, head_dim 128, vocabulary 151,936, max_position_embeddings 40960). Cost model only.
        _llama("qwen3-0.6b", 1024, 3072, 28, 16, kv_heads=8, vocab=151936, positions=40960, kind="qwen3",
               head_dim=128, tied=True),
        _llama("qwen3-1.7b", 2048, 6144, 28, 16, kv_heads=8, vocab=151936, positions=40960, kind="qwen3",
               head_dim=128, tied=True),
        _llama("qwen3-4b", 2560, 9728, 36, 32, kv_heads=8, vocab=151936, positions=40960, kind="qwen3",
               head_dim=128, tied=True),
        _llama("qwen3-8b", 4096, 12288, 36, 32, kv_heads=8, vocab=151936, positions=40960, kind="qwen3",
               head_dim=128),
        _llama("qwen3-14b", 5120, 17408, 40, 40, kv_heads=8, vocab=151936, positions=40960, kind="qwen3",
               head_dim=128),
        _llama("qwen3-32b", 5120, 25600, 64, 64, kv_heads=8, vocab=151936, positions=40960, kind="qwen3",
               head_dim=128),
        # Gemma (Gemma Team 2024a, Table 1: d_model, layers, heads, K/V heads, head size 256) and Gemma 2 (Gemma
        # Team 2024b, Table 1); google/gemma-2b, gemma-7b, gemma-2-9b, gemma-2-27b config.json: intermediate_size,
        # vocabulary 256,000, tied head, context 8192. Cost model only.
        _llama("gemma-2b", 2048, 16384, 18, 8, kv_heads=1, vocab=256000, positions=8192, kind="gemma",
               head_dim=256, tied=True),
        _llama("gemma-7b", 3072, 24576, 28, 16, vocab=256000, positions=8192, kind="gemma", head_dim=256,
               tied=True),
        _llama("gemma2-9b", 3584, 14336, 42, 16, kv_heads=8, vocab=256000, positions=8192, kind="gemma2",
               head_dim=256, tied=True),
        _llama("gemma2-27b", 4608, 36864, 46, 32, kv_heads=16, vocab=256000, positions=8192, kind="gemma2",
               head_dim=128, tied=True),
        # Phi-3 (Abdin et al. 2024, Sec. 2; microsoft/Phi-3-mini-4k-instruct and Phi-3-medium-4k-instruct
        # config.json: vocabulary 32,064, context 4096, untied). Cost model only.
        _llama("phi-3-mini", 3072, 8192, 32, 32, vocab=32064, positions=4096, kind="phi3"),
        _llama("phi-3-medium", 5120, 17920, 40, 40, kv_heads=10, vocab=32064, positions=4096, kind="phi3"),
        # OLMo (Groeneveld et al. 2024, Table 1; allenai/OLMo-7B-hf config.json: vocabulary 50,304, context 2048)
        # and OLMo 2 (OLMo et al. 2024, Table 1; allenai/OLMo-2-1124-7B / 13B config.json: vocabulary 100,352,
        # context 4096). Cost model only.
        _llama("olmo-7b", 4096, 11008, 32, 32, vocab=50304, positions=2048, kind="olmo"),
        _llama("olmo2-7b", 4096, 11008, 32, 32, vocab=100352, positions=4096, kind="olmo2"),
        _llama("olmo2-13b", 5120, 13824, 40, 40, vocab=100352, positions=4096, kind="olmo2"),
        # Megatron-LM's GPT models of Narayanan et al. 2021, Table 1 (heads, hidden size, layers; seq 2048,
        # vocabulary 51,200): the shapes costmodel/published.yaml narayanan2021 rows write. 529.6B = mt-nlg-530b.
        _gpt3("megatron-1.7b", 2304, 24, 24),
        _gpt3("megatron-3.6b", 3072, 30, 32),
        _gpt3("megatron-7.5b", 4096, 36, 32),
        _gpt3("megatron-18.4b", 6144, 40, 48),
        _gpt3("megatron-39.1b", 8192, 48, 64),
        _gpt3("megatron-76.1b", 10240, 60, 80),
        _gpt3("megatron-145.6b", 12288, 80, 96),
        _gpt3("megatron-310.1b", 16384, 96, 128),
        _gpt3("megatron-529.6b", 20480, 105, 128),
        _gpt3("megatron-1t", 25600, 128, 160),
        # ByT5 (Xue et al. 2022, Table 1: d_model, d_ff, encoder / decoder depth; mT5's heads; google/byt5-*
        # config.json: vocabulary 384, d_kv 64)
        _byt5("byt5-small", 1472, 3584, 6, 12, 4),
        _byt5("byt5-base", 1536, 3968, 12, 18, 6),
        _byt5("byt5-large", 1536, 3840, 16, 36, 12),
        _byt5("byt5-xl", 2560, 6720, 32, 36, 12),
        _byt5("byt5-xxl", 4672, 12352, 64, 36, 12),
        # BART (Lewis et al. 2020; facebook/bart-base, bart-large config.json: vocabulary 50,265, GELU), mBART-50
        # (Tang et al. 2020; facebook/mbart-large-50: vocabulary 250,054), NLLB-200 dense (NLLB Team 2022;
        # facebook/nllb-200-distilled-600M, nllb-200-1.3B, nllb-200-3.3B config.json: model_type m2m_100,
        # vocabulary 256,206, ReLU), PEGASUS (Zhang et al. 2020; google/pegasus-large: vocabulary 96,103, ReLU).
        # Read as the T5 block of the same widths (`_bart_like`). Cost model only.
        _seq2seq("bart-base", "bart", 768, 6, 12, 3072, 50265, "gelu"),
        _seq2seq("bart-large", "bart", 1024, 12, 16, 4096, 50265, "gelu"),
        _seq2seq("mbart-large-50", "mbart", 1024, 12, 16, 4096, 250054, "gelu"),
        _seq2seq("nllb-200-600m", "m2m_100", 1024, 12, 16, 4096, 256206, "relu"),
        _seq2seq("nllb-200-1.3b", "m2m_100", 1024, 24, 16, 8192, 256206, "relu"),
        _seq2seq("nllb-200-3.3b", "m2m_100", 2048, 24, 32, 8192, 256206, "relu"),
        _seq2seq("pegasus-large", "pegasus", 1024, 16, 16, 4096, 96103, "relu"),
        # umT5 (Chung et al. 2023, UniMax: mT5's architectures, a 256,384-token vocabulary, a relative-position bias
        # in every layer: not counted, 1,024-4,096 per layer); google/umt5-base and umt5-xxl config.json read (the
        # mT5-base / mT5-XXL shapes, untied), small and xl taken as mT5-small / mT5-XL the same way. Cost model only.
        _mt5("umt5-small", 512, 1024, 6, 8, kind="umt5"),
        _mt5("umt5-base", 768, 2048, 12, 12, kind="umt5"),
        _mt5("umt5-xl", 2048, 5120, 32, 24, kind="umt5"),
        _mt5("umt5-xxl", 4096, 10240, 64, 24, kind="umt5"),
        # OPUS-MT English-German (Tiedemann & Thottingal 2020; Helsinki-NLP/opus-mt-en-de config.json: model_type
        # marian, d_model 512, 6 + 6 layers, 8 heads, FFN 2048, swish, vocabulary 58,101 shared by both stacks).
        _seq2seq("opus-mt-en-de", "marian", 512, 6, 8, 2048, 58101, "swish"),
        # CPU proxies: a family of tiny T5 v1.1-style models for tests, demos and scaling-law studies.
        _t5("t5-tiny", 128, 32, 512, 4, 2, v1_1=True, vocab=8192),
        _t5("t5-mini", 256, 32, 1024, 8, 4, v1_1=True, vocab=8192),
        _t5("t5-micro", 384, 48, 1536, 8, 6, v1_1=True, vocab=8192),
        _gpt2("gpt2-tiny", 128, 2, 4, vocab=8192, positions=512),
        _llama("llama-tiny", 128, 384, 2, 4, kv_heads=2, vocab=8192, positions=512),
    ]
)


def get_model(name_or_path: str) -> ModelSpec:
    """A preset name, a path to a Hugging Face config.json (or a folder holding one), or a model YAML of the shape
    keys a paper states (`from_shape`: the `model:` mapping of a costmodel/published.yaml row)."""
    if name_or_path in PRESETS:
        return PRESETS[name_or_path]
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml"):
        from scalestudy.yamlfile import read_yaml

        shape = read_yaml(path, "model file")
        if not isinstance(shape, dict):
            raise ScalestudyError(f"model file {path}: needs a mapping of shape keys ({', '.join(SHAPE_KEYS)})")
        return _depth_checked(replace(from_shape(path.stem, shape, f"model file {path}"),
                                      source=str(path.resolve())), f"model file {path}")
    if path.is_dir():
        path = path / "config.json"
    if path.suffix == ".json" or path.exists():
        return _depth_checked(from_hf_config(path), f"model config {path}")
    import difflib

    near = difflib.get_close_matches(name_or_path, PRESETS, n=1)  # a misspelt preset: gpt3-175 -> gpt3-175b
    raise ScalestudyError(f"unknown model {name_or_path!r}{f' (did you mean {near[0]}?)' if near else ''}: use a "
                          "preset (`scalestudy presets` lists them), a config.json or a model YAML path")


# Layers of one stack (encoder, decoder) of a model a user gives. The deepest published Transformer has 1,000 (Wang
# et al. 2022, "DeepNet: Scaling Transformers to 1,000 Layers"); the cost model walks a stack layer by layer (ZeRO-3's
# module trace, pipeline stage splits), so a count of millions -- a typo -- ran for hours or out of memory.
MAX_LAYERS = 10_000


def _depth_checked(spec: ModelSpec, origin: str) -> ModelSpec:
    """`spec`, or one line when a stack is deeper than MAX_LAYERS."""
    layers = max(spec.num_layers, spec.num_decoder_layers)
    if layers > MAX_LAYERS:
        raise ScalestudyError(f"{origin}: {layers:,} layers in one stack: at most {MAX_LAYERS:,} (the deepest "
                              "published Transformer has 1,000: DeepNet, Wang et al. 2022)")
    return spec
