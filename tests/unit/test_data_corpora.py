"""Corpus readers, their one-line errors, and temperature mixing."""

import gzip
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from scalestudy.engine.data import bundled
from scalestudy.engine.data.corpora import read_corpus
from scalestudy.engine.data.mixing import interleave, mixture_weights
from scalestudy.errors import ScalestudyError


def test_txt_one_document_per_nonblank_line(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("first doc\n\n   \n  second doc  \nthird\n", encoding="utf-8")
    assert read_corpus(str(path)) == ["first doc", "second doc", "third"]
    gz = tmp_path / "a.txt.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    assert read_corpus(str(gz), max_docs=2) == ["first doc", "second doc"]


def test_a_byte_order_mark_is_not_text(tmp_path):
    """Windows editors start UTF-8 files with a BOM: JSONL refused its first line, .txt kept it in the first document."""
    (tmp_path / "bom.jsonl").write_bytes(b"\xef\xbb\xbf" + b'{"text": "first"}\n{"text": "second"}\n')
    assert read_corpus(str(tmp_path / "bom.jsonl")) == ["first", "second"]
    (tmp_path / "bom.txt.gz").write_bytes(gzip.compress(b"\xef\xbb\xbffirst doc\n\xef\xbb\xbfsecond\n"))
    assert read_corpus(str(tmp_path / "bom.txt.gz")) == ["first doc", "\ufeffsecond"]  # only the file's start


def test_jsonl_field_and_errors(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text(json.dumps({"body": "hello"}) + "\n\n" + json.dumps({"body": "world", "x": 1}) + "\n")
    assert read_corpus(str(path), text_field="body") == ["hello", "world"]
    with pytest.raises(ScalestudyError, match=r"a\.jsonl line 1: no field 'text' \(fields: body\)"):
        read_corpus(str(path))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n{not json\n')
    with pytest.raises(ScalestudyError, match=r"bad\.jsonl line 2 is not valid JSON"):
        read_corpus(str(bad))


def test_parquet_column_and_missing_column(tmp_path):
    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"content": ["one", None, " ", "two"], "n": [1, 2, 3, 4]}), path)
    assert read_corpus(str(path), text_field="content") == ["one", "two"]
    with pytest.raises(ScalestudyError, match=r"no column 'text' \(columns: content, n\)"):
        read_corpus(str(path))
    with pytest.raises(ScalestudyError, match="column 'n' has type int64, not string"):
        read_corpus(str(path), text_field="n")


def test_errors_are_one_line_and_name_the_problem(tmp_path):
    with pytest.raises(ScalestudyError, match="corpus file not found: .*nope.txt"):
        read_corpus(str(tmp_path / "nope.txt"))
    (tmp_path / "shards").mkdir()  # a folder is named as one, with what --data takes
    with pytest.raises(ScalestudyError, match=r"corpus .*shards is a directory: --data takes corpus files \(\.txt, "):
        read_corpus(str(tmp_path / "shards"))
    (tmp_path / "x.csv").write_text("a,b\n")
    with pytest.raises(ScalestudyError, match=r"unknown corpus extension for .*x\.csv"):
        read_corpus(str(tmp_path / "x.csv"))
    (tmp_path / "empty.txt").write_text("\n  \n")
    with pytest.raises(ScalestudyError, match="is empty"):
        read_corpus(str(tmp_path / "empty.txt"))
    (tmp_path / "latin1.txt").write_bytes("ok line\nsecond ok\ncaf\xe9 au lait\n".encode("latin-1"))
    with pytest.raises(ScalestudyError, match=r"latin1\.txt line 3 is not valid UTF-8") as err:
        read_corpus(str(tmp_path / "latin1.txt"))
    assert "\n" not in str(err.value)
    with pytest.raises(ScalestudyError, match="bad dataset spec"):
        read_corpus("hf:")


def test_bundled_corpus_is_real_text():
    docs = read_corpus(bundled.corpus_path())
    assert len(docs) == 242  # one chapter per line
    assert docs[0].startswith("In the beginning God created the heaven and the earth.")
    assert 1_000_000 < sum(map(len, docs)) < 1_200_000


def test_mixture_weights_follow_temperature():
    sizes = [1000, 100, 10]
    np.testing.assert_allclose(mixture_weights(sizes, 1.0), np.array(sizes) / 1110)
    w = mixture_weights(sizes, 2.0)
    np.testing.assert_allclose(w, np.sqrt(sizes) / np.sqrt(sizes).sum())
    with pytest.raises(ScalestudyError, match="temperature must be > 0"):
        mixture_weights(sizes, 0)


@pytest.mark.parametrize("temperature", [1.0, 3.0])
def test_interleave_proportions_within_statistical_bound(temperature):
    corpora = [[f"a{i}" for i in range(1000)], [f"b{i}" for i in range(100)], [f"c{i}" for i in range(10)]]
    total = 20_000
    mixed = interleave(corpora, temperature, seed=7, total=total)
    p = mixture_weights([1000, 100, 10], temperature)
    for prefix, expected in zip("abc", p):
        observed = sum(d[0] == prefix for d in mixed) / total
        # 5 binomial standard deviations: a false failure has probability < 1e-6.
        assert abs(observed - expected) <= 5 * np.sqrt(expected * (1 - expected) / total)
    # Small corpora repeat (up-sampled); every document of a corpus appears before any repeats.
    c_docs = [d for d in mixed if d[0] == "c"]
    assert sorted(c_docs[:10]) == sorted(corpora[2])
    assert interleave(corpora, temperature, seed=7, total=total) == mixed
    assert interleave(corpora, temperature, seed=8, total=total) != mixed


def test_hf_spec_streams_through_datasets(monkeypatch):
    """hf:NAME[:CONFIG] calls datasets.load_dataset(NAME, CONFIG, split="train", streaming=True); no network here."""
    import sys
    import types

    calls = []

    def load_dataset(name, config, split, streaming):
        calls.append((name, config, split, streaming))
        return iter({"content": f"doc {i}", "id": i} for i in range(10**9))  # unbounded, like a real stream

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    assert read_corpus("hf:allenai/c4:en", text_field="content", max_docs=3) == ["doc 0", "doc 1", "doc 2"]
    assert calls == [("allenai/c4", "en", "train", True)]
    with pytest.raises(ScalestudyError, match=r"hf:wiki: no field 'text' \(fields: content, id\)"):
        read_corpus("hf:wiki")

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach the Hub\nlong details")

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=offline))
    with pytest.raises(ScalestudyError, match="^cannot stream hf:wiki: Couldn't reach the Hub$"):
        read_corpus("hf:wiki")
