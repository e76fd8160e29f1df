"""Tokenizer: exact vocabulary size, T5 special-token layout, determinism, save/load."""

import pytest

from scalestudy.engine.data import bundled
from scalestudy.engine.data.corpora import read_corpus
from scalestudy.engine.data.tokenizer import (
    fingerprint_tokenizer,
    load_tokenizer,
    save_tokenizer,
    MAX_TRAINING_WORD,
    sentinel_id,
    train_tokenizer,
    training_text,
)
from scalestudy.errors import ScalestudyError


@pytest.fixture(scope="module")
def docs():
    return read_corpus(bundled.corpus_path())[:40]


@pytest.mark.parametrize("kind", ["unigram", "bpe"])
def test_layout_size_and_determinism(docs, kind, tmp_path):
    tok = train_tokenizer(docs, 2000, kind)
    assert tok.get_vocab_size() == 2000
    assert [tok.token_to_id(t) for t in ("<pad>", "</s>", "<unk>")] == [0, 1, 2]
    for i in (0, 1, 57, 99):
        assert tok.token_to_id(f"<extra_id_{i}>") == sentinel_id(i, 2000) == 1999 - i
    assert tok.id_to_token(1900) == "<extra_id_99>"
    # Sentinels in text are single tokens, never split into pieces.
    ids = tok.encode("the <extra_id_3> end", add_special_tokens=False).ids
    assert 1996 in ids and not any(1900 <= i < 2000 and i != 1996 for i in ids)
    text = "And God said, Let there be light: and there was light."
    assert tok.decode(tok.encode(text).ids).strip() == text
    again = train_tokenizer(docs, 2000, kind)
    assert fingerprint_tokenizer(again) == fingerprint_tokenizer(tok)
    save_tokenizer(tok, tmp_path / "tok.json")
    loaded = load_tokenizer(tmp_path / "tok.json")
    assert fingerprint_tokenizer(loaded) == fingerprint_tokenizer(tok)
    assert loaded.encode(text).ids == tok.encode(text).ids


def test_unigram_emits_unk_for_unseen_characters(docs):
    tok = train_tokenizer(docs, 1000, "unigram")
    assert 2 in tok.encode("snowman \u2603").ids
    assert 2 not in train_tokenizer(docs, 1000, "bpe").encode("snowman \u2603").ids  # byte-level


def test_errors(docs, tmp_path):
    with pytest.raises(ScalestudyError, match="corpus too small to learn"):
        train_tokenizer(["tiny corpus", "two lines"], 4000, "bpe")
    with pytest.raises(ScalestudyError, match="unknown tokenizer kind 'wordpiece'"):
        train_tokenizer(docs, 1000, "wordpiece")
    with pytest.raises(ScalestudyError, match="vocab_size must be at least 512"):
        train_tokenizer(docs, 100)
    with pytest.raises(ScalestudyError, match="tokenizer file not found"):
        load_tokenizer(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ScalestudyError, match="cannot load tokenizer"):
        load_tokenizer(tmp_path / "bad.json")


def test_training_cuts_only_runs_no_language_has(docs):
    """BPE training time grows with the square of a word's length (a 1 MB line of DNA: half an hour); a run of
    letters and digits longer than MAX_TRAINING_WORD is cut for training, natural text is trained as it is."""
    assert all(training_text(doc) == doc for doc in docs)
    dna = "ACGT" * 25_000
    pieces = training_text(f"chromosome: {dna}.").split(" ")
    assert pieces[0] == "chromosome:" and "".join(pieces[1:]) == dna + "."
    assert max(map(len, pieces)) == MAX_TRAINING_WORD
    with pytest.raises(ScalestudyError, match="corpus too small to learn"):  # not half an hour of training first
        train_tokenizer([dna], 1000, "unigram")
