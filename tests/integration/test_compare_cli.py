"""A later run compared with an earlier report of the same script: ``pipecheck report --compare
OLD NEW`` and the automatic comparison of ``wrap(save=PATH)`` and ``pipecheck run --json PATH``,
through real subprocesses running a real tiny DataLoader.

The earlier run: ``num_workers=0`` and a 2 ms step (the loop waits for 8 ms of loading per
batch: a high stall, fast). The later run: ``num_workers=1`` and a 30 ms step: the stall falls
because the step slowed, and samples/s falls about 4x. The comparison must say throughput
fell."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cli_helpers import error_line
from paths import REPO_ROOT
from report_factory import sample_report

from pipecheck.cli import main
from pipecheck.records import RankInfo, RanksSummary
from pipecheck.report import load

TRAIN = textwrap.dedent("""
    import sys, time
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Slow(Dataset):
        def __len__(self):
            return 96

        def __getitem__(self, index):
            time.sleep(0.002)  # 8 ms a batch of 4
            return torch.tensor([index])

    def main():
        workers, step_s, save = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
        loader = DataLoader(Slow(), batch_size=4, num_workers=workers)
        if save != "-":
            import pipecheck
            loader = pipecheck.wrap(loader, save=save)
        for epoch in range(2):
            for batch in loader:
                time.sleep(step_s)
        if save != "-":
            print(loader.report().render(width=200), flush=True)
        sys.exit(0)

    if __name__ == "__main__":
        main()
