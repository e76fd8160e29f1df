"""ModelSpec: the architecture of an encoder-decoder (T5/mT5) or decoder-only (GPT-2/Llama) Transformer.

Pure Python (no torch): the cost model, the planner and the engine all read the same spec.
Built from a Hugging Face `config.json` (specs/hf_config.py) or the shape a paper states (`from_shape`);
the presets by name, and `get_model` that resolves a name or a path, are specs/presets.py.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Literal

from scalestudy.errors import ScalestudyError

Family = Literal["t5", "mt5", "gpt2", "llama"]
# T5 takes any "{act}" or "gated-{act}" (feed_forward_proj); GPT-2 its activation_function (GPT_FFNS); Llama
# layouts "swiglu".
Ffn = str
T5_ACTIVATIONS = ("relu", "gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "silu", "swish", "quick_gelu")
AttentionBias = Literal["none", "qkv", "all"]  # Llama attention_bias=true: q,k,v,o; Qwen2: q,k,v only
LLAMA_LAYOUTS = ("llama", "mistral", "qwen2")  # config model_types with the Llama block (RMSNorm, RoPE, SwiGLU, GQA)
# (Mistral's / Qwen2's sliding_window: priced as full attention over the sequence, as the cost model prices all)
# Nemotron (HF NemotronConfig, Nemotron-4 15B/340B): the same block with a non-gated squared-ReLU FFN (up, down;
# hidden_act relu2) and LayerNorm1p (weight and bias per norm; the cost model prices the norm as the Llama one's)
NEMOTRON = "nemotron"
# Falcon (HF FalconConfig: Falcon-7B/40B/180B): rotary, multi-query (7B) or grouped (new_decoder_architecture)
# K/V heads, a non-gated GELU FFN of ffn_hidden_size (4d), LayerNorm; read as a llama-family block with ffn "gelu".
# Its parallel attention + MLP (both from one LayerNorm) is priced as the sequential block. Cost model only: `train`
# builds none (COST_MODEL_TYPES).
FALCON = "falcon"
# Other published dense architectures, read as the block the cost model prices (readers: specs/hf_config.py `_COST_MODEL_READERS`):
# opt, bloom, mpt as the gpt2 block (LayerNorm, biased projections, non-gated FFN, tied head); gpt_neox, gptj as a
# llama-family block with a GELU FFN (rotary, untied); gemma, gemma2 as a llama-family gated block; umt5 as mT5.
# Cost model only, like Falcon: `train` builds none of them.
HF_DENSE_TYPES = ("opt", "bloom", "mpt", "gpt_neox", "gptj", "gemma", "gemma2", "umt5")
# Llama-layout decoders of other publishers (the Llama config keys; `_llama_like`): Qwen3 (heads of `head_dim`; its
# per-head q/k RMSNorms, 2 x head_dim per layer, not counted), Phi-3 (fused qkv_proj / gate_up_proj: the same weights),
# OLMo and OLMo 2 (OLMo's parameter-free LayerNorm and OLMo 2's q/k RMSNorms counted as Llama's two norms), Granite
# (Llama with scalar multipliers), StableLM (LayerNorm, partial rotary, `use_qkv_bias`), Cohere (parallel attention +
# FFN priced as the sequential block, LayerNorm, head tied by CohereConfig's default). Cost model only.
LLAMA_LIKE_TYPES = ("qwen3", "phi3", "olmo", "olmo2", "granite", "stablelm", "cohere")
# BART-style encoder-decoders (BartConfig's keys: `_bart_like`), read as the T5 block of the same widths: BART, mBART
# (mBART-50's 250,054 vocabulary), M2M-100 / NLLB-200 dense, Marian (OPUS-MT), Pegasus, PLBart. Their learned or
# sinusoidal position tables (<= 2 x 1,026 x d_model) and the biases of every projection and LayerNorm (< 1% of the
# weights together: bart-large 403.5M counted of 406.3M) are not counted; their eager kernels are priced as Hugging
# Face T5's. Cost model only.
SEQ2SEQ_TYPES = ("bart", "mbart", "m2m_100", "marian", "pegasus", "plbart")
COST_MODEL_TYPES = (FALCON, *HF_DENSE_TYPES, *LLAMA_LIKE_TYPES, *SEQ2SEQ_TYPES)
# the cost-model-only types presets use (to_hf_config writes each in its own model_type)
PRESET_COST_MODEL_TYPES = ("opt", "bloom", "mpt", FALCON, "gpt_neox", "gptj", "gemma", "gemma2", "qwen3", "phi3",
                           "olmo", "olmo2", "bart", "mbart", "m2m_100", "pegasus", "marian", "umt5")
# Mixture-of-experts configs: the cost model prices dense blocks only (every token through every FFN weight)
MOE_TYPES = ("mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "dbrx", "deepseek_v2", "deepseek_v3", "jamba", "phimoe",
             "granitemoe", "switch_transformers", "nllb_moe", "gpt_oss", "llama4")
MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
LLAMA_FFNS = ("swiglu", "relu2", "gelu")  # llama-family FFNs: SwiGLU; Nemotron's squared ReLU; Falcon's GELU
# gpt2-family FFN activations (GPT2Config.activation_function, default gelu_new: the composed tanh GELU HF GPT-2 runs
# as 8 eager ops; "gelu": one erf-GELU kernel, as Megatron's fused bias-GeLU and the published GPT rows price it)
GPT_FFNS = ("gelu_new", "gelu", "gelu_fast", "gelu_pytorch_tanh", "relu")


@dataclass(frozen=True)
class ModelSpec:
    """Architecture hyperparameters; names follow the T5 config where the families differ.

    For decoder-only models `num_layers` is the decoder depth and `num_decoder_layers` is 0.
    `d_kv` is the per-head dimension: T5 allows `d_kv * num_heads != d_model` (t5-3b, t5-11b).
    """

    name: str
    family: Family
    vocab_size: int
    d_model: int
    num_layers: int
    num_heads: int
    d_kv: int
    d_ff: int
    ffn: Ffn
    tie_word_embeddings: bool
    num_decoder_layers: int = 0
    num_kv_heads: int = 0  # 0 means num_heads (no grouped-query attention)
    relative_attention_num_buckets: int = 32
    max_position_embeddings: int = 0  # learned positions (GPT-2) or RoPE context (Llama)
    attention_bias: AttentionBias = "none"  # biases of the attention projections (Llama layouts)
    mlp_bias: bool = False  # biases of gate/up/down (Llama attention_bias/mlp_bias configs)
    hf_type: str = ""  # the config's model_type when it differs from `family` (mistral, qwen2: Llama layout)
    source: str = ""  # the config.json this spec was read from (absolute); "" for presets. `ref` is what to pass on

    def __post_init__(self) -> None:
        for field in ("vocab_size", "d_model", "num_layers", "num_heads", "d_kv", "d_ff"):
            if getattr(self, field) <= 0:
                raise ScalestudyError(f"model {self.name!r}: {field} must be positive, got {getattr(self, field)}")
        if self.num_decoder_layers < 0 or self.num_kv_heads < 0:
            raise ScalestudyError(f"model {self.name!r}: layer and head counts must not be negative")
        if self.is_encoder_decoder and self.num_decoder_layers == 0:
            raise ScalestudyError(f"model {self.name!r}: an encoder-decoder model needs num_decoder_layers > 0")
        if self.num_kv_heads and self.num_heads % self.num_kv_heads:
            raise ScalestudyError(
                f"model {self.name!r}: num_heads {self.num_heads} not divisible by num_kv_heads {self.num_kv_heads}"
            )

    @property
    def is_encoder_decoder(self) -> bool:
        return self.family in ("t5", "mt5")

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_heads

    @property
    def inner_dim(self) -> int:
        """Width of the attention projections: num_heads * d_kv."""
        return self.num_heads * self.d_kv

    @property
    def total_layers(self) -> int:
        return self.num_layers + self.num_decoder_layers

    @property
    def gated_ffn(self) -> bool:
        return self.ffn.startswith("gated-") or self.ffn == "swiglu"

    @property
    def ref(self) -> str:
        """What names this model to another command or process: the preset name, or the config.json path.

        `name` is only a label (a config's `_name_or_path`, or its folder): never pass it where a model is looked up.
        """
        return self.source or self.name

    def with_vocab(self, vocab_size: int) -> ModelSpec:
        return replace(self, vocab_size=vocab_size)

    def to_dict(self) -> dict:
        return asdict(self)


# A count of a model (layers, heads, widths, vocabulary, positions) beyond a 32-bit index is a typo: the cost
# model's FLOP and byte products of such counts leave floating point (an int too large for a float).
MAX_MODEL_COUNT = 2**31 - 1


def gpt_ffn(act: object, where: str) -> str:
    """A gpt2-family FFN activation (GPT_FFNS), else one line naming `where`."""
    if act not in GPT_FFNS:
        raise ScalestudyError(f"{where} {act!r}: a gpt model's activation is one of {', '.join(GPT_FFNS)}")
    return act


def t5_ffn(proj: object, where: str) -> str:
    """T5's feed_forward_proj: "{act}" or "gated-{act}" (as T5Config checks it); "gated-gelu" means gelu_new."""
    act = str(proj).split("-")[-1]
    if not isinstance(proj, str) or act not in T5_ACTIVATIONS or proj not in (act, f"gated-{act}"):
        raise ScalestudyError(f"{where}: unsupported feed_forward_proj {proj!r} (ACT or gated-ACT, ACT in "
                              f"{', '.join(T5_ACTIVATIONS)})")
    return "gated-gelu" if proj == "gated-gelu_new" else proj


# Strategy.attention -> Hugging Face attn_implementation: "flash" (no stored attention probabilities) is PyTorch's
# scaled_dot_product_attention (FlashAttention / memory-efficient kernels where the inputs allow), "eager" the
# materialised softmax. SDPA_TYPES: the model types whose Transformers class has an SDPA path (`_supports_sdpa`;
# tests/unit/test_engine_models.py pins this list to the installed Transformers).
HF_ATTENTION = {"flash": "sdpa", "eager": "eager"}
SDPA_TYPES = ("t5", "mt5", "gpt2", "llama", "mistral", "qwen2", "nemotron")


def check_trainable(spec: ModelSpec) -> None:
    """One line where `train` builds no Transformers class for `spec` (a cost-model-only model type): train, and
    tune before it calibrates."""
    kind = spec.hf_type or spec.family
    if kind in COST_MODEL_TYPES:
        raise ScalestudyError(f"{kind} models ({spec.name}) are read by the cost model only (estimate, plan): train "
                              f"builds {', '.join(SDPA_TYPES)}")


def hf_attn_implementation(spec: ModelSpec, attention: str) -> str:
    """The attn_implementation `train` builds `spec` with for Strategy.attention; one-line error where the model's
    Transformers class cannot run it."""
    if attention not in HF_ATTENTION:
        raise ScalestudyError(f"unknown attention {attention!r} (choose from {', '.join(HF_ATTENTION)})")
    impl = HF_ATTENTION[attention]
    kind = spec.hf_type or spec.family
    check_trainable(spec)
    if impl == "sdpa" and kind not in SDPA_TYPES:
        raise ScalestudyError(f"attention flash needs PyTorch SDPA, which Transformers does not offer for "
                              f"{kind} models ({spec.name}): use attention eager")
    return impl


# The shape keys of a model YAML / a published row's `model:` (seq: the positions a GPT learns, = the run's length)
SHAPE_KEYS = ("family", "d_model", "layers", "heads", "vocab", "seq", "d_ff", "kv_heads", "ffn", "tied", "d_kv")
_SHAPE_COUNTS = ("d_model", "layers", "heads", "vocab", "seq", "d_ff", "kv_heads", "d_kv")


def from_shape(name: str, m: dict, origin: str) -> ModelSpec:
    """A model from the shape a paper states. family gpt (the default; GPT-3, OPT, BLOOM, MPT, NeoX as published
    rows write them): FFN of 4 d_model with `ffn` gelu (one kernel; the default) or another GPT_FFNS activation
    (gelu_new: HF GPT-2's composed tanh GELU), learned positions of `seq`, head tied unless `tied: false`; llama:
    SwiGLU of width d_ff (or non-gated: `ffn: relu2` Nemotron's squared ReLU, `gelu` Falcon's), grouped-query
    `kv_heads`, head untied unless `tied: true`; t5: `layers` encoder and as many decoder blocks, d_kv, d_ff, ffn
    (relu, gated-gelu, ...), tied. Bad keys or values: one line naming `origin`."""
    unknown = set(m) - set(SHAPE_KEYS)
    if unknown:
        from scalestudy.specs.near_keys import did_you_mean

        raise ScalestudyError(f"{origin}: unknown model key(s) {', '.join(sorted(map(str, unknown)))}"
                              f"{did_you_mean(unknown, SHAPE_KEYS)} (shape keys: {', '.join(SHAPE_KEYS)}; the "
                              "decoder length of a T5 run is --target-len)")
    m = {k: v for k, v in m.items() if v is not None}  # a key left blank (`seq:`) is not given: a need or default
    for key in _SHAPE_COUNTS:
        value = m.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or not 1 <= value <= MAX_MODEL_COUNT):
            raise ScalestudyError(f"{origin}: {key} must be a whole number >= 1 (at most {MAX_MODEL_COUNT}), got "
                                  f"{value!r}")
    family, tied = m.get("family", "gpt"), m.get("tied")
    if tied is not None and not isinstance(tied, bool):
        raise ScalestudyError(f"{origin}: tied must be true or false, got {tied!r}")
    need = {"gpt": ("d_model", "layers", "heads", "vocab", "seq"), "llama": ("d_model", "layers", "heads", "vocab",
            "d_ff"), "t5": ("d_model", "layers", "heads", "vocab", "d_kv", "d_ff", "ffn")}.get(family) \
        if isinstance(family, str) else None  # a list or mapping: no family name (unhashable: a TypeError)
    if need is None:
        raise ScalestudyError(f"{origin}: family must be gpt, llama or t5, got {family!r}")
    missing = [k for k in need if k not in m]
    if missing:
        raise ScalestudyError(f"{origin}: a {family} model needs {', '.join(missing)}")
    d, heads = m["d_model"], m["heads"]
    if family != "t5" and d % heads:  # GPT-2's and Llama's attention split d_model into the heads (T5 states d_kv)
        raise ScalestudyError(f"{origin}: d_model {d} is not divisible by heads {heads}")
    if family == "t5":
        return ModelSpec(name=name, family="t5", vocab_size=m["vocab"], d_model=d, num_layers=m["layers"],
                         num_decoder_layers=m["layers"], num_heads=heads, d_kv=m["d_kv"], d_ff=m["d_ff"],
                         ffn=t5_ffn(m["ffn"], origin), tie_word_embeddings=bool(tied if tied is not None else True))
    if family == "llama":
        ffn = m.get("ffn", "swiglu")
        if ffn not in LLAMA_FFNS:
            raise ScalestudyError(f"{origin}: a llama model's ffn is swiglu, relu2 (Nemotron) or gelu (Falcon), got "
                                  f"{ffn!r}")
        return ModelSpec(name=name, family="llama", vocab_size=m["vocab"], d_model=d, num_layers=m["layers"],
                         num_heads=heads, d_kv=d // heads, d_ff=m["d_ff"], ffn=ffn, num_kv_heads=m.get("kv_heads", 0),
                         tie_word_embeddings=bool(tied), max_position_embeddings=m.get("seq", 0))
    if "d_ff" in m or "kv_heads" in m:
        raise ScalestudyError(f"{origin}: a gpt model has an FFN of 4 d_model and full heads (d_ff and kv_heads are "
                              "llama / t5 keys)")
    return ModelSpec(name=name, family="gpt2", vocab_size=m["vocab"], d_model=d, num_layers=m["layers"],
                     num_heads=heads, d_kv=d // heads, d_ff=4 * d, ffn=gpt_ffn(m.get("ffn", "gelu"), f"{origin}: ffn"),
                     tie_word_embeddings=bool(tied if tied is not None else True), max_position_embeddings=m["seq"])
