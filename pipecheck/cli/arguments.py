"""The command line's argument parsing: the parser classes (one line per usage error), the
ranges every number option accepts, and the converters that check them."""

from __future__ import annotations

import argparse
from typing import Any, NoReturn, Optional

from pipecheck._atomic import output_problem
from pipecheck.errors import BadInputError
from pipecheck.render.terminal import MIN_WIDTH



class UsageError(BadInputError):
    """The command line itself is wrong (unknown option, missing argument, bad value)."""


class Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises :class:`UsageError` instead of printing usage and exiting,
    so every error leaves the CLI as one ``pipecheck: error:`` line."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')")


class SubcommandParser(Parser):
    """A subcommand's parser: an option it does not know is its error, pointing to its own
    help (argparse would hand it up to the top-level parser, whose error points to
    ``pipecheck --help``: ``pipecheck demo --wokers 2``)."""

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        # Any: typeshed types this method as overloads on the namespace's type.
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


MAX_SECONDS = 86_400.0
"""Longest duration any option takes, in seconds (one day: `--duration`, `--budget`,
`--timeout`, `--trial-seconds`, `--max-wait-per-batch-s`). pipecheck's choice: longer than any
sensible sampling window or sweep, far below ``threading.TIMEOUT_MAX`` (about 292 years)."""


MAX_STEP_S = 3_600.0
"""Longest emulated step (`--step-time`), in seconds."""


MAX_WORKERS = 1_024
"""Most DataLoader workers an option takes (the stress sweep's own range ends at 32)."""


MAX_PREFETCH_FACTOR = 1_024
"""Largest ``prefetch_factor`` an option takes (batches in flight per worker)."""


MAX_THREADS = 1_024
"""Most torch intra-op threads an option takes (`stress --torch-threads`)."""


MAX_BATCH_SIZE = 2**31 - 1
"""Largest batch size, shuffle buffer or batch count an option takes (a 32-bit count)."""


MAX_WIDTH = 1_000
"""Widest summary, in columns (`--width`)."""


MAX_RATE_HZ = 1_000
"""Highest py-spy sampling rate (`attach --rate`), in samples per second and process: beyond it
py-spy's own cost on the target grows and the samples add nothing."""


DEMO_MAX_STEPS = 10**9
"""Most demo training steps (`demo --steps`)."""


DEMO_MAX_IMAGES = 10**6
"""Most demo images (`demo --images`): each is a JPEG written to disk once."""


MAX_COUNTED = 10**6
"""Most shards `pipecheck shards --count` reads the headers of."""


MAX_PID = 2**22
"""Largest process id (Linux's ``PID_MAX_LIMIT``, the ceiling of ``kernel.pid_max``)."""


MAX_SAMPLES_PER_S = 1e12
"""Largest `--min-samples-per-s` threshold, in samples/s (far above any input pipeline)."""


MIN_THRESHOLD = 1e-6
"""Smallest positive threshold (`--min-samples-per-s` in samples/s, `--max-wait-per-batch-s`
in seconds): a smaller one passes or fails the same way and prints as a string of zeros."""


def _shown(text: str) -> str:
    """An argument as quoted in an error, cut to 40 characters (a pasted megabyte stays one
    readable line)."""
    return repr(text if len(text) <= 40 else text[:40] + "...")


def _range_text(low: float, high: float, above: bool, unit: str) -> str:
    def number(value: float) -> str:
        whole = float(value).is_integer() and abs(value) < 1e15
        return f"{int(value):,}" if whole else f"{value:g}"

    lower = f"more than {number(low)} and at most" if above else f"from {number(low)} to"
    return f"{lower} {number(high)}{' ' + unit if unit else ''}"


