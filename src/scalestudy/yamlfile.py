"""Reading user YAML files with one-line errors (missing file, not UTF-8, invalid YAML with its line)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from scalestudy.errors import ScalestudyError


TOO_MANY_DIGITS = "a number with more than 4,300 digits (Python's int limit): no setting is that large"


def unreadable_value(exc: ValueError) -> str:
    """Why a parser's constructor refused a value, in one line: Python's 4,300-digit int limit (TOO_MANY_DIGITS), else
    the constructor's own first line -- YAML 1.1 reads 2026-13-45 as a date, and datetime refuses month 13."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return TOO_MANY_DIGITS if "integer string conversion" in text else f"cannot read a value: {text}"


def read_yaml(path: str | Path, what: str) -> Any:
    """The loaded YAML document ({} for an empty file); `what` names the file in errors ("study spec")."""
    path = Path(path)
    if path.exists() and not path.is_file():  # it was 'not found'; a FIFO's read would never end
        raise ScalestudyError(f"{what} {path} is not a regular file (a directory, a FIFO or a device)")
    if not path.is_file():
        raise ScalestudyError(f"{what} not found: {path}{repo_hint(path)}")
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)
    except BadKey as exc:
        raise ScalestudyError(f"{what} {path}: {exc}") from None
    except UnicodeDecodeError:
        raise ScalestudyError(f"{what} {path}: not UTF-8 text") from None
    except RecursionError:  # thousands of nested brackets: no configuration is shaped like that
        raise ScalestudyError(f"{what} {path}: nested too deeply to be a configuration") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark else ""
        raise ScalestudyError(f"{what} {path}: invalid YAML{at}: {str(exc).splitlines()[0]}") from None
    except ValueError as exc:  # a value YAML's constructors refuse: 4,300+ digits, a date like 2026-13-45
        raise ScalestudyError(f"{what} {path}: {unreadable_value(exc)}") from None
    if _expanded_size(data, {}) > MAX_VALUES:
        raise ScalestudyError(f"{what} {path}: its aliases (*name) expand to more than {MAX_VALUES:,} values: no "
                              "configuration is that large")
    return {} if data is None else data


def repo_hint(path: Path) -> str:
    """' (...)' when a relative path that is missing here names a file of this source checkout (the README's
    `examples/...`, which are relative to the repository root, typed in another directory); '' otherwise."""
    root = Path(__file__).resolve().parents[2]  # src/scalestudy/yamlfile.py -> the checkout holding src/
    if path.is_absolute() or not (root / "src" / "scalestudy").is_dir() or not (root / path).exists():
        return ""
    return f" in {Path.cwd()} (the repository's is {root / path}: the README's paths are relative to its root)"


# A configuration holds hundreds of values. YAML aliases share one object, so a few lines of `&a [*a, *a, ...]`
# stand for billions of values: loading is cheap, but any walk over them (a check, an error message's repr) is not.
MAX_VALUES = 1_000_000


def _expanded_size(obj: Any, memo: dict[int, int]) -> int:
    """How many values `obj` holds with every alias expanded (each shared object counted once per use, sized once)."""
    if not isinstance(obj, (dict, list)):
        return 1
    if id(obj) in memo:
        return memo[id(obj)]
    memo[id(obj)] = 1  # a structure that contains itself counts once
    items = [*obj.keys(), *obj.values()] if isinstance(obj, dict) else obj
    memo[id(obj)] = size = 1 + sum(_expanded_size(v, memo) for v in items)
    return size


class BadKey(Exception):
    """A mapping names the same key twice (PyYAML would silently keep the last value), or a key is not text."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.safe_load, except that a key given twice in one mapping is an error: `steps: 4 ... steps: 40` in a
    spec is a typo either way, and silently running one of them is worse than saying so."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key: SafeLoader's own error follows
                break
            if duplicate:
                raise BadKey(f"key {key!r} is given twice (line {key_node.start_mark.line + 1})")
            if not isinstance(key, str):  # every key of these files is a name; YAML reads `on:`, `1:` otherwise
                raise BadKey(f"key {key!r} (line {key_node.start_mark.line + 1}) is not a name (quote it if "
                                   "it is one)")
        return super().construct_mapping(node, deep=deep)


def _no_base_60(kind: str):
    """YAML 1.1 reads 1:30 as the base-60 number 90 (steps: 1:30 ran 90 steps, nodes: 1:0 asked for 60 nodes):
    no value of these files is written so, a time or a ratio typed unquoted is; refused with its line."""
    base = yaml.SafeLoader.yaml_constructors[f"tag:yaml.org,2002:{kind}"]

    def construct(loader, node):
        value = base(loader, node)
        if ":" in str(node.value):
            raise BadKey(f"value {node.value} (line {node.start_mark.line + 1}) reads as the base-60 number {value} "
                         f"in YAML 1.1: quote it if it is text (\"{node.value}\"), else write the number")
        return value

    _UniqueKeyLoader.add_constructor(f"tag:yaml.org,2002:{kind}", construct)


_no_base_60("int")
_no_base_60("float")


def read_yaml_value(text: str, what: str) -> Any:
    """One YAML value typed on a command line (`train --set KEY=VALUE`), read by the files' rules: a base-60 number
    (`steps=1:30` ran 90 steps), a key given twice or an alias bomb is one line naming `what`."""
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except BadKey as exc:
        raise ScalestudyError(f"{what}: {exc}") from None
    except (yaml.YAMLError, RecursionError):
        raise ScalestudyError(f"{what}: cannot read {text!r} as a YAML value") from None
    except ValueError as exc:
        raise ScalestudyError(f"{what}: {unreadable_value(exc)}") from None
    if _expanded_size(data, {}) > MAX_VALUES:
        raise ScalestudyError(f"{what}: its aliases (*name) expand to more than {MAX_VALUES:,} values")
    return data


def number_value(value) -> float:
    """float(value) for a value read from YAML: text by number_from_text (ASCII only), anything else by float()."""
    return number_from_text(value) if isinstance(value, str) else float(value)


def number_from_text(text: str) -> float:
    """float(text) for a number YAML 1.1 leaves as text (`1e-3`, `312.0e12`: no dot or no exponent sign), ASCII
    only: Python's float() also reads other scripts' digits ('١٢' -> 12.0, fullwidth '８' -> 8.0), which the
    command line's numeric options refuse. ValueError otherwise, as float()."""
    if not text.isascii():
        raise ValueError(f"not an ASCII number: {text!r}")
    return float(text)


def int_from_text(text: str) -> int:
    """int(text), ASCII only (as number_from_text): the command line's comma-separated lists (--zero 0,٣, --tp,
    --stage-layers) read other scripts' digits where its single numeric options refuse them. ValueError otherwise."""
    if not text.isascii():
        raise ValueError(f"not an ASCII integer: {text!r}")
    return int(text)
