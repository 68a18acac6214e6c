"""The py-spy processes a pipecheck process started, found with psutil, and checks that they
are gone after it ended (dead, or a zombie nobody has reaped yet: not sampling)."""

from __future__ import annotations

import os
import time

import psutil


def py_spy_children(pid: int, count: int = 2, timeout_s: float = 60.0) -> list[psutil.Process]:
    """The first ``count`` py-spy children of ``pid`` (``py-spy record``), waiting up to
    ``timeout_s`` seconds for them to appear; fails when they do not."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            found = [child for child in psutil.Process(pid).children()
                     if child.name() == "py-spy" and "record" in child.cmdline()]
        except psutil.NoSuchProcess:
            found = []
        if len(found) >= count:
            return found[:count]
        assert time.monotonic() < deadline, f"no {count} py-spy children of {pid}: {found}"
        time.sleep(0.1)


def output_folder(children: list[psutil.Process]) -> str:
    """The folder py-spy writes into (its ``--output`` argument's directory), the same for all."""
    folders = set()
    for child in children:
        arguments = child.cmdline()
        folders.add(os.path.dirname(arguments[arguments.index("--output") + 1]))
    (folder,) = folders
    return folder


def sampling(process: psutil.Process) -> bool:
    """Whether ``process`` (the very process: pid and start time) still runs: not gone, and
    not a zombie (a zombie thread-group leader whose other threads still run, as a
    multi-threaded process's main thread is while they end, still counts as running)."""
    try:
        if not process.is_running():
            return False
        return process.status() != psutil.STATUS_ZOMBIE or process.num_threads() > 1
    except psutil.NoSuchProcess:
        return False


def wait_gone(processes: list[psutil.Process], timeout_s: float = 10.0) -> list[psutil.Process]:
    """Those of ``processes`` still sampling after up to ``timeout_s`` seconds (ideally none)."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = [p for p in processes if sampling(p)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)