def number(kind: type, low: float, high: float, unit: str = "", *, above: bool = False,
            what: Optional[str] = None):
    """An argparse type: a finite ``kind`` (``int`` or ``float``) from ``low`` to ``high``
    (more than ``low`` when ``above``), ``unit`` naming what it counts in messages, ``what``
    what is expected (default: an integer, a number of ``unit``). Raises
    ``argparse.ArgumentTypeError`` (one line, exit 2) for anything else: not a number, NaN,
    infinity, out of range."""
    expected = what or ("an integer" if kind is int else
                        f"a number{' of ' + unit if unit else ''}")
    stated = _range_text(low, high, above, unit)

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except (ValueError, OverflowError):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {_shown(text)}") from None
        in_range = low < value <= high if above else low <= value <= high  # False for NaN
        if not in_range:
            raise argparse.ArgumentTypeError(f"must be {stated}, got {_shown(text)}")
        return value + 0 if kind is int else value + 0.0  # -0.0 -> 0.0

    parse.__name__ = kind.__name__  # argparse names the type in some messages
    parse.bounds = (low, high, above)  # type: ignore[attr-defined]  # for tests and docs
    return parse


def count(minimum: int, maximum: int, unit: str = ""):
    """An argparse type: an integer from ``minimum`` to ``maximum`` (:func:`number`)."""
    return number(int, minimum, maximum, unit)


seconds = number(float, 0.0, MAX_SECONDS, "seconds", above=True)


width = count(MIN_WIDTH, MAX_WIDTH, "columns")


workers = count(0, MAX_WORKERS, "workers")


batch_size = count(1, MAX_BATCH_SIZE, "samples")


def int_list(low: int, high: int, auto: bool = False):
    """An argparse type: integers from ``low`` to ``high`` separated by commas, duplicates
    dropped, order kept (``auto`` also takes ``"auto"``, returned as it is)."""
    each = count(low, high)

    def parse(text: str) -> Any:
        if auto and text == "auto":
            return text
        values: list[int] = []
        for part in text.split(","):
            try:
                value = each(part.strip())
            except argparse.ArgumentTypeError:
                raise argparse.ArgumentTypeError(
                    f"takes integers from {low:,} to {high:,} separated by commas"
                    f"{', or auto' if auto else ''}; got {_shown(part.strip())}") from None
            if value not in values:
                values.append(value)
        return values

    parse.bounds = (low, high, False)  # type: ignore[attr-defined]  # for tests and docs
    return parse


def step_time(text: str) -> Any:
    """An argparse type: ``0.05`` or ``0.05+-0.01`` seconds (a mean of at most
    :data:`MAX_STEP_S`, jitter at most the mean), as a ``StepTime``."""
    from pipecheck.stress.settings import parse_step_time

    try:
        step = parse_step_time(text)
    except BadInputError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    if step.mean_s > MAX_STEP_S:
        raise argparse.ArgumentTypeError(
            f"the mean must be {_range_text(0, MAX_STEP_S, False, 'seconds')}, got "
            f"{_shown(text)}")
    return step


_CONFIG_RANGES = {"num_workers": (0, MAX_WORKERS), "prefetch_factor": (1, MAX_PREFETCH_FACTOR),
                  "batch_size": (1, MAX_BATCH_SIZE), "torch_num_threads": (1, MAX_THREADS)}


def baseline(text: str) -> Any:
    """An argparse type: ``num_workers=4,prefetch_factor=2,...`` as a ``LoaderSettings``, its
    numbers in the ranges of the options of the same names."""
    from pipecheck.stress.settings import parse_config

    try:
        config = parse_config(text, "--baseline")
    except BadInputError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    for name, (low, high) in _CONFIG_RANGES.items():
        value = getattr(config, name)
        if value is not None and not low <= value <= high:
            raise argparse.ArgumentTypeError(
                f"{name} must be {_range_text(low, high, False, '')}, got {value}")
    return config


def output_file(text: str) -> str:
    """An argparse type: ``-`` (stdout) or a path :func:`pipecheck._atomic.output_problem`
    accepts, checked before a long run (a stress sweep) starts."""
    problem = output_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


fraction = number(float, 0.0, 1.0, "(a 0-1 fraction: 0.05 = 5%)",
                    what="a 0-1 fraction (0.05 = 5%)")
