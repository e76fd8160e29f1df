"""Plain-print notices at a terminal wrap at spaces (a terminal cut them mid-word: 'roughl|y', 'fre|sh'); to a file or
pipe they stay one line; a path longer than the terminal stays whole."""

import io

from scalestudy.wrapped import fit


class Tty(io.StringIO):
    def isatty(self):
        return True


LINE = ("training a 8192-token unigram tokenizer on 242 documents (1.1 MB of text, roughly 1-4 s per MB; once per "
        "corpus and vocabulary, kept in scalestudy-demo/tokenizer/tokenizer.json)...")


def test_a_terminal_gets_lines_wrapped_at_spaces(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    lines = fit(LINE, Tty()).splitlines()
    assert len(lines) == 3 and max(map(len, lines)) <= 80
    assert " ".join(line.strip() for line in lines) == LINE  # no word cut, none lost
    assert lines[1].startswith("  ")  # hanging indent: the continuation reads as one notice


def test_files_and_pipes_keep_one_line(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    assert fit(LINE, io.StringIO()) == LINE


def test_a_long_path_stays_whole_and_indents_are_kept(monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    path = "/tmp/" + "x" * 60 + "/cpu_profile.yaml"
    lines = fit(f"  note: delete {path} to measure it again", Tty()).splitlines()
    assert any(line.strip() == path for line in lines)  # on a line of its own, longer than 40, not split
    assert lines[0].startswith("  note:") and all(line.startswith("  ") for line in lines)


def test_widths_are_terminal_columns_so_cjk_text_fits(monkeypatch):
    """validate's sources quote Chinese tables; wrapped by len() their lines ran to 94 columns of an 80-column
    terminal (a CJK character takes two)."""
    from scalestudy.wrapped import cells, fill

    text = "flagperf: rows 'A100单机8卡（1x8）| bf16 | PP2DP4TP1 | 3698.7' and 'H100二机16卡（2x8）| bf16' " * 6
    lines = fill(text, 40, initial_indent="  ", subsequent_indent="    ").splitlines()
    assert max(map(cells, lines)) <= 40 and cells("单机（1x8）") == 11
    assert " ".join(line.strip() for line in lines) == " ".join(text.split())  # nothing cut, nothing lost
    assert all(line.startswith("    ") for line in lines[1:])
    long = fill("see " + "単" * 30, 20).splitlines()  # a word wider than a line: cut at the column, not a character
    assert lines and long[0] == "see" and all(cells(line) <= 20 for line in long) and "".join(long[1:]) == "単" * 30
    monkeypatch.setenv("COLUMNS", "30")
    assert all(cells(line) <= 30 for line in fit("注意 " * 20, Tty()).splitlines())
