"""Terminal escape injection: control characters and rich markup in every user-derived string
of a report reach the terminal and markdown as visible text, never as sequences a terminal
acts on. The CLI runs as a real subprocess."""

from __future__ import annotations

import dataclasses
import io
import json
import re
import subprocess
import sys

import pytest
import webdataset as wds
from rich.console import Console

from pipecheck.records import (DeviceRecord, HotFunction, RankInfo, RankSummary, RanksSummary,
                               StacksRecord, StageRow)
from pipecheck.render.terminal import render_terminal
from pipecheck.shards import shards
from full_reports import assert_no_forged_line, every_section_report, forged
from render_fixtures import hostile_report

EVIL = ("\x1b]52;c;ZXZpbA==\x07\x1b[2J\x1b[H\x1b]0;pwned\x07\x9b1;31m\x9d0;t\x9c\x90q\x9c"
        "\x08\r\x0b\x7f[bold]LIT[/bold]\u202e")
"""OSC 52 (clipboard write), clear screen and home, OSC 0 (window title), C1 CSI / OSC / DCS,
backspace, carriage return, vertical tab, DEL, rich markup and a bidi override."""

NAME_EVIL = EVIL.replace("/", "")
""":data:`EVIL` as part of a file name."""

CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
SGR = re.compile("\x1b\\[[0-9;]*m")
UNTOUCHED = {"schema", "kind"}


def _poison(value, key=None):
    """Every string in ``value`` (a report's JSON) with :data:`EVIL` inside it, and a hostile
    key added to each evidence object."""
    if isinstance(value, dict):
        out = {k: _poison(v, k) for k, v in value.items()}
        if key == "evidence":
            out[f"key{EVIL}"] = f"value{EVIL}"
        return out
    if isinstance(value, list):
        return [_poison(v) for v in value]
    if isinstance(value, str) and key not in UNTOUCHED:
        return f"{value}{EVIL}"
    return value


def _hostile_json(tmp_path) -> dict:
    """A report with stress, sharding (real shards with an OSC in their names), ranks, stages,
    stacks and GPU sections, every string poisoned."""
    urls = []
    for index in range(3):
        path = tmp_path / f"part\x1b]0;x\x07{index}.tar"  # brackets would be brace syntax
        with wds.TarWriter(str(path)) as writer:
            for j in range(4):
                writer.write({"__key__": f"s{index}_{j}", "txt": "x" * 20})
        urls.append(str(path))
    report = hostile_report()
    stacks = StacksRecord(status="ok", window_s=1.0, rate_hz=50, worker_samples=10,
                          main_wait={"queue-empty": 1.0}, stages={"decode": 1.0},
                          top=[HotFunction(function="decode", file="/src/d.py", line=1,
                                           fraction=0.5, stage="decode")],
                          main_top=[HotFunction(function="step", file="/src/t.py", line=2,
                                                fraction=0.5)], note="a note")
    device = DeviceRecord(status="ok", backend="torch.cuda", batches=3, idle_s=0.1,
                          idle_fraction=0.1, note="a note")
    summaries = [RankSummary(rank=r, batches=10, samples=40, wall_s=1.0, wait_s=0.1 * (r + 1),
                             compute_s=0.5, stall_fraction=0.2, samples_per_s=40.0,
                             wait_per_batch_s=0.01, verdict="input-bound", hostname="node",
                             source="file") for r in range(2)]
    producer = report.producer.__class__(**{**report.producer.__dict__, "stages": [
        StageRow(name="decode", where="workers", exclusive_s=1.0, fraction=1.0, samples_in=4,
                 samples_out=4, bytes_read=10, workers={"0": 0.5, "1": 0.5})]})
    report = dataclasses.replace(
        report, stacks=stacks, device=device, producer=producer,
        rank=RankInfo(rank=0, world_size=2, hostname="node", backend="gloo"),
        ranks=RanksSummary(world_size=2, ranks=summaries, straggler=1),
        sharding=shards(urls, num_workers=2, world_size=1, shuffle_buffer=1))
    return _poison(report.to_dict())


