"""What can go wrong, as exception types, and the exit code each one ends a command with.

The one rule of the command line (README, "When things go wrong"):

    0    the run worked and its result is good
    1    the run worked but a claim or a result is bad (one result line says which)
    2    bad input or an unusable machine (`UserError`: one `error:` line naming the input)
    3    an internal error: a bug (one `error:` line naming the log with the full traceback)
    130  interrupted (SIGINT or SIGTERM): the work done so far is written and marked
"""

EXIT_OK = 0
EXIT_RESULT_BAD = 1
EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3
EXIT_INTERRUPTED = 130


class UserError(Exception):
    """Bad input or an unusable machine: the message is shown as one line, no traceback.

    Raise it with a message that names the input (a file, a flag, a backend) and what
    is wrong with it. The CLI prints `error: <message>` and exits with `exit_code`.
    """

    exit_code = EXIT_BAD_INPUT


class Interrupted(BaseException):
    """A caught SIGINT or SIGTERM, raised where the work stops (see `engine.interrupt`).

    Like `KeyboardInterrupt`, not an `Exception`: code that catches every error (a claim runner,
    a library) must not swallow the user's request to stop."""

    exit_code = EXIT_INTERRUPTED

    def __init__(self, signal_name: str = "SIGINT", detail: str = ""):
        super().__init__(f"interrupted by {signal_name}" + (f": {detail}" if detail else ""))
        self.signal_name = signal_name
