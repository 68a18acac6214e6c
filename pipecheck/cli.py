"""The ``pipecheck`` command line: ``main(argv) -> int``, one class per subcommand.

Each subcommand class's docstring is its help text. Commands that end in a report share the
output options ``--json FILE`` (save the report), ``--html FILE`` (self-contained HTML report),
``--trace FILE`` (Chrome trace), ``--markdown`` (print markdown instead of the terminal
summary), ``--quiet`` (no terminal summary), ``--verbose`` (every section of the terminal
summary; by default it fits a screen) and ``--width N`` (summary width in columns).
``--debug`` (before or after the subcommand) shows tracebacks.

Exit codes:

* 0: success.
* 1: a ``check`` threshold was violated (:class:`~pipecheck.errors.CheckFailed`).
* 2: bad input: a :class:`~pipecheck.errors.PipecheckError` (missing or unreadable file, bad
  target) or a usage error. One line on stderr, ``pipecheck: error: <message>``.
* 3: an unexpected internal error (a bug in pipecheck or in user code it ran). One line on stderr
  plus a hint to rerun with ``--debug``. Kept apart from 1 so CI can tell "threshold violated"
  from "pipecheck crashed".
* 130: interrupted with Ctrl-C (128 + SIGINT, as shells report it).
* 141: stdout closed early, e.g. piped into ``head`` (128 + SIGPIPE, as shells report it).
* ``pipecheck run``: the program's own exit code (128 + N when signal N ended it), whatever
  happens to the reports; 2 only when the command cannot be started.
"""

from __future__ import annotations

import abc
import dataclasses
import argparse
import inspect
import os
import signal
import stat
import sys
import traceback
from typing import TYPE_CHECKING, Any, Callable, NoReturn, Optional, Sequence, TextIO

from pipecheck._atomic import is_stdout, output_problem
from pipecheck.errors import BadInputError, CheckFailed, PipecheckError
from pipecheck.errors import one_line as error_line
from pipecheck.records import MAX_WORLD_SIZE
from pipecheck.codec import to_jsonable
from pipecheck.render.inert import one_line
from pipecheck.render.formats import FILE_FORMATS
from pipecheck.render.markdown import MarkdownRenderer
from pipecheck.render.sections.sharding import sharding_section
from pipecheck.render.terminal import MIN_WIDTH, TerminalRenderer, render_section

if TYPE_CHECKING:
    from pipecheck.report import Report

PROG = "pipecheck"
EXIT_OK = 0
EXIT_INTERNAL_ERROR = 3
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141


class UsageError(BadInputError):
    """The command line itself is wrong (unknown option, missing argument, bad value)."""


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises :class:`UsageError` instead of printing usage and exiting,
    so every error leaves the CLI as one ``pipecheck: error:`` line."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')")


class _SubcommandParser(_Parser):
    """A subcommand's parser: an option it does not know is its error, pointing to its own
    help (argparse would hand it up to the top-level parser, whose error points to
    ``pipecheck --help``: ``pipecheck demo --wokers 2``)."""

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        # Any: typeshed types this method as overloads on the namespace's type.
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


# -- option types --------------------------------------------------------------------------------
#
# Every numeric option goes through _number: a finite value in a stated range, checked when the
# arguments are parsed (one line, exit 2), so no huge or non-finite value reaches a timer, a
# sleep or a worker count (`--duration 1e308` overflowed a timeout deep in the sampler).

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


def _number(kind: type, low: float, high: float, unit: str = "", *, above: bool = False,
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


def _count(minimum: int, maximum: int, unit: str = ""):
    """An argparse type: an integer from ``minimum`` to ``maximum`` (:func:`_number`)."""
    return _number(int, minimum, maximum, unit)


_seconds = _number(float, 0.0, MAX_SECONDS, "seconds", above=True)
_width = _count(MIN_WIDTH, MAX_WIDTH, "columns")
_workers = _count(0, MAX_WORKERS, "workers")
_batch_size = _count(1, MAX_BATCH_SIZE, "samples")


def _int_list(low: int, high: int, auto: bool = False):
    """An argparse type: integers from ``low`` to ``high`` separated by commas, duplicates
    dropped, order kept (``auto`` also takes ``"auto"``, returned as it is)."""
    each = _count(low, high)

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


def _step_time(text: str) -> Any:
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
                  "batch_size": (1, MAX_BATCH_SIZE)}


