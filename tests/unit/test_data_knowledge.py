"""Knowledge masking: lexicon entities and detected phrases are masked as whole units, never split."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scalestudy.engine.data import bundled
from scalestudy.engine.data.corpora import read_corpus
from scalestudy.engine.data.knowledge import (
    ENTITY,
    PHRASE,
    UNIT_RE,
    PhraseMatcher,
    knowledge_noise_mask,
    load_lexicon,
    token_flags,
)
from scalestudy.engine.data.tokenizer import train_tokenizer
from scalestudy.errors import ScalestudyError

LEXICON = ["land of Egypt", "Jesus Christ", "Moses", "kingdom of heaven", "Red sea", "ark of the covenant",
           "Son of God", "God of Israel", "Simon Peter"]
FILLER = ["and", "went", "unto", "water", "he", "said", "came", "there", "people", "great", "city", "Behold",
          "stood", "by", "a", "multitude", "Aaron", "Jerusalem", "forth"]
SEPARATORS = [" ", " ", " ", ", ", ". ", "; ", "  ", "\n", " (", ") "]


@pytest.fixture(scope="module")
def docs():
    return read_corpus(bundled.corpus_path())


@pytest.fixture(scope="module")
def tokenizers(docs):
    return {kind: train_tokenizer(docs[:40], 1000, kind) for kind in ("unigram", "bpe")}


@pytest.fixture(scope="module")
def matcher(docs):
    # The built-in detector fitted on the corpus plus the lexicon: detected phrases must not cut entities either.
    return PhraseMatcher.fit(docs, LEXICON)


@st.composite
def texts(draw):
    """A text built from lexicon entries and filler words; returns it with the entries' character spans."""
    parts = draw(st.lists(st.tuples(st.booleans(), st.sampled_from(LEXICON), st.sampled_from(FILLER),
                                    st.sampled_from(SEPARATORS)), min_size=1, max_size=60))
    text, entities = "", []
    for is_entity, entry, filler, sep in parts:
        word = entry if is_entity else filler
        if is_entity:
            entities.append((len(text), len(text) + len(word)))
        text += word + sep
    return text, entities


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sample=texts(), kind=st.sampled_from(["unigram", "bpe"]), seed=st.integers(0, 2**32 - 1),
       density=st.floats(0.05, 0.6), mean_span=st.floats(1.0, 5.0), limit_frac=st.floats(0.3, 1.0))
def test_entities_are_never_split_across_mask_and_no_mask(sample, kind, seed, density, mean_span, limit_frac,
                                                          tokenizers, matcher):
    text, entities = sample
    enc = tokenizers[kind].encode(text, add_special_tokens=False)
    flags = token_flags(text, enc.offsets, matcher)
    rng = np.random.default_rng(seed)
    limit = max(1, int(len(flags) * limit_frac))
    mask = knowledge_noise_mask(flags, density, rng, mean_span, limit=limit)
    offsets = np.asarray(enc.offsets).reshape(-1, 2)
    for start, end in entities:
        touching = (offsets[:, 0] < end) & (offsets[:, 1] > start)
        assert touching.any()
        assert mask[touching].all() or not mask[touching].any(), (text[start:end], enc.tokens)
        # And each entity lies inside one unit of kind entity.
        assert (flags[touching] >> 1 == ENTITY).all()
    budget = int(round(limit * density)) if limit >= 2 else 0
    assert mask.sum() <= max(budget, 1)
    assert not mask[limit:].any()


def test_units_levels_and_overlaps():
    m = PhraseMatcher(["Son of God", "God of Israel", "land of Egypt"], frozenset({"Moses", "Aaron"}),
                      frozenset({("burnt", "offering")}))
    units = UNIT_RE.findall("Moses and Aaron , Moses Aaron offered a burnt offering to the Son of God of Israel")
    got = [(" ".join(units[a:b]), kind) for a, b, kind in m.spans(units)]
    assert got == [("Moses Aaron", PHRASE), ("burnt offering", PHRASE), ("Son of God of Israel", ENTITY)]


def test_detector_finds_names_and_collocations(matcher):
    m = matcher
    for name in ("Moses", "Jesus", "Christ", "Pharaoh", "Egypt"):
        assert name in m.names
    for common in ("And", "The", "For"):
        assert common not in m.names  # capitalised at sentence starts, but mostly lowercase
    assert ("burnt", "offering") in m.collocations and ("of", "the") not in m.collocations


def test_density_close_to_target_on_real_text(docs, tokenizers, matcher):
    text = " ".join(docs[:3])
    enc = tokenizers["unigram"].encode(text, add_special_tokens=False)
    flags = token_flags(text, enc.offsets, matcher)
    rng = np.random.default_rng(0)
    fractions = [knowledge_noise_mask(flags[i:i + 200], 0.15, rng).mean() for i in range(0, len(flags) - 200, 50)]
    assert 0.14 <= np.mean(fractions) <= 0.15  # met from below: never overshoots the budget
    assert (flags >> 1 == PHRASE).mean() > 0.03  # the detector marks a real share of the text


def test_lexicon_file(tmp_path):
    path = tmp_path / "lex.txt"
    path.write_text("# comment\nland of Egypt\n\n  Moses  \n", encoding="utf-8")
    assert load_lexicon(path) == ["land of Egypt", "Moses"]
    assert "Jesus Christ" in load_lexicon(bundled.lexicon_path())
    with pytest.raises(ScalestudyError, match="lexicon file not found"):
        load_lexicon(tmp_path / "none.txt")
    (tmp_path / "empty.txt").write_text("# nothing\n")
    with pytest.raises(ScalestudyError, match="has no entries"):
        load_lexicon(tmp_path / "empty.txt")
    (tmp_path / "bin.txt").write_bytes(b"ok\nalso ok\n\xff\xfe\n")
    with pytest.raises(ScalestudyError, match=r"bin\.txt line 3 is not valid UTF-8"):
        load_lexicon(tmp_path / "bin.txt")
