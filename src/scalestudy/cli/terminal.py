"""Terminal output that fits: tables that drop their least important columns (never cut a key one) to the width of
the terminal, and help texts that show defaults and whole command summaries.

Rich squeezes a too-wide table by cutting cells ("0.49...", "nod..."), which hides exactly the numbers a reader
came for. Here a table is laid out for the width first: columns are dropped in their stated order until the rest
fit whole, and the caller says which were left out. (Commands and paths are printed with soft_wrap=True, so that
Rich never splits them across lines.)
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

PIPE_WIDTH = 160  # output to a file or pipe: wide enough for every column
WRAP_MIN = 16  # narrowest a wrapping column (a label, a reason) is squeezed to


@dataclass(frozen=True)
class Column:
    header: str
    justify: str = "right"
    drop: int = 0  # 0: key column, never dropped; otherwise higher numbers are dropped first
    wrap: bool = False  # prose (a label, a reason): may wrap at spaces when key columns alone do not fit


def terminal_width() -> int:
    """The terminal's width: $COLUMNS wins (as in Rich); else the terminal that stdout, stderr or stdin is (so
    `scalestudy plan ... | less` still fits the screen); else PIPE_WIDTH (output to files and CI logs)."""
    if os.environ.get("COLUMNS", "").isdigit():
        return int(os.environ["COLUMNS"])
    for stream in (sys.stdout, sys.stderr, sys.stdin):
        try:
            return os.get_terminal_size(stream.fileno()).columns
        except (AttributeError, ValueError, OSError):
            continue
    return PIPE_WIDTH


def terminal_console():
    """A Rich console terminal_width() wide: Rich alone falls back to 80 columns when stdout is a pipe (`| less`)."""
    from rich.console import Console

    return Console(width=terminal_width())


def table_width(columns: list[Column], rows: list[list[str]], keep: list[int], rules: bool = True) -> int:
    """Width of a Rich table (heavy-head box, or box=None with `rules` False; padding 1) showing columns `keep` with
    no cell or header wrapped (columns are dropped before prose is wrapped; only what still does not fit wraps)."""
    total = len(keep) + 1 if rules else 0  # vertical rules
    for i in keep:
        total += max([len(columns[i].header), *(len(r[i]) for r in rows)]) + 2
    return total


def fit_columns(columns: list[Column], rows: list[list[str]], width: int, rules: bool = True) -> list[int]:
    """Indices of the columns to show: all, minus droppable ones (highest `drop` first) until the table fits."""
    keep = list(range(len(columns)))
    for i in sorted((i for i, c in enumerate(columns) if c.drop), key=lambda i: -columns[i].drop):
        if table_width(columns, rows, keep, rules) <= width:
            break
        keep.remove(i)
    return keep


def fitted_table(title: str, columns: list[Column], rows: list[list[str]], width: int):
    """(rich Table, headers of the columns left out) for a terminal `width` columns wide."""
    from rich.markup import escape
    from rich.table import Table

    keep = fit_columns(columns, rows, width)
    table = Table(title=escape(title), width=None)  # titles and cells are data (labels, reasons): "[" is text
    for i in keep:
        # fold, never ellipsis: should a key column still not fit, it wraps onto a second line instead of "0.49..."
        table.add_column(columns[i].header, justify=columns[i].justify, overflow="fold",
                         no_wrap=not columns[i].wrap, min_width=WRAP_MIN if columns[i].wrap else None)
    for r in rows:
        table.add_row(*(escape(r[i]) for i in keep))
    return table, [c.header for i, c in enumerate(columns) if i not in keep]



def show_defaults(command, defaults: dict) -> None:
    """Add `defaults` ({parameter name: value}) as '(default: ...)' to the help of `command`'s options whose own
    default is None (they fall back on a config file first, so typer cannot know the value). Options whose help
    already explains their default, and empty values, are left as they are."""
    import inspect

    for name, param in inspect.signature(command).parameters.items():
        info = param.default
        value = defaults.get(name)
        if getattr(info, "default", 0) is not None or value in (None, "", [], ()):
            continue
        if "default" in (info.help or "").lower():
            continue
        shown = str(value).lower() if isinstance(value, bool) else str(value)
        info.help = f"{info.help or ''} (default: {shown})".strip()  # show_default would print "(value)"


def run_flag_defaults() -> dict:
    """RunConfig's default value of every `train` flag (flat option name -> value)."""
    from scalestudy.specs.run import FLAT_KEYS, RunConfig

    cfg = RunConfig()
    return {flat: getattr(getattr(cfg, section), name) for flat, (section, name) in FLAT_KEYS.items()}


def full_command_summaries(app) -> None:
    """Command lists show each command's whole first sentence, wrapped, instead of click's cut ("...of..."): click
    shortens a docstring to fit one line but prints an explicit short_help in full."""
    import inspect

    for info in app.registered_commands:
        if info.short_help is None and info.callback is not None and info.callback.__doc__:
            first = inspect.cleandoc(info.callback.__doc__).split("\n\n")[0].replace("\n", " ")
            info.short_help = first.split("; ")[0].split(". ")[0].rstrip(".")
    for group in app.registered_groups:
        full_command_summaries(group.typer_instance)


def plain_argument_usage(command) -> None:
    """Usage lines name a required argument as click does, `scalestudy fit [OPTIONS] SOURCE`: typer writes
    `{source}`, braces that read as a set or a template to fill in (README's synopses write DIR, SPEC.yaml)."""
    for sub in getattr(command, "commands", {}).values():
        plain_argument_usage(sub)
    for param in command.params:
        if param.param_type_name == "argument" and hasattr(param, "_usage_display_name"):
            name = (param.metavar or param.name).upper()
            shown = name if param.required else f"[{name}]"
            param._usage_display_name = lambda shown=shown, many=param.nargs != 1: shown + ("..." if many else "")
