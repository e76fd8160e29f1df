"""What one full CPython collection pays for the vocabulary lists NeMo 1.11 / 1.12 T5 datasets hold
(docs/costmodel-validation.md, 'mT5's per-step premium, fifth pass').

t5_dataset.py (NeMo tags v1.11.0 / v1.12.0) keeps `self.vocab_id_list = self.tokenizer.vocab` in every T5Dataset --
three per data_prefix file (train / valid / test). For SentencePieceTokenizer (mT5) `vocab` builds a fresh list of
fresh strs (id_to_piece per id: 250,000 + 100 sentinels); for the HF BERT tokenizer (T5's BertWordPieceCase) a new
list of the vocabulary dict's own ~29k strs. Lists are always tracked by the collector and a full collection traverses
every item twice (subtract_refs, move_unreachable); the id -> token dict beside it holds only ints and strs, so CPython
leaves it untracked. NeMo calls no gc function at either tag, so collections are CPython's own.

Prints, side by side, the process CPU time of gc.collect() with K such lists held minus without: per list and per
item, mT5-style (fresh strs, 250,100) and T5-style (shared strs, ~29k), and their ratio. The machine's rate, not
Selene's (AMD EPYC 7742, CPython 3.8 in NGC 22.08): an order of magnitude, not a price.

    python3 benchmarks/gc_vocab_check.py [--lists 8] [--repeat 5]
"""

from __future__ import annotations

import argparse
import gc
import random
import string
import time

MT5_VOCAB = 250_100  # mc4.250000.100extra sentencepiece model + NeMo's 100 sentinels
T5_VOCAB = 29_000  # bert-large-cased's 28,996 + specials (NeMo pads the table to 29,184)
T5_FILES = 30  # conf/training/t5/*.yaml data_prefix: my-t5_00 .. my-t5_29 (the mT5 yamls auto-blend the mC4 files)


def _collect_s(repeat: int) -> float:
    """Least CPU time of a full collection over `repeat` tries (the machine is shared: the least is the cost)."""
    best = float("inf")
    for _ in range(repeat):
        t = time.process_time()
        gc.collect()
        best = min(best, time.process_time() - t)
    return best


def _words(n: int) -> list[str]:
    rng = random.Random(0)
    return ["".join(rng.choices(string.ascii_letters, k=rng.randint(2, 10))) for _ in range(n)]


def per_list_s(vocab: int, lists: int, fresh: bool, repeat: int) -> float:
    """Seconds a full collection pays per held T5Dataset vocabulary list (and its untracked id -> token dict)."""
    words = _words(vocab)
    gc.collect()
    base = _collect_s(repeat)
    held = []
    for _ in range(lists):
        lst = [(w + ".")[:-1] for w in words] if fresh else list(words)  # fresh: new str objects, as id_to_piece
        held.append((lst, {i: w for i, w in enumerate(lst)}))
    cost = (_collect_s(repeat) - base) / lists
    del held
    gc.collect()
    return cost


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lists", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    mt5 = per_list_s(MT5_VOCAB, a.lists, True, a.repeat)
    t5 = per_list_s(T5_VOCAB, a.lists, False, a.repeat)
    print(f"full collection, per held list: mT5 (fresh, {MT5_VOCAB:,}) {mt5 * 1e3:.2f} ms "
          f"({mt5 / MT5_VOCAB * 1e9:.1f} ns/item) | T5 (shared, {T5_VOCAB:,}) {t5 * 1e3:.2f} ms "
          f"({t5 / T5_VOCAB * 1e9:.1f} ns/item) | ratio {mt5 / t5:.1f}x")
    t5_lists = 3 * T5_FILES
    for files in (24, 100):
        extra = 3 * files * mt5 - t5_lists * t5
        print(f"  mT5 blend of {files} files x 3 splits vs T5's {t5_lists} lists: mT5 - T5 {extra * 1e3:.0f} ms "
              f"per full collection; "
              f"0.17 / 1.5 s per step (3B / 23B intercept gaps) would need {0.17 / extra:.1f} / {1.5 / extra:.1f} "
              f"full collections per step")


if __name__ == "__main__":
    main()
