"""torch.distributed end to end: real ``torchrun --standalone --nproc_per_node=2`` jobs on the
CPU with gloo (tests/dist_train.py), rank 1's loader deliberately slow.

About 6 s per job on 2 cores (three Python processes importing torch); the straggler and kill
jobs run in the default suite, the gather-timeout job is marked slow."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from pipecheck.cli import main
from pipecheck.check import Thresholds, check
from pipecheck.merge import merge_reports
from pipecheck.report import load
from paths import REPO_ROOT, SUPPORT

pytest.importorskip("torch.distributed.run")
if not __import__("torch.distributed").distributed.is_available():
    pytest.skip("torch.distributed is not available in this torch build", allow_module_level=True)

SCRIPT = SUPPORT / "dist_train.py"
import dist_train  # noqa: E402  (the job's constants)


def _torchrun(out: pathlib.Path, mode: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT),
                                                         os.environ.get("PYTHONPATH")])))
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         str(SCRIPT), str(out), mode],
        env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def straggler_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("straggler")
    done = _torchrun(out, "straggler")
    assert done.returncode == 0, done.stdout + done.stderr
    return out, done


def test_each_rank_writes_its_own_file(straggler_run):
    out, _ = straggler_run
    assert sorted(p.name for p in out.iterdir()) == ["run.rank0.json", "run.rank1.json"]
    for rank in (0, 1):
        report = load(out / f"run.rank{rank}.json")
        assert (report.rank.rank, report.rank.world_size) == (rank, 2)
        assert report.consumer.batches == dist_train.STEPS


def test_rank_0_gathers_every_rank_and_names_the_straggler(straggler_run):
    out, done = straggler_run
    assert "straggler 1" in done.stdout
    ranks = load(out / "run.rank0.json").ranks
    assert [r.rank for r in ranks.ranks] == [0, 1] and ranks.missing == []
    assert ranks.ranks[1].source == "gathered"
    assert ranks.straggler == 1
    assert load(out / "run.rank1.json").ranks is None  # only rank 0 gathers


def test_merged_report_names_rank_1_as_the_straggler(straggler_run, tmp_path, capsys):
    out, _ = straggler_run
    files = sorted(str(p) for p in out.glob("run.rank*.json"))
    assert main(["report", *files, "--width", "120", "--json", str(tmp_path / "m.json")]) == 0
    text = capsys.readouterr().out
    assert "straggler: rank 1" in text and "Rank 1 is the straggler" in text
    merged = load(tmp_path / "m.json")
    assert merged.rank.rank == 1 and merged.ranks.straggler == 1
    (finding,) = [f for f in merged.diagnosis.findings if f.kind == "straggler-rank"]
    slow, fast = merged.ranks.ranks[1], merged.ranks.ranks[0]
    # rank 1 sleeps SLOW_SAMPLE_S per sample; rank 0's wait per step is far below that
    assert slow.wait_per_batch_s > dist_train.SLOW_SAMPLE_S * dist_train.BATCH_SIZE / 2
    assert fast.wait_per_batch_s < slow.wait_per_batch_s / 4
    assert finding.evidence["rank"] == 1
    assert finding.evidence["excess_fraction"] >= finding.evidence["threshold_fraction"]


def test_check_judges_the_merged_run_on_its_straggler(straggler_run, capsys):
    out, _ = straggler_run
    files = sorted(str(p) for p in out.glob("run.rank*.json"))
    assert main(["check", *files, "--max-stall", "0.5"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "on rank 1 (the straggler)" in err


@pytest.mark.slow
def test_a_killed_rank_leaves_the_survivors_report(tmp_path, capsys):
    done = _torchrun(tmp_path, "kill")
    assert done.returncode != 0  # the job failed: rank 1 died with SIGKILL
    assert not (tmp_path / "run.rank1.json").exists()
    survivor = load(tmp_path / "run.rank0.json")
    assert survivor.rank.rank == 0
    # rank 0 ran its steps up to the one rank 1 never joined
    assert dist_train.KILL_AFTER <= survivor.consumer.batches <= dist_train.KILL_AFTER + 1
    assert main(["report", str(tmp_path / "run.rank0.json")]) == 0
    assert "rank 0 of 2" in capsys.readouterr().out
    # A guard over the merged survivors does not pass: rank 1's figures are missing.
    merged = merge_reports([("run.rank0.json", survivor)])
    assert merged.ranks.missing == [1]
    first = check(merged, Thresholds(max_stall=0.99))[0]
    assert not first.passed and "rank(s) 1 of 2 sent no data" in first.line


@pytest.mark.slow
def test_a_rank_that_never_reports_is_listed_as_missing_after_the_timeout(tmp_path):
    done = _torchrun(tmp_path, "no-report")
    assert done.returncode == 0, done.stdout + done.stderr
    report = load(tmp_path / "run.rank0.json")
    assert report.ranks.missing == [1]
    kinds = {f.kind for f in report.diagnosis.findings}
    assert {"ranks-missing", "gather-failed"} <= kinds
    assert (tmp_path / "run.rank1.json").exists()  # saved at its exit all the same
