"""torch's own DataLoader tests as an acceptance run for ``pipecheck.wrap``.

Runs pytorch's ``test/test_dataloader.py`` (read from pytorch's repository for the installed
torch; never part of this project) twice, each in its own pytest subprocess: plainly, and with
every ``torch.utils.data.DataLoader`` it constructs returned through ``pipecheck.wrap``
(``benchmarks/torch_acceptance_shim.py``, loaded by a ``sitecustomize.py`` in a temporary
directory, so the test file's spawned children and ``python -c`` subprocesses are wrapped too).
It then compares the two pass sets and prints:

* passed / failed / skipped counts, plain and wrapped;
* every regression: a test that passes plainly and fails wrapped, with the first line of its
  failure; each is a pipecheck defect;
* the known exceptions, :data:`PRIVATE_INTERNALS`: tests that assert on torch's private
  iterator internals (``_workers``, ``_pin_memory_thread``), with the reason. A listed test
  counts as an exception only when its wrapped failure names the private attribute; failing
  for any other reason, it is a regression like the rest.

Each test gets ``--timeout`` seconds. With pytest-timeout's default (signal) method a plain
``test_multiprocessing_contexts`` on a loaded 2-core machine stayed blocked in the DataLoader's
queue long past its timeout, so the thread method is used: a test past its time ends that
pytest process, is counted failed ("hung"), and pytest starts again with the tests not yet
started. Results are written by a small plugin one line per test as they come, so a crash
loses nothing but the running test. Each pytest runs in its own process group, killed when it
ends.

Exit status: 0 when there is no regression, 1 when there is one, 2 for bad input (a missing
test file, a missing test dependency, a collection that failed).

Needs, importable by the interpreter that runs the tests: pytest, ``expecttest`` (torch's
``common_utils`` imports it) and ``pytest-timeout`` (the per-test timeout). Install them where
torch's version cannot move, e.g. ``pip install --target DIR expecttest pytest-timeout`` and
pass ``--path DIR``.

Usage::

    python benchmarks/torch_dataloader_acceptance.py /tmp/torchtests/test_dataloader.py \\
        [--path DIR] [-k EXPR] [--timeout 300] [--wrap-options '{"host": false}'] \\
        [--only plain|wrapped] [--plain-results FILE] [--wrapped-results FILE] \\
        [--keep DIR] [--json OUT]

On 2 shared cores the whole file takes tens of minutes per run; ``-k`` narrows it (pytest's
expression over class and test names, e.g. ``-k "TestDataLoader and not PersistentWorkers"``).

Baseline (pipecheck 5acbfe8, before the issue-11 rewrite of the wrapper): torch 2.13.0+cpu
(git cf30153c), test file from pytorch/pytorch at 74436f9025609987bbc69c617564f98635b67807 (the
one full version the search store holds; it predates 2.13: ``test_get_worker_info`` fails
plainly because 2.13's ``WorkerInfo`` raises ``FrozenInstanceError``, not ``RuntimeError``),
2 cores shared with other jobs, plain and wrapped run at the same time with ``--only plain`` /
``--only wrapped --keep DIR --timeout 300``, then compared with ``--plain-results`` /
``--wrapped-results``: 178 tests; plain 161 passed, 3 failed, 14 skipped (1153 s); wrapped 148
passed, 16 failed, 14 skipped (1223 s). 11 regressions: ``test_error``, ``test_error_workers``,
``test_invalid_assign_after_init``, ``test_iterable_style_dataset`` (each in ``TestDataLoader``
and ``TestDataLoaderPersistentWorkers``) and ``test_nested_tensor_multiprocessing`` (fork,
forkserver, spawn); 2 private-internals exceptions (``test_partial_workers``, both classes).
``test_shuffler_iterdatapipe`` outran 300 s in both runs. The wrapped pytest took minutes to
exit after its summary: the garbage collector was shutting down partly consumed worker
iterators that only reference cycles still held.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
SHIM = "torch_acceptance_shim"
WRAP_ENV = "PIPECHECK_ACCEPTANCE_WRAP"
RESULTS_ENV = "PIPECHECK_ACCEPTANCE_RESULTS"
RESULTS_MODULE = "pipecheck_acceptance_results"
OPTIONS_ENV = "PIPECHECK_ACCEPTANCE_WRAP_OPTIONS"
REQUIRED_MODULES = ("pytest", "expecttest", "pytest_timeout")

SITECUSTOMIZE = f"""\
# Written by pipecheck's benchmarks/torch_dataloader_acceptance.py for one wrapped run.
import os
if os.environ.get({WRAP_ENV!r}) == "1":
    import {SHIM}
    {SHIM}.install()
