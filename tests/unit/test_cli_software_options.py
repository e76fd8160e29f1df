"""estimate and plan take the run's software options from one declaration (cli/options.SOFTWARE_OPTIONS), so an
option added there reaches both commands (plan --cublas was once missed until a parity test failed)."""

from __future__ import annotations

import inspect

from scalestudy.cli.costmodel import estimate
from scalestudy.cli.options import PLAN_SOFTWARE_OPTIONS, SOFTWARE_OPTIONS
from scalestudy.cli.plan import plan
from scalestudy.specs.strategy import Strategy

# Strategy fields that are the layout or a per-command choice, not one of the shared software statements:
# each command declares these itself (plan searches most of them).
SHAPE_FIELDS = {"engine", "zero", "tp", "pp", "cp", "micro_batch", "recompute", "precision", "offload_optimizer",
                "offload_params", "attention", "pp_schedule", "virtual_stages", "stage_layers"}


def _flags(command) -> dict[str, tuple[str, ...]]:
    return {name: tuple(p.default.param_decls) for name, p in inspect.signature(command).parameters.items()
            if hasattr(p.default, "param_decls")}


def test_every_software_field_of_strategy_is_one_shared_option():
    assert set(Strategy.__dataclass_fields__) - SHAPE_FIELDS == set(SOFTWARE_OPTIONS)
    assert list(PLAN_SOFTWARE_OPTIONS) == list(SOFTWARE_OPTIONS)  # plan overrides defaults only, in the same order


def test_estimate_and_plan_both_take_every_shared_option_under_the_same_flag():
    est, pln = _flags(estimate), _flags(plan)
    for name, (_, option) in SOFTWARE_OPTIONS.items():
        assert est[name] == pln[name] == tuple(option.param_decls), name
    assert "software" not in est and "software" not in pln  # the placeholder is replaced, not a flag


def _readme_values(text: str, flag: str) -> list[str] | None:
    """The values the README's estimate synopsis lists for `flag` (`[--flag a|b|c]`, continued lines joined), or
    None where it names the flag without values (a switch)."""
    import re

    synopsis = re.sub(r"\s*\\\n\s*", " ", text).replace(" |", "|")
    match = re.search(rf"\[{re.escape(flag)}(?: ([^\]\s]+))?\]", synopsis)
    assert match, f"README's estimate synopsis does not name {flag}"
    return match.group(1).split("|") if match.group(1) else None


def _schema_values(row: str, name: str) -> list[str]:
    """The values docs/estimate-schema.md's `assumptions` entry for `name` lists: '`name` (a / b / c: ...'."""
    start = row.find(f"`{name}` (")
    assert start >= 0, f"docs/estimate-schema.md's assumptions row has no `{name}` entry"
    head = row[start + len(name) + 4:].split(":")[0]
    return [value.split()[0] for value in head.split(" / ")]


def test_readme_and_estimate_schema_name_every_shared_option_and_each_of_its_values():
    """A new option or value reaches the README's estimate synopsis and the schema's `assumptions` entry too
    (--optimizer-kind, --gradient-sync, --lm-head gathered, --cross-entropy torch-16bit were once missing)."""
    from pathlib import Path

    from scalestudy.specs.strategy import _CHOICES

    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text(encoding="utf-8")
    schema = (root / "docs" / "estimate-schema.md").read_text(encoding="utf-8")
    row = next(line for line in schema.splitlines() if line.startswith("| `assumptions`"))
    choices = dict(_CHOICES)
    for name, (_, option) in SOFTWARE_OPTIONS.items():
        flag = option.param_decls[0].split("/")[0]
        if name in choices:
            assert sorted(_readme_values(readme, flag)) == sorted(choices[name]), flag
            assert sorted(_schema_values(row, name)) == sorted(choices[name]), name
        else:  # a switch: named in the README
            assert flag in readme, flag
    assert _readme_values(readme, "--precision") == list(choices["precision"])


def test_a_cost_model_flag_given_to_train_says_so_in_one_line(capsys):
    """click's own error suggested `--offload-optimizer` for `train --optimizer-kind sgd`."""
    import pytest

    from scalestudy.cli import main

    for argv, flag in ((["train", "--model", "t5-tiny", "--optimizer-kind", "sgd"], "--optimizer-kind"),
                       (["train", "--gradient-sync=last"], "--gradient-sync"), (["tune", "--no-tf32"], "--no-tf32")):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        err = capsys.readouterr().err
        assert exc.value.code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
        assert f"{flag} is a cost-model option" in err and "drop it" in err and "Possible options" not in err
    with pytest.raises(SystemExit):
        main(["train", "--frobnicate"])
    assert "No such option: --frobnicate" in capsys.readouterr().err  # other unknown flags: click's own line


def test_a_refused_software_value_says_why_and_what_to_use():
    import pytest

    from scalestudy.errors import ScalestudyError

    with pytest.raises(ScalestudyError) as exc:
        Strategy(engine="fsdp", zero=3, precision="fp32", cross_entropy="torch-16bit")
    assert "(an fp32 model's logits are fp32)" in str(exc.value) and "autocast runs" not in str(exc.value)
    assert "cross_entropy torch is" in str(exc.value)
    with pytest.raises(ScalestudyError, match="it needs engine fsdp"):
        Strategy(engine="deepspeed", zero=2, gradient_sync="last")