def _baseline(text: str) -> Any:
    """An argparse type: ``num_workers=4,prefetch_factor=2,...`` as a ``TrialConfig``, its
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


# -- output ------------------------------------------------------------------------------------


def _output_file(text: str) -> str:
    """An argparse type: ``-`` (stdout) or a path :func:`pipecheck._atomic.output_problem`
    accepts, checked before a long run (a stress sweep) starts."""
    problem = output_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


_OUTPUT_OPTIONS = ("json", *(renderer.name for renderer in FILE_FORMATS))


def _check_outputs(args: argparse.Namespace) -> None:
    """At most one thing may go to stdout: one output option given as ``-``, or ``--markdown``.
    Raises :class:`UsageError` otherwise (before any work starts)."""
    to_stdout = [f"--{name} -" for name in _OUTPUT_OPTIONS
                 if getattr(args, name, None) and is_stdout(getattr(args, name))]
    if to_stdout and getattr(args, "markdown", False):
        to_stdout.append("--markdown")
    if len(to_stdout) > 1:
        raise UsageError(f"only one output can go to stdout, got {' and '.join(to_stdout)}")


def _add_output_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("output")
    group.add_argument("--json", metavar="FILE", type=_output_file,
                       help="save the report as JSON to FILE ('-': stdout)")
    group.add_argument("--html", metavar="FILE", type=_output_file,
                       help="save a self-contained HTML report (charts inline, no network) to FILE "
                       "('-': stdout)")
    group.add_argument("--trace", metavar="FILE", type=_output_file,
                       help="save a Chrome Trace Event Format timeline to FILE (open it in "
                       "Perfetto or chrome://tracing; '-': stdout)")
    group.add_argument("--markdown", action="store_true",
                       help="print markdown (for CI logs and pull requests) instead of the "
                       "terminal summary; printed even with --quiet")
    group.add_argument("--quiet", action="store_true", help="do not print the terminal summary")
    group.add_argument("--verbose", action="store_true",
                       help="print every section of the terminal summary (per-batch figures, "
                       "workers, host, stages, shards, every rank of a multi-rank run, full "
                       "reasons and findings); by default it fits a screen")
    group.add_argument(
        "--width",
        metavar="N",
        type=_width,
        help=f"summary width in columns, {MIN_WIDTH} to {MAX_WIDTH:,} (default: the terminal's, "
        "else 100)",
    )


def _use_color(stream: TextIO) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set (https://no-color.org)."""
    if "NO_COLOR" in os.environ or os.environ.get("TERM") == "dumb":
        return False
    return hasattr(stream, "isatty") and stream.isatty()


def _save_outputs(report: "Report", args: argparse.Namespace, what: str) -> bool:
    """Write ``--json`` first (so a rendering problem cannot lose the measurements), then each
    file format asked for (:data:`FILE_FORMATS`), each atomically, saying where on stderr
    (``what`` names the JSON: "report"). Returns whether stdout is to stay quiet (``--quiet``,
    or an output went to stdout)."""
    stdout_taken = any(getattr(args, name) and is_stdout(getattr(args, name))
                       for name in _OUTPUT_OPTIONS)
    quiet = bool(args.quiet or stdout_taken)  # nothing else on stdout when an output goes there
    if args.json:
        saved = report.save(args.json, per_rank=False)  # --json FILE writes FILE exactly
        if not quiet:
            _say(f"{PROG}: {what} saved to {saved}", sys.stderr)
    for renderer in FILE_FORMATS:
        path = getattr(args, renderer.name)
        if path:
            saved = renderer().save(report, path)
            if not quiet:
                _say(f"{PROG}: {renderer.what} saved to {saved}", sys.stderr)
    return quiet


def _emit(report: "Report", args: argparse.Namespace, title: Optional[str] = None) -> None:
    """Save the outputs asked for (:func:`_save_outputs`), then print the markdown or terminal
    summary."""
    quiet = _save_outputs(report, args, "report")
    if args.markdown:
        MarkdownRenderer(title=title).write(report, sys.stdout)
        return
    if quiet:
        return
    if title is not None:
        _say(f"==> {title} <==", sys.stdout)
    TerminalRenderer(width=args.width, color=_use_color(sys.stdout),
                     verbose=args.verbose).write(report, sys.stdout)


# -- subcommands ---------------------------------------------------------------------------------


class Command(abc.ABC):
    """Base for subcommands: ``name``, arguments, ``run``; the class docstring is the help."""

    name: str

    @abc.abstractmethod
    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Add this subcommand's options to its parser."""

    @abc.abstractmethod
    def run(self, args: argparse.Namespace) -> int:
        """Do the work and return the exit code; errors propagate to :func:`main`."""


class DemoCommand(Command):
    """Run the embedded demo and print its report.

    A real JPEG WebDataset feeds a small CNN trained on the CPU through pipecheck.wrap.
    Options left out keep the demo's own defaults. The demo data (synthetic JPEG shards) is
    written once into --data (default: $PIPECHECK_CACHE, else ~/.cache/pipecheck/demo) and
    reused.
    """

    name = "demo"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--data", metavar="DIR", help="folder for the demo shards")
        # No defaults here: options left out keep run_demo's own defaults (one source of truth).
        parser.add_argument("--workers", metavar="N", type=_workers,
                            help=f"DataLoader num_workers, 0 to {MAX_WORKERS:,}")
        parser.add_argument("--steps", metavar="N", type=_count(1, DEMO_MAX_STEPS, "steps"),
                            help=f"training steps to run, 1 to {DEMO_MAX_STEPS:,}")
        parser.add_argument("--batch-size", metavar="N", type=_batch_size,
                            help="samples per batch")
        parser.add_argument("--images", metavar="N", type=_count(1, DEMO_MAX_IMAGES, "images"),
                            help=f"images in the dataset, 1 to {DEMO_MAX_IMAGES:,} (each one "
                            "is a JPEG written to --data)")
        parser.add_argument(
            "--no-progress", action="store_true", help="do not show a progress bar while training"
        )
        _add_output_options(parser)

    def run(self, args: argparse.Namespace) -> int:
        from pipecheck import demo

        given = {
            name: getattr(args, name)
            for name in ("workers", "steps", "batch_size", "images")
            if getattr(args, name) is not None
        }
        try:
            report = demo.run_demo(
                data_dir=args.data, progress=not (args.no_progress or args.quiet), **given
            )
        except demo.DemoInterrupted as interrupted:
            # Ctrl-C: the report of the steps done so far still comes out, then exit 130.
            _emit(interrupted.report, args)
            print(f"{PROG}: interrupted; the report covers the steps run so far",
                  file=sys.stderr)
            return EXIT_INTERRUPTED
        _emit(report, args)
        return EXIT_OK


