"""``errors.one_line``: the one way an exception becomes a line of a note or an error."""

import pytest
from hypothesis import given, strategies as st

from pipecheck.errors import BadInputError, one_line


def test_type_and_message_on_one_line():
    assert one_line(ValueError("bad\n  value\tthere")) == "ValueError: bad value there"


def test_an_empty_message_is_the_type_alone():
    assert one_line(KeyboardInterrupt()) == "KeyboardInterrupt"
    assert one_line(RuntimeError("  \n ")) == "RuntimeError"


def test_pipecheck_errors_are_their_message_alone():
    assert one_line(BadInputError("no such report file: x.json")) == "no such report file: x.json"


def test_a_worker_error_keeps_its_first_line_and_the_original_message():
    err = ValueError("Caught ValueError in DataLoader worker process 0.\nOriginal Traceback "
                     "(most recent call last):\n  File x, line 1\nValueError: corrupt 13\n")
    assert one_line(err) == ("ValueError: Caught ValueError in DataLoader worker process 0. "
                             "ValueError: corrupt 13")


def test_limit_cuts_the_message():
    assert one_line(OSError("x" * 50), limit=10) == "OSError: " + "x" * 10


def test_an_exception_whose_str_raises_is_named():
    class Broken(Exception):
        def __str__(self):
            raise RuntimeError("no")

    assert one_line(Broken()) == "Broken"


@given(st.text())
def test_always_one_line(message):
    line = one_line(RuntimeError(message))
    assert "\n" not in line and "\r" not in line and line.startswith("RuntimeError")


@pytest.mark.parametrize("limit", [1, 5, 200])
def test_limit_bounds_the_length(limit):
    assert len(one_line(RuntimeError("y" * 1000), limit=limit)) <= len("RuntimeError: ") + limit
