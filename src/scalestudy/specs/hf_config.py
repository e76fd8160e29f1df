"""Hugging Face config.json <-> ModelSpec: `from_hf_config` reads a config of each model_type the cost model prices
(one reader a layout; a bad or missing field is one line naming the file), `to_hf_config` writes the config that builds
a spec's architecture (engine/hf_model.py). The model types and what each leaves out: specs/model.py.
"""

from __future__ import annotations

import json
from pathlib import Path

from scalestudy.errors import ScalestudyError
from scalestudy.specs.model import (COST_MODEL_TYPES, FALCON, LLAMA_LAYOUTS, LLAMA_LIKE_TYPES, MAX_MODEL_COUNT,
                                    MOE_KEYS, MOE_TYPES, NEMOTRON, PRESET_COST_MODEL_TYPES, SEQ2SEQ_TYPES,
                                    T5_ACTIVATIONS, AttentionBias, ModelSpec, gpt_ffn, t5_ffn)
from scalestudy.yamlfile import unreadable_value


def from_hf_config(path: str | Path) -> ModelSpec:
    """Build a spec from a Hugging Face `config.json` (model_type t5, mt5, gpt2, llama / mistral / qwen2, nemotron;
    cost model only: falcon, opt, bloom, mpt, gpt_neox, gptj, gemma, gemma2, umt5, LLAMA_LIKE_TYPES, SEQ2SEQ_TYPES).
    Mixture-of-experts configs are refused (one line)."""
    path = Path(path)
    if path.exists() and not path.is_file():  # it was 'not found'
        raise ScalestudyError(f"model config {path} is not a regular file (a FIFO or a device)")
    if not path.is_file():
        raise ScalestudyError(f"model config not found: {path}")
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ScalestudyError(f"model config {path} is not valid JSON: {exc}") from None
    except ValueError as exc:  # json reads at most 4,300 digits into an int
        raise ScalestudyError(f"model config {path}: {unreadable_value(exc)}") from None
    except RecursionError:  # thousands of nested brackets: json's decoder recurses once per level
        raise ScalestudyError(f"model config {path}: nested too deeply to be a model config") from None
    if not isinstance(cfg, dict):
        raise ScalestudyError(f"model config {path} must hold a JSON object")
    kind = cfg.get("model_type")
    if kind is not None and not isinstance(kind, str):  # a list or mapping: unhashable in the readers' lookups
        raise ScalestudyError(f"model config {path}: model_type must be text (t5, gpt2, llama, ...), got {kind!r}")
    # The display name: the config's own, else its folder's (a file named config.json says nothing).
    name = cfg.get("_name_or_path") or (path.resolve().parent.name if path.stem == "config" else path.stem)
    if not isinstance(name, str) or len(name) > MAX_NAME_CHARS:  # a hub id or a path; printed in every table title
        raise ScalestudyError(f"model config {path}: _name_or_path must be text of at most {MAX_NAME_CHARS} "
                              f"characters (a hub id or a path), got {_shown(name)}")
    if any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in name):  # as a study's name (study/spec.py)
        raise ScalestudyError(f"model config {path}: the model's name {_shown(name)} holds a control character (it "
                              "heads every table and goes into run configs and reports): give one line of text")
    _refuse_moe(cfg, kind, path)  # before any reader: a T5 or GPT-2 config with experts is no dense model either
    source = str(path.resolve())
    try:
        if kind in ("t5", "mt5"):
            ffn = t5_ffn(cfg.get("feed_forward_proj", "relu"), f"model config {path}")
            layers = _int(cfg, "num_layers", path)
            _warn_forced_tie(cfg, kind, ffn, path)
            return ModelSpec(
                name=name, family=kind, vocab_size=_int(cfg, "vocab_size", path),
                d_model=_int(cfg, "d_model", path), num_layers=layers,
                num_decoder_layers=_int(cfg, "num_decoder_layers", path, layers),
                num_heads=_int(cfg, "num_heads", path), d_kv=_int(cfg, "d_kv", path), d_ff=_int(cfg, "d_ff", path),
                ffn=ffn,
                # T5 defaults to tied; mT5's published configs say false (and mean it).
                tie_word_embeddings=_flag(cfg, "tie_word_embeddings", kind == "t5", path),
                relative_attention_num_buckets=_int(cfg, "relative_attention_num_buckets", path, 32), source=source,
            )
        if kind == "gpt2":
            d = _int(cfg, "n_embd", path)
            heads = _int(cfg, "n_head", path)
            _divides(d, "n_embd", heads, "n_head", path)  # GPT-2 splits the width evenly over the heads
            return ModelSpec(
                name=name, family="gpt2", vocab_size=_int(cfg, "vocab_size", path), d_model=d,
                num_layers=_int(cfg, "n_layer", path),
                num_heads=heads, d_kv=d // heads, d_ff=_int(cfg, "n_inner", path, 4 * d),
                ffn=gpt_ffn(cfg.get("activation_function", "gelu_new"), f"model config {path}: activation_function"),
                tie_word_embeddings=_flag(cfg, "tie_word_embeddings", True, path),
                max_position_embeddings=_int(cfg, "n_positions", path, 1024), source=source,
            )
        if kind == FALCON:
            return _falcon(cfg, path, name, source)
        if kind in _COST_MODEL_READERS:
            return _COST_MODEL_READERS[kind](cfg, path, name, source)
        if kind in LLAMA_LAYOUTS or kind == NEMOTRON:
            return _llama_block(
                cfg, path, name, source, ffn=_nemotron_act(cfg, path) if kind == NEMOTRON else "swiglu",
                attention_bias="qkv" if kind == "qwen2" else ("all" if _flag(cfg, "attention_bias", False, path)
                                                              else "none"),
                mlp_bias=kind in ("llama", NEMOTRON) and _flag(cfg, "mlp_bias", False, path),
                hf_type="" if kind == "llama" else kind)
    except KeyError as exc:
        raise ScalestudyError(f"model config {path}: missing field {exc.args[0]!r} for model_type {kind!r}") from None
    raise ScalestudyError(f"model config {path}: unsupported model_type {kind!r} (t5, mt5, gpt2, "
                          f"{', '.join(LLAMA_LAYOUTS)}, {NEMOTRON}, {', '.join(COST_MODEL_TYPES)})")


