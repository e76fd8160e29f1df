"""Run the real CLI in this process (`scalestudy.cli.main`) and return (exit code, stdout, stderr)."""

from __future__ import annotations

from scalestudy.cli import main


def run_cli(capsys, args: list[str]) -> tuple[int, str, str]:
    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err
