"""The gather at ``report()`` time and the merge at 16 ranks: torchrun on the CPU with gloo
(tests/support/dist_many.py), rank 5's loader deliberately slow. Sixteen Python processes
importing torch take about 30-60 s on 2 cores, so the test is marked slow."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from pipecheck.cli import main
from pipecheck.report import load
from paths import REPO_ROOT, SUPPORT

pytest.importorskip("torch.distributed.run")
if not __import__("torch.distributed").distributed.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

import dist_many  # noqa: E402  (the job's constants)

WORLD = int(os.environ.get("PIPECHECK_GATHER_WORLD", "16"))
"""Processes of the job (16; PIPECHECK_GATHER_WORLD=32 measures a larger world)."""


@pytest.mark.slow
def test_sixteen_ranks_gather_summaries_and_merge_with_the_straggler(tmp_path, capsys):
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT),
                                                         os.environ.get("PYTHONPATH")])))
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone",
         f"--nproc_per_node={WORLD}", str(SUPPORT / "dist_many.py"), str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    found = re.search(r"gather (\d+) ranks ([\d.]+) s, (\d+) bytes a summary; straggler (\d+)",
                      done.stdout)
    assert found, done.stdout
    ranks, seconds, size, straggler = found.groups()
    assert int(ranks) == WORLD and int(straggler) == dist_many.SLOW_RANK
    assert int(size) < 2_000  # a summary, not a report
    assert float(seconds) < 10.0
    with capsys.disabled():  # the measured cost, shown with -s
        print(f"\ngather of {WORLD} summaries: {float(seconds) * 1e3:.1f} ms, "
              f"{float(seconds) / WORLD * 1e3:.2f} ms and {size} bytes a rank")

    gathered = load(tmp_path / "run.rank0.json").ranks  # rank 0's report() gathered them all
    assert [r.rank for r in gathered.ranks] == list(range(WORLD)) and not gathered.missing
    assert gathered.straggler == dist_many.SLOW_RANK
    assert {r.source for r in gathered.ranks if r.rank} == {"gathered"}

    files = sorted(str(p) for p in tmp_path.glob("run.rank*.json"))
    assert len(files) == WORLD
    assert main(["report", *files, "--width", "100", "--json", str(tmp_path / "m.json")]) == 0
    text = capsys.readouterr().out
    assert text.count("\n") <= 60
    assert f"straggler: rank {dist_many.SLOW_RANK}" in text
    assert f"Straggler: rank {dist_many.SLOW_RANK}" in text
    merged = load(tmp_path / "m.json")
    assert merged.rank.rank == dist_many.SLOW_RANK
    assert merged.ranks.shape.scope == "rank"  # one host: one node, one slow rank
    assert merged.ranks.shape.slowest_ranks[0] == dist_many.SLOW_RANK
    assert [f.kind for f in merged.diagnosis.findings][0] == "straggler-rank"
