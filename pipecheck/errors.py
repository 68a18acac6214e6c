"""Exception hierarchy. Every error pipecheck raises on purpose derives from PipecheckError.

``exit_code`` is what the CLI returns when the error reaches it: 2 means bad input (a missing
file, an unreadable report, a target that is not a loader), 1 a violated check threshold.
"""

from __future__ import annotations

from typing import Optional


class PipecheckError(Exception):
    """Base class; the message is one line meant for the user."""

    exit_code = 2


class BadInputError(PipecheckError):
    """The user gave something pipecheck cannot use (path, target, option value)."""

    exit_code = 2


class BadArgumentError(BadInputError, ValueError):
    """A public entry point (``wrap``, ``stress``, ``TuneLimits``, ``check.Thresholds``, the
    callbacks' options, the rank gather's ``timeout_s``) was given a value it cannot use. A
    ``ValueError`` too, so code that catches ``ValueError`` around those calls keeps working."""


class ReportFormatError(BadInputError):
    """A saved report is unreadable: not JSON, wrong or unknown schema, missing keys."""


class CheckFailed(PipecheckError):
    """A ``pipecheck check`` threshold was violated."""

    exit_code = 1


def one_line(err: BaseException, limit: Optional[int] = None) -> str:
    """``err`` as one line, for a note in a report or a one-line error: ``Type: message``, the
    message's lines joined by single spaces; a :class:`PipecheckError`'s message alone (it is
    already written for the user). torch re-raises a DataLoader worker's exception with the
    worker's whole traceback in its message ("Caught ValueError in DataLoader worker process
    0.", "Original Traceback ...", the original error last): only that first line and the
    last are kept. ``limit`` (characters, > 0): the message is cut to it. Never raises, even
    for an exception whose ``__str__`` does."""
    name = type(err).__name__
    try:
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    except Exception:  # a user exception whose __str__ fails still gets its type named
        lines = []
    if not lines:
        return name
    if len(lines) > 1 and any(line.startswith("Original Traceback") for line in lines):
        text = f"{lines[0]} {lines[-1]}"
    else:
        text = " ".join(" ".join(line.split()) for line in lines)
    if limit is not None:
        text = text[:limit]
    return text if isinstance(err, PipecheckError) else f"{name}: {text}"
