"""Reading user YAML files with one-line errors (missing file, not UTF-8, invalid YAML with its line)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from scalestudy.errors import ScalestudyError


def read_yaml(path: str | Path, what: str) -> Any:
    """The loaded YAML document ({} for an empty file); `what` names the file in errors ("study spec")."""
    path = Path(path)
    if not path.is_file():
        raise ScalestudyError(f"{what} not found: {path}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ScalestudyError(f"{what} {path}: not UTF-8 text") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark else ""
        raise ScalestudyError(f"{what} {path}: invalid YAML{at}: {str(exc).splitlines()[0]}") from None
    return {} if data is None else data