class ReportCommand(Command):
    """Render saved JSON reports in the terminal.

    RUN.json is a file written by report.save() or --json. Several files of one
    torch.distributed run (run.rank0.json run.rank1.json ..., or run.rank*.json) are merged
    into one report, reading one file at a time: the terminal shows the job summary (data
    wait per step over ranks and nodes, the slowest ranks and nodes, whether the straggler
    is a rank, a node or the whole job, ranks missing or failed, the straggler's diagnosis);
    --verbose adds the straggler rank's full report and every rank's row; --html and --json
    hold both. Other files are rendered in turn under a header naming each; --json then takes
    a single report.

    --compare OLD.json NEW.json compares a later run with an earlier report of the same
    script: a verdict line first that says whether throughput (samples/s) rose or fell, by
    how much and whether beyond the runs' own noise (judged by samples/s, never by the
    stall), then throughput, steady step, data wait, stall and goodput side by side, the
    loader settings that changed, and a note when the runs were on different machines or
    read other data. --json saves NEW's report with the comparison in it.
    """

    name = "report"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("runs", metavar="RUN.json", nargs="+", help="saved report file(s)")
        parser.add_argument("--compare", action="store_true",
                            help="compare two reports of the same script, RUN.json OLD NEW: "
                            "did throughput rise or fall, and what changed")
        _add_output_options(parser)

    def run(self, args: argparse.Namespace) -> int:
        if args.compare:
            return self._compare(args)
        merged = _merged_rank_files(args.runs)
        if merged is not None:
            _emit(merged, args)
            return EXIT_OK
        # Load every file before printing anything: a bad file fails the command up front.
        reports = _load_reports(args.runs)
        if len(reports) > 1 and any(report.rank is not None for _, report in reports):
            from pipecheck.merge import merge_reports

            _emit(merge_reports(reports), args)
            return EXIT_OK
        for option in _OUTPUT_OPTIONS:
            if getattr(args, option) and len(args.runs) > 1:
                raise UsageError(f"--{option} takes a single report, or the rank files of one "
                                 "torch.distributed run (which are merged)")
        several = len(reports) > 1
        for i, (path, report) in enumerate(reports):
            if i and (args.markdown or not args.quiet):
                print()
            _emit(report, args, title=path if several else None)
        return EXIT_OK


    def _compare(self, args: argparse.Namespace) -> int:
        """``--compare OLD NEW``: NEW's report with its comparison against OLD, to every output
        asked for; the terminal and markdown show the comparison alone."""
        from pipecheck.analysis.compare import compare_reports
        from pipecheck.render.sections import build_comparison_document

        if len(args.runs) != 2:
            raise UsageError(f"--compare takes two reports, OLD.json NEW.json; got "
                             f"{len(args.runs)}")
        (old_path, old), (new_path, new) = _load_reports(args.runs)
        for path, report in ((old_path, old), (new_path, new)):
            if report.ranks is not None:
                raise BadInputError(f"{path} is a merged multi-rank report; --compare takes "
                                    "one rank's file of each run (run.rank0.json)")
        if old.rank is not None and new.rank is not None and old.created == new.created \
                and old.rank.rank != new.rank.rank:
            raise BadInputError(f"{old_path} and {new_path} are two ranks of one "
                                "torch.distributed run (pipecheck report merges them); "
                                "--compare takes one rank's file of each of two runs")
        compared = dataclasses.replace(new, comparison=compare_reports(old, new, old_path))
        quiet = _save_outputs(compared, args, "report with the comparison")
        document = build_comparison_document(compared, new_path)
        if args.markdown:
            sys.stdout.write(MarkdownRenderer().render_document(document))
        elif not quiet:
            sys.stdout.write(TerminalRenderer(width=args.width, color=_use_color(sys.stdout),
                                              verbose=args.verbose)
                             .render_document(document))
        sys.stdout.flush()
        return EXIT_OK


def _merged_rank_files(paths: Sequence[str]) -> Optional["Report"]:
    """Several files whose first has a rank: the rank files of one run, merged streaming
    (:func:`pipecheck.merge.merge_files`: one file read at a time, summaries kept); ``None``
    for a single file or when the first has no rank (then each is loaded in full)."""
    if len(paths) < 2:
        return None
    from pipecheck.merge import merge_files, read_rank_file

    if read_rank_file(paths[0]).rank is None:
        return None
    return merge_files(paths)


def _load_reports(paths: Sequence[str]) -> list[tuple[str, "Report"]]:
    from pipecheck.report import load

    return [(path, load(path)) for path in paths]


_fraction = _number(float, 0.0, 1.0, "(a 0-1 fraction: 0.05 = 5%)",
                    what="a 0-1 fraction (0.05 = 5%)")


