"""CLI commands (train): work in progress."""

from scalestudy.cli import app  # noqa: F401
