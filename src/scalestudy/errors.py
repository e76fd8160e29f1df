"""One exception type for bad user input: the CLI prints its message on one line and exits with its exit_code (2)."""


class ScalestudyError(ValueError):
    """Invalid input (unknown preset, non-dividing degrees, missing files, ...). Message is one line."""

    exit_code = 2


class RunFailed(ScalestudyError):
    """The input was fine but the work failed (e.g. no trial of a sweep succeeded): one line, exit status 1."""

    exit_code = 1


class OptionError(ScalestudyError):
    """A bad option value or combination. Its message names the options by their field names, which are the YAML
    keys (strategy sections, study specs, train's --set); `options` lists those written in it, so that a command
    whose user typed flags can name them as typed instead (`--optimizer-loop`, not `optimizer_loop`): renamed."""

    def __init__(self, message: str, *options: str) -> None:
        super().__init__(message)
        self.options = options

    def renamed(self, names: dict[str, str]) -> str:
        """The message with each of its options in `names` written as names[option]. Whole names only: not inside
        another name (pp in pp_schedule), a dashed word, a dotted key (DeepSpeed's data_types.grad_accum_dtype) or a
        path the message quotes (--tokenizer tk/tokenizer.json: the file's name is not the option)."""
        import re

        message = str(self)
        for option in sorted(self.options, key=len, reverse=True):
            if option in names:
                message = re.sub(rf"(?<![\w./\\-]){re.escape(option)}(?![\w/\\-]|\.\w)", lambda _: names[option],
                                 message)
        return message


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether `exc` is a device or host allocation failure (the training worker reports it as OOM, exit status 3;
    a checkpoint load that fails for memory is such a failure, not a damaged file)."""
    if isinstance(exc, MemoryError):
        return True
    text = str(exc).lower()
    return "out of memory" in text or "can't allocate memory" in text or "cannot allocate memory" in text
