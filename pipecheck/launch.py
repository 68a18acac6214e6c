"""The parent side of ``pipecheck run -- COMMAND``: run an unmodified program with every
DataLoader it iterates measured, then gather the reports.

How it works, and why: docs/internals.md (``pipecheck/launch.py``).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from pipecheck.errors import BadInputError, one_line
from pipecheck.run_files import ReportName, parse
from pipecheck.run_process import (GRACE_S, KILL_WAIT_S, StartFailed, describe,
                                   run_until_all_gone, say)

SITE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_run_site")
"""The folder holding the ``sitecustomize`` that installs the hook in child processes."""

PACKAGE_ENV = "PIPECHECK_RUN_PACKAGE"
"""The parent's ``pipecheck`` package folder: a child importing the same folder is served."""

VERSION_ENV = "PIPECHECK_RUN_VERSION"
"""The parent's pipecheck version: a child importing another install of it is served too."""

PREFIX_ENV = "PIPECHECK_RUN_PREFIX"
"""The parent's ``sys.prefix``: a child of the same environment is given the parent's package
when it is not on its path (pipecheck run from a source checkout)."""

@dataclass(frozen=True)
class LoaderReport:
    """One measured loader: its ``report`` (merged across ranks when it has several),
    ``label`` (``loader 0``, with the pid when several processes measured loaders) and the
    report files it came from."""

    label: str
    report: Any
    files: tuple[str, ...]


@dataclass(frozen=True)
class MissingReport:
    """A loader a process started measuring (it claimed a report name) whose report never
    came: the process ended without saving (``os._exit``, ``exec`` into another program,
    SIGKILL, a crash) or measuring it failed."""

    pid: int
    index: int


@dataclass
class RunOutcome:
    """What ``pipecheck run`` found: the program's exit ``code``, its ``loaders`` (the
    training loader first), the reports that never came (``missing``), the shared-memory files
    swept after it (``swept``), and ``kept_folder``: the run folder when it could not be removed
    because a process of the program outlived SIGKILL (else ``None``)."""

    code: int
    loaders: list[LoaderReport] = field(default_factory=list)
    missing: list[MissingReport] = field(default_factory=list)
    swept: list[str] = field(default_factory=list)
    kept_folder: Optional[str] = None


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


def child_environment(folder: str, *, tune: bool = False) -> dict[str, str]:
    """The child's environment: ours, plus the hook's folder first on ``PYTHONPATH``,
    ``PIPECHECK_RUN_DIR`` naming ``folder`` and what the hook checks before it measures a
    process (:data:`PACKAGE_ENV`, :data:`VERSION_ENV`, :data:`PREFIX_ENV`); with ``tune``,
    ``PIPECHECK_RUN_TUNE=1`` unless the caller's environment sets its limits
    (:data:`pipecheck.run_hook.TUNE_ENV`: every measured DataLoader is tuned online, as
    ``wrap(tune=True)``); without ``tune`` the variable is removed, so a value inherited from
    the caller's environment never turns tuning on)."""
    from pipecheck._version import __version__
    from pipecheck.run_hook import RUN_DIR_ENV, TUNE_ENV

    env = dict(os.environ)
    paths = [SITE_DIR] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env[RUN_DIR_ENV] = folder
    env[PACKAGE_ENV] = os.path.realpath(os.path.dirname(os.path.abspath(__file__)))
    env[VERSION_ENV] = __version__
    env[PREFIX_ENV] = os.path.realpath(sys.prefix)
    if tune:
        env.setdefault(TUNE_ENV, "1")  # a caller's own limits (name=value pairs) are kept
    else:
        env.pop(TUNE_ENV, None)
    return env


def run_program(argv: Sequence[str], folder: str, *, grace_s: float = GRACE_S,
                stdout: Optional[int] = None, tune: bool = False) -> tuple[int, list[int]]:
    """Run ``argv`` with the hook on (its reports go to ``folder``) until every process of it
    is gone (:func:`pipecheck.run_process.run_until_all_gone`): its exit code and the pids
    still alive after SIGKILL (normally none). Raises
    :class:`~pipecheck.run_process.StartFailed` when it cannot start. ``tune``: tune every
    measured DataLoader online (:func:`child_environment`)."""
    return run_until_all_gone(argv, child_environment(folder, tune=tune), grace_s=grace_s,
                              stdout=stdout)


# -- gathering the reports ------------------------------------------------------------------------


