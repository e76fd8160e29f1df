"""Did-you-mean hints for unknown keys: one rule for every YAML a user writes (run configs and their sections, study
specs, cluster, device and model files), so a typo or another tool's name for an option is answered the same way
everywhere.

A key's hint is the known key it most likely meant: first the name other tools give the same option (`learning_rate`
is Hugging Face's and DeepSpeed's `lr`: no spelling distance reaches it), then the closest spelling (difflib, its
default 0.6 similarity)."""

from __future__ import annotations

import difflib
from typing import Iterable

# Names other training tools give our options (Hugging Face TrainingArguments, DeepSpeed's config JSON, Megatron-LM's
# arguments, torchrun, Hugging Face config.json), each with our names in the order tried: the first one the file
# being read knows is the hint (a run config's nodes are `nnodes`, a cluster file's `nodes`).
SYNONYMS: dict[str, tuple[str, ...]] = {
    "learning_rate": ("lr",), "max_lr": ("lr",), "min_lr": ("min_lr_ratio",),
    "lr_warmup_steps": ("warmup_steps",), "lr_warmup_iters": ("warmup_steps",), "max_steps": ("steps",),
    "train_steps": ("steps",), "train_iters": ("steps",), "num_steps": ("steps",),
    "train_micro_batch_size_per_gpu": ("micro_batch",), "per_device_train_batch_size": ("micro_batch",),
    "micro_batch_size": ("micro_batch",), "batch_size": ("global_batch",), "train_batch_size": ("global_batch",),
    "global_batch_size": ("global_batch",), "seq_length": ("seq_len", "seq"), "max_seq_len": ("seq_len", "seq"),
    "max_seq_length": ("seq_len", "seq"), "sequence_length": ("seq_len", "seq"), "zero_stage": ("zero",),
    "stage": ("zero",), "tensor_model_parallel_size": ("tp",), "tensor_parallel": ("tp",),
    "pipeline_model_parallel_size": ("pp",), "pipeline_parallel": ("pp",), "context_parallel_size": ("cp",),
    "num_nodes": ("nnodes", "nodes"), "nproc_per_node": ("nproc", "gpus_per_node"),
    "gpus": ("gpus_per_node", "nproc"), "max_grad_norm": ("grad_clip",), "gradient_clipping": ("grad_clip",),
    "clip_grad": ("grad_clip",), "adam_beta1": ("beta1",), "adam_beta2": ("beta2",), "adam_epsilon": ("eps",),
    "adam_eps": ("eps",), "gradient_checkpointing": ("recompute",), "activation_checkpointing": ("recompute",),
    "recompute_granularity": ("recompute",), "dtype": ("precision",), "mixed_precision": ("precision",),
    "num_layers": ("layers",), "n_layer": ("layers",), "num_hidden_layers": ("layers",), "hidden_size": ("d_model",),
    "n_embd": ("d_model",), "num_attention_heads": ("heads",), "n_head": ("heads",), "num_heads": ("heads",),
    "vocab_size": ("vocab", "vocab_size"), "intermediate_size": ("d_ff",), "ffn_hidden_size": ("d_ff",),
    "num_key_value_heads": ("kv_heads",), "gpu": ("device",), "gpu_type": ("device",),
}


def nearest(key: str, known: Iterable[str]) -> str | None:
    """The known key `key` most likely meant (module docstring), or None."""
    known = [str(k) for k in known]
    name = str(key).strip().lower().replace("-", "_")
    for candidate in SYNONYMS.get(name, ()):
        if candidate in known:
            return candidate
    close = difflib.get_close_matches(name, known, n=1)
    return close[0] if close else None


def did_you_mean(unknown: Iterable[str], known: Iterable[str]) -> str:
    """' (did you mean lr?)' for one unknown key, ' (learning_rate: did you mean lr?; ...)' for several (the first
    three), '' where none comes near: appended to an error line that names the unknown keys."""
    unknown, known = sorted(map(str, unknown)), list(known)
    pairs = [(k, nearest(k, known)) for k in unknown[:3]]
    pairs = [(k, near) for k, near in pairs if near]
    if not pairs:
        return ""
    if len(unknown) == 1:
        return f" (did you mean {pairs[0][1]}?)"
    return " (" + "; ".join(f"{k}: did you mean {near}?" for k, near in pairs) + ")"