class CheckCommand(Command):
    """Fail (exit 1) when a saved run misses an input-pipeline threshold, for CI.

    RUN.json is a saved report; several files of one torch.distributed run
    (run.rank*.json) are merged first, then stall and wait are judged on the straggler
    rank and throughput on the ranks' summed samples/s. --max-stall is a 0-1 fraction of
    loop time spent waiting for data, steady state (0.05 = 5%); --min-samples-per-s the
    throughput in samples/s; --max-wait-per-batch-s the mean data wait per batch in
    seconds. Prints one line per threshold: violated ones on stderr (exit 1), passed ones on
    stdout unless --quiet (exit 0). A figure the run did not measure violates its threshold.
    Unreadable files and bad values exit 2.
    """

    name = "check"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("runs", metavar="RUN.json", nargs="+", help="saved report file(s)")
        parser.add_argument("--max-stall", metavar="F", type=_fraction,
                            help="largest steady-state data stall allowed, 0-1 (0.05 = 5%%)")
        parser.add_argument("--min-samples-per-s", metavar="N",
                            type=_number(float, MIN_THRESHOLD, MAX_SAMPLES_PER_S, "samples/s"),
                            help="smallest throughput allowed, in samples/s "
                            f"({MIN_THRESHOLD:g} to {MAX_SAMPLES_PER_S:g})")
        parser.add_argument("--max-wait-per-batch-s", metavar="S",
                            type=_number(float, MIN_THRESHOLD, MAX_SECONDS, "seconds"),
                            help="largest mean data wait per batch allowed, in seconds "
                            f"({MIN_THRESHOLD:g} to {MAX_SECONDS:,.0f})")
        parser.add_argument("--quiet", action="store_true", help="print violations only")

    def run(self, args: argparse.Namespace) -> int:
        from pipecheck.check import Thresholds, check

        try:
            thresholds = Thresholds(max_stall=args.max_stall,
                                    min_samples_per_s=args.min_samples_per_s,
                                    max_wait_per_batch_s=args.max_wait_per_batch_s)
        except ValueError as err:
            raise UsageError(str(err)) from None
        merged = _merged_rank_files(args.runs)
        if merged is not None:
            reports = [(" ".join(args.runs), merged)]
        else:
            reports = _load_reports(args.runs)
        if len(reports) > 1 and any(report.rank is not None for _, report in reports):
            from pipecheck.merge import merge_reports

            reports = [(" ".join(args.runs), merge_reports(reports))]
        failed = 0
        for path, report in reports:
            label = f" ({path})" if len(reports) > 1 else ""
            for outcome in check(report, thresholds):
                if outcome.passed:
                    if not args.quiet:
                        _say(f"{PROG}: check passed: {outcome.line}{label}", sys.stdout)
                else:
                    failed += 1
                    _say(f"{PROG}: check failed: {outcome.line}{label}", sys.stderr)
        return CheckFailed.exit_code if failed else EXIT_OK


