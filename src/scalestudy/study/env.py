"""The environment a study ran in: package versions and hardware (recorded with every trial)."""

from __future__ import annotations

import os
import platform
import socket
import sys
from importlib import metadata

PACKAGES = ("scalestudy", "torch", "deepspeed", "transformers", "tokenizers", "numpy")


def _version(pkg: str) -> str | None:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def capture() -> dict:
    """Versions (without importing torch) and the host's hardware."""
    return {
        "python": sys.version.split()[0],
        "versions": {p: _version(p) for p in PACKAGES},
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "memory_bytes": _memory_bytes(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