def _assert_inert(text: str, markup: str = "[bold]LIT[/bold]") -> None:
    found = sorted({hex(ord(c)) for c in CONTROL.findall(text)})
    assert not found, f"control characters reached the output: {found}"
    assert markup in text  # markup shown, not interpreted


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipecheck", *args], capture_output=True,
                          timeout=120, env=None)


def test_terminal_and_markdown_show_hostile_strings_inert(tmp_path):
    path = tmp_path / f"run{NAME_EVIL}.json"
    path.write_text(json.dumps(_hostile_json(tmp_path)), encoding="utf-8")
    for extra in ([], ["--verbose"], ["--markdown"]):
        done = _cli("report", str(path), "--width", "120", *extra)
        assert done.returncode == 0, done.stderr
        out = done.stdout.decode("utf-8")
        _assert_inert(out)
        assert "\\x1b]52;c;" in out  # shown as an escape, so the user sees something is off
        assert extra != ["--verbose"] or "Shard assignment" in out


def test_several_hostile_files_give_inert_headers_and_errors(tmp_path):
    data = _hostile_json(tmp_path)
    data["rank"] = data["ranks"] = None
    first, second = tmp_path / f"a{NAME_EVIL}.json", tmp_path / f"b{NAME_EVIL}.json"
    for path in (first, second):
        path.write_text(json.dumps(data), encoding="utf-8")
    done = _cli("report", str(first), str(second), "--width", "120")
    assert done.returncode == 0, done.stderr
    _assert_inert(done.stdout.decode("utf-8"))
    checked = _cli("check", str(first), str(second), "--max-stall", "0.01")
    assert checked.returncode == 1
    _assert_inert(checked.stdout.decode("utf-8") + checked.stderr.decode("utf-8"),
                  markup="[bold]LIT[bold]")  # the file names' markup
    missing = _cli("report", str(tmp_path / f"gone{NAME_EVIL}.json"))
    assert missing.returncode == 2
    err = missing.stderr.decode("utf-8")
    assert err.count("\n") == 1
    _assert_inert(err, markup="[bold]LIT[bold]")


def test_colour_output_has_only_rich_own_escape_codes(tmp_path):
    from pipecheck.report import Report

    report = Report.from_dict(_hostile_json(tmp_path))
    coloured = render_terminal(report, width=120, color=True)
    assert SGR.search(coloured)  # colour is on
    _assert_inert(SGR.sub("", coloured))
    buffer = io.StringIO()  # rich.print(report) on a console with markup on
    Console(file=buffer, width=120, force_terminal=True, color_system="standard").print(report)
    _assert_inert(SGR.sub("", buffer.getvalue()))


@pytest.mark.slow
def test_html_shows_control_and_bidi_characters_as_escapes(tmp_path):
    """A right-to-left override in a string would reverse the page's text (the verdict, the
    context line) in a browser: the page shows it as an escape, like the terminal does."""
    path = tmp_path / "run.json"
    path.write_text(json.dumps(_hostile_json(tmp_path)), encoding="utf-8")
    page_path = tmp_path / "run.html"
    done = _cli("report", str(path), "--html", str(page_path), "--quiet")
    assert done.returncode == 0, done.stderr
    page = page_path.read_text(encoding="utf-8")
    _assert_inert(page.replace("\n", " "))
    assert "\\u202e" in page and "\\x1b]52;c;" in page


@pytest.mark.slow
def test_the_cli_forges_no_line_from_a_separator_in_any_string_field(tmp_path):
    """Every string of a report with every section (found by walking its dataclasses) ends in
    a line separator and a fake verdict: ``pipecheck report`` and ``--markdown`` print each
    as one line with the separator shown as an escape."""
    report, planted = forged(every_section_report())
    path = report.save(tmp_path / "run.json", per_rank=False)
    for extra, markdown in (([], False), (["--markdown"], True)):
        done = _cli("report", str(path), "--width", "100", *extra)
        assert done.returncode == 0, done.stderr
        shown = assert_no_forged_line(done.stdout.decode("utf-8"), planted, markdown=markdown)
        assert "report.diagnosis.findings[0].message" in shown