"""

_PRIVATE = re.compile(r"has no attribute '(_workers|_pin_memory_thread)'")

PRIVATE_INTERNALS: dict[str, str] = {
    "test_partial_workers":
        "reads iter(loader)._workers to join the worker processes: a private attribute of "
        "torch's _MultiProcessingDataLoaderIter, which the wrapper's iterator is not",
    "test_iterable_style_dataset":
        "after its checks, reads iter(loader)._workers to check that the workers exit: a "
        "private attribute of torch's _MultiProcessingDataLoaderIter",
}
"""Test name (in either class: plain and persistent workers) -> why its wrapped failure is not
a pipecheck defect. Applies only when the failure message matches :data:`_PRIVATE`.
``test_get_worker_info`` also reads ``it._workers``, but in a child process whose stderr the
test silences, so its failure message (the child's exit status) cannot tell why: it counts as a
regression. (Run by hand against pipecheck 5acbfe8, the child failed earlier, and not on
private internals: ``worker_info.dataset`` was not an instance of the user's dataset class.)"""


@dataclass
class Outcome:
    """One test's result: ``passed``, ``failed`` (failure or error), ``skipped`` (also
    ``expectedFailure``, which pytest reports as xfail) and the first line of the message."""

    status: str
    message: str = ""


@dataclass
class RunResult:
    """One pytest run: per-test outcomes, wall seconds and pytest's exit status."""

    outcomes: dict[str, Outcome] = field(default_factory=dict)
    wall_s: float = 0.0
    returncode: Optional[int] = None

    def count(self, status: str) -> int:
        return sum(1 for o in self.outcomes.values() if o.status == status)


RESULTS_PLUGIN = """\
# Written by pipecheck's benchmarks/torch_dataloader_acceptance.py: one JSON line per test
# start and per test report, flushed at once, so a run that hangs or crashes keeps its results.
import json
import os

_PATH = os.environ[%r]


def _write(record):
    with open(_PATH, "a") as out:
        out.write(json.dumps(record) + "\\n")


def pytest_runtest_logstart(nodeid, location):
    _write({"nodeid": nodeid, "event": "start"})


def pytest_runtest_logreport(report):
    if report.when != "call" and report.outcome == "passed":
        return
    outcome = "skipped" if hasattr(report, "wasxfail") else report.outcome
    message = ""
    if report.outcome == "failed":
        crash = getattr(report.longrepr, "reprcrash", None)
        message = crash.message if crash is not None else str(report.longrepr)
    elif report.outcome == "skipped" and isinstance(report.longrepr, tuple):
        message = str(report.longrepr[2])
    _write({"nodeid": report.nodeid, "event": "report", "outcome": outcome,
            "message": message.strip().splitlines()[0] if message.strip() else ""})
""" % RESULTS_ENV

HUNG = "no result: the test hung past the timeout or crashed pytest"


def read_results(path: Path) -> tuple[dict[str, Outcome], set[str]]:
    """Outcomes by node id from a results file of :data:`RESULTS_PLUGIN`, and the node ids
    that started. A test that started and never reported is failed with :data:`HUNG`; one
    failed or skipped in any phase (setup, call, teardown) counts so."""
    outcomes: dict[str, Outcome] = {}
    started: set[str] = set()
    if not path.exists():
        return outcomes, started
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # a line cut short by a crash
            continue
        nodeid = record.get("nodeid", "")
        if record.get("event") == "start":
            started.add(nodeid)
            continue
        status = {"passed": "passed", "skipped": "skipped"}.get(record.get("outcome"), "failed")
        before = outcomes.get(nodeid)
        if before is None or before.status == "passed" or (
                before.status == "skipped" and status == "failed"):
            outcomes[nodeid] = Outcome(status, record.get("message", ""))
    for nodeid in started - set(outcomes):
        outcomes[nodeid] = Outcome("failed", HUNG)
    return outcomes, started


def _short(nodeid: str) -> str:
    """``Class::test`` from a pytest node id ``file.py::Class::test``."""
    return nodeid.split("::", 1)[1] if "::" in nodeid else nodeid


def _run(command: list[str], *, cwd: Path, env: dict[str, str], log: Path,
         timeout_s: float) -> Optional[int]:
    """Run ``command`` in its own process group, appending its output to ``log``; then kill
    whatever of that group is left (workers of a test that hung). ``None`` on timeout."""
    with open(log, "a") as out:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        try:
            returncode: Optional[int] = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            returncode = None
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except OSError:  # the group is already gone
            pass
        process.wait()
    return returncode


def collect(test_file: Path, *, env: dict[str, str], args: argparse.Namespace,
            log: Path) -> list[str]:
    """The node ids pytest collects from ``test_file`` (with ``-k``). Raises ``RuntimeError``
    when collection fails."""
    command = [args.python, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q",
               str(test_file)] + (["-k", args.k] if args.k else [])
    found = subprocess.run(command, cwd=test_file.parent, env=env, capture_output=True,
                           text=True, timeout=600, check=False)
    with open(log, "a") as out:
        out.write(found.stdout + found.stderr)
    ids = [line.strip() for line in found.stdout.splitlines() if "::" in line]
    if found.returncode not in (0, 5) or (found.returncode == 0 and not ids):
        raise RuntimeError(f"collecting {test_file} failed (exit {found.returncode}); see {log}")
    return ids


def run_pytest(test_file: Path, *, wrapped: bool, args: argparse.Namespace,
               workdir: Path) -> RunResult:
    """Run ``test_file``'s tests (wrapped or plainly) in pytest subprocesses and read their
    results. A test past ``--timeout`` ends its pytest (pytest-timeout's thread method: a
    hung DataLoader may swallow the signal method's exception) and pytest starts again with
    the tests not yet started. Raises ``RuntimeError`` when collection fails."""
    kind = "wrapped" if wrapped else "plain"
    results = workdir / f"{kind}.jsonl"
    log = workdir / f"{kind}.log"
    for stale in (results, log):
        stale.unlink(missing_ok=True)
    site = workdir / f"site-{kind}"
    site.mkdir(exist_ok=True)
    (site / f"{RESULTS_MODULE}.py").write_text(RESULTS_PLUGIN)
    env = dict(os.environ)
    paths = [str(site)] + list(args.path)
    env.pop(WRAP_ENV, None)
    if wrapped:
        (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
        paths = [str(site), str(ROOT / "benchmarks"), str(ROOT)] + list(args.path)
        env[WRAP_ENV] = "1"
        env[OPTIONS_ENV] = json.dumps(args.wrap_options)
    env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in [env.get("PYTHONPATH")] if p])
    env[RESULTS_ENV] = str(results)
    started_at = time.perf_counter()
    remaining = collect(test_file, env=env, args=args, log=log)
    returncode: Optional[int] = 0
    while remaining:
        command = [args.python, "-m", "pytest", "-p", "no:cacheprovider", "-p", RESULTS_MODULE,
                   "-q", "--timeout", str(args.timeout), "--timeout-method", "thread",
                   *remaining]
        left_s = args.run_timeout - (time.perf_counter() - started_at)
        if left_s <= 0:
            break
        returncode = _run(command, cwd=test_file.parent, env=env, log=log, timeout_s=left_s)
        _, started = read_results(results)
        still = [nodeid for nodeid in remaining if nodeid not in started]
        if len(still) == len(remaining):  # nothing ran: do not loop for ever
            break
        remaining = still
    outcomes, _ = read_results(results)
    return RunResult({_short(n): o for n, o in outcomes.items()},
                     time.perf_counter() - started_at, returncode)


def _base_name(test: str) -> str:
    return test.rpartition("::")[2]


def compare(plain: RunResult, wrapped: RunResult) -> tuple[list[str], list[str]]:
    """(regressions, excused): tests passing plainly that fail wrapped, split by whether the
    failure is a listed private-internals assertion."""
    regressions, excused = [], []
    for test, outcome in sorted(plain.outcomes.items()):
        after = wrapped.outcomes.get(test)
        if outcome.status != "passed" or after is None or after.status != "failed":
            continue
        if _base_name(test) in PRIVATE_INTERNALS and _PRIVATE.search(after.message):
            excused.append(test)
        else:
            regressions.append(test)
    return regressions, excused


def _summary_line(kind: str, result: RunResult) -> str:
    how = (f"{result.wall_s:.0f} s, pytest exit {result.returncode}" if result.wall_s
           else "read from a results file")
    return (f"{kind:8s} passed {result.count('passed'):4d}  failed {result.count('failed'):4d}  "
            f"skipped {result.count('skipped'):4d}  ({len(result.outcomes)} tests, {how})")


def report(plain: RunResult, wrapped: RunResult) -> tuple[str, list[str]]:
    """The printed comparison and the regressions."""
    regressions, excused = compare(plain, wrapped)
    lines = [_summary_line("plain", plain), _summary_line("wrapped", wrapped), ""]
    missing = sorted(set(plain.outcomes) ^ set(wrapped.outcomes))
    if missing:
        lines.append(f"in one run only ({len(missing)}): " + ", ".join(missing))
    lines.append(f"regressions (pass plain, fail wrapped): {len(regressions)}")
    for test in regressions:
        lines.append(f"  {test}: {wrapped.outcomes[test].message[:200]}")
    fixed = [t for t, o in sorted(plain.outcomes.items())
             if o.status == "failed" and wrapped.outcomes.get(t, Outcome("")).status == "passed"]
    if fixed:
        lines.append(f"fail plain, pass wrapped (flaky?): {', '.join(fixed)}")
    lines.append(f"known private-internals exceptions hit: {len(excused)}")
    for test in excused:
        lines.append(f"  {test}: {PRIVATE_INTERNALS[_base_name(test)]}")
    lines.append("listed private-internals exceptions (excused only when the failure names "
                 "the private attribute):")
    for name, reason in PRIVATE_INTERNALS.items():
        lines.append(f"  {name}: {reason}")
    plain_failures = [t for t, o in sorted(plain.outcomes.items()) if o.status == "failed"]
    if plain_failures:
        lines.append(f"failing plainly too (not counted): {', '.join(plain_failures)}")
    return "\n".join(lines), regressions


def _check_dependencies(python: str, paths: list[str]) -> Optional[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in [env.get("PYTHONPATH")] if p])
    code = ("import importlib.util, sys; missing = [m for m in sys.argv[1:] "
            "if importlib.util.find_spec(m) is None]; print(' '.join(missing))")
    found = subprocess.run([python, "-c", code, *REQUIRED_MODULES], env=env,
                           capture_output=True, text=True)
    missing = found.stdout.strip()
    if found.returncode != 0:
        return f"{python} could not be run: {found.stderr.strip()[-300:]}"
    if missing:
        return (f"missing test dependencies: {missing} (pip install --target DIR expecttest "
                f"pytest-timeout, then pass --path DIR)")
    return None


