"""Every numeric option of every subcommand is range-checked when the arguments are parsed: a
value that is not finite, or outside the range the option states, is one line on stderr and
exit 2 before any work (``--duration 1e308`` was an OverflowError traceback). The options are
found by walking the real parser, so a new one without a range fails here."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from pipecheck.cli import build_parser, main
from cli_helpers import error_line

REQUIRED = {"demo": [], "report": ["x.json"], "check": ["x.json"], "stress": ["x.py:make"],
            "shards": ["x.tar", "--workers", "1"], "attach": ["1"], "run": []}
"""Arguments each subcommand needs besides the option tested (never reached: parsing fails)."""

NOT_NUMERIC = {"output_file", "step_time", "baseline"}
"""Option types that take text (paths, a step time and a configuration, range-checked by their
own types)."""


def _subparsers():
    parser = build_parser()
    (group,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return group.choices


def _numeric_options():
    for command, sub in _subparsers().items():
        for action in sub._actions:
            bounds = getattr(action.type, "bounds", None)
            if bounds is not None:
                yield command, (action.option_strings or [action.metavar])[-1], bounds


OPTIONS = list(_numeric_options())


def test_every_typed_option_states_a_range():
    assert len(OPTIONS) >= 20
    for command, sub in _subparsers().items():
        for action in sub._actions:
            if action.type is None:
                assert action.metavar not in ("N", "S", "HZ", "F", "W"), (command, action)
                continue
            assert action.type not in (int, float), (command, action.option_strings)
            named = getattr(action.type, "__name__", "")
            assert hasattr(action.type, "bounds") or named in NOT_NUMERIC, (command, named)


def _bad_values(low, high, above):
    values = ["nan", "inf", "-inf", "1e999", "9" * 5000, "12abc"]
    if float(high).is_integer() and not above:  # an integer option (or a closed float range)
        values += [str(int(high) + 1), str(int(low) - 1)]
    else:
        values += [repr(high * 10), repr(low) if above else repr(low - 1)]
    return values


@pytest.mark.parametrize("command, option, bounds", OPTIONS,
                         ids=[f"{c} {o}" for c, o, _ in OPTIONS])
def test_out_of_range_or_non_finite_values_are_one_line_and_exit_2(command, option, bounds,
                                                                    capsys):
    low, high, above = bounds
    for value in _bad_values(low, high, above):
        argv = [command, *REQUIRED[command]]
        if option.startswith("-"):
            argv += [option, value]
        elif value.startswith("-"):  # argparse reads "-inf" as an option, not a PID
            continue
        else:  # the positional PID
            argv = [command, value]
        assert main(argv) == 2, (argv, capsys.readouterr())
        line = error_line(capsys)
        assert line.startswith(f"pipecheck: error: argument {option}: "), line
        assert ("must be" in line or "expected" in line or "takes integers" in line), line
        assert len(line) < 300  # a pasted megabyte is quoted short


@pytest.mark.parametrize("command, option, bounds", OPTIONS,
                         ids=[f"{c} {o}" for c, o, _ in OPTIONS])
def test_the_bounds_themselves_are_accepted(command, option, bounds):
    low, high, above = bounds
    sub = _subparsers()[command]
    (action,) = [a for a in sub._actions
                 if option in a.option_strings or a.metavar == option]
    accepted = action.type(str(high))
    assert accepted == [high] if isinstance(accepted, list) else accepted == high
    if not above:
        accepted = action.type(str(low))
        assert accepted == [low] if isinstance(accepted, list) else accepted == low


@pytest.mark.parametrize("argv, fragment", [
    (["stress", "x.py:make", "--step-time", "1e308"], "the mean must be from 0 to 3,600 seconds"),
    (["stress", "x.py:make", "--step-time", "0.1+-nan"], "step time"),
    (["stress", "x.py:make", "--baseline", "num_workers=99999"],
     "num_workers must be from 0 to 1,024"),
    (["stress", "x.py:make", "--workers", "0,2,99999999999999999999"],
     "takes integers from 0 to 1,024 separated by commas, or auto"),
])
def test_text_options_holding_numbers_are_range_checked(argv, fragment, capsys):
    assert main(argv) == 2
    assert fragment in error_line(capsys)


def test_a_huge_duration_is_one_line_not_a_traceback():
    """The reported case, through a real process."""
    done = subprocess.run([sys.executable, "-m", "pipecheck", "attach", "1", "--duration",
                           "1e308"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr == ("pipecheck: error: argument --duration: must be more than 0 and at "
                           "most 86,400 seconds, got '1e308' (see 'pipecheck attach --help')\n")