def _refuse_moe(cfg: dict, kind: object, path: Path) -> None:
    """A mixture-of-experts config (Mixtral, Qwen2-MoE, DBRX, ...): one line, not a dense model of the wrong size."""
    experts = [k for k in MOE_KEYS if isinstance(cfg.get(k), (int, float)) and cfg[k] > 1]  # 8.0 is 8 experts
    if kind in MOE_TYPES or experts:
        raise ScalestudyError(f"model config {path}: model_type {kind!r} is a mixture of experts"
                              f"{f' ({experts[0]} {cfg[experts[0]]})' if experts else ''}: the cost model prices "
                              "dense blocks only (no router, expert parallelism or per-expert token counts)")


def _gelu(cfg: dict, key: str, default: str, kind: str, path: Path) -> None:
    """The FFN activation of a GELU architecture (any of Transformers' GELU variants costs the same)."""
    act = cfg.get(key) or default
    if not (isinstance(act, str) and act.startswith("gelu")):
        raise ScalestudyError(f"model config {path}: {key} {act!r} of a {kind} model: only GELU variants are modelled")


def _gpt_block(cfg: dict, kind: str, name: str, source: str, *, d: int, layers: int, heads: int, vocab: int,
               d_ff: int, ffn: str, positions: int, path: Path) -> ModelSpec:
    """The gpt2 block (LayerNorm, biased q/k/v/o and fc1/fc2, full heads, tied head) for OPT, BLOOM and MPT; the
    position table has `positions` rows (0: ALiBi, none)."""
    _divides(d, "hidden size", heads, "head count", path)
    tied = _flag(cfg, "tie_word_embeddings", True, path)
    return ModelSpec(name=name, family="gpt2", vocab_size=vocab, d_model=d, num_layers=layers, num_heads=heads,
                     d_kv=d // heads, d_ff=d_ff, ffn=ffn, tie_word_embeddings=tied, max_position_embeddings=positions,
                     hf_type=kind, source=source)


