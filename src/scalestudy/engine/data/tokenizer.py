"""Train, save and load the subword tokenizer (Hugging Face `tokenizers`), with T5's special-token layout.

Ids: `<pad>` = 0, `</s>` = 1, `<unk>` = 2, and 100 sentinels `<extra_id_0>`..`<extra_id_99>` on the TOP ids as in T5
(`<extra_id_0>` = vocab_size - 1, descending). `vocab_size` counts every one of them.

Kinds:
- "unigram" (default): a unigram language-model tokenizer (Viterbi over piece log-probabilities, as SentencePiece's
  unigram), NFKC + Metaspace ("▁" marks a word start). Its piece inventory is learned by BPE merges and its
  log-probabilities by hard EM on word counts. We do not use `tokenizers`' UnigramTrainer: its scores differ by up to
  ~1e-3 between identical runs (Rust hash-map order), so two ranks could tokenize differently, and it stops short of
  the requested size on small corpora (6,342 of 8,092 pieces on the bundled corpus). Integer counts make ours exact.
- "bpe": byte-level BPE (GPT-2 style, never emits `<unk>`).
Training is deterministic: the same documents and settings give the same tokenizer.json bytes.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from scalestudy.errors import ScalestudyError
from scalestudy.specs.run_options import MIN_VOCAB_SIZE
from scalestudy.atomicfile import write_text_atomic

PAD, EOS, UNK = "<pad>", "</s>", "<unk>"
PAD_ID, EOS_ID, UNK_ID = 0, 1, 2
NUM_SENTINELS = 100
KINDS = ("unigram", "bpe")
EM_ITERATIONS = 2  # hard-EM re-estimations of the unigram log-probabilities; the second changes little
# tokenizers' BpeTrainer takes time quadratic in a word's length (huggingface/tokenizers#497: 100k characters without
# a space or punctuation, e.g. DNA, took 20 s, a 1 MB line half an hour). Such runs are cut into pieces of
# this many characters for training only; no word of a natural language comes near it.
MAX_TRAINING_WORD = 256
_LONG_RUN = re.compile(rf"(\w{{{MAX_TRAINING_WORD}}})(?=\w)")  # letters, digits: what stays one word


def sentinel_id(i: int, vocab_size: int) -> int:
    """Id of `<extra_id_i>` (T5 layout: extra_id_0 is the last id)."""
    return vocab_size - 1 - i


def _check_vocab_size(vocab_size: int) -> None:
    if vocab_size < MIN_VOCAB_SIZE:
        raise ScalestudyError(f"vocab_size must be at least {MIN_VOCAB_SIZE} (3 specials, 100 sentinels, pieces), got "
                              f"{vocab_size}")


def _metaspace():
    # Punctuation gets its own pieces ("Egypt" + ","), so the vocabulary is not spent on "Egypt," / "Egypt." / ...
    return pre_tokenizers.Sequence([pre_tokenizers.Metaspace(), pre_tokenizers.Punctuation("isolated")])


def _bpe_tokenizer(byte_level: bool) -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token=None if byte_level else UNK))
    tok.normalizer = normalizers.NFKC()
    if byte_level:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
        tok.decoder = decoders.ByteLevel()
    else:
        tok.pre_tokenizer = _metaspace()
        tok.decoder = decoders.Metaspace()
    return tok


def _train_bpe(docs: Sequence[str], n_base: int, byte_level: bool) -> Tokenizer:
    tok = _bpe_tokenizer(byte_level)
    alphabet = pre_tokenizers.ByteLevel.alphabet() if byte_level else []
    trainer = trainers.BpeTrainer(vocab_size=n_base, special_tokens=[PAD, EOS, UNK], initial_alphabet=alphabet,
                                  show_progress=False)
    tok.train_from_iterator((training_text(doc) for doc in docs), trainer, length=len(docs))
    got = tok.get_vocab_size()
    if got < n_base:
        raise ScalestudyError(f"corpus too small to learn {n_base} tokens (learned {got}): lower vocab_size")
    return tok


def training_text(doc: str) -> str:
    """`doc` as the BPE trainer sees it: a run of letters and digits longer than MAX_TRAINING_WORD is cut there."""
    return _LONG_RUN.sub(r"\1 ", doc)


def _word_counts(tok: Tokenizer, docs: Iterable[str]) -> Counter:
    counts: Counter = Counter()
    for doc in docs:
        counts.update(w for w, _ in tok.pre_tokenizer.pre_tokenize_str(tok.normalizer.normalize_str(doc)))
    return counts


def _unigram_scores(model, pieces: list[str], words: Counter) -> list[float]:
    """One hard-EM step: segment every word with `model`, score = log(relative piece frequency)."""
    counts = [0] * len(pieces)
    for word in sorted(words):  # sorted: the float sums below must not depend on dict order
        for t in model.tokenize(word):
            counts[t.id] += words[word]
    total = sum(counts) + 0.5 * len(pieces)
    # Add-1/2 smoothing keeps unused pieces (BPE intermediates) reachable but unlikely.
    return [math.log((c + 0.5) / total) for c in counts]


def _train_unigram(docs: Sequence[str], n_base: int) -> Tokenizer:
    bpe = _train_bpe(docs, n_base, byte_level=False)
    vocab = bpe.get_vocab()
    pieces = [p for p, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    words = _word_counts(bpe, docs)
    model = bpe.model
    for _ in range(EM_ITERATIONS):
        scores = _unigram_scores(model, pieces, words)
        scores[PAD_ID] = scores[EOS_ID] = scores[UNK_ID] = 0.0  # specials are matched before the model
        model = models.Unigram([(p, s) for p, s in zip(pieces, scores)], unk_id=UNK_ID, byte_fallback=False)
    tok = Tokenizer(model)
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = _metaspace()
    tok.decoder = decoders.Metaspace()
    tok.add_special_tokens([PAD, EOS, UNK])
    return tok


def train_tokenizer(docs: Sequence[str], vocab_size: int = 8192, kind: str = "unigram") -> Tokenizer:
    """Train on `docs` to exactly `vocab_size` ids including pad/eos/unk and the 100 sentinels."""
    _check_vocab_size(vocab_size)
    if kind not in KINDS:
        raise ScalestudyError(f"unknown tokenizer kind {kind!r} (choose from {', '.join(KINDS)})")
    if not docs:
        raise ScalestudyError("cannot train a tokenizer on an empty corpus")
    n_base = vocab_size - NUM_SENTINELS
    tok = _train_unigram(docs, n_base) if kind == "unigram" else _train_bpe(docs, n_base, byte_level=True)
    tok.add_special_tokens([f"<extra_id_{i}>" for i in reversed(range(NUM_SENTINELS))])
    # Round-trip through JSON: parsing can move a score's last bit, and a rank that trains must hold exactly the
    # tokenizer a rank that loads tokenizer.json holds (serialization is stable after one round trip).
    tok = Tokenizer.from_str(tok.to_str())
    check_layout(tok, vocab_size, origin="trained tokenizer")
    return tok


def check_layout(tok: Tokenizer, vocab_size: int | None = None, origin: str = "tokenizer") -> int:
    """Verify the T5 special-token layout; return the vocabulary size."""
    size = tok.get_vocab_size()
    if vocab_size is not None and size != vocab_size:
        raise ScalestudyError(f"{origin} has {size} tokens, expected vocab_size {vocab_size}")
    expected = {PAD: PAD_ID, EOS: EOS_ID, UNK: UNK_ID, "<extra_id_0>": size - 1,
                f"<extra_id_{NUM_SENTINELS - 1}>": size - NUM_SENTINELS}
    for token, want in expected.items():
        if tok.token_to_id(token) != want:
            raise ScalestudyError(f"{origin}: {token} must have id {want}, has {tok.token_to_id(token)}")
    return size


def save_tokenizer(tok: Tokenizer, path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, tok.to_str(pretty=True))


def load_tokenizer(path: str | Path) -> Tokenizer:
    path = Path(path)
    if path.exists() and not path.is_file():  # was 'not found': a FIFO's read would block, a folder is no file
        raise ScalestudyError(f"tokenizer {path} is not a regular file (a directory, a FIFO or a device)")
    if not path.is_file():
        raise ScalestudyError(f"tokenizer file not found: {path}")
    try:
        tok = Tokenizer.from_str(path.read_text(encoding="utf-8"))
    except Exception as exc:  # tokenizers raises plain Exception subclasses with multi-line text
        raise ScalestudyError(f"cannot load tokenizer {path}: {str(exc).splitlines()[0]}") from None
    check_layout(tok, origin=str(path))
    return tok


def fingerprint_tokenizer(tok: Tokenizer) -> str:
    return hashlib.sha256(tok.to_str().encode("utf-8")).hexdigest()