def _options(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(f"not JSON: {error}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object of wrap() keyword arguments")
    return value


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0 seconds, got {text}")
    return value


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("test_file", type=Path, help="pytorch's test/test_dataloader.py")
    parser.add_argument("-k", default="", help="pytest -k expression selecting tests")
    parser.add_argument("--timeout", type=_positive, default=300.0,
                        help="seconds per test before pytest-timeout fails it (default 300)")
    parser.add_argument("--run-timeout", type=_positive, default=4 * 3600.0,
                        help="seconds for a whole pytest run (default 4 h)")
    parser.add_argument("--path", action="append", default=[],
                        help="directory prepended to PYTHONPATH of both runs (repeatable)")
    parser.add_argument("--python", default=sys.executable,
                        help="interpreter that runs the tests (default: this one)")
    parser.add_argument("--wrap-options", type=_options, default={},
                        help='JSON keyword arguments for pipecheck.wrap, e.g. \'{"host": false}\'')
    parser.add_argument("--only", choices=("plain", "wrapped"),
                        help="run one side and print its counts only")
    parser.add_argument("--plain-results", type=Path,
                        help="reuse plain.jsonl of an earlier plain run (kept with --keep) "
                             "instead of running plainly again: the plain side does not "
                             "depend on pipecheck")
    parser.add_argument("--wrapped-results", type=Path,
                        help="likewise, wrapped.jsonl of an earlier wrapped run (to compare two "
                             "kept runs without running either)")
    parser.add_argument("--keep", type=Path,
                        help="directory to keep results (plain.jsonl, wrapped.jsonl) and logs "
                             "in (default: a temporary one)")
    parser.add_argument("--json", type=Path, help="also write the outcomes as JSON here")
    args = parser.parse_args(argv)

    test_file = args.test_file.resolve()
    if not test_file.is_file():
        print(f"error: no test file at {args.test_file}", file=sys.stderr)
        return 2
    for given in (args.plain_results, args.wrapped_results):
        if given is not None and not given.is_file():
            print(f"error: no results file at {given}", file=sys.stderr)
            return 2
    problem = _check_dependencies(args.python, args.path)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="pipecheck-acceptance-") as scratch:
        workdir = args.keep.resolve() if args.keep else Path(scratch)
        workdir.mkdir(parents=True, exist_ok=True)
        results: dict[str, RunResult] = {}
        try:
            for kind, given in (("plain", args.plain_results),
                                ("wrapped", args.wrapped_results)):
                if given is not None and args.only in (None, kind):
                    outcomes, _ = read_results(given)
                    results[kind] = RunResult({_short(n): o for n, o in outcomes.items()})
            for kind in ("plain", "wrapped"):
                if args.only in (None, kind) and kind not in results:
                    print(f"running {kind} ...", file=sys.stderr, flush=True)
                    results[kind] = run_pytest(test_file, wrapped=kind == "wrapped",
                                               args=args, workdir=workdir)
        except (RuntimeError, OSError) as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    print(f"test file: {test_file}; -k {args.k!r}; per-test timeout {args.timeout:g} s; "
          f"wrap options {args.wrap_options}")
    if args.json:
        args.json.write_text(json.dumps(
            {kind: {"wall_s": r.wall_s, "returncode": r.returncode,
                    "outcomes": {t: vars(o) for t, o in r.outcomes.items()}}
             for kind, r in results.items()}, indent=1))
    if args.only:
        print(_summary_line(args.only, results[args.only]))
        return 0
    text, regressions = report(results["plain"], results["wrapped"])
    print(text)
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main())
