"""Framework callbacks that measure the training dataloader where users train through a
framework rather than a bare loop:

* :mod:`pipecheck.integrations.lightning`: ``PipecheckCallback`` for ``lightning.pytorch``
  (or ``pytorch_lightning``) ``Trainer.fit``;
* :mod:`pipecheck.integrations.transformers`: ``PipecheckCallback`` for the Hugging Face
  ``Trainer``.

Each module imports its framework when it is imported itself; ``import pipecheck`` imports
neither. Install both with ``pip install -e ".[integrations]"`` in a checkout (the distribution
is ``torch-pipecheck``; PyPI's ``pipecheck`` is another project).
"""

from __future__ import annotations

import os
import pathlib
from typing import Optional

from pipecheck.errors import BadArgumentError


def callback_options(path: Optional[str | os.PathLike[str]], gather_timeout_s: float
                     ) -> tuple[Optional[pathlib.Path], float]:
    """The options both callbacks take, checked: the report path (``None``: not saved) and the
    rank-0 gather timeout in seconds. Raises :class:`~pipecheck.errors.BadArgumentError` (a
    ``ValueError``) unless the timeout is > 0."""
    if not gather_timeout_s > 0:
        raise BadArgumentError(f"gather_timeout_s must be > 0 seconds, got {gather_timeout_s!r}")
    return (pathlib.Path(path) if path is not None else None), gather_timeout_s
