"""Plain `print` lines that a terminal does not cut mid-word.

A terminal breaks a line longer than itself at its last column, mid-word ("roughl|y 1-4 s per MB", "fre|sh
machine": the demo at 80 columns). Lines printed without Rich (notices from the cost model, the data pipeline, the
CLI's stderr log) are wrapped at spaces here when they go to a terminal; to a file or pipe (logs, CI, grep) they stay
one line. A word longer than the width (a long path) is kept whole on its own line, never split.
"""

from __future__ import annotations

import os
import sys
import textwrap


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
        out.append(line if len(line) <= width else textwrap.fill(
            line.strip(" "), width, initial_indent=indent, subsequent_indent=indent + "  ", break_long_words=False,
            break_on_hyphens=False))
    return "\n".join(out)


def say(text: str, stream=None, flush: bool = True) -> None:
    """print(text) to `stream` (default stdout), wrapped to it when it is a terminal (`fit`)."""
    stream = stream or sys.stdout
    print(fit(text, stream), file=stream, flush=flush)
