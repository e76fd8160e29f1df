"""User YAML files: a missing one is a one-line error that says where to look."""

from pathlib import Path

import pytest

from scalestudy.errors import ScalestudyError
from scalestudy.yamlfile import read_yaml


def test_a_readme_example_path_typed_outside_the_repository_says_where_it_is(tmp_path, monkeypatch):
    """`scalestudy study run examples/study-cpu.yaml` in another directory: the README's paths are relative to the
    repository root, and the one-line error says so, with the file's full path (when running from a checkout)."""
    import scalestudy

    root = Path(scalestudy.__file__).resolve().parents[2]
    if not (root / "examples" / "study-cpu.yaml").is_file():
        pytest.skip("not a source checkout")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ScalestudyError) as err:
        read_yaml("examples/study-cpu.yaml", "study spec")
    assert str(err.value) == (f"study spec not found: examples/study-cpu.yaml in {tmp_path} (the repository's is "
                              f"{root / 'examples/study-cpu.yaml'}: the README's paths are relative to its root)")
    with pytest.raises(ScalestudyError, match=r"^study spec not found: nope\.yaml$"):  # not the repository's: as before
        read_yaml("nope.yaml", "study spec")
