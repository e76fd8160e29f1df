"""Processes still alive that carry a study's directory marker (read from /proc, independently of the product's
own kill code, so a test of that code cannot pass vacuously)."""

from __future__ import annotations

from pathlib import Path

from scalestudy.launch.process import DIR_MARKER


def alive_in(study: Path) -> list[str]:
    marker = f"{DIR_MARKER}={study.resolve()}".encode()
    alive = []
    for d in Path("/proc").glob("[0-9]*"):
        try:
            if marker in (d / "environ").read_bytes().split(b"\0"):
                alive.append(d.name)
        except OSError:
            pass
    return alive
