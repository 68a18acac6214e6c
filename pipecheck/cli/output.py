"""What every subcommand shares: the program name and exit codes, the output options (``--json``,
``--html``, ``--trace``, ``--markdown``, ``--quiet``, ``--verbose``, ``--width``) and the
writing of a report to them, one line to a stream, and the :class:`Command` base class."""

from __future__ import annotations

import abc
import argparse
import os
import sys
from typing import TYPE_CHECKING, Optional, TextIO

from pipecheck._atomic import is_stdout
from pipecheck.render.inert import one_line
from pipecheck.render.formats import FILE_FORMATS
from pipecheck.render.markdown import MarkdownRenderer
from pipecheck.render.terminal import MIN_WIDTH, TerminalRenderer

if TYPE_CHECKING:
    from pipecheck.report import Report
from pipecheck.cli.arguments import MAX_WIDTH, UsageError, output_file, width


PROG = "pipecheck"


EXIT_OK = 0


EXIT_INTERNAL_ERROR = 3


EXIT_INTERRUPTED = 130


EXIT_BROKEN_PIPE = 141


def say(line: str, stream: TextIO) -> None:
    """Print one line of the CLI's own (errors, headers, check results, saved paths) as one
    line, its control characters and line breaks made visible: file names and messages come
    from the user (:func:`pipecheck.render.inert.one_line`)."""
    print(one_line(line), file=stream)


def silence_stdout() -> None:
    """After a broken pipe, point stdout at /dev/null so the interpreter's final flush is quiet
    (what the Python docs recommend for SIGPIPE)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):  # no real file descriptor behind stdout
        pass


def use_color(stream: TextIO) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set (https://no-color.org)."""
    if "NO_COLOR" in os.environ or os.environ.get("TERM") == "dumb":
        return False
    return hasattr(stream, "isatty") and stream.isatty()


OUTPUT_OPTIONS = ("json", *(renderer.name for renderer in FILE_FORMATS))


def check_outputs(args: argparse.Namespace) -> None:
    """At most one thing may go to stdout: one output option given as ``-``, or ``--markdown``.
    Raises :class:`UsageError` otherwise (before any work starts)."""
    to_stdout = [f"--{name} -" for name in OUTPUT_OPTIONS
                 if getattr(args, name, None) and is_stdout(getattr(args, name))]
    if to_stdout and getattr(args, "markdown", False):
        to_stdout.append("--markdown")
    if len(to_stdout) > 1:
        raise UsageError(f"only one output can go to stdout, got {' and '.join(to_stdout)}")


def add_output_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("output")
    group.add_argument("--json", metavar="FILE", type=output_file,
                       help="save the report as JSON to FILE ('-': stdout)")
    group.add_argument("--html", metavar="FILE", type=output_file,
                       help="save a self-contained HTML report (charts inline, no network) to FILE "
                       "('-': stdout)")
    group.add_argument("--trace", metavar="FILE", type=output_file,
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
        type=width,
        help=f"summary width in columns, {MIN_WIDTH} to {MAX_WIDTH:,} (default: the terminal's, "
        "else 100)",
    )


def save_outputs(report: "Report", args: argparse.Namespace, what: str) -> bool:
    """Write ``--json`` first (so a rendering problem cannot lose the measurements), then each
    file format asked for (:data:`FILE_FORMATS`), each atomically, saying where on stderr
    (``what`` names the JSON: "report"). Returns whether stdout is to stay quiet (``--quiet``,
    or an output went to stdout)."""
    stdout_taken = any(getattr(args, name) and is_stdout(getattr(args, name))
                       for name in OUTPUT_OPTIONS)
    quiet = bool(args.quiet or stdout_taken)  # nothing else on stdout when an output goes there
    if args.json:
        saved = report.save(args.json, per_rank=False)  # --json FILE writes FILE exactly
        if not quiet:
            say(f"{PROG}: {what} saved to {saved}", sys.stderr)
    for renderer in FILE_FORMATS:
        path = getattr(args, renderer.name)
        if path:
            saved = renderer().save(report, path)
            if not quiet:
                say(f"{PROG}: {renderer.what} saved to {saved}", sys.stderr)
    return quiet


def emit(report: "Report", args: argparse.Namespace, title: Optional[str] = None) -> None:
    """Save the outputs asked for (:func:`save_outputs`), then print the markdown or terminal
    summary."""
    quiet = save_outputs(report, args, "report")
    if args.markdown:
        MarkdownRenderer(title=title).write(report, sys.stdout)
        return
    if quiet:
        return
    if title is not None:
        say(f"==> {title} <==", sys.stdout)
    TerminalRenderer(width=args.width, color=use_color(sys.stdout),
                     verbose=args.verbose).write(report, sys.stdout)


class Command(abc.ABC):
    """Base for subcommands: ``name``, arguments, ``run``; the class docstring is the help."""

    name: str

    @abc.abstractmethod
    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Add this subcommand's options to its parser."""

    @abc.abstractmethod
    def run(self, args: argparse.Namespace) -> int:
        """Do the work and return the exit code; errors propagate to :func:`main`."""