class StressCommand(Command):
    """Run a loader alone under several DataLoader settings and report the fastest.

    TARGET is file.py:function or package.module:function; the function takes DataLoader
    keyword arguments (num_workers, prefetch_factor, persistent_workers, pin_memory,
    in_order, batch_size) and returns a DataLoader or a Dataset. Each configuration runs in
    its own child process for --trial-seconds (epochs following one another; each epoch's
    first batch is warm-up, the first one reported as startup), with an optional emulated
    training step per batch. A trial that delivers nothing for
    --timeout seconds is killed and recorded as failed, as is one whose loader raises; the
    sweep goes on. --budget bounds the whole run: a trial starts only when it is expected to
    end within it, time for the epoch-start and profiling trials held back; a configuration whose
    workers would not fit in the available memory is skipped with the reason. The baseline
    (--baseline; else with --workers auto the defaults of the function's num_workers /
    prefetch_factor / persistent_workers parameters, else num_workers=0; else the first
    configuration of the --workers list) runs first; the recommendation's gain is
    measured against it. Without a --workers list the what-if model guides the search: after
    calibration trials (the baseline and num_workers 1) it measures only settings predicted to
    beat the best measured by more than the measured noise; the rest are listed as predicted,
    and the best reported is always measured.
    """

    name = "stress"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("target", metavar="TARGET", help="file.py:function or module:function")
        parser.add_argument("--workers", metavar="N,N,...|auto", default="auto",
                            type=_int_list(0, MAX_WORKERS, auto=True),
                            help="num_workers values, run as a grid; auto (default): 0 up to "
                            "max(8, 4 x usable CPUs), at most 32, searched as --search says")
        parser.add_argument("--search", choices=("model", "grid"), default="model",
                            help="with --workers auto: model (default) measures only the "
                            "settings the what-if model predicts may beat the best measured; "
                            "grid measures them all")
        parser.add_argument("--prefetch-factor", metavar="N,N,...",
                            type=_int_list(1, MAX_PREFETCH_FACTOR),
                            help="prefetch_factor values, tried with workers > 0 (default 2)")
        parser.add_argument("--persistent-workers", action=argparse.BooleanOptionalAction,
                            default=None,
                            help="keep workers alive in every trial (2 epochs each), or never; "
                            "default: measure the best configuration's epoch restart both ways "
                            "and recommend persistent workers when epoch start matters")
        parser.add_argument("--in-order", metavar="true,false",
                            help="in_order values tried with 2+ workers (torch >= 2.6; default "
                            "with --workers auto: true,false)")
        parser.add_argument("--batch-size", metavar="N,N,...",
                            type=_int_list(1, MAX_BATCH_SIZE),
                            help="batch sizes to compare (default: the target's own)")
        parser.add_argument("--baseline", metavar="KEY=VALUE,...", type=_baseline,
                            help="the configuration to beat, e.g. num_workers=4,prefetch_factor=2")
        parser.add_argument("--stacks", action=argparse.BooleanOptionalAction, default=None,
                            help="profile the best configuration with py-spy in one extra trial "
                            "(default: when py-spy is installed and permitted)")
        parser.add_argument("--step-time", metavar="S[+-J]", type=_step_time,
                            help="emulated step per batch in seconds, e.g. 0.05 or 0.05+-0.01")
        parser.add_argument("--step-cpu", metavar="F",
                            type=_number(float, 0.0, 1.0, what="a share from 0 to 1"), default=0.0,
                            help="share of each emulated step spent busy on the CPU, the rest "
                            "asleep: 0 (default) for a GPU step, up to 1 for a CPU step; a "
                            "wrapped run's report gives the step's measured share")
        parser.add_argument("--step", metavar="FILE:FN",
                            help="your own training step instead, called with each batch "
                            "(file.py:function or package.module:function)")
        parser.add_argument("--budget", metavar="S", type=_seconds, default=60.0,
                            help="seconds the whole run may take, every trial included "
                            f"(default 60 s, at most {MAX_SECONDS:,.0f} s)")
        parser.add_argument("--timeout", metavar="S", type=_seconds, default=30.0,
                            help="fail a trial silent for S seconds (default 30 s, at most "
                            f"{MAX_SECONDS:,.0f} s)")
        parser.add_argument("--batches", metavar="N", type=_count(2, MAX_BATCH_SIZE, "batches"),
                            default=None,
                            help="batches per trial at most, across epochs (default: no limit)")
        parser.add_argument("--trial-seconds", metavar="S", type=_seconds, default=None,
                            help="wall-clock seconds each trial runs, epochs following one "
                            "another (default 3 s, at most "
                            f"{MAX_SECONDS:,.0f} s)")
        _add_output_options(parser)

    def run(self, args: argparse.Namespace) -> int:
        from pipecheck.stress import stress
        from pipecheck.stress.settings import DEFAULT_TRIAL_S, parse_bool_list
        from pipecheck.stress.progress import SweepProgress

        # --workers, --prefetch-factor, --batch-size, --baseline and --step-time arrive parsed
        # and range-checked (their argparse types).
        workers = args.workers if args.workers != "auto" else None
        orders = parse_bool_list(args.in_order, "--in-order") if args.in_order else None
        with SweepProgress(enabled=not args.quiet) as progress:
            report = stress(args.target, workers=workers, prefetch_factors=args.prefetch_factor,
                            persistent_workers=args.persistent_workers,
                            in_order=orders, step_time_s=args.step_time,
                            step_cpu_share=args.step_cpu, step=args.step,
                            batch_size=args.batch_size, baseline=args.baseline,
                            stacks=args.stacks,
                            budget_s=args.budget, timeout_s=args.timeout,
                            trial_batches=args.batches,
                            trial_s=args.trial_seconds or DEFAULT_TRIAL_S,
                            progress=progress, search=args.search)
        _emit(report, args)
        if args.quiet:  # otherwise the summary lists failed and skipped trials itself
            for line in progress.problems(report.stress):
                _say(f"{PROG}: {line}", sys.stderr)
        note = progress.budget_note(report.stress, args.budget)
        if note is not None:
            _say(f"{PROG}: {note}", sys.stderr)
        return EXIT_OK


class ShardsCommand(Command):
    """Dry-run how WebDataset shards are split across ranks and DataLoader workers.

    URLS are shard paths or URLs, brace notation allowed (data-{000..099}.tar). For every
    (rank, worker) it replays the real split (webdataset's split_by_node then split_by_worker,
    or --node-splitter / --worker-splitter given as file.py:function or module:function) and
    reports the shards and estimated samples each one reads, from the local shards' tar headers
    (up to --count shards counted, the rest estimated by size). Findings: empty-workers,
    shard-imbalance, unequal-rank-batches, shard-size-skew, small-shuffle-buffer; with the
    sharding changes that fix them.
    """

    name = "shards"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("urls", metavar="URLS", nargs="+", help="shard paths or URLs")
        parser.add_argument("--workers", metavar="N", type=_workers, required=True,
                            help=f"DataLoader num_workers per rank, 0 to {MAX_WORKERS:,}")
        parser.add_argument("--world-size", metavar="W", type=_count(1, MAX_WORLD_SIZE, "ranks"),
                            help=f"ranks, 1 to {MAX_WORLD_SIZE:,} (default: torch.distributed, "
                            "else $WORLD_SIZE, else 1)")
        parser.add_argument("--batch-size", metavar="N", type=_batch_size,
                            help="samples per batch, to count batches per rank")
        parser.add_argument("--drop-last", action="store_true",
                            help="the DataLoader drops each worker's last partial batch")
        parser.add_argument("--shuffle-buffer", metavar="N",
                            type=_count(0, MAX_BATCH_SIZE, "samples"),
                            help="the pipeline's shuffle(N) buffer, in samples")
        parser.add_argument("--resampled", action="store_true",
                            help="shards are resampled (WebDataset(resampled=True))")
        parser.add_argument("--node-splitter", metavar="TARGET",
                            help="file.py:function or module:function splitting by rank")
        parser.add_argument("--worker-splitter", metavar="TARGET",
                            help="file.py:function or module:function splitting by worker")
        parser.add_argument("--count", metavar="N", type=_count(1, MAX_COUNTED, "shards"),
                            default=16, help="shards whose samples are counted (default 16, at "
                            f"most {MAX_COUNTED:,})")
        parser.add_argument("--json", metavar="FILE", type=_output_file,
                            help="save the sharding analysis as JSON to FILE")
        parser.add_argument("--quiet", action="store_true", help="print nothing but errors")
        parser.add_argument("--width", metavar="N", type=_width,
                            help=f"columns for the summary, {MIN_WIDTH} to {MAX_WIDTH:,} "
                            "(default: the terminal's)")

    def run(self, args: argparse.Namespace) -> int:
        import json
        import shutil

        from pipecheck._atomic import write_text_atomic
        from pipecheck.shards import SCHEMA, shards
        from pipecheck.stress.target import load_factory

        section = shards(
            args.urls, num_workers=args.workers, world_size=args.world_size,
            batch_size=args.batch_size, drop_last=args.drop_last,
            shuffle_buffer=args.shuffle_buffer, resampled=args.resampled,
            node_splitter=load_factory(args.node_splitter) if args.node_splitter else None,
            worker_splitter=load_factory(args.worker_splitter) if args.worker_splitter else None,
            max_counted=args.count)
        if args.json:
            text = json.dumps({"schema": SCHEMA, **to_jsonable(section)}, indent=2) + "\n"
            saved = write_text_atomic(args.json, text, "sharding analysis")
            if not args.quiet:
                _say(f"{PROG}: sharding analysis saved to {saved}", sys.stderr)
        if not args.quiet:
            width = args.width or shutil.get_terminal_size(fallback=(100, 24)).columns
            sys.stdout.write(render_section(sharding_section(section),
                                            width=max(width, MIN_WIDTH)))
            sys.stdout.flush()
        return EXIT_OK


