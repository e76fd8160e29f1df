"""A value YAML's constructors refuse is one line that says which: Python's 4,300-digit int limit, or the
constructor's own reason (YAML 1.1 reads 2026-13-45 as a date, and datetime refuses month 13) -- not a misleading
'more than 4,300 digits' for the date, nor a ValueError traceback."""

import pytest

from scalestudy.errors import ScalestudyError
from scalestudy.yamlfile import TOO_MANY_DIGITS, read_yaml, read_yaml_value


def test_an_impossible_date_is_named_as_such(tmp_path):
    path = tmp_path / "cluster.yaml"
    path.write_text("device: a100-80gb\nnodes: 2026-13-45\n", encoding="utf-8")
    with pytest.raises(ScalestudyError) as err:
        read_yaml(path, "cluster file")
    assert "cannot read a value: month must be in 1..12" in str(err.value) and "digits" not in str(err.value)
    with pytest.raises(ScalestudyError, match="month must be in 1..12"):
        read_yaml_value("2026-13-45", "--set warmup_steps")


def test_too_many_digits_keeps_its_message(tmp_path):
    path = tmp_path / "cluster.yaml"
    path.write_text("nodes: " + "9" * 5000 + "\n", encoding="utf-8")
    with pytest.raises(ScalestudyError, match="4,300 digits"):
        read_yaml(path, "cluster file")
    with pytest.raises(ScalestudyError) as err:
        read_yaml_value("9" * 5000, "--set steps")
    assert str(err.value) == f"--set steps: {TOO_MANY_DIGITS}"
