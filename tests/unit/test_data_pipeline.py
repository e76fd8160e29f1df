"""prepare() + BatchStream: shapes, determinism, exact resume, rank sharding, epochs, caching, errors."""

import json

import numpy as np
import pytest

from scalestudy.engine.data import bundled, pipeline
from scalestudy.engine.data.corpora import read_corpus
from scalestudy.engine.data.pipeline import LABEL_PAD, BatchStream, DataConfig, prepare
from scalestudy.errors import ScalestudyError

SEQ = 64


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "kjv.txt"
    path.write_text("\n".join(read_corpus(bundled.corpus_path())[:30]) + "\n", encoding="utf-8")
    return str(path)


def config(corpus, objective, **kw):
    return DataConfig(paths=[corpus], objective=objective, seq_len=SEQ, vocab_size=1000, **kw)


@pytest.fixture(scope="module")
def prep_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("prep")


@pytest.fixture(scope="module")
def prepared(corpus, prep_dir):
    return {obj: prepare(config(corpus, obj, lexicon=bundled.lexicon_path()), prep_dir / obj, write=True)
            for obj in ("span", "knowledge", "causal")}


@pytest.fixture(scope="module")
def tokenizer_path(prepared, prep_dir):
    return str(prep_dir / "span" / "tokenizer.json")


def take(stream, n):
    return [next(stream) for _ in range(n)]