class RunCommand(Command):
    """Run a training program unmodified, with every DataLoader it iterates measured.

    COMMAND is the program and its arguments, after '--': 'python train.py --lr 0.1',
    'train.py ...' or '-m package.train ...' (run with this Python), a shell wrapper
    ('./train.sh'), or a launcher such as 'torchrun --nproc-per-node 2 train.py' (each rank
    writes its own file; they are merged). The program needs no change and no pipecheck
    import: every Python process the command starts that can import this pipecheck loads its
    hook (through PYTHONPATH; other interpreters are left alone), and each DataLoader it
    iterates is measured in place. When the program ends (normally, by an exception, Ctrl-C
    or SIGTERM) and every process it started is gone, the reports are printed, the loader that
    delivered the most batches (the training loader) first; --json/--html/--trace take that
    one, and with --json FILE the other loaders are saved beside it as FILE's name plus
    .loader1, .loader2, ... A device, pipe or '-' (stdout) takes the first report only.

    With an output on stdout ('-'), the program's own stdout goes to stderr, and so does the
    summary: stdout holds the report alone. Ctrl-C and Ctrl-Z reach the program's whole
    process group, as from a terminal; SIGTERM and SIGHUP sent to pipecheck reach its first
    process (then what a shell wrapper started, once the wrapper has died of it), and after
    them the program's processes have --grace seconds to end before they are killed. pipecheck
    ends when every process of the program has. The exit code is the program's own
    (128 + N when signal N ended it), whatever happens to the reports; 2 only when the
    command cannot be started.
    """

    name = "run"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("program", metavar="-- COMMAND", nargs=argparse.REMAINDER,
                            help="the program to run and its arguments")
        parser.add_argument("--grace", metavar="S", type=_seconds,
                            help="seconds the program's processes have to end after SIGTERM "
                            "or SIGHUP is passed on, or after its first process ended for "
                            "those it left running, before SIGKILL (default 45 s)")
        parser.add_argument("--tune", action="store_true",
                            help="try DataLoader settings (num_workers, prefetch_factor, "
                            "pin_memory with CUDA) in the running program and keep the best "
                            "measured, as wrap(loader, tune=True); the report's tune section "
                            "gives the line that pins them (default: never change settings)")
        _add_output_options(parser)

    def run(self, args: argparse.Namespace) -> int:
        from pipecheck.launch import GRACE_S, run_and_collect

        on_stdout = _run_outputs_on_stdout(args)
        earlier = _earlier_report(args.json)  # read once, before the program runs
        outcome = run_and_collect(
            args.program, grace_s=args.grace or GRACE_S,
            stdout=_stderr_fd() if on_stdout else None,  # keep stdout for the report alone
            tune=args.tune)
        # From here on the exit code is the program's, whatever happens to the reports.
        try:
            _report_run(outcome, args, summary=sys.stderr if on_stdout else sys.stdout,
                        earlier=earlier)
        except BrokenPipeError:
            _silence_stdout()
            _say(f"{PROG}: stdout was closed; the reports were not all written", sys.stderr)
        except KeyboardInterrupt:
            _say(f"{PROG}: interrupted while writing the reports", sys.stderr)
        except Exception as err:
            _say(f"{PROG}: could not write the reports: "
                 f"{error_line(err)}", sys.stderr)
        return outcome.code


_STDOUT_ALIASES = ("/dev/stdout", "/dev/fd/1", "/proc/self/fd/1")


def _run_outputs_on_stdout(args: argparse.Namespace) -> list[str]:
    """The output options of ``pipecheck run`` that write to stdout: ``-`` or a name of
    our stdout (``/dev/stdout``)."""
    return [name for name in _OUTPUT_OPTIONS
            if getattr(args, name) and (is_stdout(getattr(args, name))
                                        or os.path.abspath(getattr(args, name))
                                        in _STDOUT_ALIASES)]