def _opt(cfg: dict, path: Path, name: str, source: str) -> ModelSpec:
    """OPTConfig: ReLU FFN of ffn_dim, learned positions of max_position_embeddings + 2 (OPTLearnedPositionalEmbedding's
    offset), tied. Post-LayerNorm (do_layer_norm_before false, OPT-350M) costs the same; a word_embed_proj_dim other
    than hidden_size (project_in / project_out, OPT-350M) is not modelled."""
    d = _int(cfg, "hidden_size", path)
    if _int(cfg, "word_embed_proj_dim", path, d) != d:
        raise ScalestudyError(f"model config {path}: word_embed_proj_dim {cfg['word_embed_proj_dim']} != hidden_size "
                              f"{d} (OPT's project_in/project_out) is not modelled")
    act = cfg.get("activation_function", "relu")
    if act not in ("relu", "gelu"):
        raise ScalestudyError(f"model config {path}: activation_function {act!r} of an opt model: relu or gelu")
    return _gpt_block(cfg, "opt", name, source, d=d, layers=_int(cfg, "num_hidden_layers", path),
                      heads=_int(cfg, "num_attention_heads", path), vocab=_int(cfg, "vocab_size", path, 50272),
                      d_ff=_int(cfg, "ffn_dim", path), ffn=act,
                      positions=_int(cfg, "max_position_embeddings", path, 2048) + 2, path=path)


def _bloom(cfg: dict, path: Path, name: str, source: str) -> ModelSpec:
    """BloomConfig: width hidden_size (n_embed in the published configs), n_layer, n_head, GELU FFN of 4 d, ALiBi
    (no position table), tied; the embedding LayerNorm (2 d) is not counted."""
    d = _int(cfg, "n_embed", path) if cfg.get("n_embed") is not None else _int(cfg, "hidden_size", path)
    layers = _int(cfg, "n_layer", path) if cfg.get("n_layer") is not None else _int(cfg, "num_hidden_layers", path)
    heads = _int(cfg, "n_head", path) if cfg.get("n_head") is not None else _int(cfg, "num_attention_heads", path)
    return _gpt_block(cfg, "bloom", name, source, d=d, layers=layers, heads=heads,
                      vocab=_int(cfg, "vocab_size", path, 250880), d_ff=4 * d, ffn="gelu", positions=0, path=path)


def _mpt(cfg: dict, path: Path, name: str, source: str) -> ModelSpec:
    """MPT (llm-foundry MPTConfig / Transformers MptConfig): d_model, n_layers, n_heads, GELU FFN of expansion_ratio
    x d_model, tied; ALiBi (attn_config.alibi, Transformers' default) has no position table, else learned_pos_emb
    has max_seq_len rows. no_bias (MPT-7B/30B) drops the biases the gpt2 block counts (< 0.1% of the weights)."""
    attn, ffn = cfg.get("attn_config") or {}, cfg.get("ffn_config") or {}
    if not isinstance(ffn, dict):
        raise ScalestudyError(f"model config {path}: ffn_config must be a mapping (e.g. {{\"ffn_type\": \"mptmlp\"}}), "
                              f"got {ffn!r}")
    ffn_type = ffn.get("ffn_type", "mptmlp")
    if not isinstance(attn, dict) or attn.get("attn_type", "multihead_attention") != "multihead_attention" or \
            ffn_type not in ("mptmlp", "te_ln_mlp"):
        raise ScalestudyError(f"model config {path}: an mpt model with attn_type "
                              f"{attn.get('attn_type') if isinstance(attn, dict) else attn!r} / ffn_type {ffn_type!r}:"
                              " only multihead_attention and the GELU mptmlp are modelled")
    d = _int(cfg, "d_model", path)
    learned = _flag(cfg, "learned_pos_emb", True, path) and not _flag(attn, "alibi", True, path) and \
        not _flag(attn, "rope", False, path)
    return _gpt_block(cfg, "mpt", name, source, d=d, layers=_int(cfg, "n_layers", path),
                      heads=_int(cfg, "n_heads", path), vocab=_int(cfg, "vocab_size", path, 50368),
                      d_ff=_int(cfg, "expansion_ratio", path, 4) * d, ffn="gelu",
                      positions=_int(cfg, "max_seq_len", path, 2048) if learned else 0, path=path)


def _rotary_gelu(cfg: dict, kind: str, name: str, source: str, *, d: int, layers: int, heads: int, d_ff: int,
                 attention_bias: AttentionBias, positions: int, path: Path) -> ModelSpec:
    """GPT-NeoX / GPT-J: a llama-family block with a non-gated GELU FFN (biased), rotary, untied head. Their parallel
    attention + MLP (GPT-J always, GPT-NeoX use_parallel_residual) is priced as the sequential block, and the
    partial rotary (rotary_pct / rotary_dim) as rotary on the full head; LayerNorm counted as RMSNorm (d, not 2 d)."""
    _divides(d, "hidden size", heads, "head count", path)
    return ModelSpec(name=name, family="llama", vocab_size=_int(cfg, "vocab_size", path), d_model=d,
                     num_layers=layers, num_heads=heads, d_kv=d // heads, d_ff=d_ff, ffn="gelu",
                     tie_word_embeddings=_flag(cfg, "tie_word_embeddings", False, path),
                     max_position_embeddings=positions, attention_bias=attention_bias, mlp_bias=True, hf_type=kind,
                     source=source)


