"""Online tuning, ``pipecheck.wrap(loader, tune=True)``: loader settings tried in the live run,
the best measured kept (issue 27).

* :mod:`pipecheck.tune.controller`: the trial schedule, window lengths, budget and choice
  (pure; the choice rule shared with ``pipecheck stress``, :mod:`pipecheck.analysis.choice`);
* :mod:`pipecheck.tune.switch`: the in-epoch switch of a map-style loader's iterator, same
  samples in the same order;
* :mod:`pipecheck.tune.guards`: the CPU budget, memory and split-by-worker checks;
* :mod:`pipecheck.tune.tuner`: the driver a :class:`pipecheck.measurement.Measurement` holds.

Imports nothing of pipecheck above :mod:`pipecheck.probes` and :mod:`pipecheck.analysis`.
"""

from pipecheck.tune.controller import TuneLimits

__all__ = ["TuneLimits"]
