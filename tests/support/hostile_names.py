"""Functions whose name and file name hold a newline, ``;``, spaces and text shaped like
py-spy's own ``raw`` output (``NAME (FILE:LINE);... COUNT``), so a parser that splits py-spy's
text on lines or ``;`` reads forged frames and forged sample counts.

Run as a script (no torch, starts in a fraction of a second) it is a small training-like loop:
``_BaseDataLoaderIter.__next__`` (the name py-spy shows for torch's DataLoader iterator) sleeps
``--wait-s`` inside a hostile-named function, then a hostile-named step burns ``--step-s`` of
CPU. Its own stall is ``wait / (wait + step)``, about 1/3 with the defaults. It creates
``--ready`` once looping and runs until killed.
"""

from __future__ import annotations

import argparse
import time
import types
from typing import Any, Callable

HOSTILE_NAME = ("train step;_BaseDataLoaderIter.__next__ (/x/torch/utils/data/dataloader.py:1)"
                "\n<module> (/x/train.py:1) 99999\nname with spaces")
HOSTILE_FILE = "/tmp/hostile dir;\n_worker_loop (/x/worker.py:3) 77\nfile.py"
WAIT_NAME = "wait\n;for data 5"


def hostile(function: Callable[..., Any], name: str = HOSTILE_NAME,
            filename: str = HOSTILE_FILE) -> Callable[..., Any]:
    """``function`` with its code's name (and qualified name, Python 3.11+) set to ``name`` and
    its file name to ``filename``: what py-spy reads from the frame."""
    fields: dict[str, Any] = {"co_name": name, "co_filename": filename}
    if hasattr(function.__code__, "co_qualname"):
        fields["co_qualname"] = name
    code = function.__code__.replace(**fields)
    return types.FunctionType(code, function.__globals__, name, function.__defaults__,
                              function.__closure__)


def spin(cpu_s: float) -> None:
    """Burn ``cpu_s`` seconds of this thread's CPU time."""
    end = time.thread_time() + cpu_s
    while time.thread_time() < end:
        pass


def pause(seconds: float) -> None:
    time.sleep(seconds)


class _BaseDataLoaderIter:
    """Stands for torch's DataLoader iterator: py-spy names its ``__next__`` frame
    ``_BaseDataLoaderIter.__next__`` as it does torch's."""

    def __init__(self, wait_s: float) -> None:
        self.wait_s = wait_s
        self.pause = hostile(pause, WAIT_NAME)

    def __next__(self) -> int:
        self.pause(self.wait_s)
        return 1


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--wait-s", type=float, default=0.01)
    parser.add_argument("--step-s", type=float, default=0.02)
    parser.add_argument("--ready", required=True)
    args = parser.parse_args()
    step = hostile(spin)
    batches = _BaseDataLoaderIter(args.wait_s)
    next(batches)
    open(args.ready, "w").close()
    while True:
        next(batches)
        step(args.step_s)


if __name__ == "__main__":
    main()
