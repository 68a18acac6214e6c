"""Per-rank report file names: every torch.distributed rank saves ``run.json`` as
``run.rank{N}.json``. A module of its own, below both :mod:`pipecheck.report` (which saves) and
:mod:`pipecheck.distributed` (which documents the scheme), so neither imports the other."""

from __future__ import annotations

import os
import pathlib
import re

_RANK_SUFFIX = re.compile(r"\.rank(\d+)$")


def rank_path(path: str | os.PathLike[str], rank: int) -> pathlib.Path:
    """The file rank ``rank`` (>= 0) saves to for ``path``: ``run.json`` -> ``run.rank1.json``,
    ``out/run`` -> ``out/run.rank1``. A path already naming this rank is kept as it is.
    Raises ``ValueError`` for a negative rank."""
    if rank < 0:
        raise ValueError(f"rank must be >= 0, got {rank}")
    target = pathlib.Path(path)
    suffix = target.suffix
    stem = target.name[: -len(suffix)] if suffix else target.name
    named = _RANK_SUFFIX.search(stem)
    if named is not None and int(named.group(1)) == rank:
        return target
    return target.with_name(f"{stem}.rank{rank}{suffix}")