def _gpt_neox(cfg: dict, path: Path, name: str, source: str) -> ModelSpec:
    """GPTNeoXConfig (GPT-NeoX-20B, Pythia): hidden_size, num_hidden_layers, num_attention_heads, intermediate_size,
    hidden_act gelu, biased attention (attention_bias, default true)."""
    _gelu(cfg, "hidden_act", "gelu", "gpt_neox", path)
    return _rotary_gelu(cfg, "gpt_neox", name, source, d=_int(cfg, "hidden_size", path),
                        layers=_int(cfg, "num_hidden_layers", path), heads=_int(cfg, "num_attention_heads", path),
                        d_ff=_int(cfg, "intermediate_size", path),
                        attention_bias="all" if _flag(cfg, "attention_bias", True, path) else "none",
                        positions=_int(cfg, "max_position_embeddings", path, 2048), path=path)


def _gptj(cfg: dict, path: Path, name: str, source: str) -> ModelSpec:
    """GPTJConfig (GPT-J-6B): n_embd, n_layer, n_head, n_inner (default 4 n_embd), gelu_new, unbiased q/k/v/out,
    biased MLP; its LM head's bias (vocab_size) is not counted."""
    _gelu(cfg, "activation_function", "gelu_new", "gptj", path)
    d = _int(cfg, "n_embd", path)
    return _rotary_gelu(cfg, "gptj", name, source, d=d, layers=_int(cfg, "n_layer", path),
                        heads=_int(cfg, "n_head", path), d_ff=_int(cfg, "n_inner", path, 4 * d), attention_bias="none",
                        positions=_int(cfg, "n_positions", path, 2048), path=path)


def _gemma(cfg: dict, path: Path, name: str, source: str) -> ModelSpec:
    """GemmaConfig / Gemma2Config: the Llama block with heads of head_dim (Gemma-7B: 16 x 256 > hidden 3072), K/V
    heads num_key_value_heads, a gated GELU (GeGLU, priced as the SwiGLU of the same width), tied head. Gemma 2's
    sliding-window layers are priced as full attention, its logit soft-capping and extra norms are not priced."""
    kind = cfg["model_type"]
    _gelu(cfg, "hidden_activation" if cfg.get("hidden_activation") else "hidden_act", "gelu_pytorch_tanh", kind, path)
    heads = _int(cfg, "num_attention_heads", path)
    kv = _int(cfg, "num_key_value_heads", path, heads)
    _divides(heads, "num_attention_heads", kv, "num_key_value_heads", path)
    return ModelSpec(name=name, family="llama", vocab_size=_int(cfg, "vocab_size", path, 256000),
                     d_model=_int(cfg, "hidden_size", path), num_layers=_int(cfg, "num_hidden_layers", path),
                     num_heads=heads, num_kv_heads=0 if kv == heads else kv, d_kv=_int(cfg, "head_dim", path, 256),
                     d_ff=_int(cfg, "intermediate_size", path), ffn="swiglu",
                     tie_word_embeddings=_flag(cfg, "tie_word_embeddings", True, path),
                     max_position_embeddings=_int(cfg, "max_position_embeddings", path, 8192),
                     attention_bias="all" if _flag(cfg, "attention_bias", False, path) else "none", hf_type=kind,
                     source=source)


def _umt5(cfg: dict, path: Path, name: str, source: str) -> ModelSpec:
    """UMT5Config: the mT5 block and keys (d_model, d_kv, d_ff, num_layers, num_heads, feed_forward_proj), with a
    relative-position bias in every layer instead of the first (buckets x heads each: not counted); head untied
    unless tie_word_embeddings says so (google/umt5-* say false)."""
    layers = _int(cfg, "num_layers", path)
    return ModelSpec(name=name, family="mt5", vocab_size=_int(cfg, "vocab_size", path, 256384),
                     d_model=_int(cfg, "d_model", path), num_layers=layers,
                     num_decoder_layers=_int(cfg, "num_decoder_layers", path, layers),
                     num_heads=_int(cfg, "num_heads", path), d_kv=_int(cfg, "d_kv", path),
                     d_ff=_int(cfg, "d_ff", path),
                     ffn=t5_ffn(cfg.get("feed_forward_proj", "gated-gelu"), f"model config {path}"),
                     tie_word_embeddings=_flag(cfg, "tie_word_embeddings", False, path),
                     relative_attention_num_buckets=_int(cfg, "relative_attention_num_buckets", path, 32),
                     hf_type="umt5", source=source)


