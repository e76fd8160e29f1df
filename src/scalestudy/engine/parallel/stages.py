"""The model cut into pipeline chunks that keep the Hugging Face forward code and parameter names.

Each chunk is a shallow copy of the model's stacks holding only its layers (the layer lists keep their original
indices, so `model.layers.3.mlp.up_proj.weight` is named the same in every layout: checkpoints move between
layouts). Decoder-only: the first chunk embeds, the last applies the final norm and the head. Encoder-decoder
(T5/mT5, as Megatron splits T5): chunks run over the encoder layers, then the decoder layers; the encoder output
is carried along through every decoder chunk (each cross-attends to it) and its gradient flows back the same way.
A module needed by several chunks (T5's shared embedding; the first block's relative position bias, which every
chunk starting mid-stack needs; GPT-2's tied head) is the original in its first chunk and a copy elsewhere; the
copies are *tied*: grads.py sums their gradients so they stay identical, as Megatron does for embeddings.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

IGNORE = -100


def _shallow(module: nn.Module) -> nn.Module:
    """A copy sharing parameters and submodules, whose own submodule table can change without touching `module`."""
    out = copy.copy(module)
    out._modules = dict(module._modules)
    out._parameters = dict(module._parameters)
    out._buffers = dict(module._buffers)
    return out


def _layers(source: nn.ModuleList, ids: list[int]) -> nn.ModuleList:
    kept = nn.ModuleList()
    for i in ids:
        kept._modules[str(i)] = source[i]  # original index as name: same parameter names in every layout
    return kept


class ZeroPositions(nn.Module):
    """Stands in for GPT-2's position embedding after the first chunk (positions were added there)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.width = width

    def forward(self, position_ids: torch.Tensor) -> torch.Tensor:
        return torch.zeros(*position_ids.shape, self.width, device=position_ids.device)


class EdgeDropout(nn.Dropout):
    """A T5 stack's dropout, called at its entry (after the embedding) and its exit (after the final norm): a chunk
    in the middle of a stack applies only the edges it really has."""

    def __init__(self, p: float, at_entry: bool, at_exit: bool) -> None:
        super().__init__(p)
        self.active = (at_entry, at_exit)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        edge, self.calls = self.calls % 2, self.calls + 1
        return super().forward(x) if self.active[edge] else x


class Chunk(nn.Module):
    """One pipeline stage's model piece. `canonical` maps its parameter names to the full model's names."""

    first: bool
    last: bool
    canonical: dict[str, str]

    def layer_lists(self) -> list[nn.ModuleList]:
        raise NotImplementedError


class DecoderOnlyChunk(Chunk):
    """Llama or GPT-2 layers [ids]; forward(x, attention_mask, labels) -> hidden states, or logits if last."""

    def __init__(self, full: nn.Module, family: str, ids: list[int], first: bool, last: bool, tie) -> None:
        super().__init__()
        self.first, self.last, self.family = first, last, family
        base_name, list_name = ("model", "layers") if family == "llama" else ("transformer", "h")
        base = _shallow(getattr(full, base_name))
        setattr(base, list_name, _layers(getattr(getattr(full, base_name), list_name), ids))
        if family == "llama":
            base.embed_tokens = tie(base.embed_tokens) if first else None
            if not last:
                base.norm = nn.Identity()
        else:
            base.wte = tie(base.wte) if first else None
            base.wpe = tie(base.wpe) if first else ZeroPositions(full.config.n_embd)
            if not first:
                base.drop = nn.Identity()  # the embedding dropout ran in the first chunk
            if not last:
                base.ln_f = nn.Identity()
        setattr(self, base_name, base)
        self.base_name, self.list_name = base_name, list_name
        self.lm_head = tie(full.lm_head) if last else None

    def layer_lists(self) -> list[nn.ModuleList]:
        return [getattr(getattr(self, self.base_name), self.list_name)]

    def forward(self, x, attention_mask=None, labels=None):
        base = getattr(self, self.base_name)
        inputs = {"input_ids": x} if self.first else {"inputs_embeds": x}
        hidden = base(**inputs, attention_mask=attention_mask).last_hidden_state
        return self.lm_head(hidden) if self.last else hidden


def causal_lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Hugging Face's ForCausalLMLoss: token t predicts label t+1, mean over non-ignored tokens."""
    shifted = F.pad(labels, (0, 1), value=IGNORE)[..., 1:].contiguous()
    return F.cross_entropy(logits.float().view(-1, logits.size(-1)), shifted.view(-1), ignore_index=IGNORE)


def seq2seq_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """T5ForConditionalGeneration's loss: CrossEntropyLoss(ignore_index=-100) over the decoder positions."""
    # float32 as autocast runs cross-entropy inside the HF forward (a no-op in fp32 runs)
    return F.cross_entropy(logits.float().view(-1, logits.size(-1)), labels.view(-1), ignore_index=IGNORE)


