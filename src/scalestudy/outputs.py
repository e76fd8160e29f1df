"""Checks of output paths before anything is created: a command refuses a path it could not write in one line,
instead of failing half-way with a PermissionError or FileExistsError traceback and leaving debris.

os.access cannot answer for every place (root may write anywhere by permission bits, yet not under /proc or /sys,
on a read-only mount or into an immutable directory), so where a path does not exist yet the filesystem itself is
asked: the outermost missing directory (or the file) is created and removed again at once. Nothing is left."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from scalestudy.errors import ScalestudyError


def _exists(path: Path) -> bool:
    """Whether anything, even a broken symbolic link, is at `path`."""
    return os.path.lexists(path)


def _no_control_characters(path: str | Path, flag: str) -> None:
    """A newline (or another control character) in an output name breaks the lines scalestudy writes from it:
    an #SBATCH --output line ends at the newline and sbatch reads what follows as the script's first command."""
    bad = sorted({c for c in str(path) if ord(c) < 0x20 or ord(c) == 0x7F})
    if bad:
        raise ScalestudyError(f"{flag} {str(path)!r}: the name holds a control character ({', '.join(map(repr, bad))}): "
                              "choose a name without newlines or tabs")


def _broken_link(path: Path, flag: str, shown: Path) -> None:
    if path.is_symlink() and not path.exists():  # dangling, or a loop (stat gives ELOOP)
        try:
            os.stat(path)
            why = "a broken symbolic link"
        except OSError as exc:
            why = ("a symbolic link loop (its links lead back to themselves)" if exc.errno == errno.ELOOP
                   else "a broken symbolic link")
        raise ScalestudyError(f"{flag} {shown}: {path} is {why} (to {os.readlink(path)!r})")


def _nearest_existing(path: Path, flag: str, shown: Path) -> Path:
    """The nearest existing ancestor of `path` (absolute): a writable directory, else one line."""
    parent = path.parent
    while not _exists(parent):
        parent = parent.parent
    _broken_link(parent, flag, shown)
    if not parent.is_dir():
        raise ScalestudyError(f"{flag} {shown}: {parent} is a file, not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ScalestudyError(f"{flag} {shown}: directory {parent} is not writable")
    return parent


def _probe(shown: Path, flag: str, *, directory: bool) -> None:
    """Create the missing directories down to the path and the path itself (a directory, or an empty file), then
    remove them again: the filesystem's own answer (each name's length, /proc, read-only mounts), nothing left."""
    path = Path(os.path.abspath(shown))  # 'a/../b': what mkdir(parents=True) makes of it
    parent = _nearest_existing(path, flag, shown)
    missing = [p for p in path.parents if p not in parent.parents and p != parent][::-1] + [path]
    made: list[Path] = []
    try:
        for p in missing:
            if p == path and not directory:
                os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            else:
                os.mkdir(p)
            made.append(p)
    except OSError as exc:
        raise ScalestudyError(f"{flag} {shown}: cannot create {exc.filename or p}: {exc.strerror}") from None
    finally:
        for p in reversed(made):
            (os.rmdir if p.is_dir() else os.unlink)(p)


def _checked(check):
    """An OSError while looking at the path (a name too long, a component that is not a directory, an unreadable
    directory) is the same one-line refusal as the checks'."""
    def wrapper(path, flag: str = "--output", *args, **kwargs):
        try:
            return check(path, flag, *args, **kwargs)
        except OSError as exc:
            why = exc.strerror or str(exc)
            if exc.errno == errno.ENAMETOOLONG:
                why = "the name is too long for this filesystem"
            raise ScalestudyError(f"{flag} {path}: {why}") from None
    wrapper.__doc__, wrapper.__name__ = check.__doc__, check.__name__
    return wrapper


@_checked
def check_output_dir(path: str | Path, flag: str = "--output", files: tuple[str, ...] = (),
                     dirs: tuple[str, ...] = ()) -> Path:
    """An output directory: absent (creatable: asked of the filesystem) or an existing writable directory; `files`,
    names the command writes in it, must not be taken by directories or unwritable files, nor `dirs`, the folders
    it makes there, by files or unwritable folders. Creates nothing."""
    if isinstance(path, str) and not path.strip():  # Path("") is the working directory: never meant
        raise ScalestudyError(f"{flag} needs a directory name, got {path!r}")
    _no_control_characters(path, flag)
    path = Path(path)
    _broken_link(path, flag, path)
    if path.exists():
        if not path.is_dir():
            raise ScalestudyError(f"{flag} {path} exists and is not a directory")
        if not os.access(path, os.W_OK | os.X_OK):
            raise ScalestudyError(f"{flag} {path}: directory is not writable")
        for name in files:  # SQLite opens through a link: a loop was a traceback, a dangling one wrote elsewhere
            _broken_link(path / name, flag, path)
            if (path / name).is_dir():
                raise ScalestudyError(f"{flag} {path}: cannot write {path / name}: it is a directory, not a file")
            if (path / name).exists() and not os.access(path / name, os.W_OK):  # immutable: no rename over it
                raise ScalestudyError(f"{flag} {path}: cannot replace {path / name}: file is not writable")
        for name in dirs:  # a file there failed in the training ranks, after the run had started writing
            _broken_link(path / name, flag, path)
            if (path / name).exists() and not (path / name).is_dir():
                raise ScalestudyError(f"{flag} {path}: cannot make the folder {path / name}: a file is in its place")
            if (path / name).is_dir() and not os.access(path / name, os.W_OK | os.X_OK):
                raise ScalestudyError(f"{flag} {path}: cannot write into {path / name}: folder is not writable")
        return path
    _probe(path, flag, directory=True)
    return path


@_checked
def check_output_file(path: str | Path, flag: str = "--output", suffixes: tuple[str, ...] = ()) -> Path:
    """An output file: absent or a writable file, with one of `suffixes` (if given), in a writable place."""
    if isinstance(path, str) and not path.strip():
        raise ScalestudyError(f"{flag} needs a file name, got {path!r}")
    _no_control_characters(path, flag)
    path = Path(path)
    if suffixes and path.suffix.lower() not in suffixes:
        raise ScalestudyError(f"{flag} {path}: the file name must end in {' or '.join(suffixes)}")
    _broken_link(path, flag, path)
    if path.is_dir():
        raise ScalestudyError(f"{flag} {path} is a directory, not a file")
    if path.exists():
        if not path.is_file():  # a FIFO or a device: the write would block or go nowhere
            raise ScalestudyError(f"{flag} {path} exists and is not a regular file")
        if not os.access(path, os.W_OK):
            raise ScalestudyError(f"{flag} {path}: file is not writable")
        _nearest_existing(path.absolute(), flag, path)
        return path
    _probe(path, flag, directory=False)
    return path