def _stderr_fd() -> int:
    try:
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # no real stderr (embedded): fd 2
        return 2


_DEVICE_FOLDERS = ("/dev", "/dev/fd", "/proc/self/fd")


def _takes_one_report(path: str) -> bool:
    """Whether ``path`` can hold one report only: ``-``, a device or pipe (``/dev/null``, a
    FIFO), or a name in ``/dev`` or ``/proc`` (``/dev/stdout``, which may lead to a regular
    file): numbered names beside it (``/dev/null.loader1.json``) would be files nobody asked
    for, or fail. ``/dev/shm/run.json`` is a regular file like any other."""
    if is_stdout(path):
        return True
    absolute = os.path.abspath(path)
    if os.path.dirname(absolute) in _DEVICE_FOLDERS or absolute.startswith("/proc/"):
        return True
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:  # a new file
        return False


def _save_run_output(save: Callable[[], Any], what: str, path: str, quiet: bool) -> None:
    """Call ``save`` (which writes ``what`` to ``path``); a failure is one line on stderr."""
    try:
        saved = save()
    except BrokenPipeError:
        raise
    except Exception as err:  # one line; the other outputs and the summary still come
        reason = error_line(err) if isinstance(err, PipecheckError) else (
            f"cannot write {path}: {error_line(err)}")
        _say(f"{PROG}: {what} not saved: {reason}", sys.stderr)
        return
    if not quiet and not is_stdout(path):
        _say(f"{PROG}: {what} saved to {saved}", sys.stderr)


def _earlier_report(path: Optional[str]) -> Any:
    """The report ``pipecheck run --json PATH`` is about to replace, read once before the
    program starts (:func:`pipecheck.report.read_earlier`), or ``None``: no ``--json``, a
    device, pipe or stdout, no file there, or any failure (never an error: the exit code is
    the program's)."""
    if not path or _takes_one_report(path):
        return None
    try:
        from pipecheck.report import read_earlier

        return read_earlier(path)
    except Exception:
        return None


def _report_run(outcome: Any, args: argparse.Namespace, summary: TextIO,
                earlier: Any = None) -> None:
    """Write ``pipecheck run``'s outputs: the first loader's report to each output option,
    the others' JSON beside ``--json`` (numbered), and each loader's summary on ``summary``
    (stdout, or stderr when a report goes to stdout). The first loader's report holds its
    comparison with ``earlier``, the report ``--json`` replaces (:func:`_earlier_report`), and
    its summary shows the comparison's verdict line. Each failed write is one line on stderr;
    the rest goes on."""
    loaders = list(outcome.loaders)
    if loaders and earlier is not None:
        from pipecheck.report import compared_with_earlier

        loaders[0] = dataclasses.replace(
            loaders[0], report=compared_with_earlier(loaders[0].report, earlier))
    if not loaders:
        why = ("no measured process saved one (above)" if outcome.missing else
               "the program iterated no DataLoader, or ended before pipecheck could save")
        _say(f"{PROG}: no report: {why} (exit code {outcome.code})", sys.stderr)
        return
    several = len(loaders) > 1
    not_saved = []
    for i, loader in enumerate(loaders):
        title = _run_title(loader) if several else None
        what = f"{loader.label} report" if several else "report"
        if i == 0:
            if args.json:
                _save_run_output(lambda: loader.report.save(args.json, per_rank=False),
                                 what, args.json, args.quiet)
            for renderer in FILE_FORMATS:
                path = getattr(args, renderer.name)
                if path:
                    _save_run_output(lambda: renderer().save(loader.report, path),
                                     f"{loader.label} {renderer.what}" if several
                                     else renderer.what, path, args.quiet)
        elif args.json and _takes_one_report(args.json):
            not_saved.append(loader)
        elif args.json:
            numbered = _numbered_path(args.json, i)
            _save_run_output(lambda: loader.report.save(numbered, per_rank=False),
                             what, numbered, args.quiet)
        if args.markdown:
            if i:
                print()
            MarkdownRenderer(title=title).write(loader.report, sys.stdout)
        elif not args.quiet:
            if i:
                print(file=summary)
            if title is not None:
                _say(f"==> {title} <==", summary)
            TerminalRenderer(width=args.width, color=_use_color(summary),
                             verbose=args.verbose).write(loader.report, summary)
    if not_saved:
        others = ", ".join(_run_title(loader) for loader in not_saved)
        _say(f"{PROG}: --json {args.json} takes one report ({_run_title(loaders[0])}); not "
             f"saved: {others}. Give --json a regular file (run.json) to save every loader as "
             "run.json, run.loader1.json, ...", sys.stderr)


