"""CLI: in-process main([...]) for report/demo and the error paths, plus one real subprocess."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

import pipecheck.demo
from pipecheck.cli import EXIT_INTERNAL_ERROR, EXIT_INTERRUPTED, main
from pipecheck.report import load
from cli_helpers import error_line
from report_factory import sample_report
from paths import REPO_ROOT

VERDICT = ("INPUT-BOUND: the training loop waited for data 41.2% of the time (threshold 10%); "
           "data goodput 58.8%")


# -- report --------------------------------------------------------------------------------------


def test_report_renders_a_saved_report(saved, capsys):
    assert main(["report", str(saved), "--width", "100"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[0] == VERDICT
    assert "Changes that matter" in out and "num_workers" in out  # the short view
    assert err == ""


def test_report_json_writes_a_copy(saved, tmp_path, capsys):
    copy = tmp_path / "copy.json"
    assert main(["report", str(saved), "--json", str(copy), "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert out == "" and err == ""  # --quiet: no summary, no "saved" note
    assert load(copy) == load(saved)


def test_report_json_without_quiet_notes_the_file_on_stderr(saved, tmp_path, capsys):
    copy = tmp_path / "copy.json"
    assert main(["report", str(saved), "--json", str(copy)]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("INPUT-BOUND")
    assert err == f"pipecheck: report saved to {copy}\n"


def test_several_reports_each_get_a_header(saved, tmp_path, capsys):
    other = sample_report(kind="stress").save(tmp_path / "rank1.json")
    assert main(["report", str(saved), str(other), "--width", "100"]) == 0
    lines = capsys.readouterr().out.splitlines()
    headers = [i for i, line in enumerate(lines) if line.startswith("==> ")]
    assert [lines[i] for i in headers] == [f"==> {saved} <==", f"==> {other} <=="]
    assert lines[headers[0] + 1] == lines[headers[1] + 1] == VERDICT
    assert "stress report" in "\n".join(lines[headers[1]:])


def test_missing_file_is_exit_2_with_one_line(tmp_path, capsys):
    missing = tmp_path / "nope.json"
    assert main(["report", str(missing)]) == 2
    assert error_line(capsys) == f"pipecheck: error: no such report file: {missing}"


def test_non_json_is_exit_2(tmp_path, capsys):
    path = tmp_path / "run.json"
    path.write_text("this is not json\n")
    assert main(["report", str(path)]) == 2
    assert error_line(capsys).startswith(f"pipecheck: error: {path} is not JSON (")


def test_unknown_schema_is_exit_2(saved, capsys):
    data = json.loads(saved.read_text())
    data["schema"] = "pipecheck.report/9"
    saved.write_text(json.dumps(data))
    assert main(["report", str(saved)]) == 2
    assert error_line(capsys) == (
        f"pipecheck: error: {saved}: report schema 'pipecheck.report/9' is not supported; "
        "this pipecheck reads pipecheck.report/1"
    )


def test_one_bad_file_fails_before_anything_is_printed(saved, tmp_path, capsys):
    assert main(["report", str(saved), str(tmp_path / "missing.json")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "missing.json" in err


def test_debug_adds_the_traceback(tmp_path, capsys):
    assert main(["report", str(tmp_path / "nope.json"), "--debug"]) == 2
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err
    assert err.rstrip().splitlines()[-1].startswith("pipecheck: error: no such report file")


# -- usage errors and exit codes -----------------------------------------------------------------


@pytest.mark.parametrize("argv, message", [
    ([], "the following arguments are required: COMMAND"),
    (["report"], "the following arguments are required: RUN.json"),
    (["report", "x.json", "--width", "5"],
     "argument --width: must be from 20 to 1,000 columns, got '5'"),
    (["report", "x.json", "--pdf", "x.pdf"], "unrecognized arguments: --pdf x.pdf"),
    (["demo", "--workers", "two"], "argument --workers: expected an integer, got 'two'"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
])
def test_usage_errors_are_exit_2_with_one_line(argv, message, capsys):
    assert main(argv) == 2
    line = error_line(capsys)
    assert line.startswith("pipecheck: error: ") and message in line and "--help" in line


def test_json_with_several_reports_is_refused(saved, tmp_path, capsys):
    assert main(["report", str(saved), str(saved), "--json", str(tmp_path / "x.json")]) == 2
    assert "--json takes a single report" in error_line(capsys)


def test_help_and_version_exit_0(capsys):
    assert main(["--help"]) == 0
    assert "report" in capsys.readouterr().out
    assert main(["report", "--help"]) == 0
    assert "the straggler rank" in capsys.readouterr().out
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("pipecheck ")


def test_unexpected_error_is_one_line_with_a_hint(monkeypatch, capsys):
    def broken(**kwargs):
        raise RuntimeError("model exploded\nsecond line")

    monkeypatch.setattr(pipecheck.demo, "run_demo", broken)
    assert main(["demo"]) == EXIT_INTERNAL_ERROR == 3
    assert error_line(capsys) == (
        "pipecheck: internal error: RuntimeError: model exploded second line "
        "(run with --debug for the traceback)"
    )


def test_ctrl_c_is_exit_130(monkeypatch, capsys):
    def interrupted(**kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(pipecheck.demo, "run_demo", interrupted)
    assert main(["demo"]) == EXIT_INTERRUPTED == 130
    assert error_line(capsys) == "pipecheck: interrupted"


def test_closed_stdout_is_exit_141_without_noise(saved, monkeypatch, capsys):
    class ClosedPipe:
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            raise BrokenPipeError(32, "Broken pipe")

        def isatty(self):
            return False

    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert main(["report", str(saved), "--width", "100"]) == 141
    assert capsys.readouterr().err == ""


# -- demo argument parsing (the real demo is tested in its own module) -----------------------------


def _record_demo(monkeypatch):
    calls = []

    def fake_run_demo(**kwargs):
        calls.append(kwargs)
        return sample_report()

    monkeypatch.setattr(pipecheck.demo, "run_demo", fake_run_demo)
    return calls


def test_demo_passes_its_options(monkeypatch, tmp_path, capsys):
    calls = _record_demo(monkeypatch)
    out_json = tmp_path / "demo.json"
    argv = ["--debug", "demo", "--data", str(tmp_path), "--workers", "3", "--steps", "40",
            "--batch-size", "16", "--images", "512", "--no-progress", "--json", str(out_json),
            "--width", "100"]
    assert main(argv) == 0
    assert calls == [dict(data_dir=str(tmp_path), workers=3, steps=40, batch_size=16,
                          images=512, progress=False)]
    assert capsys.readouterr().out.splitlines()[0] == VERDICT
    assert load(out_json) == sample_report()


def test_demo_leaves_unset_options_to_run_demo(monkeypatch, capsys):
    calls = _record_demo(monkeypatch)
    assert main(["demo", "--quiet"]) == 0
    # --quiet also hides the progress bar; unset numbers keep run_demo's defaults.
    assert calls == [dict(data_dir=None, progress=False)]
    assert capsys.readouterr().out == ""


def test_demo_rejects_out_of_range_counts(monkeypatch, capsys):
    calls = _record_demo(monkeypatch)
    assert main(["demo", "--steps", "0"]) == 2
    assert "argument --steps: must be from 1 to 1,000,000,000 steps, got '0'" in error_line(capsys)
    assert calls == []


# -- the real entry point ------------------------------------------------------------------------


def test_python_dash_m_pipecheck_report(saved):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)}
    env.pop("NO_COLOR", None)
    done = subprocess.run(
        [sys.executable, "-m", "pipecheck", "report", str(saved), "--width", "100"],
        capture_output=True, text=True, env=env, timeout=120, cwd=saved.parent,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == VERDICT  # not a terminal: no colour codes
    assert done.stderr == ""

    missing = subprocess.run(
        [sys.executable, "-m", "pipecheck", "report", "missing.json"],
        capture_output=True, text=True, env=env, timeout=120, cwd=saved.parent,
    )
    assert missing.returncode == 2
    assert missing.stderr == "pipecheck: error: no such report file: missing.json\n"


# -- usage errors and help, through real subprocesses -----------------------------------------

SUBCOMMANDS = ("demo", "report", "check", "stress", "shards", "run", "attach")


def _cli(*argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p), "COLUMNS": "100"}
    return subprocess.run([sys.executable, "-m", "pipecheck", *argv], capture_output=True,
                          text=True, env=env, timeout=120, cwd=str(REPO_ROOT))


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_a_mistyped_option_points_to_the_subcommands_help(command):
    """``pipecheck demo --wokers 2`` pointed to ``pipecheck --help``."""
    # Each command's required arguments, whose absence would be the first error.
    extra = {"report": ["run.json"], "check": ["run.json"], "stress": ["target.py:make"],
             "shards": ["a.tar", "--workers", "1"], "attach": ["1"],
             "run": ["--", "true"]}.get(command, [])
    done = _cli(command, "--wokers=2", *extra)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == (f"pipecheck: error: unrecognized arguments: --wokers=2 "
                           f"(see 'pipecheck {command} --help')\n")


def test_a_mistyped_option_before_the_subcommand_points_to_the_top_help():
    done = _cli("--wokers", "demo")
    assert done.returncode == 2
    assert done.stderr.endswith("(see 'pipecheck --help')\n")


@pytest.mark.slow  # the default run stays under 5 minutes
def test_help_shows_plain_defaults_with_units():
    """Help showed internal names ("default 10: pipecheck.attach.DEFAULT_DURATION_S")."""
    from pipecheck.attach import ATTACH_RATE_HZ, DEFAULT_DURATION_S
    from pipecheck.run_process import GRACE_S
    from pipecheck.stress.settings import DEFAULT_TRIAL_S

    texts = {}
    for command in SUBCOMMANDS:
        done = _cli(command, "--help")
        assert done.returncode == 0, done.stderr
        texts[command] = " ".join(done.stdout.split())
        assert not re.search(r"pipecheck\.[\w.]*[A-Z_]{3,}", texts[command]), texts[command]
    assert f"(default {DEFAULT_DURATION_S:g} s," in texts["attach"]
    assert f"(default {ATTACH_RATE_HZ} Hz)" in texts["attach"]
    assert f"(default {GRACE_S:g} s)" in texts["run"]
    assert f"(default {DEFAULT_TRIAL_S:g} s," in texts["stress"]
    assert "(default 60 s," in texts["stress"] and "(default 30 s," in texts["stress"]