def _llama_like(cfg: dict, path: Path, name: str, source: str) -> ModelSpec:
    """A LLAMA_LIKE_TYPES config: the Llama keys (hidden_size, intermediate_size, num_hidden_layers,
    num_attention_heads, num_key_value_heads, head_dim), a gated FFN of hidden_act SiLU (a gated GELU priced as the
    SwiGLU of the same width, as Gemma's), q/k/v(/o) biases by attention_bias (StableLM: use_qkv_bias, q/k/v only),
    gate/up/down biases by mlp_bias (Granite); tied head by the config's own default (Cohere true, the rest false)."""
    kind = cfg["model_type"]
    act = cfg.get("hidden_act") or "silu"
    if not (isinstance(act, str) and (act in ("silu", "swish") or act.startswith("gelu"))):
        raise ScalestudyError(f"model config {path}: hidden_act {act!r} of a {kind} model: only its gated SiLU "
                              "(or GELU) FFN is modelled")
    qkv_bias = _flag(cfg, "use_qkv_bias", False, path) if kind == "stablelm" else False
    return _llama_block(
        cfg, path, name, source, ffn="swiglu",
        attention_bias="qkv" if qkv_bias else ("all" if _flag(cfg, "attention_bias", False, path) else "none"),
        mlp_bias=_flag(cfg, "mlp_bias", False, path), hf_type=kind, tied=kind == "cohere",
        # Qwen3Config's head_dim defaults to 128, not hidden_size / heads, where config.json omits it
        head_dim=128 if kind == "qwen3" else 0)


