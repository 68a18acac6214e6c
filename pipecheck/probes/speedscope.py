"""py-spy's samples read from its speedscope output (``py-spy record --format speedscope``).

How it works, and why: docs/internals.md (``pipecheck/probes/speedscope.py``).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any, NamedTuple, Optional


class Frame(NamedTuple):
    """One stack frame: the function's name (its qualified name on Python 3.11+), its file and
    its line (the function's first line with py-spy's ``--function``; ``None`` when py-spy
    gave none)."""

    function: str
    file: str
    line: Optional[int]


class SampledStack(NamedTuple):
    """``samples`` samples of one thread with the same stack. ``pid``: the sampled process
    (``None`` when py-spy named none: it sampled one process); ``thread_id``: the thread's id as
    py-spy gave it (the OS thread id on Linux, where the main thread's equals the pid; ``None``
    when unreadable); ``frames``: outermost first."""

    pid: Optional[int]
    thread_id: Optional[int]
    frames: tuple[Frame, ...]
    samples: int


_PROFILE_NAME = re.compile(r"^(?:Process (\d+) )?Thread (\S+)")


def read_speedscope(path: str) -> list[SampledStack]:
    """The stacks in py-spy's speedscope file ``path``, identical ones counted once per thread.
    Raises ``OSError`` when it cannot be read and ``ValueError`` (naming what is wrong) when it
    is not the JSON py-spy writes."""
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    return parse_speedscope(text)


def parse_speedscope(text: str) -> list[SampledStack]:
    """:func:`read_speedscope` on the file's text. Raises ``ValueError`` when ``text`` is not
    py-spy's speedscope JSON (an empty text included: py-spy wrote nothing)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"py-spy's output is not JSON ({error})") from None
    frames = _frames(_get(data, "shared", dict, "the file"))
    profiles = _get(data, "profiles", list, "the file")
    stacks: list[SampledStack] = []
    for index, profile in enumerate(profiles):
        where = f"profiles[{index}]"
        if not isinstance(profile, dict):
            raise ValueError(f"py-spy's output: {where} is not an object")
        pid, thread_id = _ids(_get(profile, "name", str, where), where)
        counts: Counter = Counter()
        for sample in _get(profile, "samples", list, where):
            try:
                counts[tuple(sample)] += 1
            except TypeError:  # not a list, or one holding lists or objects
                raise ValueError(f"py-spy's output: a sample of {where} is not a list of "
                                 "frame indices") from None
        for indices, samples in counts.items():
            if not all(type(i) is int and 0 <= i < len(frames) for i in indices):
                raise ValueError(f"py-spy's output: a sample of {where} names no known frame")
            stacks.append(SampledStack(pid, thread_id, tuple(frames[i] for i in indices),
                                       samples))
    return stacks


def _get(obj: dict, key: str, kind: type, where: str) -> Any:
    value = obj.get(key) if isinstance(obj, dict) else None
    if not isinstance(value, kind):
        raise ValueError(f"py-spy's output: {where} has no {key!r} {kind.__name__}")
    return value


def _frames(shared: dict) -> list[Frame]:
    out = []
    for index, frame in enumerate(_get(shared, "frames", list, "shared")):
        where = f"shared.frames[{index}]"
        name = _get(frame, "name", str, where)
        file = frame.get("file") or ""
        line = frame.get("line")
        if not isinstance(file, str) or not (line is None or (isinstance(line, int)
                                                              and not isinstance(line, bool))):
            raise ValueError(f"py-spy's output: {where} has a bad file or line")
        out.append(Frame(name, file, line))
    return out


def _ids(name: str, where: str) -> tuple[Optional[int], Optional[int]]:
    """``(pid, thread id)`` from a profile's name (``Process PID Thread TID "NAME"``)."""
    match = _PROFILE_NAME.match(name)
    if match is None:
        raise ValueError(f"py-spy's output: {where} is named {name[:80]!r}, not "
                         "'[Process PID ]Thread TID ...'")
    pid = int(match[1]) if match[1] is not None else None
    try:
        thread_id: Optional[int] = int(match[2], 0)
    except ValueError:
        thread_id = None
    return pid, thread_id
