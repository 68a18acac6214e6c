"""The parent side of ``pipecheck run -- COMMAND``: run an unmodified program with every
DataLoader it iterates measured, then gather the reports.

The program runs as a child process with ``pipecheck/_run_site`` first on ``PYTHONPATH`` (its
``sitecustomize`` installs :mod:`pipecheck.run_hook` in every Python process of the command,
``torchrun``'s ranks included) and ``PIPECHECK_RUN_DIR`` naming a private temporary folder where
each process writes one report per loader it iterated. Ctrl-C reaches the child directly (same
process group) and SIGTERM sent to ``pipecheck`` is passed on to it; either way the child's
exit-time save writes what was measured. Once the child has ended, the reports are grouped by
loader (the rank files of one loader are merged, as ``pipecheck report`` does), ordered by
batches consumed (the training loader first), and the exit code is the program's own
(``128 + N`` when signal ``N`` ended it, as shells report it).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from pipecheck.errors import BadInputError

SITE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_run_site")
"""The folder holding the ``sitecustomize`` that installs the hook in child processes."""

_REPORT_NAME = re.compile(r"^loader(?P<index>\d+)\.p(?P<pid>\d+)(?:\.rank(?P<rank>\d+))?\.json$")


@dataclass(frozen=True)
class LoaderReport:
    """One measured loader: its ``report`` (merged across ranks when it has several),
    ``label`` (``loader 0``, with the pid when several processes measured loaders) and the
    report files it came from."""

    label: str
    report: Any
    files: tuple[str, ...]


def command_line(command: Sequence[str]) -> list[str]:
    """The argv to run: ``COMMAND`` as given, except that a ``.py`` file or ``-m module`` runs
    with this Python (``pipecheck run -- train.py``). Raises :class:`BadInputError` for an
    empty command or one that cannot be found."""
    argv = list(command)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise BadInputError("pipecheck run needs a command after '--', e.g. "
                            "'pipecheck run -- python train.py'")
    if argv[0] == "-m" or argv[0].endswith(".py"):
        if argv[0].endswith(".py") and not os.path.isfile(argv[0]):
            raise BadInputError(f"no such script: {argv[0]}")
        return [sys.executable, *argv]
    if shutil.which(argv[0]) is None:
        raise BadInputError(f"command not found: {argv[0]}")
    return argv


def child_environment(folder: str) -> dict[str, str]:
    """The child's environment: ours, plus the hook's folder first on ``PYTHONPATH`` and
    ``PIPECHECK_RUN_DIR`` naming ``folder``."""
    from pipecheck.run_hook import RUN_DIR_ENV

    env = dict(os.environ)
    paths = [SITE_DIR] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env[RUN_DIR_ENV] = folder
    return env


def run_program(argv: Sequence[str], folder: str) -> int:
    """Run ``argv`` with the hook on, wait for it, and return its exit code (``128 + N`` for
    a signal). SIGTERM to this process is passed on to the child; Ctrl-C reaches the child
    from the terminal, and this process waits for it rather than leaving it behind. Call from
    the main thread (signal handlers)."""
    child = subprocess.Popen(list(argv), env=child_environment(folder))

    def forward(signum: int, frame: Any) -> None:  # no locks: one system call
        try:
            os.kill(child.pid, signum)
        except OSError:
            pass

    def wait_for_child(signum: int, frame: Any) -> None:
        # Ctrl-C went to the whole foreground process group: the child has it already, and a
        # second one could cut its exit-time save short.
        pass

    previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, forward),
                signal.SIGINT: signal.signal(signal.SIGINT, wait_for_child)}
    try:
        code = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 128 - code if code < 0 else code


def collect_reports(folder: str) -> list[LoaderReport]:
    """The loaders measured in ``folder``, most batches consumed first. Unreadable files are
    skipped with one line on stderr each (a process killed mid-save leaves none behind: saves
    are atomic)."""
    from pipecheck.merge import merge_reports
    from pipecheck.report import load

    groups: dict[tuple[int, Optional[int]], list[tuple[str, Any]]] = {}
    for name in sorted(os.listdir(folder)):
        match = _REPORT_NAME.match(name)
        if match is None:
            continue
        path = os.path.join(folder, name)
        try:
            report = load(path)
        except Exception as err:
            print(f"pipecheck run: skipped {name}: {err}", file=sys.stderr)
            continue
        ranked = match["rank"] is not None
        # Ranks of one loader are merged across processes; otherwise each process is its own.
        key = (int(match["index"]), None if ranked else int(match["pid"]))
        groups.setdefault(key, []).append((path, report))
    pids = {pid for _, pid in groups if pid is not None}
    loaders = []
    for (index, pid), members in groups.items():
        label = f"loader {index}" + (f" (pid {pid})" if len(pids) > 1 else "")
        report = merge_reports(members) if len(members) > 1 else members[0][1]
        loaders.append(LoaderReport(label=label, report=report,
                                    files=tuple(path for path, _ in members)))
    loaders.sort(key=lambda loader: -_batches(loader.report))
    return loaders


def _batches(report: Any) -> int:
    """Batches the loader delivered: summed over ranks for a merged report."""
    if report.ranks is not None:
        return sum(rank.batches for rank in report.ranks.ranks)
    return report.consumer.batches


def run_and_collect(command: Sequence[str]) -> tuple[int, list[LoaderReport]]:
    """Run ``command`` measured (see the module docstring): its exit code and its loaders'
    reports, the training loader (most batches) first. Raises :class:`BadInputError` for a
    command that cannot be run."""
    argv = command_line(command)
    with tempfile.TemporaryDirectory(prefix="pipecheck-run-") as folder:
        try:
            code = run_program(argv, folder)
        except OSError as err:
            raise BadInputError(f"cannot run {argv[0]}: {err.strerror or err}") from None
        return code, collect_reports(folder)
