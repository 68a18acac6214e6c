"""Exception hierarchy. Every error pipecheck raises on purpose derives from PipecheckError.

``exit_code`` is what the CLI returns when the error reaches it: 2 means bad input (a missing
file, an unreadable report, a target that is not a loader), 1 a violated check threshold.
"""

from __future__ import annotations


class PipecheckError(Exception):
    """Base class; the message is one line meant for the user."""

    exit_code = 2


class BadInputError(PipecheckError):
    """The user gave something pipecheck cannot use (path, target, option value)."""

    exit_code = 2


class ReportFormatError(BadInputError):
    """A saved report is unreadable: not JSON, wrong or unknown schema, missing keys."""


class CheckFailed(PipecheckError):
    """A ``pipecheck check`` threshold was violated."""

    exit_code = 1