def collect_reports(folder: str) -> tuple[list[LoaderReport], list[MissingReport]]:
    """The loaders measured in ``folder``, most batches consumed first, and the loaders whose
    report never came (an empty placeholder, :mod:`pipecheck.run_files`). Unreadable files
    are skipped with one line on stderr each (a process killed mid-save leaves none behind:
    saves are atomic)."""
    from pipecheck.merge import merge_reports
    from pipecheck.report import load

    names = [(name, parsed) for name in sorted(os.listdir(folder))
             if (parsed := parse(name)) is not None]
    ranked = {parsed.claimed for _, parsed in names if parsed.rank is not None}
    groups: dict[tuple[int, Optional[int], int], list[tuple[str, Any]]] = {}
    missing: list[MissingReport] = []
    for name, parsed in names:
        path = os.path.join(folder, name)
        if parsed.rank is None and _is_empty(path):
            if parsed.claimed not in ranked:  # a rank file holds the report instead
                missing.append(MissingReport(pid=parsed.pid, index=parsed.index))
            continue
        try:
            report = load(path)
        except Exception as err:
            say(f"skipped {name}: {err}")
            continue
        groups.setdefault(_group(parsed), []).append((path, report))
    processes = {(pid, claim) for _, pid, claim in groups if pid is not None}
    loaders = []
    for (index, pid, claim), members in groups.items():
        label = f"loader {index}"
        if pid is not None and len(processes) > 1:  # a reused pid: its later claims numbered
            label += f" (pid {pid}" + (f", #{claim + 1}" if claim else "") + ")"
        try:
            report = merge_reports(members) if len(members) > 1 else members[0][1]
        except Exception as err:
            say(f"{label}: its rank files could not be merged: {err}")
            continue
        loaders.append(LoaderReport(label=label, report=report,
                                    files=tuple(path for path, _ in members)))
    loaders.sort(key=lambda loader: -_batches(loader.report))
    return loaders, missing


def _group(parsed: ReportName) -> tuple[int, Optional[int], int]:
    # Ranks of one loader are merged across processes; otherwise each process is its own.
    if parsed.rank is not None:
        return (parsed.index, None, 0)
    return (parsed.index, parsed.pid, parsed.claim)


def _is_empty(path: str) -> bool:
    try:
        return os.path.getsize(path) == 0
    except OSError:
        return False


def _batches(report: Any) -> int:
    """Batches the loader delivered: summed over ranks for a merged report."""
    if report.ranks is not None:
        return sum(rank.batches for rank in report.ranks.ranks)
    return report.consumer.batches


# -- shared-memory files ------------------------------------------------------------------------


def _shared_places() -> list[tuple[str, str]]:
    """Where the probes may leave files, as ``(directory, name prefix)``: worker timing files
    (only where there is no anonymous memory, :func:`pipecheck.probes._ring.create_area`) and
    stage folders (the temp dir)."""
    from pipecheck.probes._ring import AREA_PREFIX, shared_dir
    from pipecheck.probes.stages import FOLDER_PREFIX

    return [(shared_dir(), AREA_PREFIX), (tempfile.gettempdir(), FOLDER_PREFIX)]


def _shared_names() -> set[str]:
    """The probes' file names there now."""
    names: set[str] = set()
    for directory, prefix in _shared_places():
        try:
            names.update(n for n in os.listdir(directory) if n.startswith(prefix))
        except OSError:
            pass
    return names


def sweep_shared_files(before: set[str]) -> list[str]:
    """Remove the probes' files whose owner is gone (:func:`pipecheck._owned.sweep`, as every
    ``wrap()`` does when it starts) and return those among them that were not there before the
    program ran (``before``: names): what the program's processes left."""
    from pipecheck import _owned

    removed = []
    for directory, prefix in _shared_places():
        removed += _owned.sweep(directory, prefix)
    return sorted(path for path in removed if os.path.basename(path) not in before)


def run_and_collect(command: Sequence[str], *, grace_s: float = GRACE_S,
                    stdout: Optional[int] = None, tune: bool = False) -> RunOutcome:
    """Run ``command`` measured (docs/internals.md) and gather what it left: the exit code,
    the loaders' reports (the training loader first), the reports that never came and the
    shared files swept. Lines on stderr say what went wrong after the program started; from
    then on nothing raises (the exit code is the program's). Raises :class:`BadInputError`
    for a command that cannot be run."""
    argv = command_line(command)
    before = _shared_names()
    folder = tempfile.mkdtemp(prefix="pipecheck-run-")
    try:
        code, stuck = run_program(argv, folder, grace_s=grace_s, stdout=stdout, tune=tune)
    except StartFailed as err:
        shutil.rmtree(folder, ignore_errors=True)
        raise BadInputError(f"cannot run {argv[0]}: {err}") from None
    # (Any other exception leaves the folder: processes of the program may still save there.)
    outcome = RunOutcome(code=code)
    try:
        outcome.loaders, outcome.missing = collect_reports(folder)
        outcome.swept = sweep_shared_files(before)
    except KeyboardInterrupt:  # the program's exit code stands whatever happens here
        say("interrupted while reading the reports")
    except Exception as err:
        say(f"could not read the reports: {one_line(err)}")
    finally:
        if stuck:
            outcome.kept_folder = folder
        else:
            shutil.rmtree(folder, ignore_errors=True)
    for missing in outcome.missing:
        say(f"no report from pid {missing.pid} for its loader {missing.index}: the process "
            "ended without saving it (os._exit, exec into another program, SIGKILL or a "
            "crash) or could not measure it")
    if outcome.swept:
        say(f"removed {len(outcome.swept)} file(s) of pipecheck's the program's processes left: "
            + ", ".join(os.path.basename(path) for path in outcome.swept))
    if stuck:
        say(f"process(es) {describe(stuck)} still exist {KILL_WAIT_S:g} s after SIGKILL "
            f"(uninterruptible sleep?); their run folder {folder} is left in place")
    return outcome