def assert_batches_equal(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for key in x:
            np.testing.assert_array_equal(x[key], y[key])


@pytest.mark.parametrize("objective", ["span", "knowledge", "causal"])
def test_shapes_and_contents(prepared, objective):
    p = prepared[objective]
    assert (p.vocab_size, p.pad_id, p.eos_id) == (1000, 0, 1)
    batch = next(BatchStream(p, micro_batch=3, dp_rank=0, dp_size=1, seed=0))
    assert batch["input_ids"].dtype == np.int64 and batch["labels"].dtype == np.int64
    assert batch["input_ids"].shape == (3, SEQ)
    if objective == "causal":
        # Hugging Face causal LMs shift internally: labels are the inputs themselves.
        assert batch["labels"].shape == (3, SEQ)
        np.testing.assert_array_equal(batch["labels"], batch["input_ids"])
        assert (batch["input_ids"] < 900).all()  # packed text: no sentinels, no padding
        return
    assert (p.raw_len, p.target_len) == (70, 14)  # T5's helper for 64 inputs at density 0.15, mean span 3
    assert batch["labels"].shape == (3, 14)
    for inputs, labels in zip(batch["input_ids"], batch["labels"]):
        real = labels[labels != LABEL_PAD]
        assert real[0] == 999 and real[-1] == 1  # starts with <extra_id_0>, ends with eos
        assert (labels[len(real):] == LABEL_PAD).all()
        assert inputs[-1] == 1 or objective == "knowledge"
        assert (inputs[inputs >= 900] == 999 - np.arange((inputs >= 900).sum())).all()


def test_span_examples_reconstruct_the_packed_stream(prepared):
    p = prepared["span"]
    for index in (0, 1, p.num_examples - 1):
        ex = p.example(index, epoch=3, seed=5)
        inputs, labels = ex["input_ids"], ex["labels"][ex["labels"] != LABEL_PAD]
        hidden = np.split(labels[:-1], np.flatnonzero(labels[:-1] >= 900)[1:])
        rebuilt = []
        for t in inputs[:-1]:
            rebuilt.extend(hidden.pop(0)[1:].tolist() if t >= 900 else [int(t)])
        assert rebuilt == p.tokens[index * p.raw_len:(index + 1) * p.raw_len].tolist()


def test_knowledge_inputs_are_full_and_density_kept(prepared):
    p = prepared["knowledge"]
    noise = kept = 0
    for i in range(min(p.num_examples, 200)):
        ex = p.example(i)
        assert (ex["input_ids"] != 0).all()  # the slack fills the inputs
        labels = ex["labels"][ex["labels"] != LABEL_PAD]
        n_noise = int((labels < 900).sum()) - 1
        noise += n_noise
        kept += n_noise + int((ex["input_ids"] < 900).sum()) - 1
    assert 0.13 <= noise / kept <= 0.155


@pytest.mark.parametrize("objective", ["span", "knowledge"])
def test_determinism_and_exact_resume(prepared, corpus, tmp_path, objective):
    p = prepared[objective]
    again = prepare(config(corpus, objective, lexicon=bundled.lexicon_path()), tmp_path, write=False)
    assert again.fingerprint == p.fingerprint
    a = BatchStream(p, micro_batch=4, dp_rank=1, dp_size=2, seed=3)
    b = BatchStream(again, micro_batch=4, dp_rank=1, dp_size=2, seed=3)
    first = take(a, 5)
    assert_batches_equal(first, take(b, 5))
    state = json.loads(json.dumps(a.state_dict()))  # JSON-able
    expected = take(a, 4)
    resumed = BatchStream(p, micro_batch=4, dp_rank=1, dp_size=2, seed=3)
    resumed.load_state_dict(state)
    assert_batches_equal(take(resumed, 4), expected)
    other_seed = BatchStream(p, micro_batch=4, dp_rank=1, dp_size=2, seed=4)
    assert not np.array_equal(next(other_seed)["input_ids"], first[0]["input_ids"])
    with pytest.raises(ScalestudyError, match="seed"):
        other_seed.load_state_dict(state)


def test_union_over_ranks_is_independent_of_dp_size(prepared):
    p = prepared["span"]
    reference = np.concatenate([b["input_ids"] for b in take(BatchStream(p, 8, 0, 1, seed=1), 6)])
    for dp, micro in ((2, 4), (4, 2), (8, 1)):
        streams = [BatchStream(p, micro, rank, dp, seed=1) for rank in range(dp)]
        rows = [next(s)["input_ids"] for _ in range(6) for s in streams]  # step k: rank 0, 1, ... in order
        np.testing.assert_array_equal(np.concatenate(rows), reference)
    # A different data-parallel layout can resume a run when the global progress divides.
    s = BatchStream(p, 4, 0, 2, seed=1)
    take(s, 3)
    t = BatchStream(p, 2, 0, 4, seed=1)
    t.load_state_dict(s.state_dict())
    assert t.position == s.position == 24


def test_epochs_are_fresh_permutations(prepared):
    p = prepared["causal"]
    n = p.num_examples
    s = BatchStream(p, 1, 0, 1, seed=2)
    first, second = s.order(0), s.order(1)
    assert sorted(first) == sorted(second) == list(range(n)) and not np.array_equal(first, second)
    rows = np.concatenate([b["input_ids"] for b in take(s, n + 2)])
    windows = {tuple(p.tokens[i * SEQ:(i + 1) * SEQ]) for i in range(n)}
    assert {tuple(r) for r in rows[:n]} == windows  # every example exactly once per epoch
    assert s.epoch == 1
    span = prepared["span"]
    assert not np.array_equal(span.example(0, epoch=0)["input_ids"], span.example(0, epoch=1)["input_ids"])


def test_cache_reuses_tokenizer_and_tokens(corpus, tmp_path, monkeypatch):
    cfg = config(corpus, "span")
    first = prepare(cfg, tmp_path, write=True)
    assert {"tokenizer.json", "tokenizer.meta.json", "tokens.npz", "data.json"} <= {f.name for f in tmp_path.iterdir()}

    def no_training(*args, **kwargs):
        raise AssertionError("should have reused out_dir/tokenizer.json")

    monkeypatch.setattr(pipeline, "train_tokenizer", no_training)
    monkeypatch.setattr(pipeline, "_encode", no_training)
    assert prepare(cfg, tmp_path, write=False).fingerprint == first.fingerprint
    # A rank that loads the saved tokenizer by path builds the same data (the engine's rank != 0 path).
    by_path = DataConfig(**{**cfg.to_dict(), "tokenizer": str(tmp_path / "tokenizer.json")})
    assert prepare(by_path, tmp_path, write=False).fingerprint == first.fingerprint


@pytest.mark.parametrize("cut", ["empty", "half"])
def test_a_token_cache_cut_short_is_rebuilt(corpus, tmp_path, cut):
    """fuzz7: a resumed run's tokens.npz cut short failed rank 0 (empty: np.load's EOFError, which click reports as
    'aborted', exit 130; half: zipfile.BadZipFile) where a damaged cache is rebuilt."""
    cfg = config(corpus, "span")
    first = prepare(cfg, tmp_path, write=True)
    cache = tmp_path / "tokens.npz"
    cache.write_bytes(b"" if cut == "empty" else cache.read_bytes()[: cache.stat().st_size // 2])
    assert prepare(cfg, tmp_path, write=True).fingerprint == first.fingerprint
    with np.load(cache) as data:  # written again whole
        assert len(data["tokens"]) == len(first.tokens)


def test_a_tokenizer_from_an_earlier_run_brings_its_token_stream(corpus, tmp_path, monkeypatch):
    # --tokenizer runs/a/tokenizer.json (a study's trials, runs sharing one tokenizer): run a's tokens.npz, made from
    # the same corpus and tokenizer, is read instead of encoding the corpus again, and kept in the new run's folder
    first = prepare(config(corpus, "span"), tmp_path / "a", write=True)
    by_path = config(corpus, "causal", tokenizer=str(tmp_path / "a" / "tokenizer.json"))

    def no_encoding(*args, **kwargs):
        raise AssertionError("should have read runs/a/tokens.npz")

    with monkeypatch.context() as patch:
        patch.setattr(pipeline, "_encode", no_encoding)
        second = prepare(by_path, tmp_path / "b", write=True)
    np.testing.assert_array_equal(second.tokens, first.tokens)
    assert (tmp_path / "b" / "tokens.npz").is_file()
    # another corpus with that tokenizer: the stream beside it is not this corpus's, so it is encoded
    other = tmp_path / "other.txt"
    other.write_text("\n".join(read_corpus(bundled.corpus_path())[30:40]) + "\n", encoding="utf-8")
    encoded = []
    monkeypatch.setattr(pipeline, "_encode", lambda *a, **k: encoded.append(1) or pipeline_encode(*a, **k))
    third = prepare(DataConfig(**{**by_path.to_dict(), "paths": [str(other)]}), tmp_path / "c", write=True)
    assert encoded == [1] and len(third.tokens) != len(first.tokens)


pipeline_encode = pipeline._encode


def test_target_len_option(corpus, prepared, tokenizer_path, tmp_path):
    p = prepared["span"]
    longer = prepare(config(corpus, "span", target_len=24, tokenizer=tokenizer_path), tmp_path / "a", write=True)
    ex = longer.example(0)
    assert ex["labels"].shape == (24,) and (ex["labels"][p.target_len:] == LABEL_PAD).all()
    assert longer.raw_len == p.raw_len
    shorter = prepare(config(corpus, "span", target_len=10, tokenizer=tokenizer_path), tmp_path / "b", write=True)
    ex = shorter.example(0)
    assert ex["labels"].shape == (10,) and ex["input_ids"].shape == (SEQ,) and shorter.raw_len < p.raw_len


def test_mixture_of_corpora(corpus, tmp_path):
    small = tmp_path / "small.jsonl"
    small.write_text("".join(json.dumps({"text": f"Small document number {i} about Moses."}) + "\n" for i in range(5)))
    p = prepare(DataConfig(paths=[corpus, str(small)], objective="causal", seq_len=SEQ, vocab_size=1000,
                           temperature=5.0), tmp_path / "mix", write=False)
    assert p.stats["corpora"] == {corpus: 30, str(small): 5}
    assert p.stats["documents"] == 35
    text = p.tokenizer.decode(p.tokens.tolist())
    assert text.count("Small document number") > 5  # temperature 5 up-samples the 5-document corpus


def test_errors(corpus, prepared, tokenizer_path):
    with pytest.raises(ScalestudyError, match="unknown objective 'mlm'"):
        DataConfig(objective="mlm")
    with pytest.raises(ScalestudyError, match="fewer than one example"):
        prepare(DataConfig(paths=[corpus], objective="causal", seq_len=10**6, tokenizer=tokenizer_path), None)
    with pytest.raises(ScalestudyError, match="more than the 100 sentinels"):
        prepare(DataConfig(paths=[corpus], seq_len=2048, tokenizer=tokenizer_path, mean_noise_span_length=1.0), None)
    with pytest.raises(ScalestudyError, match=r"dp_rank 2 must be in \[0, dp_size=2\)"):
        BatchStream(prepared["span"], 4, dp_rank=2, dp_size=2)
    with pytest.raises(ScalestudyError, match="different data"):
        BatchStream(prepared["span"], 4).load_state_dict(BatchStream(prepared["causal"], 4).state_dict())
    with pytest.raises(ScalestudyError, match="malformed data state"):
        BatchStream(prepared["span"], 4).load_state_dict({"step": 1})
