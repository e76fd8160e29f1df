"""Interleave several corpora with temperature sampling (mT5, Conneau et al. 2020).

Corpus i with n_i documents is drawn with probability p_i = n_i^(1/T) / sum_j n_j^(1/T): T = 1 keeps the natural
proportions, larger T flattens them (up-samples small corpora, e.g. low-resource languages; mT5 uses 1/T = 0.3).
Each draw takes the next document of the chosen corpus; a corpus that runs out starts again in a new seeded order
(so small corpora repeat). The mixture has sum_i n_i documents and is a pure function of (corpora, T, seed).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from scalestudy.errors import ScalestudyError


def mixture_weights(sizes: Sequence[int], temperature: float = 1.0) -> np.ndarray:
    if temperature <= 0:
        raise ScalestudyError(f"sampling temperature must be > 0, got {temperature}")
    if not sizes or min(sizes) <= 0:
        raise ScalestudyError("every corpus in a mixture needs at least one document")
    w = np.asarray(sizes, dtype=np.float64) ** (1.0 / temperature)
    return w / w.sum()


def interleave(corpora: Sequence[Sequence[str]], temperature: float = 1.0, seed: int = 0,
               total: int | None = None) -> list[str]:
    """One document list drawn from `corpora` with temperature sampling; `total` defaults to sum of sizes."""
    if len(corpora) == 1:
        return list(corpora[0])
    sizes = [len(c) for c in corpora]
    p = mixture_weights(sizes, temperature)
    rng = np.random.default_rng([seed, 0x6D6978])  # "mix"
    total = sum(sizes) if total is None else total
    choice = rng.choice(len(corpora), size=total, p=p)
    out: list[str] = []
    cursors = [0] * len(corpora)
    orders = [np.arange(n) for n in sizes]  # first pass in file order, later passes reshuffled
    for i in choice:
        if cursors[i] == sizes[i]:
            orders[i] = rng.permutation(sizes[i])
            cursors[i] = 0
        out.append(corpora[i][orders[i][cursors[i]]])
        cursors[i] += 1
    return out
