"""Helpers for the CLI tests."""

from __future__ import annotations


def error_line(capsys) -> str:
    """The one line the command wrote to stderr (fails the test if it wrote more or none)."""
    err = capsys.readouterr().err
    assert err.count("\n") == 1, f"expected one line on stderr, got {err!r}"
    return err.rstrip("\n")
