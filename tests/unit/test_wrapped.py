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
