"""Shared by the multi-process tests: the bundled corpus's tokenizer, trained once per session."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def bundled_tokenizer(tmp_path_factory) -> str:
    from scalestudy.engine.data.pipeline import DataConfig, prepare

    out = tmp_path_factory.mktemp("bundled-tokenizer")
    prepare(DataConfig(seq_len=64, target_len=16), out, write=True)
    return str(out / "tokenizer.json")