class T5Chunk(Chunk):
    """Encoder layers [enc_ids] and/or decoder layers [dec_ids] of a T5/mT5 model.

    Positional inputs (from the previous stage): first chunk (input_ids,); encoder chunk (encoder hidden,);
    the chunk that starts the decoder after an encoder-only chunk (encoder output,); later decoder chunks
    (decoder hidden, encoder output). Keyword inputs on every stage: attention_mask (encoder padding), labels.
    """

    def __init__(self, full: nn.Module, enc_ids: list[int], dec_ids: list[int], first: bool, last: bool, tie) -> None:
        super().__init__()
        self.first, self.last = first, last
        config = full.config
        self.encoder = (self._stack(full.encoder, enc_ids, embed=first, ends=enc_ids[-1] == len(full.encoder.block) - 1,
                                    tie=tie) if enc_ids else None)
        self.starts_decoder = bool(dec_ids) and dec_ids[0] == 0
        self.decoder = (self._stack(full.decoder, dec_ids, embed=self.starts_decoder, ends=last, tie=tie)
                        if dec_ids else None)
        self.lm_head = tie(full.lm_head) if last else None
        self.output_scale = config.d_model ** -0.5 if getattr(config, "scale_decoder_outputs", False) else None
        self.start_id, self.pad_id = config.decoder_start_token_id, config.pad_token_id

    @staticmethod
    def _stack(stack: nn.Module, ids: list[int], embed: bool, ends: bool, tie) -> nn.Module:
        out = _shallow(stack)
        out.block = _layers(stack.block, ids)
        out.embed_tokens = tie(stack.embed_tokens) if embed else None
        if not ends:
            out.final_layer_norm = nn.Identity()
        if ids[0] != 0 or not ends:
            out.dropout = EdgeDropout(stack.dropout.p, at_entry=ids[0] == 0, at_exit=ends)
        if ids[0] != 0:  # only block 0 owns the relative position bias; this chunk's first block computes it
            attn = stack.block[ids[0]].layer[0].SelfAttention
            attn.has_relative_attention_bias = True
            attn.relative_attention_bias = tie(stack.block[0].layer[0].SelfAttention.relative_attention_bias)
        return out

    def layer_lists(self) -> list[nn.ModuleList]:
        return [s.block for s in (self.encoder, self.decoder) if s is not None]

    def shift_right(self, labels: torch.Tensor) -> torch.Tensor:
        shifted = labels.new_zeros(labels.shape)
        shifted[..., 1:] = labels[..., :-1].clone()
        shifted[..., 0] = self.start_id
        return shifted.masked_fill(shifted == IGNORE, self.pad_id)

    def forward(self, *acts, attention_mask=None, labels=None):
        if self.encoder is not None:
            inputs = {"input_ids": acts[0]} if self.first else {"inputs_embeds": acts[0]}
            enc = self.encoder(**inputs, attention_mask=attention_mask).last_hidden_state
            if self.decoder is None:
                return enc
            enc_out, dec_in = enc, None
        elif self.starts_decoder:
            enc_out, dec_in = acts[0], None
        else:
            dec_in, enc_out = acts
        inputs = {"input_ids": self.shift_right(labels)} if dec_in is None else {"inputs_embeds": dec_in}
        hidden = self.decoder(**inputs, encoder_hidden_states=enc_out,
                              encoder_attention_mask=attention_mask).last_hidden_state
        if not self.last:
            return hidden, enc_out.view_as(enc_out)  # carried on to the next decoder chunk
        if self.output_scale is not None:
            hidden = hidden * self.output_scale
        return self.lm_head(hidden)


class _Tier:
    """Hands out each shared module once as itself, then as copies; remembers copies' canonical names."""

    def __init__(self, full: nn.Module) -> None:
        self.names = {id(p): n for n, p in full.named_parameters()}
        self.seen: set[int] = set()  # parameters already handed out (GPT-2's head shares the embedding's)
        self.aliases: dict[int, str] = {}  # id(copied parameter) -> canonical name

    def __call__(self, module: nn.Module) -> nn.Module:
        ids = {id(p) for p in module.parameters()}
        if not ids & self.seen:
            self.seen |= ids
            return module
        twin = copy.deepcopy(module)
        for (_, p), (_, q) in zip(module.named_parameters(), twin.named_parameters()):
            self.aliases[id(q)] = self.names[id(p)]
        return twin

    def canonical(self, chunk: nn.Module) -> dict[str, str]:
        return {n: self.aliases.get(id(p), self.names.get(id(p), n)) for n, p in chunk.named_parameters()}


def split_model(full: nn.Module, family: str, counts: list[int]) -> list[Chunk]:
    """Every chunk, in stage order, with `counts[s]` layers each (encoder then decoder layers for T5)."""
    tie = _Tier(full)
    if family in ("t5", "mt5"):
        n_enc = len(full.encoder.block)
        order = [("enc", i) for i in range(n_enc)] + [("dec", i) for i in range(len(full.decoder.block))]
    else:
        order = [("dec", i) for i in range(full.config.num_hidden_layers)]
    chunks, start = [], 0
    for s, n in enumerate(counts):
        part = order[start:start + n]
        start += n
        first, last = s == 0, s == len(counts) - 1
        if family in ("t5", "mt5"):
            chunk = T5Chunk(full, [i for k, i in part if k == "enc"], [i for k, i in part if k == "dec"], first,
                            last, tie)
        else:
            chunk = DecoderOnlyChunk(full, family, [i for _, i in part], first, last, tie)
        chunks.append(chunk)
    for chunk in chunks:
        chunk.canonical = tie.canonical(chunk)
    return chunks


def loss_function(family: str):
    return seq2seq_loss if family in ("t5", "mt5") else causal_lm_loss
