"""The short report by default and ``--verbose`` on every command that prints one; the figures
each output shows (short terminal view, ``--verbose``, markdown) agree with the JSON it came
from."""

from __future__ import annotations

import argparse
import json
import re

import pytest

from fake_pipeline import FakeRun, simulate
from pipecheck import units
from pipecheck.cli import build_parser, main
from pipecheck.effects import STEPS_PER_SAVING
from pipecheck.report import build_report

REPORT_COMMANDS = ("demo", "stress", "report", "run", "attach")
"""The subcommands that print a report."""


def _subparsers():
    parser = build_parser()
    (group,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return group.choices


@pytest.mark.parametrize("command", REPORT_COMMANDS)
def test_every_command_that_prints_a_report_takes_verbose(command):
    options = {o for action in _subparsers()[command]._actions for o in action.option_strings}
    assert "--verbose" in options


def test_report_is_short_by_default_and_whole_with_verbose(saved, capsys):
    assert main(["report", str(saved), "--width", "100"]) == 0
    short = capsys.readouterr().out
    assert main(["report", str(saved), "--width", "100", "--verbose"]) == 0
    whole = capsys.readouterr().out
    assert len(short.splitlines()) <= 40
    assert "Changes that matter" in short and "--verbose" in short.splitlines()[-2]
    for title in ("Throughput", "Data wait (stall)", "Producer vs consumer", "Host",
                  "Recommendations"):
        assert f"\n{title}\n" in whole and f"\n{title}\n" not in short


# -- every output's figures agree with the JSON ----------------------------------------------------

CHAINED = FakeRun(num_workers=1, production_s=0.1, step_s=0.05, epochs=3,
                  batches_per_epoch=40, startup_s=0.4, worker_cpu_fraction=0.05)
"""A latency-bound run that restarts its workers every epoch: more workers, then
persistent_workers, a chain of two changes."""


def _outputs(path, capsys):
    texts = {}
    for name, extra in (("short", []), ("verbose", ["--verbose"]), ("markdown", ["--markdown"])):
        assert main(["report", str(path), "--width", "200", *extra]) == 0
        texts[name] = " ".join(capsys.readouterr().out.split()).replace("\\_", "_")
    return texts


def test_every_output_states_the_json_figures(tmp_path, capsys):
    report = build_report(simulate(CHAINED))
    path = report.save(tmp_path / "run.json")
    data = json.loads(path.read_text(encoding="utf-8"))
    recs = data["recommendations"]
    assert [r["setting"] for r in recs][:2] == ["num_workers", "persistent_workers"]
    texts = _outputs(path, capsys)
    consumer = data["consumer"]
    judgement = data["diagnosis"]["judgement"]
    previous = {"gain": 0.0, "epoch": 0.0, "steps": 0.0}
    for rec in recs[:2]:
        expected = rec["expected"]
        # the JSON's own figures: per epoch and per 10,000 steps from the same seconds per step
        per_step = expected["saved_s_per_10k_steps"] / STEPS_PER_SAVING
        assert expected["saved_s_per_epoch"] == pytest.approx(
            per_step * data["loader"]["batches_per_epoch"])
        own = {"gain": expected["gain_samples_per_s"] - previous["gain"],
               "epoch": expected["saved_s_per_epoch"] - previous["epoch"],
               "steps": expected["saved_s_per_10k_steps"] - previous["steps"]}
        line = (f"+{units.rate(own['gain'], 'samples')} this change")
        saving = (f"saves {units.seconds(own['epoch'])} per epoch, "
                  f"{units.seconds(own['steps'])} per 10,000 steps")
        for name, text in texts.items():
            assert line in text, (name, line)
            assert saving in text, (name, saving)
        if previous["gain"]:  # a later change of the chain names the total too
            total = f"+{units.rate(expected['gain_samples_per_s'], 'samples')} with the changes above"
            for name, text in texts.items():
                assert total in text, (name, total)
        previous = {"gain": expected["gain_samples_per_s"], "epoch": expected["saved_s_per_epoch"],
                    "steps": expected["saved_s_per_10k_steps"]}
    ratio = f"{judgement['capacity_demand_ratio']:.2f}x"
    for name, text in texts.items():
        assert units.rate(consumer["samples_per_s"], "samples") in text, name
        assert units.percent(consumer["stall_fraction"]) in text, name
        assert ratio in text, name
        assert units.rate(consumer["demand_batches_per_s"], "batches") in text, name


def test_the_shares_of_a_chain_add_up_to_its_total(tmp_path, capsys):
    report = build_report(simulate(CHAINED))
    path = report.save(tmp_path / "run.json")
    short = _outputs(path, capsys)["short"]
    shares = [_seconds(s) for s in re.findall(r"saves (.+?) per epoch", short)]
    total = report.recommendations[1].expected.saved_s_per_epoch
    assert len(shares) >= 2
    assert sum(shares[:2]) == pytest.approx(total, rel=0.02)


def _seconds(text):
    minutes = re.fullmatch(r"(\d+) min (\d+) s", text)
    if minutes:
        return 60 * int(minutes.group(1)) + int(minutes.group(2))
    value, unit = text.split()
    return float(value.replace(",", "")) * {"s": 1, "ms": 1e-3}[unit]
