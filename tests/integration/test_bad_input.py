"""Hostile and malformed input to the CLI: each gets one line on stderr and exit 2 (bad input),
never a hang, an out-of-memory kill or exit 3 (internal error). Real subprocesses, each bounded
in time and, where memory is at stake, in address space."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys

import pytest

from pipecheck.cli import main
from pipecheck.records import MAX_WORLD_SIZE, RankInfo
from pipecheck.report import MAX_REPORT_BYTES
from paths import SUPPORT
from report_factory import sample_report

MEMORY_LIMIT_BYTES = 3 * 1024**3
"""Address space each pipecheck run here may use: a run that tries to read /dev/zero whole or
build a list per rank of a world of 10**8 fails with MemoryError instead of exhausting the
shared machine (and exits 3, failing the test)."""


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))


def _pipecheck(*args: str) -> tuple[int, str]:
    done = subprocess.run([sys.executable, "-m", "pipecheck", *args], capture_output=True,
                          text=True, timeout=60, preexec_fn=_limit_memory)
    return done.returncode, done.stderr


def _one_error(code: int, err: str, *fragments: str) -> None:
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("pipecheck: error: "), err
    for fragment in fragments:
        assert fragment in err


def _saved(tmp_path, data: dict, name: str = "run.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "run.json"
    os.mkfifo(fifo)
    _one_error(*_pipecheck("report", str(fifo)), "is a FIFO (named pipe), not a report file")


def test_a_character_device_is_refused():
    _one_error(*_pipecheck("report", "/dev/zero"), "/dev/zero is a character device")


def test_a_file_over_the_size_limit_is_refused_naming_its_size(tmp_path):
    big = tmp_path / "big.json"
    with open(big, "wb") as handle:  # sparse: no disk used
        handle.truncate(MAX_REPORT_BYTES + 2**20)
    _one_error(*_pipecheck("report", str(big)), str(big),
               f"is {(MAX_REPORT_BYTES + 2**20) // 2**20} MiB, larger than the "
               f"{MAX_REPORT_BYTES // 2**20} MiB")


def test_deeply_nested_json_is_bad_input(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 200_000 + "]" * 200_000)
    _one_error(*_pipecheck("report", str(path)), "nested too deeply")


@pytest.mark.parametrize(("rank", "fragment"), [
    ({"rank": 5, "world_size": 2}, "rank 5 is outside world size 2"),
    ({"rank": 0, "world_size": 10**8}, f"world_size must be 1 to {MAX_WORLD_SIZE}"),
])
def test_ranks_outside_bounds_are_bad_input(tmp_path, rank, fragment):
    data = sample_report().to_dict()
    data["rank"] = rank
    other = dict(data, rank={"rank": 1, "world_size": rank["world_size"]})
    _one_error(*_pipecheck("report", _saved(tmp_path, data), _saved(tmp_path, other, "b.json")),
               fragment)


@pytest.mark.parametrize(("sharding", "fragment"), [
    ({"findings": [1]}, "report.sharding.findings[0] must be an object"),
    ({"ranks": 3}, "report.sharding.ranks must be a list"),
    ({"assignments": [{"rank": 0, "worker": 0, "shards": 1, "samples": "many"}]},
     "report.sharding.assignments[0].samples"),
])
def test_a_wrongly_typed_sharding_section_is_bad_input(tmp_path, sharding, fragment):
    data = sample_report().to_dict()
    valid = json.loads((SUPPORT / "old_reports" / "wrap_sharding.json").read_text())["sharding"]
    data["sharding"] = {**valid, **sharding}
    _one_error(*_pipecheck("report", _saved(tmp_path, data)), fragment)


@pytest.mark.parametrize(("path", "value", "fragment"), [
    (("consumer", "steady_stall_fraction"), -1.672, "must be a 0-1 fraction, got -1.672"),
    (("consumer", "stall_fraction"), 1.5, "must be a 0-1 fraction"),
    (("consumer", "wait_s"), -3.0, "report.consumer.wait_s must not be negative"),
    (("consumer", "batches"), -1, "report.consumer.batches must not be negative"),
    (("consumer", "samples_per_s"), -256.0, "must not be negative"),
    (("producer", "batch_time_s", "p99"), -0.2, "report.producer.batch_time_s.p99"),
    (("host", "processes", 0, "rss_max_bytes"), -1, "rss_max_bytes must not be negative"),
])
def test_out_of_range_numbers_are_rejected_naming_the_field(tmp_path, capsys, path, value,
                                                            fragment):
    data = sample_report().to_dict()
    where = data
    for key in path[:-1]:
        where = where[key]
    where[path[-1]] = value
    saved = _saved(tmp_path, data)
    # In this process: the field checks are the loader's; the real subprocess is the next test.
    for args in (["check", saved, "--max-stall", "0.5"], ["report", saved]):
        code = main(args)
        _one_error(code, capsys.readouterr().err, fragment)


def test_an_out_of_range_number_is_one_line_from_a_real_cli_process(tmp_path):
    data = sample_report().to_dict()
    data["consumer"]["wait_s"] = -3.0
    saved = _saved(tmp_path, data)
    _one_error(*_pipecheck("check", saved, "--max-stall", "0.5"),
               "report.consumer.wait_s must not be negative")
    _one_error(*_pipecheck("report", saved), "report.consumer.wait_s must not be negative")


def test_negative_worker_ids_and_memory_slopes_are_valid(tmp_path):
    data = sample_report().to_dict()
    data["producer"]["workers"][0]["id"] = -1  # the main process with num_workers=0
    data["producer"]["workers"][0]["memory_growth_bytes_per_s"] = -1000.0
    # CPU seconds per busy second: a worker running several threads goes past 1
    data["producer"]["workers"][0]["cpu_fraction"] = 1.54
    data["producer"]["cpu_fraction"] = 1.54
    code, err = _pipecheck("report", _saved(tmp_path, data))
    assert code == 0, err


@pytest.mark.parametrize(("url", "fragment"), [
    ("a-{000..003.tar", "unbalanced braces in shard URL 'a-{000..003.tar'"),
    pytest.param("a-000..003}.tar", "unbalanced braces", marks=pytest.mark.slow),
    pytest.param("a-{0..99999999999}.tar", "expand to more than 1,000,000 shards",
                 marks=pytest.mark.slow),
])
def test_bad_shard_patterns_are_bad_input(url, fragment):
    _one_error(*_pipecheck("shards", url, "--workers", "2"), fragment)


@pytest.mark.slow
def test_demo_data_pointing_at_a_file_is_bad_input(tmp_path):
    path = tmp_path / "not-a-folder"
    path.write_text("x")
    _one_error(*_pipecheck("demo", "--data", str(path), "--steps", "2", "--quiet"),
               f"demo data folder {path} is a file, not a folder")


# -- numbers JSON holds but Python cannot use: 1e999 is infinity ---------------------------------


def _with_infinity(tmp_path, name="run.json", rank=None) -> str:
    """A saved report whose consumer.samples_per_s is the JSON text 1e999 (infinity)."""
    data = sample_report().to_dict()
    if rank is not None:
        data["rank"] = {"rank": rank, "world_size": 2}
    data["consumer"]["samples_per_s"] = "__INFINITY__"
    path = tmp_path / name
    path.write_text(json.dumps(data).replace('"__INFINITY__"', "1e999"))
    return str(path)


INFINITY = "report.consumer.samples_per_s must be a finite number, got inf"


@pytest.mark.parametrize("args", [
    ("check", "{}", "--min-samples-per-s", "1e12"),  # passed as "n/a meets ..." before
    ("report", "{}", "--html", "{out}"),  # exit 3 before
])
def test_infinity_is_refused_naming_its_key(tmp_path, args):
    saved = _with_infinity(tmp_path)
    out = str(tmp_path / "out")
    _one_error(*_pipecheck(*(a.format(saved, out=out) for a in args)), INFINITY)
    assert not os.path.exists(out)


@pytest.mark.slow
@pytest.mark.parametrize("args", [
    ("report", "{}", "--trace", "{out}"),
    ("report", "{}", "--markdown"),
    ("report", "{}", "--json", "{out}"),
    ("report", "{rank0}", "{}"),  # merging rank files
    ("check", "{rank0}", "{}", "--max-stall", "0.5"),
])
def test_every_reader_refuses_infinity(tmp_path, args):
    saved = _with_infinity(tmp_path, "run.rank1.json", rank=1)
    rank0 = sample_report(rank=RankInfo(rank=0, world_size=2)).save(tmp_path / "run.json")
    out = str(tmp_path / "out")
    _one_error(*_pipecheck(*(a.format(saved, out=out, rank0=rank0) for a in args)), INFINITY)
