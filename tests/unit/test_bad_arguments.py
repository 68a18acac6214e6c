"""Every public entry point refuses a bad argument with one exception type,
``errors.BadArgumentError``: a ``ValueError`` (code that catches that keeps working) and a
``BadInputError`` (the CLI's one line and exit 2)."""

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import pipecheck
from pipecheck.autosave import AutoSave
from pipecheck.check import Thresholds
from pipecheck.distributed import gather_summaries
from pipecheck.errors import BadArgumentError, BadInputError
from pipecheck.integrations import callback_options
from pipecheck.tune import TuneLimits
from pipecheck.tune.controller import limits_from_text


def _loader():
    return DataLoader(TensorDataset(torch.arange(8)), batch_size=2)


CALLS = {
    "wrap host_interval_s": lambda tmp: pipecheck.wrap(_loader(), host_interval_s=0),
    "wrap stacks_rate_hz": lambda tmp: pipecheck.wrap(_loader(), stacks_rate_hz=-1),
    "wrap save into a missing folder": lambda tmp: pipecheck.wrap(
        _loader(), save=tmp / "missing" / "r.json"),
    "AutoSave.check_path": lambda tmp: AutoSave.check_path(tmp),
    "stress budget_s": lambda tmp: pipecheck.stress(_loader(), budget_s=0),
    "stress search": lambda tmp: pipecheck.stress(_loader(), search="random"),
    "TuneLimits min_batches": lambda tmp: TuneLimits(min_batches=1),
    "tune limits text": lambda tmp: limits_from_text("no_such_limit=3"),
    "Thresholds max_stall": lambda tmp: Thresholds(max_stall=2.0),
    "Thresholds none given": lambda tmp: Thresholds(),
    "callback gather timeout": lambda tmp: callback_options(None, 0),
    "gather timeout": lambda tmp: gather_summaries(None, timeout_s=0),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_bad_argument_is_one_type(name, tmp_path):
    with pytest.raises(BadArgumentError) as caught:
        CALLS[name](tmp_path)
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, BadInputError)
    message = str(caught.value)
    assert message and "\n" not in message
