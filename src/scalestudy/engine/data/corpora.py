"""Corpus readers: each returns a list of documents (non-empty strings).

Specs:
- `PATH.txt` / `PATH.txt.gz`: one document per non-empty line (leading/trailing whitespace stripped). Lines, not
  paragraphs, because most pre-training dumps are one document per line and a line is never ambiguous.
- `PATH.jsonl` / `PATH.jsonl.gz`: one JSON object per non-empty line; the document is its `text_field`.
- `PATH.parquet`: the string column `text_field`.
- `hf:NAME[:CONFIG]`: a Hugging Face dataset, streamed (split "train"), its `text_field`; needs network and the
  `datasets` package. Streams can be unbounded, so at most `max_docs` documents are read (default HF_DEFAULT_MAX_DOCS).
Errors are one-line ScalestudyErrors naming the file (and line number where there is one).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from scalestudy.errors import ScalestudyError

HF_DEFAULT_MAX_DOCS = 100_000
EXTENSIONS = (".txt", ".txt.gz", ".jsonl", ".jsonl.gz", ".parquet")


def _kind(path: str) -> str:
    for ext in EXTENSIONS:
        if path.endswith(ext):
            return ext.removesuffix(".gz").lstrip(".")
    raise ScalestudyError(f"unknown corpus extension for {path} (use {', '.join(EXTENSIONS)} or hf:NAME[:CONFIG])")


def _lines(path: str):
    """(line number, decoded line) for every line; non-UTF-8 bytes are reported with file and line."""
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            for number, raw in enumerate(f, start=1):
                try:  # utf-8-sig on the first line: a byte-order mark (Windows editors) is no text, nor JSON
                    yield number, raw.decode("utf-8-sig" if number == 1 else "utf-8")
                except UnicodeDecodeError as exc:
                    raise ScalestudyError(f"{path} line {number} is not valid UTF-8 ({exc.reason} at byte {exc.start})"
                                          ) from None
    except (OSError, EOFError) as exc:  # e.g. a truncated or non-gzip .gz file
        raise ScalestudyError(f"cannot read {path}: {exc}") from None


def read_txt(path: str, max_docs: int = 0) -> list[str]:
    docs = []
    for _, line in _lines(path):
        line = line.strip()
        if line:
            docs.append(line)
            if len(docs) == max_docs:
                break
    return docs


def read_jsonl(path: str, text_field: str = "text", max_docs: int = 0) -> list[str]:
    docs = []
    for number, line in _lines(path):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ScalestudyError(f"{path} line {number} is not valid JSON: {exc.msg}") from None
        except RecursionError:  # thousands of nested brackets: json's decoder recurses once per level
            raise ScalestudyError(f"{path} line {number}: nested too deeply to be a record") from None
        if not isinstance(record, dict):
            raise ScalestudyError(f"{path} line {number}: expected a JSON object, got {type(record).__name__}")
        if text_field not in record:
            fields = ", ".join(sorted(record)) or "none"
            raise ScalestudyError(f"{path} line {number}: no field {text_field!r} (fields: {fields}); set text_field")
        value = record[text_field]
        if not isinstance(value, str):
            raise ScalestudyError(f"{path} line {number}: field {text_field!r} is {type(value).__name__}, not a string")
        if value.strip():
            docs.append(value.strip())
            if len(docs) == max_docs:
                break
    return docs


def read_parquet(path: str, text_field: str = "text", max_docs: int = 0) -> list[str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path)
    except (pa.ArrowException, OSError) as exc:
        raise ScalestudyError(f"cannot read parquet file {path}: {str(exc).splitlines()[0]}") from None
    if text_field not in schema.names:
        raise ScalestudyError(f"{path}: no column {text_field!r} (columns: {', '.join(schema.names)}); set text_field")
    column_type = schema.field(text_field).type
    if not (pa.types.is_string(column_type) or pa.types.is_large_string(column_type)):
        raise ScalestudyError(f"{path}: column {text_field!r} has type {column_type}, not string")
    column = pq.read_table(path, columns=[text_field]).column(text_field).to_pylist()
    docs = [v.strip() for v in column if v is not None and v.strip()]
    return docs[:max_docs] if max_docs else docs


def check_hf_spec(spec: str) -> None:
    """`hf:NAME[:CONFIG]` as written (the dataset itself is only reached when read: it needs the network)."""
    parts = spec.split(":")
    if len(parts) not in (2, 3) or not all(p.strip() for p in parts[1:]):
        raise ScalestudyError(f"bad dataset spec {spec!r}: use hf:NAME or hf:NAME:CONFIG")


def read_hf(spec: str, text_field: str = "text", max_docs: int = 0) -> list[str]:
    """`hf:NAME[:CONFIG]`, streamed; only the first `max_docs` documents (HF_DEFAULT_MAX_DOCS when 0)."""
    check_hf_spec(spec)
    parts = spec.split(":")
    try:
        import datasets
    except ImportError:
        raise ScalestudyError("hf: corpora need the `datasets` package (pip install 'scalestudy[hub]')") from None
    limit = max_docs or HF_DEFAULT_MAX_DOCS
    try:
        stream = datasets.load_dataset(parts[1], parts[2] if len(parts) == 3 else None, split="train", streaming=True)
        docs = []
        for number, record in enumerate(stream):
            if text_field not in record:
                raise ScalestudyError(f"{spec}: no field {text_field!r} (fields: {', '.join(sorted(record))})")
            value = record[text_field]
            if isinstance(value, str) and value.strip():
                docs.append(value.strip())
                if len(docs) >= limit:
                    break
    except ScalestudyError:
        raise
    except Exception as exc:  # network, unknown dataset, auth: all user-facing
        raise ScalestudyError(f"cannot stream {spec}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                              ) from None
    return docs


def check_corpus_file(spec: str) -> None:
    """A local corpus spec names a regular file: a folder, a FIFO or a device (whose read never ends or never
    stops) and a missing file each said as such, before anything reads it or a rank starts."""
    path = Path(spec)
    if path.is_dir():  # a folder of shards is a common guess: name what is accepted instead
        raise ScalestudyError(f"corpus {spec} is a directory: --data takes corpus files "
                              f"({', '.join(EXTENSIONS)}; repeat --data for several) or hf:NAME[:CONFIG]")
    if path.exists() and not path.is_file():  # was 'not found': it is there, but reading it would block or not end
        raise ScalestudyError(f"corpus {spec} is not a regular file (a FIFO, a socket or a device): --data takes "
                              "corpus files")
    if not path.is_file():
        raise ScalestudyError(f"corpus file not found: {spec}")


def read_corpus(spec: str, text_field: str = "text", max_docs: int = 0) -> list[str]:
    """Documents of one corpus spec (see module docstring); raises on a missing file or an empty corpus."""
    if spec.startswith("hf:"):
        docs = read_hf(spec, text_field, max_docs)
    else:
        check_corpus_file(spec)
        kind = _kind(spec)
        if kind == "txt":
            docs = read_txt(spec, max_docs)
        elif kind == "jsonl":
            docs = read_jsonl(spec, text_field, max_docs)
        else:
            docs = read_parquet(spec, text_field, max_docs)
    if not docs:
        raise ScalestudyError(f"corpus {spec} is empty (no non-blank documents)")
    return docs
