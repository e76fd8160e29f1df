"""The `scalestudy` command line: a typer app whose commands are thin calls into the packages.

Each command group lives in its own module and registers itself on `app`. Bad input raises
`ScalestudyError`, which `main` prints as one line and exits with status 2 (never a traceback). Output paths are
checked before anything is written (scalestudy.outputs asks the filesystem itself); an OSError the checks could not
foresee (a full disk, an I/O error reading an input) is still one line and status 2. Ctrl-C, at any point from
loading the commands on, is one line and status 130.
"""

from __future__ import annotations

import sys

from scalestudy.errors import ScalestudyError


def __getattr__(name: str):
    """`app` and `err_console` (cli/root.py), imported on first use: typer and rich load inside `main`'s try."""
    if name in ("app", "err_console"):
        from scalestudy.cli import root

        return getattr(root, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Interrupted(BaseException):
    """Ctrl-C inside a command, carried past typer: its main returns a bare 130 for a KeyboardInterrupt, so `main`
    could not tell it from a command's own status and printed nothing."""


def _register() -> None:
    # Imported here so each module can import `app` from this package; modules import heavy deps lazily.
    from scalestudy.cli import costmodel, plan, scaling, study, train  # noqa: F401
    from scalestudy.cli.root import app
    from scalestudy.cli.terminal import full_command_summaries

    full_command_summaries(app)


_COMMAND: list = []  # the click command typer builds from `app`, built once per process


def _command():
    """The click command of `app`. typer builds it from the functions' signatures on every call (~25 ms, most of
    a cost-model command's time); the commands do not change within a process, so it is built once."""
    if not _COMMAND:
        _register()
        from scalestudy.cli.terminal import plain_argument_usage

        import typer

        from scalestudy.cli.root import app

        command = typer.main.get_command(app)
        plain_argument_usage(command)
        _interruptible(command)
        _COMMAND.append(command)
    return _COMMAND[0]


# Bidirectional overrides and isolates: they reorder what a terminal shows after them ("Trojan Source")
_BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _shown_controls(text: str) -> str:
    """`text` with each control character written as Python writes it ('\\x1b'): a path or a config's name that
    carries an escape sequence recoloured or rewrote the error line in the terminal (Rich passes ESC through)."""
    import unicodedata

    return "".join(repr(c)[1:-1] if unicodedata.category(c) == "Cc" or c in _BIDI_CONTROLS else c for c in text)


def _interruptible(command) -> None:
    """A KeyboardInterrupt in the command raised as `Interrupted`, which typer's main lets through to `main`."""
    invoke = command.invoke

    def wrapped(ctx):
        try:
            return invoke(ctx)
        except KeyboardInterrupt as exc:
            raise Interrupted() from exc

    command.invoke = wrapped


def _print_error(message: str) -> None:
    from rich.markup import escape

    from scalestudy.cli.root import err_console

    # the message is plain text: '[dimension, fraction]' or a name typed as '[bold]x' must not be read as markup
    err_console.print(f"[bold red]error:[/] {escape(_shown_controls(' '.join(message.split())))}", highlight=False,
                      soft_wrap=True, markup=True, emoji=False)  # 'hf:x:' is a name, not the :x: emoji


def _usage_error(exc) -> str:
    """Click's usage error as one line (its default is a 5-6 line box), pointing at the command's --help."""
    ctx = getattr(exc, "ctx", None)
    hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
    return f"{_cost_model_flag(exc, ctx) or exc.format_message()}{hint}"


def _cost_model_flag(exc, ctx) -> str | None:
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


# Options naming an input file (or a model): a blank value became the working directory or the path '/' in the
# messages ("corpus /home/me is a directory", "tokenizer file not found: /home/me/"), never the value typed
_FILE_OPTIONS = ("--data", "--tokenizer", "--lexicon", "--config", "--plot", "--model", "--base")
# Commands whose first argument is a study directory, a runs CSV or a spec file
_PATH_ARGUMENT_COMMANDS = (("fit",), ("report",), ("search",), ("study", "run"), ("study", "status"), ("study", "export"))


def _check_blank(args: list[str]) -> None:
    """A file option or a command's path argument given as '' or whitespace: one line naming it and the value."""
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if name in _FILE_OPTIONS and (eq or i + 1 < len(args)):
            value = value if eq else args[i + 1]
            if not value.strip():
                raise ScalestudyError(f"{name} needs a file name, got {value!r}")
    for words in _PATH_ARGUMENT_COMMANDS:
        if tuple(args[:len(words)]) == words and len(args) > len(words) and not args[len(words)].strip():
            raise ScalestudyError(f"`scalestudy {' '.join(words)}` needs a file or directory name, got "
                                  f"{args[len(words)]!r}")


def main(argv: list[str] | None = None) -> None:
    try:
        _main(argv)
    except (KeyboardInterrupt, Interrupted):  # Ctrl-C while loading, checking or running: one line, not a traceback
        _interrupted()


def _interrupted() -> None:
    try:
        sys.stderr.write("error: interrupted (Ctrl-C)\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # stderr closed, or a second Ctrl-C while it was written
        pass
    sys.exit(130)  # 128 + SIGINT, as a shell reports it


def _main(argv: list[str] | None) -> None:
    import typer

    try:
        from scalestudy.launch.process import check_environment

        check_environment()  # variables the ranks and the CPU profile read: one line now, not a failure inside them
        _check_utf8(sys.argv[1:] if argv is None else argv)
        _check_blank(sys.argv[1:] if argv is None else argv)
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
