"""One exception type for bad user input: the CLI prints its message on one line and exits with its exit_code (2)."""


class ScalestudyError(ValueError):
    """Invalid input (unknown preset, non-dividing degrees, missing files, ...). Message is one line."""

    exit_code = 2


class RunFailed(ScalestudyError):
    """The input was fine but the work failed (e.g. no trial of a sweep succeeded): one line, exit status 1."""

    exit_code = 1
