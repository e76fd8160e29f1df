"""The `scalestudy` command line: a typer app whose commands are thin calls into the packages.

Each command group lives in its own module and registers itself on `app`. Bad input raises
`ScalestudyError`, which `main` prints as one line and exits with status 2 (never a traceback). Output paths are
checked before anything is written (scalestudy.outputs asks the filesystem itself); an OSError the checks could not
foresee (a full disk, an I/O error reading an input) is still one line and status 2.
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


def _register() -> None:
    # Imported here so each module can import `app` from this package; modules import heavy deps lazily.
    from scalestudy.cli import costmodel, plan, scaling, study, train  # noqa: F401
    from scalestudy.cli.terminal import full_command_summaries

    full_command_summaries(app)


_COMMAND: list = []  # the click command typer builds from `app`, built once per process


def _command():
    """The click command of `app`. typer builds it from the functions' signatures on every call (~25 ms, most of
    a cost-model command's time); the commands do not change within a process, so it is built once."""
    if not _COMMAND:
        _register()
        from scalestudy.cli.terminal import plain_argument_usage

        command = typer.main.get_command(app)
        plain_argument_usage(command)
        _COMMAND.append(command)
    return _COMMAND[0]


# Bidirectional overrides and isolates: they reorder what a terminal shows after them ("Trojan Source")
_BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _shown_controls(text: str) -> str:
    """`text` with each control character written as Python writes it ('\\x1b'): a path or a config's name that
    carries an escape sequence recoloured or rewrote the error line in the terminal (Rich passes ESC through)."""
    import unicodedata

    return "".join(repr(c)[1:-1] if unicodedata.category(c) == "Cc" or c in _BIDI_CONTROLS else c for c in text)


def _print_error(message: str) -> None:
    from rich.markup import escape

    # the message is plain text: '[dimension, fraction]' or a name typed as '[bold]x' must not be read as markup
    err_console.print(f"[bold red]error:[/] {escape(_shown_controls(' '.join(message.split())))}", highlight=False,
                      soft_wrap=True, markup=True, emoji=False)  # 'hf:x:' is a name, not the :x: emoji


def _usage_error(exc: typer.TyperException) -> str:
    """Click's usage error as one line (its default is a 5-6 line box), pointing at the command's --help."""
    ctx = getattr(exc, "ctx", None)
    hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
    return f"{_cost_model_flag(exc, ctx) or exc.format_message()}{hint}"


def _cost_model_flag(exc: typer.TyperException, ctx) -> str | None:
    """A cost-model flag of estimate / plan given to a command without it (train, tune) said as such: click's own
    'No such option: --optimizer-kind (Possible options: --offload-optimizer)' suggests a flag of another meaning."""
    if type(exc).__name__ != "NoSuchOption" or ctx is None:  # typer's vendored click's class
        return None
    from scalestudy.cli.options import SOFTWARE_OPTIONS
    from scalestudy.specs.run import COST_MODEL_OPTIONS

    for name, (_, option) in SOFTWARE_OPTIONS.items():
        if exc.option_name in (flag for decl in option.param_decls for flag in decl.split("/")):
            what = f": {COST_MODEL_OPTIONS[name]}" if name in COST_MODEL_OPTIONS else ""
            return (f"{exc.option_name} is a cost-model option (scalestudy estimate / plan{what}); "
                    f"`{ctx.command_path}` runs its own software and has no such flag: drop it")
    return None


def _os_error(exc: OSError) -> str:
    """An OSError as one line: what failed on which path, e.g. "cannot write /proc/x: No such file or directory"."""
    paths = " -> ".join(str(p) for p in (exc.filename, exc.filename2) if p is not None)
    why = exc.strerror or type(exc).__name__
    return f"{paths}: {why}" if paths else why  # e.g. stdout on a full disk: "No space left on device"


def _check_utf8(args: list[str]) -> None:
    """Names and paths on the command line end up in UTF-8 files (configs, stores, reports): one that is not UTF-8
    (Python keeps its bytes as surrogates) would fail half-way through writing them."""
    for arg in args:
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            shown = arg.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
            raise ScalestudyError(f"argument {shown!r} is not UTF-8 text: scalestudy writes names and paths into "
                                  "UTF-8 files (rename the file, or give the name in UTF-8)") from None


def main(argv: list[str] | None = None) -> None:
    try:
        from scalestudy.launch.process import check_environment

        check_environment()  # variables the ranks and the CPU profile read: one line now, not a failure inside them
        _check_utf8(sys.argv[1:] if argv is None else argv)
        code = _command().main(args=argv, prog_name="scalestudy", standalone_mode=False)
    except typer.TyperException as exc:  # usage errors (typer's click)
        if type(exc).__name__ == "NoArgsIsHelpError":  # a bare `scalestudy` or `scalestudy study`: the help
            exc.show()
        else:
            _print_error(_usage_error(exc))
        sys.exit(exc.exit_code)
    except typer.Abort as exc:
        if isinstance(exc.__cause__, EOFError):  # click makes any EOFError an Abort: a file cut short, not Ctrl-C
            _print_error(f"a file ended before its data did (cut short or damaged): {exc.__cause__ or 'EOFError'}")
            sys.exit(2)
        _print_error("aborted")
        sys.exit(130)
    except ScalestudyError as exc:
        _print_error(str(exc))
        sys.exit(getattr(exc, "exit_code", 2))
    except OSError as exc:  # the filesystem refused what the checks could not foresee (/proc, a full disk, EIO)
        _print_error(_os_error(exc))
        sys.exit(2)
    except RuntimeError as exc:  # pathlib's resolve() (Python < 3.13) reports a symbolic link loop so
        if not str(exc).startswith("Symlink loop"):
            raise
        _print_error(f"{exc} (a symbolic link that points back at itself)")
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)
