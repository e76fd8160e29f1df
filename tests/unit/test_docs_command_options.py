"""docs/command-options.md names every option of every command with what it does, its default and its unit.

newcomer3 found calibrate --base/--name/--full, fit --bootstrap/--level/--seed, tune --margin, study run --executor
and more described by `--help` alone. The commands and their options are read from the CLI itself (the click
command typer builds), not from a list here, so an option added to any command without a row fails this test, and
so does a row left behind for an option that is gone. One process, no subprocess: milliseconds per command.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from scalestudy.cli import _command

DOC = Path(__file__).resolve().parents[2] / "docs" / "command-options.md"
SHARED = "Software options (estimate and plan)"  # the section a command's own section points to with SHARED_NOTE
SHARED_NOTE = "Also every option of 'Software options' below."


def _commands(command=None, path=()):
    """(path, click command) of every leaf command: ("estimate",), ("study", "run"), ..."""
    command = command or _command()
    if hasattr(command, "commands"):
        return [leaf for name, sub in command.commands.items() for leaf in _commands(sub, (*path, name))]
    return [(path, command)]


def _sections() -> dict[str, str]:
    """The page's sections by heading ('scalestudy study run', SHARED)."""
    parts = re.split(r"^## (.+)$", DOC.read_text(encoding="utf-8"), flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


def _rows(section: str) -> dict[frozenset, list[str]]:
    """{the flags a row names: [default, unit, what it does]} of a section's option table."""
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if len(cells) == 4 and cells[0].startswith("`"):
            flags = frozenset(re.findall(r"`(-[^`]+)`", cells[0]))
            assert flags not in rows, f"two rows for {sorted(flags)}"
            rows[flags] = cells[1:]
    return rows


def _visible_options(command):
    return [p for p in command.params if p.param_type_name == "option" and not getattr(p, "hidden", False)]


COMMANDS = _commands()


def test_every_command_has_a_section_and_every_section_a_command():
    names = {"scalestudy " + " ".join(path) for path, _ in COMMANDS}
    assert set(_sections()) == names | {SHARED}


@pytest.mark.parametrize("path,command", COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_every_option_has_a_row_with_its_default_unit_and_meaning(path, command):
    sections = _sections()
    section = sections["scalestudy " + " ".join(path)]
    rows = _rows(section)
    shared = _rows(sections[SHARED]) if SHARED_NOTE in section else {}
    for param in command.params:
        if param.param_type_name == "argument":  # named as its usage line names it
            assert f"`{param.name.upper()}`" in section, f"{' '.join(path)}: argument {param.name.upper()} not named"
    documented = set()
    for option in _visible_options(command):
        flags = frozenset(option.opts + option.secondary_opts)
        cells = rows.get(flags) or shared.get(flags)
        assert cells, f"scalestudy {' '.join(path)} {' / '.join(sorted(flags))}: no row in {DOC.name}"
        default, unit, meaning = cells
        assert default and unit and len(meaning) > 10, f"{' '.join(path)} {sorted(flags)}: an empty cell"
        if option.default is not None and not isinstance(option.default, bool) and not option.is_flag:
            shown = ",".join(map(str, option.default)) if isinstance(option.default, (list, tuple)) else option.default
            assert str(shown) in default, f"{' '.join(path)} {sorted(flags)}: default {shown} not in {default!r}"
        if option.required:
            assert default == "required", f"{' '.join(path)} {sorted(flags)} is required"
        documented.add(flags)
    stale = set(rows) - documented
    assert not stale, f"scalestudy {' '.join(path)}: rows for options it does not take: {sorted(map(sorted, stale))}"


def test_the_shared_rows_are_options_of_each_command_that_points_to_them():
    sections = _sections()
    shared = set(_rows(sections[SHARED]))
    pointing = [c for p, c in COMMANDS if SHARED_NOTE in sections["scalestudy " + " ".join(p)]]
    assert len(pointing) == 2  # estimate and plan
    for command in pointing:
        taken = {frozenset(o.opts + o.secondary_opts) for o in _visible_options(command)}
        assert shared <= taken, sorted(map(sorted, shared - taken))


@pytest.mark.parametrize("path,command", [(p, c) for p, c in COMMANDS if any(
    q.param_type_name == "argument" for q in c.params)], ids=lambda v: " ".join(v) if isinstance(v, tuple) else "")
def test_a_usage_line_names_its_argument_as_this_page_does(path, command):
    """typer wrote `scalestudy fit [OPTIONS] {source}`: braces read as a set or a template to fill in."""
    usage = command.collect_usage_pieces(command.context_class(command, info_name=path[-1]))
    arguments = [p.name.upper() for p in command.params if p.param_type_name == "argument"]
    assert usage == ["[OPTIONS]", *arguments]
