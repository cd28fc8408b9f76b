"""The root of the errors a user can fix: the CLI shows them as one ``error:`` line.

Anything else is a bug and keeps its traceback. ``UserError`` derives from ``ValueError`` so code
that already catches bad values keeps working.
"""


class UserError(ValueError):
    """Bad input, flags or configuration; the message says what to change."""


class RetryWillNotHelp(UserError):
    """A pipeline step failed on its input or parameters: Kubeflow's retries cannot fix that."""
