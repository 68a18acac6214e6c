"""The child process of :func:`pipecheck.stress.isolate.check_target`: import a named target
and call it once (twice when the baseline differs), away from the pipecheck process.

Run as ``python -m pipecheck.stress.target_child REQUEST.json``. It appends one byte to the
``progress`` file beside the request once the interpreter is up (the parent's watchdog then
allows ``timeout_s`` for the rest) and writes ``result.json``: ``{"baseline": config or null}``
or ``{"error": one line}`` for a bad target. A target that hangs, exits or crashes leaves no
result; the parent says which.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from pipecheck.errors import BadInputError
from pipecheck.stress import _baseline
from pipecheck.loader_settings import LoaderSettings
from pipecheck.stress.target import call_factory, load_factory


def check(request: dict[str, Any]) -> dict[str, Any]:
    """Load and call the request's target; the result to write (see the module docstring)."""
    target = request["target"]
    config = LoaderSettings.from_dict(request["config"])
    try:
        factory = load_factory(target)
        call_factory(factory, config, name=target)
        first = None
        if request["derive_baseline"]:
            first = _baseline(request["baseline"], factory, config)
            if first is not None and first != config:
                call_factory(factory, first, name=target)
    except BadInputError as err:
        return {"error": str(err)}
    return {"baseline": first.to_dict() if first is not None else None}


def _child(request_path: str) -> int:
    with open(request_path, encoding="utf-8") as handle:
        request = json.load(handle)
    folder = os.path.dirname(request_path)
    with open(os.path.join(folder, "progress"), "ab", buffering=0) as progress:
        progress.write(b"s")
    for entry in reversed(request["sys_path"]):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    result = check(request)
    temp = os.path.join(folder, "result.json.tmp")
    with open(temp, "w", encoding="utf-8") as handle:
        json.dump(result, handle)
    os.replace(temp, os.path.join(folder, "result.json"))
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1]))
