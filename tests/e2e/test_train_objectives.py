"""Every objective and corpus format trains for real through `scalestudy train` (1 CPU rank, tiny lengths, a few
steps): T5 knowledge masking with a --lexicon on a .jsonl corpus, and decoder-only causal LM on a .parquet corpus.
Paths are given relative to the working directory, as a user types them. The loss must be finite and falling."""

from __future__ import annotations

import gzip
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from scalestudy.engine.data.bundled import corpus_path, lexicon_path

pytestmark = [pytest.mark.slow, pytest.mark.dist]

STEPS = 16
COMMON = ["--engine", "ddp", "--nproc", "1", "--steps", str(STEPS), "--micro-batch", "4", "--seq-len", "32",
          "--lr", "3e-3", "--warmup-steps", "2", "--warmup", "1", "--vocab-size", "1000", "--no-progress"]


@pytest.fixture(scope="module")
def chapters() -> list[str]:
    text = gzip.open(corpus_path(), "rt", encoding="utf-8").read()
    return [c for c in text.splitlines() if c.strip()][:60]  # ~250 kB: a quick tokenizer, thousands of examples


def train(cwd: Path, *args: str) -> tuple[list[float], dict]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([sys.executable, "-m", "scalestudy", "train", *COMMON, *args, "--output", "run"], cwd=cwd,
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    losses = [json.loads(line)["loss"] for line in (cwd / "run" / "metrics.jsonl").read_text().splitlines()]
    return losses, json.loads((cwd / "run" / "data.json").read_text())


def assert_learns(losses: list[float]) -> None:
    assert len(losses) == STEPS and all(math.isfinite(x) for x in losses), losses
    first, last = sum(losses[:3]) / 3, sum(losses[-3:]) / 3
    assert last < first - 0.5, losses  # nats/token, well beyond step-to-step noise


def test_knowledge_objective_with_lexicon_on_jsonl(tmp_path, chapters):
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps({"id": i, "body": c}) + "\n"
                                                   for i, c in enumerate(chapters)))
    entries = Path(lexicon_path()).read_text(encoding="utf-8").splitlines()[:200]
    (tmp_path / "entities.txt").write_text("\n".join(entries) + "\n")
    losses, data = train(tmp_path, "--model", "t5-tiny", "--objective", "knowledge", "--target-len", "12",
                         "--data", "corpus.jsonl", "--text-field", "body", "--lexicon", "entities.txt")
    assert_learns(losses)
    assert data["config"]["objective"] == "knowledge"
    assert (tmp_path / data["config"]["lexicon"]).resolve() == (tmp_path / "entities.txt").resolve()
    assert {(tmp_path / p).resolve(): n for p, n in data["corpora"].items()} == {(tmp_path / "corpus.jsonl").resolve():
                                                                          len(chapters)}


def test_causal_objective_on_parquet(tmp_path, chapters):
    pq.write_table(pa.table({"text": chapters}), tmp_path / "corpus.parquet")
    losses, data = train(tmp_path, "--model", "gpt2-tiny", "--objective", "causal", "--data", "corpus.parquet")
    assert_learns(losses)
    assert data["config"]["objective"] == "causal"
    assert {(tmp_path / p).resolve(): n for p, n in data["corpora"].items()} == {(tmp_path / "corpus.parquet").resolve():
                                                                          len(chapters)}
