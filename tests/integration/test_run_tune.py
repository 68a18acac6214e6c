"""``pipecheck run --tune -- python script.py`` on a script that never imports pipecheck: the
DataLoader is tuned inside the program, the script's samples and order are its untuned ones,
and the report has a tune section."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import pipecheck

TRAIN = textwrap.dedent("""
    import json, sys, time
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Slow(Dataset):
        def __len__(self):
            return 400

        def __getitem__(self, index):
            time.sleep(0.002)
            return torch.tensor(index)

    if __name__ == "__main__":
        loader = DataLoader(Slow(), batch_size=4, shuffle=True,
                            generator=torch.Generator().manual_seed(5))
        order = [[int(i) for batch in loader for i in batch] for _ in range(2)]
        with open(sys.argv[1], "w") as out:
            json.dump(order, out)
""")


@pytest.mark.slow  # a real tuned run of a script (8 s); test_tune.py covers tuning itself
def test_run_tune_tunes_an_unmodified_script(tmp_path: Path):
    (tmp_path / "train.py").write_text(TRAIN)
    plain = subprocess.run([sys.executable, "train.py", "plain.json"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0, plain.stderr
    env = dict(os.environ, PIPECHECK_RUN_TUNE="min_batches=4,min_seconds=0,warmup_batches=1,"
                                              "budget_fraction=1")
    tuned = subprocess.run([sys.executable, "-m", "pipecheck", "run", "--tune", "--json",
                            "run.json", "--quiet", "--", sys.executable, "train.py",
                            "tuned.json"], cwd=tmp_path, capture_output=True, text=True,
                           timeout=240, env=env)
    assert tuned.returncode == 0, tuned.stderr
    assert json.loads((tmp_path / "tuned.json").read_text()) == \
        json.loads((tmp_path / "plain.json").read_text())
    report = pipecheck.load(tmp_path / "run.json")
    assert report.tune is not None and report.tune.status == "settled", report.tune
    assert [t.settings.num_workers for t in report.tune.trials][:2] == [0, 2]
    assert report.tune.pin_line.startswith("DataLoader(..., num_workers=")


@pytest.mark.slow  # the untuned run is the default run test_run_command covers
def test_run_without_tune_changes_nothing(tmp_path: Path):
    (tmp_path / "train.py").write_text(TRAIN)
    env = dict(os.environ, PIPECHECK_RUN_TUNE="1")  # inherited: not a request to tune
    result = subprocess.run([sys.executable, "-m", "pipecheck", "run", "--json", "run.json",
                             "--quiet", "--", sys.executable, "train.py", "out.json"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=240, env=env)
    assert result.returncode == 0, result.stderr
    assert pipecheck.load(tmp_path / "run.json").tune is None
