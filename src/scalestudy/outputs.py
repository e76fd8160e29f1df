"""Checks of output paths before anything is created: a command refuses a path it could not write in one line,
instead of failing half-way with a PermissionError or FileExistsError traceback and leaving debris."""

from __future__ import annotations

import os
from pathlib import Path

from scalestudy.errors import ScalestudyError


def _writable_ancestor(path: Path, flag: str) -> None:
    """The nearest existing ancestor of `path` must be a directory this process can create entries in."""
    parent = path.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise ScalestudyError(f"{flag} {path}: {parent} is a file, not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ScalestudyError(f"{flag} {path}: directory {parent} is not writable")


def check_output_dir(path: str | Path, flag: str = "--output") -> Path:
    """An output directory: absent (creatable) or an existing writable directory. Creates nothing."""
    if isinstance(path, str) and not path.strip():  # Path("") is the working directory: never meant
        raise ScalestudyError(f"{flag} needs a directory name, got {path!r}")
    path = Path(path)
    if path.exists():
        if not path.is_dir():
            raise ScalestudyError(f"{flag} {path} exists and is not a directory")
        if not os.access(path, os.W_OK | os.X_OK):
            raise ScalestudyError(f"{flag} {path}: directory is not writable")
        return path
    _writable_ancestor(path, flag)
    return path


def check_output_file(path: str | Path, flag: str = "--output", suffixes: tuple[str, ...] = ()) -> Path:
    """An output file: absent or a writable file, with one of `suffixes` (if given), in a writable place."""
    if isinstance(path, str) and not path.strip():
        raise ScalestudyError(f"{flag} needs a file name, got {path!r}")
    path = Path(path)
    if suffixes and path.suffix.lower() not in suffixes:
        raise ScalestudyError(f"{flag} {path}: the file name must end in {' or '.join(suffixes)}")
    if path.is_dir():
        raise ScalestudyError(f"{flag} {path} is a directory, not a file")
    if path.exists() and not os.access(path, os.W_OK):
        raise ScalestudyError(f"{flag} {path}: file is not writable")
    _writable_ancestor(path, flag)
    return path
