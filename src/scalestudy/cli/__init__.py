"""The `scalestudy` command line: a typer app whose commands are thin calls into the packages.

Each command group lives in its own module and registers itself on `app`. Bad input raises
`ScalestudyError`, which `main` prints as one line and exits with status 2 (never a traceback).
"""

from __future__ import annotations

import sys

import typer
from rich.console import Console

from scalestudy.errors import ScalestudyError

app = typer.Typer(
    name="scalestudy",
    help="Plan, run, tune and report distributed pre-training of encoder-decoder and decoder-only LLMs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
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


def _register() -> None:
    # Imported here so each module can import `app` from this package; modules import heavy deps lazily.
    from scalestudy.cli import costmodel, plan, scaling, study, train  # noqa: F401


def main(argv: list[str] | None = None) -> None:
    _register()
    try:
        app(args=argv, prog_name="scalestudy")
    except ScalestudyError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        sys.exit(2)
