"""The subcommands that measure another program: ``pipecheck run`` (a script under
``pipecheck.wrap``) and ``pipecheck attach PID`` (py-spy and psutil on a process never
wrapped), with the writing of their reports."""

from __future__ import annotations

import dataclasses
import argparse
import os
import signal
import stat
import sys
from typing import Any, Callable, Optional, TextIO

from pipecheck._atomic import is_stdout
from pipecheck.errors import PipecheckError
from pipecheck.errors import one_line as error_line
from pipecheck.render.formats import FILE_FORMATS
from pipecheck.render.markdown import MarkdownRenderer
from pipecheck.render.terminal import TerminalRenderer

from pipecheck.cli.arguments import MAX_PID, MAX_RATE_HZ, MAX_SECONDS, count, seconds
from pipecheck.cli.output import (Command, EXIT_OK, OUTPUT_OPTIONS, PROG, add_output_options, emit,
                                  say, silence_stdout, use_color)


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
        parser.add_argument("--grace", metavar="S", type=seconds,
                            help="seconds the program's processes have to end after SIGTERM "
                            "or SIGHUP is passed on, or after its first process ended for "
                            "those it left running, before SIGKILL (default 45 s)")
        parser.add_argument("--tune", action="store_true",
                            help="try DataLoader settings (num_workers, prefetch_factor, "
                            "pin_memory with CUDA) in the running program and keep the best "
                            "measured, as wrap(loader, tune=True); the report's tune section "
                            "gives the line that pins them (default: never change settings)")
        add_output_options(parser)

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
            silence_stdout()
            say(f"{PROG}: stdout was closed; the reports were not all written", sys.stderr)
        except KeyboardInterrupt:
            say(f"{PROG}: interrupted while writing the reports", sys.stderr)
        except Exception as err:
            say(f"{PROG}: could not write the reports: "
                 f"{error_line(err)}", sys.stderr)
        return outcome.code


_STDOUT_ALIASES = ("/dev/stdout", "/dev/fd/1", "/proc/self/fd/1")


def _run_outputs_on_stdout(args: argparse.Namespace) -> list[str]:
    """The output options of ``pipecheck run`` that write to stdout: ``-`` or a name of
    our stdout (``/dev/stdout``)."""
    return [name for name in OUTPUT_OPTIONS
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
        say(f"{PROG}: {what} not saved: {reason}", sys.stderr)
        return
    if not quiet and not is_stdout(path):
        say(f"{PROG}: {what} saved to {saved}", sys.stderr)


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
        say(f"{PROG}: no report: {why} (exit code {outcome.code})", sys.stderr)
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
                say(f"==> {title} <==", summary)
            TerminalRenderer(width=args.width, color=use_color(summary),
                             verbose=args.verbose).write(loader.report, summary)
    if not_saved:
        others = ", ".join(_run_title(loader) for loader in not_saved)
        say(f"{PROG}: --json {args.json} takes one report ({_run_title(loaders[0])}); not "
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
        parser.add_argument("pid", metavar="PID", type=count(1, MAX_PID),
                            help="process id of the training script")
        parser.add_argument("--duration", metavar="S", type=seconds,
                            help=f"seconds to sample (default 10 s, at most {MAX_SECONDS:,.0f} s)")
        parser.add_argument("--rate", metavar="HZ", type=count(1, MAX_RATE_HZ, "Hz"),
                            help=f"samples per second and process, 1 to {MAX_RATE_HZ:,} "
                            "(default 50 Hz)")
        add_output_options(parser)

    def run(self, args: argparse.Namespace) -> int:
        from pipecheck.attach import StopSignals, StoppedBeforeSampling, attach

        def started(duration_s: float) -> None:
            if not args.quiet:
                say(f"{PROG}: sampling PID {args.pid} for {duration_s:g} s "
                     "(Ctrl-C ends early and reports)", sys.stderr)

        terminals = [fd for fd in (1, 2) if _is_terminal(fd)]
        # Held until the report is written: a signal while writing it cannot lose it.
        with StopSignals() as signals:
            try:
                report = attach(args.pid, args.duration, rate_hz=args.rate,
                                on_started=started, signals=signals)
            except StoppedBeforeSampling as stopped:
                _leave_hung_up_terminal(terminals)
                say(f"{PROG}: {stopped}; nothing was sampled, no report", sys.stderr)
                return 128 + stopped.signum
            if signals.first is not None:
                _leave_hung_up_terminal(terminals)
            emit(report, args)
            if signals.first is not None:
                name = signal.Signals(signals.first).name
                ended = report.attach is not None and report.attach.signal == name
                say(f"{PROG}: {name} received; " + (
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
