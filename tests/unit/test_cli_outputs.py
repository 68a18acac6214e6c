"""CLI output options --html, --trace and --markdown on report, demo and stress (in-process
main([...]); demo and stress are replaced by a fake returning a ready report)."""

from __future__ import annotations

import json
import sys

import pytest

import pipecheck.demo
import pipecheck.stress  # noqa: F401 (the module: the package attribute is the function)
from pipecheck.cli import main
from pipecheck.render.html import render_html
from pipecheck.render.markdown import render_markdown
from pipecheck.render.trace import render_trace
from render_fixtures import stress_report
from cli_helpers import error_line
from report_factory import sample_report


def test_report_writes_html_and_trace_and_prints_markdown(saved, tmp_path, capsys):
    html_path, trace_path = tmp_path / "run.html", tmp_path / "run.trace.json"
    argv = ["report", str(saved), "--html", str(html_path), "--trace", str(trace_path),
            "--markdown"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    report = sample_report()
    assert out == render_markdown(report)  # markdown instead of the terminal summary
    assert err == (f"pipecheck: HTML report saved to {html_path}\n"
                   f"pipecheck: trace saved to {trace_path}\n")
    assert html_path.read_text(encoding="utf-8") == render_html(report)
    assert json.loads(trace_path.read_text(encoding="utf-8")) == json.loads(render_trace(report))


def test_quiet_silences_notes_but_not_asked_for_markdown(saved, tmp_path, capsys):
    assert main(["report", str(saved), "--trace", str(tmp_path / "t.json"), "--quiet"]) == 0
    assert capsys.readouterr() == ("", "")
    assert (tmp_path / "t.json").exists()
    assert main(["report", str(saved), "--markdown", "--quiet"]) == 0
    assert capsys.readouterr().out.startswith("**INPUT-BOUND")


@pytest.mark.parametrize("option", ["--html", "--trace"])
def test_bad_output_path_is_exit_2_with_one_line_before_any_work(option, saved, tmp_path,
                                                                  capsys):
    missing = tmp_path / "no" / "such" / "out"
    assert main(["report", str(saved), option, str(missing)]) == 2
    assert error_line(capsys) == (f"pipecheck: error: argument {option}: no such directory: "
                                   f"{missing.parent} (see 'pipecheck report --help')")
    assert main(["report", str(saved), option, str(tmp_path)]) == 2
    assert "is a directory, not a file" in error_line(capsys)


def test_several_reports_refuse_files_and_get_markdown_headings(saved, tmp_path, capsys):
    other = sample_report(kind="stress").save(tmp_path / "rank1.json")
    assert main(["report", str(saved), str(other), "--html", str(tmp_path / "x.html")]) == 2
    assert "--html takes a single report" in error_line(capsys)
    assert main(["report", str(saved), str(other), "--markdown"]) == 0
    headings = [s for s in capsys.readouterr().out.splitlines() if s.startswith("## ")]
    assert headings == [f"## {saved}", f"## {other}"]


@pytest.mark.slow
def test_demo_and_stress_take_the_output_options(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(pipecheck.demo, "run_demo", lambda **kwargs: sample_report())
    monkeypatch.setattr(sys.modules["pipecheck.stress"], "stress",
                        lambda *args, **kwargs: stress_report())
    demo_html = tmp_path / "demo.html"
    assert main(["demo", "--quiet", "--html", str(demo_html), "--markdown"]) == 0
    assert capsys.readouterr().out == render_markdown(sample_report())
    assert demo_html.read_text(encoding="utf-8") == render_html(sample_report())
    trace = tmp_path / "stress.trace.json"
    assert main(["stress", "targets.py:make", "--quiet", "--trace", str(trace),
                 "--markdown"]) == 0
    out = capsys.readouterr().out
    assert "### Stress sweep" in out
    assert json.loads(trace.read_text(encoding="utf-8"))["otherData"]["report_kind"] == "stress"
