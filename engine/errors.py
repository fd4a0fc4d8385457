"""The one exception type that reaches the user as a single line and exit code 2."""


class UserError(Exception):
    """Bad input or an unusable machine: the message is shown as one line, no traceback.

    Raise it with a message that names the input (a file, a flag, a backend) and what
    is wrong with it. The CLI prints `error: <message>` and exits with `exit_code`.
    """

    exit_code = 2
