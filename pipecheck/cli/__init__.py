"""The ``pipecheck`` command line: ``main(argv) -> int``, one class per subcommand
(:mod:`~pipecheck.cli.reading`: ``report``, ``check``; :mod:`~pipecheck.cli.measuring`: ``demo``,
``stress``, ``shards``; :mod:`~pipecheck.cli.running`: ``run``, ``attach``), on the argument
parsing of :mod:`~pipecheck.cli.arguments` and the output options of :mod:`~pipecheck.cli.output`.

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

import argparse
import inspect
import sys
import traceback
from typing import Any, Optional, Sequence

from pipecheck.errors import PipecheckError
from pipecheck.errors import one_line as error_line

from pipecheck.cli.arguments import Parser, SubcommandParser
from pipecheck.cli.output import (Command, EXIT_BROKEN_PIPE, EXIT_INTERNAL_ERROR, EXIT_INTERRUPTED,
                                  EXIT_OK, PROG, check_outputs, say, silence_stdout)
from pipecheck.cli.reading import CheckCommand, ReportCommand
from pipecheck.cli.measuring import DemoCommand, ShardsCommand, StressCommand
from pipecheck.cli.running import AttachCommand, RunCommand


COMMANDS: tuple[type[Command], ...] = (DemoCommand, ReportCommand, CheckCommand, StressCommand,
                                       ShardsCommand, RunCommand, AttachCommand)


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (exposed for tests and documentation tools)."""
    from pipecheck import __version__

    parser = Parser(
        prog=PROG,
        description="Is your PyTorch input pipeline holding training back, why, and what to "
        "change.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    subparsers = parser.add_subparsers(dest="command_name", metavar="COMMAND", required=True,
                                       parser_class=SubcommandParser)
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
        check_outputs(args)
        return args.command.run(args)
    except SystemExit as done:  # --help and --version exit through argparse
        return _exit_code(done.code)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        silence_stdout()
        return EXIT_BROKEN_PIPE
    except PipecheckError as err:
        if debug:
            traceback.print_exc()
        say(f"{PROG}: error: {error_line(err)}", sys.stderr)
        return err.exit_code
    except Exception as err:
        if debug:
            traceback.print_exc()
            hint = ""
        else:
            hint = " (run with --debug for the traceback)"
        message = error_line(err)
        say(f"{PROG}: internal error: {message}{hint}", sys.stderr)
        return EXIT_INTERNAL_ERROR


def _exit_code(code: Any) -> int:
    if code is None:
        return EXIT_OK
    return code if isinstance(code, int) else 2
