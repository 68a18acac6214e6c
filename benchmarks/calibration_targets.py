"""``pipecheck stress`` targets for the calibration suite's pipelines (``benchmarks/pipelines.py``),
so the suite can run the measurement a report names where its figure is uncertain.

Which pipeline, and where its files are, come from the environment (a stress trial imports this
file in a child process, which inherits it): :data:`PIPELINE_ENV` names the pipeline and
:data:`DATA_ENV` the folder its ``prepare`` filled (unset for pipelines without files).

* ``loader(**settings)``: the pipeline's DataLoader as the suite builds it
  (:func:`pipelines.loader_with`: batches of 64, shuffled unless iterable) with the DataLoader
  keywords stress passes;
* ``step(batch)``: one step of the pipeline's own training step (``Pipeline.model``), created
  on the first call in each process.

    PIPECHECK_CALIBRATION_PIPELINE=torchops pipecheck stress \\
        benchmarks/calibration_targets.py:loader --step benchmarks/calibration_targets.py:step
"""

from __future__ import annotations

import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pipelines import LOADER_KEYWORDS, PIPELINES, loader_with  # noqa: E402

PIPELINE_ENV = "PIPECHECK_CALIBRATION_PIPELINE"
"""Environment variable naming the pipeline (a key of :data:`pipelines.PIPELINES`)."""

DATA_ENV = "PIPECHECK_CALIBRATION_DATA"
"""Environment variable holding the pipeline's data folder, when it has files."""

_model: Any = None


def _pipeline() -> Any:
    name = os.environ.get(PIPELINE_ENV, "")
    if name not in PIPELINES:
        raise ValueError(f"{PIPELINE_ENV}={name!r} is not a calibration pipeline "
                         f"(one of {', '.join(PIPELINES)})")
    return PIPELINES[name]


def loader(num_workers: int = 0, prefetch_factor: Any = None,
           persistent_workers: bool = False, pin_memory: bool = False, **_: Any) -> Any:
    """The pipeline's DataLoader with these settings (``in_order`` and ``batch_size`` are left
    at the suite's: ignored)."""
    pipeline = _pipeline()
    settings = {"num_workers": num_workers, "prefetch_factor": prefetch_factor,
                "persistent_workers": persistent_workers, "pin_memory": pin_memory}
    dataset = pipeline.dataset(os.environ.get(DATA_ENV) or None)
    return loader_with(dataset, {k: v for k, v in settings.items() if k in LOADER_KEYWORDS},
                       pipeline.iterable)


def step(batch: Any) -> None:
    """One training step of the pipeline's model on ``batch``."""
    global _model
    if _model is None:
        _model = _pipeline().model()
    _model.step(batch)