class AttachCommand(Command):
    """Measure a running training process that was never wrapped.

    PID is the training script's main process. py-spy samples its main thread and its
    DataLoader workers for --duration seconds (never pausing them: --nonblocking) and psutil
    reads their CPU, IO and memory. The data stall is estimated as the share of main-thread
    samples inside the DataLoader's __next__, with a 95% Wilson interval; the verdict uses the
    wrapped run's thresholds. Batch counts and rates, per-batch times, the producer's capacity
    and so any recommendation need the loader wrapped (pipecheck run -- python train.py).
    py-spy must be allowed to trace PID: the same user with kernel.yama.ptrace_scope 0, or
    root / CAP_SYS_PTRACE. Ctrl-C, SIGTERM and SIGHUP end the window early, stop py-spy and
    still write the report; the exit code is then 128 + the signal's number (130 for Ctrl-C,
    143 for SIGTERM, 129 for SIGHUP).
    """

    name = "attach"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        # No defaults here: options left out keep attach()'s own (one source of truth), and
        # building the parser imports nothing heavy.
        parser.add_argument("pid", metavar="PID", type=_count(1, MAX_PID),
                            help="process id of the training script")
        parser.add_argument("--duration", metavar="S", type=_seconds,
                            help=f"seconds to sample (default 10 s, at most {MAX_SECONDS:,.0f} s)")
        parser.add_argument("--rate", metavar="HZ", type=_count(1, MAX_RATE_HZ, "Hz"),
                            help=f"samples per second and process, 1 to {MAX_RATE_HZ:,} "
                            "(default 50 Hz)")
        _add_output_options(parser)

    def run(self, args: argparse.Namespace) -> int:
        from pipecheck.attach import StopSignals, StoppedBeforeSampling, attach

        def started(duration_s: float) -> None:
            if not args.quiet:
                _say(f"{PROG}: sampling PID {args.pid} for {duration_s:g} s "
                     "(Ctrl-C ends early and reports)", sys.stderr)

        terminals = [fd for fd in (1, 2) if _is_terminal(fd)]
        # Held until the report is written: a signal while writing it cannot lose it.
        with StopSignals() as signals:
            try:
                report = attach(args.pid, args.duration, rate_hz=args.rate,
                                on_started=started, signals=signals)
            except StoppedBeforeSampling as stopped:
                _leave_hung_up_terminal(terminals)
                _say(f"{PROG}: {stopped}; nothing was sampled, no report", sys.stderr)
                return 128 + stopped.signum
            if signals.first is not None:
                _leave_hung_up_terminal(terminals)
            _emit(report, args)
            if signals.first is not None:
                name = signal.Signals(signals.first).name
                ended = report.attach is not None and report.attach.signal == name
                _say(f"{PROG}: {name} received; " + (
                    "the report covers the window sampled so far" if ended
                    else "the report was written first"), sys.stderr)
                return 128 + signals.first  # as a shell reports a process signal N ended
        return EXIT_OK


def _is_terminal(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False


def _leave_hung_up_terminal(terminals: list[int]) -> None:
    """Point each of ``terminals`` (stdout, stderr) that was a terminal and is one no longer at
    ``/dev/null``: a hung-up terminal (SIGHUP: it was closed) fails every write with EIO and
    every terminal query with it, so ``isatty`` turns false. The files are written anyway."""
    for fd in terminals:
        if not _is_terminal(fd):
            try:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, fd)
                os.close(devnull)
            except OSError:
                pass


def _run_title(loader: Any) -> str:
    return f"{loader.label}: {loader.report.consumer.batches} batches"


def _numbered_path(path: str, index: int) -> str:
    """``run.json`` -> ``run.loader1.json``."""
    root, extension = os.path.splitext(path)
    return f"{root}.loader{index}{extension or '.json'}"


COMMANDS: tuple[type[Command], ...] = (DemoCommand, ReportCommand, CheckCommand, StressCommand,
                                       ShardsCommand, RunCommand, AttachCommand)


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (exposed for tests and documentation tools)."""
    from pipecheck import __version__

    parser = _Parser(
        prog=PROG,
        description="Is your PyTorch input pipeline holding training back, why, and what to "
        "change.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    subparsers = parser.add_subparsers(dest="command_name", metavar="COMMAND", required=True,
                                       parser_class=_SubcommandParser)
    for command_class in COMMANDS:
        command = command_class()
        doc = inspect.cleandoc(command_class.__doc__ or "")
        sub = subparsers.add_parser(
            command.name,
            help=doc.splitlines()[0] if doc else None,
            description=doc,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        # SUPPRESS: '--debug' after the subcommand must not reset one given before it.
        sub.add_argument(
            "--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks"
        )
        command.add_arguments(sub)
        sub.set_defaults(command=command)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the CLI with ``argv`` (default ``sys.argv[1:]``) and return the exit code (see the
    module docstring). Errors, Ctrl-C and ``SystemExit`` all become exit codes, not exceptions."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in arguments  # known before parsing, so usage errors honour it too
    try:
        args = build_parser().parse_args(arguments)
        _check_outputs(args)
        return args.command.run(args)
    except SystemExit as done:  # --help and --version exit through argparse
        return _exit_code(done.code)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except PipecheckError as err:
        if debug:
            traceback.print_exc()
        _say(f"{PROG}: error: {error_line(err)}", sys.stderr)
        return err.exit_code
    except Exception as err:
        if debug:
            traceback.print_exc()
            hint = ""
        else:
            hint = " (run with --debug for the traceback)"
        message = error_line(err)
        _say(f"{PROG}: internal error: {message}{hint}", sys.stderr)
        return EXIT_INTERNAL_ERROR


def _exit_code(code: Any) -> int:
    if code is None:
        return EXIT_OK
    return code if isinstance(code, int) else 2


def _say(line: str, stream: TextIO) -> None:
    """Print one line of the CLI's own (errors, headers, check results, saved paths) as one
    line, its control characters and line breaks made visible: file names and messages come
    from the user (:func:`pipecheck.render.inert.one_line`)."""
    print(one_line(line), file=stream)


def _silence_stdout() -> None:
    """After a broken pipe, point stdout at /dev/null so the interpreter's final flush is quiet
    (what the Python docs recommend for SIGPIPE)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):  # no real file descriptor behind stdout
        pass
