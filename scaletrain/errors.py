"""Errors that mean "the user asked for something that cannot work".

The command line turns a UsageError into one line on stderr and exit status 2, never a
traceback: the message must say what was found and the exact fix (flag or value).
"""


class UsageError(Exception):
    """A user's mistake: bad flag, bad value, impossible combination. Exit status 2."""


class DetectionError(UsageError):
    """The launcher's environment variables contradict each other or are incomplete."""
