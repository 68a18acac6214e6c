"""Finding py-spy and the permission to run it: where py-spy is installed, whether this process
may trace its children (``kernel.yama.ptrace_scope``, ``CAP_SYS_PTRACE``, the ``PR_SET_PTRACER``
opt-in), a one-line reason with how to enable it when it may not, py-spy processes that die
with the thread that started them, and ``pipecheck attach``'s check of a target process
(:func:`check_target`). The sampling itself is :mod:`pipecheck.probes.stacks`.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
from typing import Any, Callable, Optional

PTRACE_SCOPE_PATH = "/proc/sys/kernel/yama/ptrace_scope"


_PR_SET_PTRACER = 0x59616D61  # "Yama" in <linux/prctl.h>


_PR_SET_PTRACER_ANY = ctypes.c_ulong(-1 & 0xFFFFFFFFFFFFFFFF)


_CAP_SYS_PTRACE = 19


ENABLE_HINT = (
    "run as root with CAP_SYS_PTRACE (in Docker: docker run --cap-add SYS_PTRACE), or allow "
    "same-user attach with sysctl kernel.yama.ptrace_scope=1"
)


def _set_ptracer(value: ctypes.c_ulong) -> bool:
    """``prctl(PR_SET_PTRACER, value)``; ``True`` on success, ``False`` off Linux or where
    Yama is not built in."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PTRACER, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent() -> Optional[Callable[[], None]]:
    """A ``preexec_fn`` that makes the child receive SIGKILL when the thread that forks it
    ends (``prctl(PR_SET_PDEATHSIG, SIGKILL)``; kept across ``exec`` for a binary that is not
    set-user-ID), and kills it at once if this process died before that call took effect;
    ``None`` off Linux or where ``prctl`` cannot be found.

    Fork from a thread that lives as long as the child (the process's main thread, or a thread
    that waits for the child), as Linux ties the signal to the forking *thread*. The function
    is resolved here, in the parent: the child between ``fork`` and ``exec`` only calls it
    (no import, no lock)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                      ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    parent = os.getpid()
    kill = int(signal.SIGKILL)

    def in_child() -> None:
        prctl(_PR_SET_PDEATHSIG, kill, 0, 0, 0)
        if os.getppid() != parent:  # the parent is gone already: the signal will never come
            os.kill(os.getpid(), kill)

    return in_child


def allow_ptrace() -> bool:
    """Let any process of this user ptrace this one (Yama's opt-in); ``True`` on success. A
    no-op returning ``False`` off Linux or where Yama is not built in (nothing to opt into).
    Undo it with :func:`revoke_ptrace` when the sampling window ends."""
    return _set_ptracer(_PR_SET_PTRACER_ANY)


def revoke_ptrace() -> bool:
    """Withdraw :func:`allow_ptrace`'s opt-in (``PR_SET_PTRACER 0``: Yama's default rules
    again); ``True`` on success."""
    return _set_ptracer(ctypes.c_ulong(0))


class PtracerOptIn:
    """A ``worker_init_fn`` wrapper: opts the worker in to being sampled (:func:`allow_ptrace`),
    then calls the loader's own ``worker_init_fn`` (if any) unchanged. Picklable for spawn and
    forkserver when the wrapped function is."""

    def __init__(self, worker_init_fn: Optional[Callable[[int], Any]]) -> None:
        self.worker_init_fn = worker_init_fn

    def __call__(self, worker_id: int) -> None:
        allow_ptrace()
        if self.worker_init_fn is not None:
            self.worker_init_fn(worker_id)

    def __repr__(self) -> str:
        return f"<pipecheck ptrace opt-in then {self.worker_init_fn!r}>"


def ptrace_scope(path: str = PTRACE_SCOPE_PATH) -> Optional[int]:
    """Yama's ``kernel.yama.ptrace_scope`` (0-3), ``None`` where Yama is absent."""
    try:
        with open(path) as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return None


def has_cap_sys_ptrace(status_path: str = "/proc/self/status") -> bool:
    """Whether this process's effective capabilities include CAP_SYS_PTRACE (Linux)."""
    try:
        with open(status_path) as handle:
            for line in handle:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> _CAP_SYS_PTRACE & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def py_spy_dirs() -> list[str]:
    """Where :func:`find_py_spy` looks before ``PATH``, in order: the directory of
    ``sys.executable`` (a venv's ``bin``, also when the venv is not activated), this
    environment's scripts directory (``sysconfig.get_path("scripts")``), and the user scheme's
    scripts directory (where ``pip install --user`` puts py-spy, e.g. ``~/.local/bin``).
    Duplicates and unknown directories are left out."""
    candidates = [os.path.dirname(sys.executable) if sys.executable else "",
                  sysconfig.get_path("scripts")]
    try:
        candidates.append(sysconfig.get_path("scripts", sysconfig.get_preferred_scheme("user")))
    except KeyError:  # no user scheme on this platform
        pass
    found: list[str] = []
    for directory in candidates:
        if directory and directory not in found:
            found.append(directory)
    return found


def find_py_spy() -> Optional[str]:
    """The py-spy executable to run: the first found in :func:`py_spy_dirs`, then on
    ``PATH``; ``None`` when there is none. Job scripts often run ``venv/bin/python train.py``
    without activating the venv, so ``PATH`` alone misses the py-spy installed with
    pipecheck."""
    for directory in py_spy_dirs():
        path = shutil.which("py-spy", path=directory)
        if path is not None:
            return path
    return shutil.which("py-spy")


