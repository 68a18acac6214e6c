"""``pipecheck run``'s report names (:mod:`pipecheck.run_files`): a name is claimed with
``O_EXCL``, so two processes with one pid never share a report file."""

from __future__ import annotations

import os

import pytest

from pipecheck.rank_files import rank_path
from pipecheck.run_files import MAX_CLAIMS, ReportName, claim_report_path, parse


def test_a_reused_pid_claims_the_next_free_name(tmp_path):
    first = claim_report_path(str(tmp_path), 0, pid=4242)
    second = claim_report_path(str(tmp_path), 0, pid=4242)  # the same pid, later in the run
    third = claim_report_path(str(tmp_path), 0, pid=4242)
    assert [os.path.basename(p) for p in (first, second, third)] == [
        "loader0.p4242.json", "loader0.p4242.1.json", "loader0.p4242.2.json"]
    assert all(os.path.getsize(p) == 0 for p in (first, second, third))  # placeholders
    assert os.path.basename(claim_report_path(str(tmp_path), 1, pid=4242)) == "loader1.p4242.json"


def test_names_parse_back_with_their_rank_files():
    assert parse("loader3.p17.json") == ReportName(index=3, pid=17, claim=0, rank=None)
    assert parse("loader3.p17.2.json") == ReportName(index=3, pid=17, claim=2, rank=None)
    ranked = parse(rank_path("loader3.p17.2.json", 5).name)  # what a rank's save writes
    assert ranked == ReportName(index=3, pid=17, claim=2, rank=5)
    assert ranked.claimed == "loader3.p17.2.json"
    for other in ("run.json", "loader.p1.json", "loader1.p1.json.tmp", ".loader1.p1.json.9.tmp",
                  "loader1.p1.rank.json", "loader1.p-1.json"):
        assert parse(other) is None, other


def test_claims_run_out_with_a_clear_error(tmp_path):
    for claim in range(MAX_CLAIMS):
        (tmp_path / (f"loader0.p9.{claim}.json" if claim else "loader0.p9.json")).touch()
    with pytest.raises(FileExistsError, match="report names for loader 0 of pid 9"):
        claim_report_path(str(tmp_path), 0, pid=9)


def test_a_planted_symlink_is_not_followed(tmp_path):
    target = tmp_path / "elsewhere.txt"
    target.write_text("keep")
    os.symlink(target, tmp_path / "loader0.p5.json")
    path = claim_report_path(str(tmp_path), 0, pid=5)
    assert os.path.basename(path) == "loader0.p5.1.json"
    assert target.read_text() == "keep"
