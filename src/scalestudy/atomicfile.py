"""Write a file so a reader (or a crash) never sees it half-written: temp file beside it, then rename."""

from __future__ import annotations

import os
from pathlib import Path


def write_text_atomic(path: str | Path, text: str, *, executable: bool = False) -> Path:
    """Replace `path` with `text` in one rename; the temp name carries the pid so concurrent writers don't clash."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        if executable:
            tmp.chmod(0o755)
        os.replace(tmp, path)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)  # no stray temp file beside a write that failed
        if isinstance(exc, OSError) and exc.filename is None:  # a full disk's write names no file: name it
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        raise
    return path
