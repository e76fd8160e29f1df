"""One exception type for bad user input: the CLI prints its message on one line and exits 2."""


class ScalestudyError(ValueError):
    """Invalid input (unknown preset, non-dividing degrees, missing files, ...). Message is one line."""
