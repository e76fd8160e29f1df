"""The data pipeline the engine trains on: `prepare` once, then a `BatchStream` per data-parallel rank.

    prepared = prepare(DataConfig(objective="span", seq_len=128), out_dir, write=(rank == 0))
    stream = BatchStream(prepared, micro_batch=8, dp_rank=rank, dp_size=dp, seed=0)
    batch = next(stream)  # {"input_ids": int64 [8, 128], "labels": int64 [8, target_len]}

Objectives (every array int64, exact shapes; label padding is -100, input padding is pad_id 0):
- "span": T5 span corruption. Each example is a window of `raw_len` packed tokens (compute_input_and_target_lengths:
  the longest window whose corrupted inputs fit seq_len). inputs [seq_len], labels [target_len]. `target_len` 0 means
  "exactly what span corruption needs" (seq_len 512, density 0.15, span 3 -> 114); a larger value pads labels; a
  smaller one shortens the window so the targets fit (inputs are then padded).
- "knowledge": ERNIE-style masking of whole words, phrases and entities (knowledge.py), same format as "span". Units
  of the first raw_len tokens are masked (density over those tokens); the example then keeps the longest prefix of
  raw_len + slack tokens whose inputs fit seq_len and targets fit target_len. Whole units give a different number
  of spans than T5's formula, and the unmasked slack fills the inputs when there are fewer, so inputs are full in
  nearly every example. Windows start every raw_len tokens (the slack overlaps the next window).
- "causal": decoder-only LM. input_ids = a window of seq_len packed tokens, labels = input_ids: Hugging Face causal
  LM models shift labels internally (position t predicts token t+1), so no shift happens here.

Determinism: `prepare` is a pure function of the config (same corpus -> same tokenizer -> same token stream on every
rank). Example i of epoch e is corrupted with an RNG seeded by (seed, epoch, i), so it never depends on the rank,
the batch size or what was read before. Global micro-step k on rank r reads the examples at positions
[(k*dp_size + r)*B, (k*dp_size + r + 1)*B) of a seeded order (a fresh permutation of all examples per epoch).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from scalestudy.engine.data import bundled
from scalestudy.engine.data.corpora import read_corpus
from scalestudy.engine.data.knowledge import PhraseMatcher, knowledge_noise_mask, load_lexicon, token_flags
from scalestudy.engine.data.mixing import interleave
from scalestudy.engine.data.packing import num_windows, pack, pack_flags
from scalestudy.engine.data.span_corruption import (
    apply_noise_mask,
    compute_input_and_target_lengths,
    noise_counts,
    pad_to,
    random_spans_noise_mask,
)
from scalestudy.engine.data.tokenizer import (
    EOS_ID,
    NUM_SENTINELS,
    PAD_ID,
    fingerprint_tokenizer,
    load_tokenizer,
    save_tokenizer,
    train_tokenizer,
)
from scalestudy.errors import ScalestudyError
from scalestudy.atomicfile import write_text_atomic
from scalestudy.specs.run import WRITTEN_BY_JSON
from scalestudy.wrapped import say

OBJECTIVES = ("span", "knowledge", "causal")
LABEL_PAD = -100
FORMAT_VERSION = 1  # bump when tokenization or example construction changes (invalidates caches)


@dataclass
class DataConfig:
    paths: list[str] = field(default_factory=list)  # corpus specs (see corpora.py); empty -> bundled KJV excerpt
    text_field: str = "text"  # jsonl field / parquet column / hf field
    objective: str = "span"  # span | knowledge | causal
    seq_len: int = 512  # encoder input length (span/knowledge) or decoder length (causal)
    target_len: int = 0  # decoder length for span/knowledge; 0 = derived from seq_len and the noise settings
    noise_density: float = 0.15
    mean_noise_span_length: float = 3.0
    lexicon: str | None = None  # knowledge: one entry per line; None -> bundled lexicon with the bundled corpus
    temperature: float = 1.0  # mixing temperature over several corpora: p_i ∝ n_i^(1/T)
    tokenizer: str | None = None  # path to a tokenizer.json; None -> train one on the corpus
    vocab_size: int = 8192  # including pad/eos/unk and the 100 sentinels
    tokenizer_kind: str = "unigram"  # unigram | bpe
    max_docs: int = 0  # per corpus; 0 = all (hf: streams read HF_DEFAULT_MAX_DOCS)
    mix_seed: int = 0  # seed of the corpus mixture (part of the data, not of the batch order)

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ScalestudyError(f"unknown objective {self.objective!r} (choose from {', '.join(OBJECTIVES)})")
        if self.seq_len < 4:
            raise ScalestudyError(f"seq_len must be >= 4, got {self.seq_len}")
        if self.target_len < 0:
            raise ScalestudyError(f"target_len must not be negative, got {self.target_len}")
        if isinstance(self.paths, str):
            self.paths = [self.paths]

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Prepared:
    """Everything needed to build examples; identical on every rank for the same config."""

    config: DataConfig
    tokenizer: Tokenizer
    tokens: np.ndarray  # int32 packed stream
    flags: np.ndarray | None  # uint8 knowledge-unit flags aligned with tokens (knowledge objective only)
    raw_len: int  # tokens per example window before corruption (seq_len for causal)
    window: int  # tokens read per example (raw_len, plus slack for knowledge masking)
    seq_len: int
    target_len: int  # label length (seq_len for causal)
    num_examples: int  # examples per epoch
    fingerprint: str  # hash of tokenizer + token stream + example settings
    stats: dict = field(default_factory=dict)  # documents, tokens, timings (seconds)
    pad_id: int = PAD_ID
    eos_id: int = EOS_ID

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    def example(self, index: int, epoch: int = 0, seed: int = 0) -> dict[str, np.ndarray]:
        """Example `index` (0 <= index < num_examples) of `epoch`: {"input_ids", "labels"}, int64, fixed lengths."""
        start = index * self.raw_len
        window = self.tokens[start: start + self.window].astype(np.int64)
        cfg = self.config
        if cfg.objective == "causal":
            return {"input_ids": window, "labels": window.copy()}
        rng = np.random.default_rng([seed, epoch, index, FORMAT_VERSION])
        if cfg.objective == "span":
            mask = random_spans_noise_mask(len(window), cfg.noise_density, rng, cfg.mean_noise_span_length)
        else:
            flags = self.flags[start: start + self.window]
            mask = knowledge_noise_mask(flags, cfg.noise_density, rng, cfg.mean_noise_span_length,
                                        limit=self.raw_len, max_targets=self.target_len)
            keep = fitting_prefix(mask, self.seq_len, self.target_len)
            window, mask = window[:keep], mask[:keep]
        inputs, targets = apply_noise_mask(window, mask, self.vocab_size, self.eos_id)
        return {"input_ids": pad_to(inputs, self.seq_len, self.pad_id),
                "labels": pad_to(targets, self.target_len, LABEL_PAD)}


def check_vocab(spec, tokenizer_vocab: int) -> None:
    """The model's embedding (`spec`: a ModelSpec) must cover every token id; unused extra rows (a model vocabulary
    larger than the tokenizer's) are fine. Here, beside the data and free of model code, so that `scalestudy train`'s
    launcher checks it without importing transformers (~0.7 CPU s per launch)."""
    if spec.vocab_size < tokenizer_vocab:
        raise ScalestudyError(f"model {spec.name} has a {spec.vocab_size}-token vocabulary but the tokenizer has "
                              f"{tokenizer_vocab}: use a smaller tokenizer vocabulary or a larger model")


def fitting_prefix(mask: np.ndarray, seq_len: int, target_len: int) -> int:
    """Longest prefix of a masked window whose inputs fit seq_len and whose targets fit target_len (eos included)."""
    span_start = mask & ~np.concatenate([[False], mask[:-1]])
    noise = np.cumsum(mask)
    spans = np.cumsum(span_start)
    length = np.arange(1, len(mask) + 1)
    fits = (length - noise + spans + 1 <= seq_len) & (noise + spans + 1 <= target_len)
    return int(np.flatnonzero(fits)[-1]) + 1 if fits.any() else 0


def _read_docs(cfg: DataConfig) -> tuple[list[str], dict]:
    specs = cfg.paths or [bundled.corpus_path()]
    corpora = [read_corpus(spec, cfg.text_field, cfg.max_docs) for spec in specs]
    docs = interleave(corpora, cfg.temperature, cfg.mix_seed)
    return docs, {"corpora": {spec: len(c) for spec, c in zip(specs, corpora)}, "documents": len(docs)}


def _sha(*parts: str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()


def _tokenizer(cfg: DataConfig, docs: list[str], corpus_hash: str, out_dir: Path | None, write: bool) -> Tokenizer:
    if cfg.tokenizer:
        return load_tokenizer(cfg.tokenizer)
    key = _sha(corpus_hash, str(cfg.vocab_size), cfg.tokenizer_kind, str(FORMAT_VERSION))
    cached, meta = (out_dir / "tokenizer.json", out_dir / "tokenizer.meta.json") if out_dir else (None, None)
    if cached and cached.is_file() and meta.is_file():
        try:
            matches = json.loads(meta.read_text())["key"] == key
        except (ValueError, KeyError, TypeError, RecursionError):  # not the meta written below: train anew
            matches = False
        if matches:
            return load_tokenizer(cached)
    mb = sum(len(d) for d in docs) / 1e6
    # A long start-up is announced, not silent: a large corpus takes minutes (1-4 s per MB of text on one core)
    say(f"training a {cfg.vocab_size}-token {cfg.tokenizer_kind} tokenizer on {len(docs):,} documents "
        f"({mb:.1f} MB of text, roughly 1-4 s per MB; once per corpus and vocabulary"
        + (f", kept in {cached})..." if write and cached else ")..."))
    t0 = time.perf_counter()
    tok = train_tokenizer(docs, cfg.vocab_size, cfg.tokenizer_kind)
    say(f"tokenizer trained in {time.perf_counter() - t0:.1f} s")
    if write and cached:
        save_tokenizer(tok, cached)
        _write_json(meta, {"key": key, "vocab_size": cfg.vocab_size, "kind": cfg.tokenizer_kind})
    return tok


def _write_json(path: Path, data: dict) -> None:
    # marked: an output DIR holding them is a run's, even before its train_config.yaml (specs/run.check_not_users_files)
    write_text_atomic(path, json.dumps({**WRITTEN_BY_JSON, **data}, indent=1))


def _lexicon(cfg: DataConfig) -> list[str]:
    if cfg.lexicon:
        return load_lexicon(cfg.lexicon)
    return [] if cfg.paths else load_lexicon(bundled.lexicon_path())


def _lengths(cfg: DataConfig) -> tuple[int, int, int]:
    """(raw_len, window, target_len) of one example."""
    if cfg.objective == "causal":
        return cfg.seq_len, cfg.seq_len, cfg.seq_len
    raw, needed = compute_input_and_target_lengths(cfg.seq_len, cfg.noise_density, cfg.mean_noise_span_length,
                                                   cfg.target_len or None)
    target = cfg.target_len or needed
    spans = noise_counts(raw, cfg.noise_density, cfg.mean_noise_span_length)[1]
    if spans > NUM_SENTINELS:
        raise ScalestudyError(f"seq_len {cfg.seq_len} at noise density {cfg.noise_density} and mean span "
                              f"{cfg.mean_noise_span_length} needs {spans} noise spans, more than the "
                              f"{NUM_SENTINELS} sentinels: raise mean_noise_span_length or lower seq_len")
    window = raw if cfg.objective == "span" else raw + raw // 8 + 8  # slack: knowledge spans are longer
    return raw, window, target


ENCODE_CHUNK = 4096  # documents per encode_batch call: bounds the memory held in Encoding objects


def _encode(cfg: DataConfig, docs: list[str], tok: Tokenizer) -> tuple[np.ndarray, np.ndarray | None]:
    matcher = PhraseMatcher.fit(docs, _lexicon(cfg)) if cfg.objective == "knowledge" else None
    ids, flags = [], []
    for i in range(0, len(docs), ENCODE_CHUNK):
        chunk = docs[i: i + ENCODE_CHUNK]
        encodings = tok.encode_batch(chunk, add_special_tokens=False)
        ids.extend(np.asarray(e.ids, dtype=np.int32) for e in encodings)
        if matcher is not None:
            flags.extend(token_flags(d, e.offsets, matcher) for d, e in zip(chunk, encodings))
    return pack(ids, EOS_ID), (pack_flags(flags) if matcher is not None else None)


def _cached_tokens(path: Path | None, key: str, knowledge: bool) -> tuple[np.ndarray, np.ndarray | None] | None:
    """(tokens, flags) of the token cache at `path` when it holds `key`; None when absent, unreadable or other."""
    if path is None or not path.is_file():
        return None
    try:
        with np.load(path) as data:
            if str(data["key"]) == key:
                return data["tokens"], (data["flags"] if knowledge else None)
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        pass  # unreadable, cut short (empty: EOFError; half a zip: BadZipFile) or an older cache: rebuild
    return None


def _tokenize(cfg: DataConfig, docs: list[str], tok: Tokenizer, corpus_hash: str, out: Path | None, write: bool
              ) -> tuple[np.ndarray, np.ndarray | None]:
    """Token stream (and knowledge flags), cached in out/tokens.npz under a key of everything they depend on; a
    tokenizer given by path also finds the tokens.npz saved beside it (read only, used when the key matches)."""
    knowledge = cfg.objective == "knowledge"
    key = _sha(corpus_hash, fingerprint_tokenizer(tok), str(knowledge), *(_lexicon(cfg) if knowledge else []),
               str(FORMAT_VERSION))
    cache = out / "tokens.npz" if out is not None else None
    cached = _cached_tokens(cache, key, knowledge)
    if cached is not None:
        return cached
    # A tokenizer taken from an earlier run's folder (--tokenizer runs/a/tokenizer.json, a study's shared one): that
    # run's token stream, when it was made from this corpus and tokenizer (the same key), instead of encoding again.
    beside = Path(cfg.tokenizer).with_name("tokens.npz") if cfg.tokenizer else None
    found = _cached_tokens(beside, key, knowledge) if beside is not None and beside != cache else None
    tokens, flags = found if found is not None else _encode(cfg, docs, tok)
    if write and cache is not None:
        tmp = cache.with_name(f".{cache.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            arrays = {"key": np.array(key), "tokens": tokens}
            if flags is not None:
                arrays["flags"] = flags
            np.savez(f, **arrays)
        os.replace(tmp, cache)
    return tokens, flags


def prepare(cfg: DataConfig, out_dir: str | Path | None = None, *, write: bool = False) -> Prepared:
    """Read the corpora, train or load the tokenizer, tokenize and pack. Deterministic in `cfg`.

    With `write`, the tokenizer is saved to out_dir/tokenizer.json and the token stream to out_dir/tokens.npz; any
    later call (any rank) reuses them when they were made from the same corpus and settings. A summary goes to
    out_dir/data.json. Let one rank write.
    """
    timings = {}
    t0 = time.perf_counter()
    docs, stats = _read_docs(cfg)
    corpus_hash = _sha(*docs)
    timings["read_s"] = time.perf_counter() - t0
    out = Path(out_dir) if out_dir is not None else None
    if out is not None and write:
        out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    tok = _tokenizer(cfg, docs, corpus_hash, out, write)
    timings["tokenizer_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    tokens, flags = _tokenize(cfg, docs, tok, corpus_hash, out, write)
    timings["tokenize_s"] = time.perf_counter() - t0
    raw, window, target = _lengths(cfg)
    n = num_windows(len(tokens), raw, window)
    if n == 0:
        raise ScalestudyError(f"corpus has {len(tokens)} tokens, fewer than one example of {window} tokens: "
                              f"add text or lower seq_len")
    # Content, not paths: a rank that loads tokenizer.json by path must get the trainer's fingerprint.
    settings = {k: v for k, v in cfg.to_dict().items() if k not in ("paths", "tokenizer", "lexicon")}
    fingerprint = _sha(fingerprint_tokenizer(tok), hashlib.sha256(tokens.tobytes()).hexdigest(),
                       hashlib.sha256(flags.tobytes()).hexdigest() if flags is not None else "",
                       json.dumps(settings, sort_keys=True), str(FORMAT_VERSION))
    stats.update(tokens=int(len(tokens)), examples=n, raw_len=raw, window=window, vocab_size=tok.get_vocab_size(),
                 timings=timings)
    prepared = Prepared(config=cfg, tokenizer=tok, tokens=tokens, flags=flags, raw_len=raw, window=window,
                        seq_len=cfg.seq_len, target_len=target, num_examples=n, fingerprint=fingerprint, stats=stats)
    if write and out is not None:
        _write_json(out / "data.json", {"config": cfg.to_dict(), "fingerprint": fingerprint, **stats})
    return prepared


class BatchStream:
    """Infinite, deterministic, resumable micro-batches for one data-parallel rank (see module docstring)."""

    def __init__(self, prepared: Prepared, micro_batch: int, dp_rank: int = 0, dp_size: int = 1, seed: int = 0):
        if micro_batch < 1:
            raise ScalestudyError(f"micro_batch must be >= 1, got {micro_batch}")
        if not 0 <= dp_rank < dp_size:
            raise ScalestudyError(f"dp_rank {dp_rank} must be in [0, dp_size={dp_size})")
        self.prepared = prepared
        self.micro_batch = micro_batch
        self.dp_rank = dp_rank
        self.dp_size = dp_size
        self.seed = seed
        self.step = 0  # global micro-steps taken
        self._orders: dict[int, np.ndarray] = {}

    def order(self, epoch: int) -> np.ndarray:
        """The seeded permutation of example indices for `epoch`."""
        if epoch not in self._orders:
            if len(self._orders) > 2:
                self._orders.pop(min(self._orders))
            rng = np.random.default_rng([self.seed, epoch, 0x6F72646572])  # "order"
            self._orders[epoch] = rng.permutation(self.prepared.num_examples)
        return self._orders[epoch]

    def example_at(self, position: int) -> dict[str, np.ndarray]:
        """The example at a global position of the seeded order (all epochs laid end to end)."""
        epoch, offset = divmod(position, self.prepared.num_examples)
        return self.prepared.example(int(self.order(epoch)[offset]), epoch, self.seed)

    @property
    def position(self) -> int:
        """Global position of the first example of this rank's next micro-batch."""
        return (self.step * self.dp_size + self.dp_rank) * self.micro_batch

    @property
    def epoch(self) -> int:
        return self.position // self.prepared.num_examples

    def __iter__(self) -> BatchStream:
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        start = self.position
        examples = [self.example_at(p) for p in range(start, start + self.micro_batch)]
        self.step += 1
        return {key: np.stack([e[key] for e in examples]) for key in examples[0]}

    def state_dict(self) -> dict:
        return {"version": FORMAT_VERSION, "step": self.step, "seed": self.seed, "micro_batch": self.micro_batch,
                "dp_size": self.dp_size, "dp_rank": self.dp_rank, "fingerprint": self.prepared.fingerprint}

    def load_state_dict(self, state: dict) -> None:
        """Resume exactly after the last batch recorded in `state` (same data, seed and global batch geometry)."""
        try:
            fingerprint, seed = state["fingerprint"], state["seed"]
            consumed = int(state["step"]) * int(state["dp_size"]) * int(state["micro_batch"])
        except (KeyError, TypeError, ValueError):
            raise ScalestudyError("malformed data state (expected BatchStream.state_dict())") from None
        if fingerprint != self.prepared.fingerprint:
            raise ScalestudyError("data state was saved for different data or data settings; cannot resume")
        if seed != self.seed:
            raise ScalestudyError(f"data state has seed {seed}, this stream {self.seed}; cannot resume")
        per_step = self.dp_size * self.micro_batch
        if consumed % per_step:
            raise ScalestudyError(f"cannot resume: {consumed} examples consumed is not a multiple of dp_size x "
                                  f"micro_batch = {per_step}")
        self.step = consumed // per_step