def unavailable_reason(py_spy: Optional[str], scope: Optional[int], capable: bool) -> Optional[str]:
    """Why sampling cannot start, with how to enable it; ``None`` when it may. ``py_spy``: the
    executable's path (``None``: not found); ``scope``: Yama's ptrace_scope; ``capable``: whether
    this process holds CAP_SYS_PTRACE."""
    if not sys.platform.startswith("linux"):
        return f"pipecheck samples stacks on Linux only (this is {sys.platform})."
    if py_spy is None:
        return ("py-spy is not installed: not beside this Python, in its scripts directories "
                "or on PATH (python -m pip install py-spy).")
    if scope == 3:
        return ("kernel.yama.ptrace_scope is 3: no process may attach to another until reboot; "
                "boot with a lower ptrace_scope to sample stacks.")
    if scope == 2 and not capable:
        return ("kernel.yama.ptrace_scope is 2: only processes with CAP_SYS_PTRACE may attach; "
                f"{ENABLE_HINT}.")
    return None


_DUMP_TIMEOUT_S = 20.0
"""How long :func:`check_target` waits for ``py-spy dump`` (it reads one stack of each thread;
tens of milliseconds on an idle host)."""


_PYTHON_VERSION = re.compile(r"^Python v(\S+)", re.MULTILINE)


def run_dump(py_spy: str, pid: int) -> tuple[int, str, str]:
    """``py-spy dump --nonblocking --pid PID``: ``(exit status, stdout, stderr)``. Never pauses
    the target (``--nonblocking``); raises ``OSError`` when py-spy cannot be run."""
    try:
        done = subprocess.run([py_spy, "dump", "--nonblocking", "--pid", str(pid)],
                              stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=_DUMP_TIMEOUT_S, preexec_fn=die_with_parent())
    except subprocess.TimeoutExpired:
        return 1, "", f"py-spy dump did not answer within {_DUMP_TIMEOUT_S:.0f} s"
    return (done.returncode, done.stdout.decode(errors="replace"),
            done.stderr.decode(errors="replace"))


def check_target(pid: int, py_spy: Optional[str] = None) -> tuple[Optional[str], Optional[str]]:
    """Whether py-spy can sample another process ``pid``: ``(problem, python_version)``.
    ``problem`` is ``None`` when it can, else one line naming what is wrong and how to allow
    it (py-spy missing, Yama's ``ptrace_scope``, permission denied, not a Python process, no
    such process); ``python_version`` is the target's (``"3.11.7"``) when py-spy read it.
    Runs one ``py-spy dump --nonblocking`` (:func:`run_dump`), which never pauses the target.
    ``py_spy``: the executable (default: :func:`find_py_spy`)."""
    py_spy = py_spy if py_spy is not None else find_py_spy()
    scope = ptrace_scope()
    reason = unavailable_reason(py_spy, scope, has_cap_sys_ptrace())
    if reason is not None:
        return f"cannot attach to PID {pid}: {reason}", None
    assert py_spy is not None  # unavailable_reason() names a missing py-spy
    try:
        code, out, err = run_dump(py_spy, pid)
    except OSError as error:
        return f"py-spy could not be run ({py_spy}): {error}", None
    if code == 0:
        found = _PYTHON_VERSION.search(out)
        return None, found.group(1) if found else None
    text = err.lower()
    detail = _py_spy_error(err) or f"exit status {code}"
    if "permission denied" in text or "operation not permitted" in text:
        yama = ("Yama is not enabled here, so a container or security module refuses it"
                if scope is None else
                f"with Yama, a process that is not the target's parent may attach only at "
                f"kernel.yama.ptrace_scope 0 (now {scope}; sysctl kernel.yama.ptrace_scope=0, "
                f"or write 0 to {PTRACE_SCOPE_PATH})")
        return (f"py-spy was denied access to PID {pid} ({detail}): run pipecheck as the "
                "target's user or as root with CAP_SYS_PTRACE (in Docker: docker run --cap-add "
                f"SYS_PTRACE); {yama}"), None
    if "python version" in text or "python interpreter" in text:
        return (f"PID {pid} is not a Python process: py-spy found no Python interpreter in it "
                f"({detail})"), None
    if "no such file" in text or "no such process" in text or "process is running" in text:
        return f"no process with PID {pid} (it may have exited)", None
    return f"py-spy cannot read PID {pid}: {detail}", None


def _py_spy_error(stderr: str) -> str:
    """py-spy's error message on one line: its ``Error:`` line and the distinct ``Caused by``
    lines, without the stack backtrace it prints after them (at most 300 characters)."""
    head = stderr.split("Stack backtrace:", 1)[0]
    lines = [line.strip() for line in head.splitlines() if line.strip()]
    message = next((line for line in lines if line.startswith("Error:")), "")
    causes: list[str] = []
    for line in lines:
        number, _, cause = line.partition(": ")
        if number.isdigit() and cause and cause not in causes:
            causes.append(cause)
    if causes:
        message = f"{message} ({'; '.join(causes)})" if message else "; ".join(causes)
    return (message or last_error_line(stderr))[:300]


def last_error_line(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or [""])[-1][:300]
