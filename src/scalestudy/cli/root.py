"""The typer app every command module registers on (`from scalestudy.cli import app`), its root callback and
`version`. Kept out of cli/__init__.py, whose `main` must be running -- and catching Ctrl-C -- before typer and rich
are imported (half a second on a busy machine: a Ctrl-C then was a traceback)."""

from __future__ import annotations

import typer
from rich.console import Console

app = typer.Typer(
    name="scalestudy",
    help="Plan, run, tune and report distributed pre-training of encoder-decoder and decoder-only LLMs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # click's plain help: in an 80-column terminal Rich's boxed panels leave ~18 columns for the help text
    rich_markup_mode=None,
)
err_console = Console(stderr=True)


@app.callback()
def _root() -> None:
    """Plan, run, tune and report distributed pre-training of encoder-decoder and decoder-only LLMs."""


@app.command()
def version() -> None:
    """Print the scalestudy version."""
    from scalestudy import __version__

    print(f"scalestudy {__version__}")
