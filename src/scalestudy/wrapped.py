"""Plain `print` lines that a terminal does not cut mid-word.

A terminal breaks a line longer than itself at its last column, mid-word ("roughl|y 1-4 s per MB", "fre|sh
machine": the demo at 80 columns). Lines printed without Rich (notices from the cost model, the data pipeline, the
CLI's stderr log) are wrapped at spaces here when they go to a terminal; to a file or pipe (logs, CI, grep) they stay
one line. A word longer than the width (a long path) is kept whole on its own line, never split.

Widths are terminal columns (`cells`), not characters: a CJK character takes two, so validate's sources quoting
Chinese tables ('A100单机8卡（1x8）') wrapped by textwrap's len() ran to 94 columns in an 80-column terminal.
"""

from __future__ import annotations

import os
import sys
import unicodedata


def width_of(stream) -> int | None:
    """Columns of the terminal `stream` is ($COLUMNS wins, as in Rich and cli/terminal.py); None: not a terminal."""
    try:
        if not stream.isatty():
            return None
        if os.environ.get("COLUMNS", "").isdigit():
            return int(os.environ["COLUMNS"])
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError):
        return None


def fit(text: str, stream) -> str:
    """`text` with each line longer than the terminal `stream` is wrapped at spaces (later lines indented as the first,
    plus 2); unchanged when `stream` is not a terminal."""
    width = width_of(stream)
    if width is None:
        return text
    out = []
    for line in text.splitlines() or [""]:
        indent = line[: len(line) - len(line.lstrip(" "))]
        out.append(line if cells(line) <= width else fill(
            line.strip(" "), width, initial_indent=indent, subsequent_indent=indent + "  ", break_long_words=False))
    return "\n".join(out)


def cells(text: str) -> int:
    """Terminal columns `text` takes: East Asian wide and full-width characters 2, combining marks 0, others 1."""
    return sum(0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def fill(text: str, width: int, initial_indent: str = "", subsequent_indent: str = "",
         break_long_words: bool = True) -> str:
    """textwrap.fill(text, width, ..., break_on_hyphens=False) by terminal columns (`cells`) instead of len():
    words joined by single spaces; a word longer than a line is cut at the line's end, or with break_long_words
    False kept whole on its own line."""
    lines, line, indent = [], initial_indent, initial_indent
    for word in text.split():
        sep = "" if line == indent else " "
        if cells(line + sep + word) <= width:
            line += sep + word
            continue
        if line != indent:
            lines.append(line)
            indent = line = subsequent_indent
        while break_long_words and cells(line + word) > width:
            cut = _prefix_within(word, width - cells(line))
            lines.append(line + word[:cut])
            word, indent, line = word[cut:], subsequent_indent, subsequent_indent
        line += word
    return "\n".join([*lines, line]) if line.strip() or lines else ""


def _prefix_within(word: str, room: int) -> int:
    """How many of `word`'s characters fit in `room` columns (at least one, so that a cut always advances)."""
    used = count = 0
    for c in word:
        used += cells(c)
        if used > room:
            break
        count += 1
    return max(count, 1)


def say(text: str, stream=None, flush: bool = True) -> None:
    """print(text) to `stream` (default stdout), wrapped to it when it is a terminal (`fit`)."""
    stream = stream or sys.stdout
    print(fit(text, stream), file=stream, flush=flush)