""")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p), "COLUMNS": "200"}


def _python(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=_env(),
                          timeout=240, cwd=cwd)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """``old.json`` (0 workers, 2 ms step) and ``auto.json``: the later run (1 worker, 30 ms
    step) saved by ``wrap(save=)`` over a copy of the earlier one; ``later.out`` its stdout."""
    folder = tmp_path_factory.mktemp("compare")
    (folder / "train.py").write_text(TRAIN)
    first = _python("train.py", "0", "0.002", "auto.json", cwd=folder)
    assert first.returncode == 0, first.stderr
    assert load(folder / "auto.json").comparison is None  # nothing was there before
    shutil.copy(folder / "auto.json", folder / "old.json")
    later = _python("train.py", "1", "0.03", "auto.json", cwd=folder)
    assert later.returncode == 0, later.stderr
    (folder / "later.out").write_text(later.stdout)
    return folder


@pytest.mark.slow  # two real training runs (the module's fixture), about 10 s
def test_report_compare_says_throughput_fell_although_the_stall_fell(runs):
    old, new = load(runs / "old.json"), load(runs / "auto.json")
    assert new.consumer.samples_per_s < old.consumer.samples_per_s
    done = _python("-m", "pipecheck", "report", "--compare", "old.json", "auto.json",
                   "--width", "200", cwd=runs)
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    assert first.startswith("THROUGHPUT FELL "), done.stdout
    assert "samples/s -> " in first and "beyond the runs' own noise" in first
    assert "the data stall fell (" in first and "only because the step slowed" in first
    assert "Compared with the earlier report" in done.stdout
    assert "num_workers" in done.stdout and "steady step" in done.stdout
    assert done.stderr == ""


@pytest.mark.slow  # two real training runs (the module's fixture), about 10 s
def test_report_compare_json_and_markdown(runs, tmp_path):
    out = tmp_path / "compared.json"
    done = _python("-m", "pipecheck", "report", "--compare", "old.json", "auto.json",
                   "--json", str(out), "--markdown", cwd=runs)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("**THROUGHPUT FELL ")
    assert "| throughput |" in done.stdout
    data = json.loads(out.read_text())
    comparison = data["comparison"]
    assert comparison["status"] == "compared" and comparison["verdict"] == "fell"
    assert comparison["old_path"] == "old.json"
    assert comparison["beyond_noise"] is True
    assert {"name": "num_workers", "old": 0, "new": 1} in comparison["settings"]
    assert [f["name"] for f in comparison["figures"]][:2] == ["samples_per_s", "batches_per_s"]


@pytest.mark.slow  # two real training runs (the module's fixture), about 10 s
def test_wrap_save_keeps_the_comparison_with_the_report_it_replaced(runs):
    report = load(runs / "auto.json")
    assert report.comparison is not None
    assert report.comparison.status == "compared" and report.comparison.verdict == "fell"
    assert report.comparison.old_path == "auto.json"
    assert report.comparison.old_created == load(runs / "old.json").created
    summary = (runs / "later.out").read_text()
    assert "THROUGHPUT FELL " in summary  # the one-line verdict in the terminal summary
    assert summary.index("THROUGHPUT FELL ") < summary.index("Changes that matter\n")


@pytest.mark.slow
@pytest.mark.slow  # two real training runs (the module's fixture), about 10 s
def test_an_unreadable_earlier_file_is_a_note_never_an_error(runs, tmp_path):
    shutil.copy(runs / "train.py", tmp_path / "train.py")
    (tmp_path / "garbage.json").write_text("not a report\n")
    done = _python("train.py", "0", "0.002", "garbage.json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    comparison = load(tmp_path / "garbage.json").comparison
    assert comparison.status == "not-compared"
    assert "could not be read" in comparison.note and "not JSON" in comparison.note
    assert "not compared with the earlier report garbage.json" in done.stdout


@pytest.mark.slow
@pytest.mark.slow  # two real training runs (the module's fixture), about 10 s
def test_pipecheck_run_json_compares_with_the_report_it_replaces(runs, tmp_path):
    shutil.copy(runs / "train.py", tmp_path / "train.py")
    shutil.copy(runs / "old.json", tmp_path / "run.json")
    done = _python("-m", "pipecheck", "run", "--json", "run.json", "--width", "200", "--",
                   sys.executable, "train.py", "1", "0.03", "-", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    comparison = load(tmp_path / "run.json").comparison
    assert comparison.status == "compared" and comparison.verdict == "fell"
    assert "THROUGHPUT FELL " in done.stdout


# -- bad input: one line, exit 2 (in process) -------------------------------------------------


@pytest.fixture
def two(tmp_path):
    return (sample_report().save(tmp_path / "a.json"),
            sample_report().save(tmp_path / "b.json"))


def test_compare_of_equal_reports_is_no_measurable_change(two, capsys):
    assert main(["report", "--compare", str(two[0]), str(two[1]), "--width", "200"]) == 0
    assert capsys.readouterr().out.startswith("NO MEASURABLE CHANGE in throughput")


def test_compare_needs_two_reports(two, capsys):
    assert main(["report", "--compare", str(two[0])]) == 2
    assert error_line(capsys) == ("pipecheck: error: --compare takes two reports, OLD.json "
                                  "NEW.json; got 1")


def test_compare_with_a_missing_file(two, tmp_path, capsys):
    assert main(["report", "--compare", str(two[0]), str(tmp_path / "nope.json")]) == 2
    assert error_line(capsys) == f"pipecheck: error: no such report file: {tmp_path / 'nope.json'}"


def test_compare_with_a_file_that_is_not_a_report(two, tmp_path, capsys):
    other = tmp_path / "other.json"
    other.write_text('{"hello": 1}')
    assert main(["report", "--compare", str(other), str(two[1])]) == 2
    assert error_line(capsys) == (f"pipecheck: error: {other}: not a pipecheck report: it has "
                                  "no 'schema' key")


def test_compare_with_a_merged_rank_report(two, tmp_path, capsys):
    merged = sample_report(rank=RankInfo(rank=0, world_size=2), ranks=RanksSummary(
        world_size=2, ranks=[], straggler=None, missing=[], samples_per_s=None))
    path = merged.save(tmp_path / "merged.json", per_rank=False)
    assert main(["report", "--compare", str(path), str(two[1])]) == 2
    assert error_line(capsys) == (f"pipecheck: error: {path} is a merged multi-rank report; "
                                  "--compare takes one rank's file of each run (run.rank0.json)")


def test_compare_of_two_ranks_of_one_run(tmp_path, capsys):
    paths = [sample_report(rank=RankInfo(rank=r, world_size=2)).save(tmp_path / "run.json")
             for r in (0, 1)]
    assert [p.name for p in paths] == ["run.rank0.json", "run.rank1.json"]
    assert main(["report", "--compare", *map(str, paths)]) == 2
    assert error_line(capsys) == (
        f"pipecheck: error: {paths[0]} and {paths[1]} are two ranks of one torch.distributed "
        "run (pipecheck report merges them); --compare takes one rank's file of each of two "
        "runs")