def _llama_block(cfg: dict, path: Path, name: str, source: str, *, ffn: str, attention_bias: AttentionBias,
                 mlp_bias: bool, hf_type: str, tied: bool = False, head_dim: int = 0) -> ModelSpec:
    """The Llama block from the Llama config keys (hidden_size, num_attention_heads, num_key_value_heads, head_dim,
    num_hidden_layers, intermediate_size, vocab_size, max_position_embeddings, tie_word_embeddings -- default
    `tied`): llama / mistral / qwen2 / nemotron and LLAMA_LIKE_TYPES. `head_dim`: the width a config without one
    means (0: hidden_size / heads, which must then divide; else the heads have their own width, Qwen3-0.6B 16 x 128)."""
    d = _int(cfg, "hidden_size", path)
    heads = _int(cfg, "num_attention_heads", path)
    kv = _int(cfg, "num_key_value_heads", path, heads)
    if cfg.get("head_dim") is None and not head_dim:
        _divides(d, "hidden_size", heads, "num_attention_heads", path)
    _divides(heads, "num_attention_heads", kv, "num_key_value_heads", path)  # each KV head serves a group
    return ModelSpec(
        name=name, family="llama", vocab_size=_int(cfg, "vocab_size", path), d_model=d,
        num_layers=_int(cfg, "num_hidden_layers", path), num_heads=heads, num_kv_heads=0 if kv == heads else kv,
        d_kv=_int(cfg, "head_dim", path, head_dim or d // heads), d_ff=_int(cfg, "intermediate_size", path), ffn=ffn,
        tie_word_embeddings=_flag(cfg, "tie_word_embeddings", tied, path),
        max_position_embeddings=_int(cfg, "max_position_embeddings", path, 2048),
        attention_bias=attention_bias, mlp_bias=mlp_bias, hf_type=hf_type, source=source)


def _bart_like(cfg: dict, path: Path, name: str, source: str) -> ModelSpec:
    """A SEQ2SEQ_TYPES config (BartConfig's keys): d_model, encoder_layers / decoder_layers, encoder_attention_heads
    / decoder_attention_heads and encoder_ffn_dim / decoder_ffn_dim (the T5 block has one head count and FFN width
    for both stacks: refused when they differ), the non-gated FFN of activation_function, vocab_size, a head tied
    to the shared embedding (tie_word_embeddings, default true; Marian's separate decoder embedding refused)."""
    kind = cfg["model_type"]
    heads = _int(cfg, "encoder_attention_heads", path)
    d_ff = _int(cfg, "encoder_ffn_dim", path)
    if (_int(cfg, "decoder_attention_heads", path, heads), _int(cfg, "decoder_ffn_dim", path, d_ff)) != (heads, d_ff):
        raise ScalestudyError(f"model config {path}: decoder_attention_heads / decoder_ffn_dim differ from the "
                              "encoder's: the cost model prices one head count and FFN width for both stacks")
    if not _flag(cfg, "share_encoder_decoder_embeddings", True, path):
        raise ScalestudyError(f"model config {path}: share_encoder_decoder_embeddings false (a separate decoder "
                              "embedding) is not modelled")
    d = _int(cfg, "d_model", path)
    _divides(d, "d_model", heads, "encoder_attention_heads", path)
    act = cfg.get("activation_function") or "gelu"
    if act not in T5_ACTIVATIONS:
        raise ScalestudyError(f"model config {path}: activation_function {act!r} of a {kind} model: one of "
                              f"{', '.join(T5_ACTIVATIONS)}")
    return ModelSpec(name=name, family="t5", vocab_size=_int(cfg, "vocab_size", path), d_model=d,
                     num_layers=_int(cfg, "encoder_layers", path), num_decoder_layers=_int(cfg, "decoder_layers", path),
                     num_heads=heads, d_kv=d // heads, d_ff=d_ff, ffn=act,
                     tie_word_embeddings=_flag(cfg, "tie_word_embeddings", True, path), hf_type=kind, source=source)


_COST_MODEL_READERS = {"opt": _opt, "bloom": _bloom, "mpt": _mpt, "gpt_neox": _gpt_neox, "gptj": _gptj,
                       "gemma": _gemma, "gemma2": _gemma, "umt5": _umt5,
                       **{kind: _llama_like for kind in LLAMA_LIKE_TYPES}, **{kind: _bart_like for kind in SEQ2SEQ_TYPES}}


def _falcon(cfg: dict, path: Path, name: str, source: str) -> ModelSpec:
    """A Falcon config as Transformers' FalconConfig reads it: K/V heads num_kv_heads under new_decoder_architecture,
    else 1 when multi_query (the default), else num_attention_heads; ffn_hidden_size default 4 hidden_size."""
    if cfg.get("activation", "gelu") != "gelu":
        raise ScalestudyError(f"model config {path}: activation {cfg['activation']!r} of a falcon model: only gelu "
                              "(Falcon's) is modelled")
    d, heads = _int(cfg, "hidden_size", path, 4544), _int(cfg, "num_attention_heads", path, 71)
    _divides(d, "hidden_size", heads, "num_attention_heads", path)
    if _flag(cfg, "new_decoder_architecture", False, path):
        kv = _int(cfg, "num_kv_heads", path, heads)
    else:
        kv = 1 if _flag(cfg, "multi_query", True, path) else heads
    _divides(heads, "num_attention_heads", kv, "num_kv_heads", path)
    bias = _flag(cfg, "bias", False, path)
    return ModelSpec(
        name=name, family="llama", vocab_size=_int(cfg, "vocab_size", path, 65024), d_model=d,
        num_layers=_int(cfg, "num_hidden_layers", path, 32), num_heads=heads, num_kv_heads=0 if kv == heads else kv,
        d_kv=d // heads, d_ff=_int(cfg, "ffn_hidden_size", path, 4 * d), ffn="gelu",
        tie_word_embeddings=_flag(cfg, "tie_word_embeddings", True, path),
        max_position_embeddings=_int(cfg, "max_position_embeddings", path, 2048),
        attention_bias="all" if bias else "none", mlp_bias=bias, hf_type=FALCON, source=source)


def _nemotron_act(cfg: dict, path: Path) -> str:
    """A Nemotron config's FFN: hidden_act relu2 (NemotronConfig's default, every Nemotron-4 release) is the one
    the cost model prices (ModelSpec ffn "relu2": up, squared ReLU, down)."""
    act = cfg.get("hidden_act", "relu2")
    if act != "relu2":
        raise ScalestudyError(f"model config {path}: hidden_act {act!r} of a nemotron model: only relu2 (Nemotron's "
                              "squared ReLU, the default) is modelled")
    return "relu2"


def _flag(cfg: dict, key: str, default: bool, path: Path) -> bool:
    """A true/false field of the config ("yes" or 1 is not one: bool("no") is True)."""
    value = cfg.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ScalestudyError(f"model config {path}: {key} must be true or false, got {value!r}")
    return value


MAX_NAME_CHARS = 4096  # a model's display name (a hub id or a path: PATH_MAX on Linux)


def _shown(value: object, limit: int = 60) -> str:
    """repr(value), cut to `limit` characters: an error line names a bad value, not all of it."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def _int(cfg: dict, key: str, path: Path, default: int | None = None) -> int:
    """A count of the config (layers, heads, widths, vocabulary, positions): a whole number >= 1, else one line.
    `default` stands for a missing or null field (KeyError without one: the caller names the missing field)."""
    value = cfg[key] if default is None or cfg.get(key) is not None else default  # null: what Transformers takes
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value in (
            float("inf"), float("-inf")) or value != int(value) or not 1 <= value <= MAX_MODEL_COUNT:
        raise ScalestudyError(f"model config {path}: {key} must be a whole number >= 1 (at most {MAX_MODEL_COUNT}), "
                              f"got {value!r}")
    return int(value)


def _divides(total: int, name: str, parts: int, part_name: str, path: Path) -> None:
    """A width or head count the model splits evenly (Transformers refuses the model otherwise): one line."""
    if total % parts:
        raise ScalestudyError(f"model config {path}: {name} {total} is not divisible by {part_name} {parts}")


_WARNED: set[str] = set()


def _warn_forced_tie(cfg: dict, kind: str, ffn: str, path: Path) -> None:
    """Transformers 5 writes tie_word_embeddings=true into every T5/mT5 config it saves (it forces the value), so a
    T5 v1.1 / mT5 config saved by it no longer says that the published model has its own LM head."""
    if not (cfg.get("tie_word_embeddings") and (kind == "mt5" or ffn.startswith("gated-"))):
        return
    if not str(cfg.get("transformers_version", "")).startswith("5.") or str(path) in _WARNED:
        return
    import sys

    _WARNED.add(str(path))  # once per file and process (every trial of a study reads the config again)

    print(f"warning: {path}: tie_word_embeddings=true in a T5 v1.1/mT5 config saved by Transformers "
          f"{cfg['transformers_version']}, which writes true for every T5 config; the published T5 v1.1/mT5 models "
          "have an untied LM head (mT5-XXL: 12.92B, not 11.90B). Counting it tied, as written; set "
          '"tie_word_embeddings": false if the model is untied.', file=sys.stderr)


def to_hf_config(spec: ModelSpec) -> dict:
    """The Hugging Face config dict (model_type + fields) that builds this architecture."""
    if spec.hf_type in PRESET_COST_MODEL_TYPES and spec.hf_type != "umt5":
        return _cost_model_hf_config(spec)
    if spec.is_encoder_decoder:  # T5, mT5 and umT5 (T5's keys)
        return {
            "model_type": spec.hf_type or spec.family, "vocab_size": spec.vocab_size, "d_model": spec.d_model, "d_kv": spec.d_kv,
            "d_ff": spec.d_ff, "num_layers": spec.num_layers, "num_decoder_layers": spec.num_decoder_layers,
            "num_heads": spec.num_heads, "feed_forward_proj": spec.ffn,
            "relative_attention_num_buckets": spec.relative_attention_num_buckets,
            "tie_word_embeddings": spec.tie_word_embeddings, "decoder_start_token_id": 0, "pad_token_id": 0,
            "eos_token_id": 1,
        }
    if spec.family == "gpt2":
        return {
            "model_type": "gpt2", "vocab_size": spec.vocab_size, "n_embd": spec.d_model, "n_layer": spec.num_layers,
            "n_head": spec.num_heads, "n_inner": spec.d_ff, "n_positions": spec.max_position_embeddings,
            "activation_function": spec.ffn, "tie_word_embeddings": spec.tie_word_embeddings,
        }
    fields = {
        "model_type": spec.hf_type or "llama", "vocab_size": spec.vocab_size, "hidden_size": spec.d_model,
        "intermediate_size": spec.d_ff, "num_hidden_layers": spec.num_layers, "num_attention_heads": spec.num_heads,
        "num_key_value_heads": spec.kv_heads, "head_dim": spec.d_kv,
        "max_position_embeddings": spec.max_position_embeddings, "tie_word_embeddings": spec.tie_word_embeddings,
    }
    if spec.hf_type in ("", NEMOTRON):  # Llama's (and Nemotron's) own switches; Qwen2 has q/k/v biases built in
        fields.update(attention_bias=spec.attention_bias == "all", mlp_bias=spec.mlp_bias)
    if spec.hf_type == NEMOTRON:
        fields["hidden_act"] = "relu2"
    return fields


def _cost_model_hf_config(spec: ModelSpec) -> dict:
    """The config.json of a cost-model-only preset's architecture (PRESET_COST_MODEL_TYPES) in its own model_type,
    so that it reads back (`from_hf_config`) as the same spec; `train` builds none of them."""
    common = {"vocab_size": spec.vocab_size, "tie_word_embeddings": spec.tie_word_embeddings}
    if spec.hf_type == "opt":  # OPTLearnedPositionalEmbedding holds max_position_embeddings + 2 rows
        return {"model_type": "opt", "hidden_size": spec.d_model, "num_hidden_layers": spec.num_layers,
                "num_attention_heads": spec.num_heads, "ffn_dim": spec.d_ff, "activation_function": spec.ffn,
                "max_position_embeddings": spec.max_position_embeddings - 2, **common}
    if spec.hf_type == "bloom":
        return {"model_type": "bloom", "hidden_size": spec.d_model, "n_layer": spec.num_layers,
                "n_head": spec.num_heads, **common}
    if spec.hf_type == "mpt":  # ALiBi (no position table) unless the spec has learned positions
        return {"model_type": "mpt", "d_model": spec.d_model, "n_layers": spec.num_layers, "n_heads": spec.num_heads,
                "expansion_ratio": spec.d_ff // spec.d_model, "max_seq_len": spec.max_position_embeddings or 2048,
                "attn_config": {"alibi": not spec.max_position_embeddings}, **common}
    if spec.hf_type in ("gpt_neox", "gptj"):
        return _rotary_gelu_hf_config(spec, common)
    if spec.hf_type in SEQ2SEQ_TYPES:  # BartConfig's keys: one width and head count for both stacks
        return {"model_type": spec.hf_type, "d_model": spec.d_model, "encoder_layers": spec.num_layers,
                "decoder_layers": spec.num_decoder_layers, "encoder_attention_heads": spec.num_heads,
                "decoder_attention_heads": spec.num_heads, "encoder_ffn_dim": spec.d_ff,
                "decoder_ffn_dim": spec.d_ff, "activation_function": spec.ffn, **common}
    if spec.hf_type != FALCON:  # gemma, gemma2, LLAMA_LIKE_TYPES: the Llama keys with an explicit head_dim
        return {"model_type": spec.hf_type, "hidden_size": spec.d_model, "intermediate_size": spec.d_ff,
                "num_hidden_layers": spec.num_layers, "num_attention_heads": spec.num_heads,
                "num_key_value_heads": spec.kv_heads, "head_dim": spec.d_kv,
                "max_position_embeddings": spec.max_position_embeddings,
                "attention_bias": spec.attention_bias == "all", **common}
    # Falcon-7B's layout (multi-query, the old decoder) when one K/V head; grouped K/V only under the new decoder
    grouped = 1 < spec.kv_heads < spec.num_heads
    heads = {"new_decoder_architecture": True, "num_kv_heads": spec.kv_heads} if grouped else {
        "new_decoder_architecture": False, "multi_query": spec.kv_heads == 1}
    return {"model_type": FALCON, "hidden_size": spec.d_model, "num_hidden_layers": spec.num_layers,
            "num_attention_heads": spec.num_heads, **heads, "ffn_hidden_size": spec.d_ff,
            "max_position_embeddings": spec.max_position_embeddings, "bias": spec.attention_bias == "all", **common}


def _rotary_gelu_hf_config(spec: ModelSpec, common: dict) -> dict:
    """GPT-NeoX's (biased attention switch) or GPT-J's (n_* keys) config.json of a `_rotary_gelu` spec."""
    if spec.hf_type == "gptj":
        return {"model_type": "gptj", "n_embd": spec.d_model, "n_layer": spec.num_layers, "n_head": spec.num_heads,
                "n_inner": spec.d_ff, "n_positions": spec.max_position_embeddings, **common}
    return {"model_type": "gpt_neox", "hidden_size": spec.d_model, "num_hidden_layers": spec.num_layers,
            "num_attention_heads": spec.num_heads, "intermediate_size": spec.d_ff,
            "max_position_embeddings": spec.max_position_embeddings, "attention_bias": spec.attention_bias == "all",
            **common}
