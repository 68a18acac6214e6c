"""Rendering cost is bounded: a report whose every list and map is thousands of entries long (a
runaway or hostile writer; the lists found by walking the report's dataclasses) renders to the
terminal and markdown at the size of one with a few hundred, each capped list saying how many
entries it left out. Timings are in ``benchmarks/render_large.py``, not here."""

from __future__ import annotations

import dataclasses

from pipecheck.render.markdown import render_markdown
from pipecheck.render.sections import ranks as ranks_section
from pipecheck.render.terminal import render_terminal
from pipecheck.render import trace
from full_reports import attach_report, every_section_report, inflate

COUNT = 2_000

SAID = ["... and 1,950 more findings (see the JSON)",
        "... and 1,980 more recommendations (see the JSON)",
        "... and 1,936 more workers (see the JSON)",
        "... and 1,936 more ranks (see the JSON)",
        "... and 1,994 more stages (see the JSON)",
        "... and 1,995 more functions (see the JSON)",
        "... and 1,980 more sharding findings (see the JSON)",
        "... and 1,980 more sharding recommendations (see the JSON)",
        "... and 1,800 more measured configurations (see the JSON)",
        "... and 1,980 more compared figures (see the JSON)",
        "... and 1,980 more changed settings (see the JSON)"]
"""What the capped lists of :func:`every_section_report` say at :data:`COUNT` entries."""


def test_every_capped_list_says_how_many_it_left_out(monkeypatch):
    # the every-rank table (--verbose, HTML) keeps 16,384 rows; its cap is tested at 64 here
    monkeypatch.setattr(ranks_section, "RANK_ROWS", 64)
    big = inflate(every_section_report(), COUNT)
    terminal = render_terminal(big, width=100, verbose=True)
    markdown = render_markdown(big)
    # The short view stays bounded whatever the report holds (this one has every optional
    # section, and its verdict line alone lists 2,000 thresholds, cut at 2,000 characters;
    # with 2,000 ranks it is the job summary).
    assert len(render_terminal(big, width=100).splitlines()) <= 60
    for said in SAID:
        assert said in terminal, said
        # markdown's full view leaves the every-rank table to --verbose and HTML
        assert said in markdown or "ranks" in said, said
    # Bounded: a few hundred rows at most, however long the report's lists.
    assert len(terminal) < 150_000 and len(markdown) < 150_000
    assert "and 1,984 more settings" in terminal  # a configuration of 2,000 settings


def test_a_job_of_thousands_of_ranks_shows_a_short_summary_without_verbose():
    big = inflate(every_section_report(), COUNT)
    assert len(big.ranks.ranks) == COUNT
    terminal = render_terminal(big, width=100)
    assert terminal.count("\n") <= 60 and "slowest" in terminal and "straggler" in terminal
    assert "--verbose" in terminal and "Findings" not in terminal
    assert "more ranks" not in terminal  # no per-rank table at all


def test_an_attach_report_caps_its_workers_and_lines():
    big = inflate(attach_report(), COUNT)
    terminal = render_terminal(big, width=100, verbose=True)
    assert "... and 1,936 more workers (see the JSON)" in terminal
    assert "... and 1,980 more lines (see the JSON)" in terminal
    assert len(terminal) < 60_000


def test_the_trace_thins_a_timeline_longer_than_any_pipecheck_writes(monkeypatch):
    assert trace.TRACE_ENTRIES > 32 * 1_024  # every timeline pipecheck writes stays whole
    monkeypatch.setattr(trace, "TRACE_ENTRIES", 1_000)  # the rule, at a size quick to test
    report = every_section_report()
    long = dataclasses.replace(report, timeline=inflate(report.timeline, 3_000))
    events = trace.trace_events(long)
    spans = [e for e in events["traceEvents"] if e.get("cat") == "data-wait"]
    assert len(spans) == 1_000
    assert events["otherData"]["thinned"]["batches"] == "1,000 of 3,000 entries"
    assert "thinned" not in trace.trace_events(report)["otherData"]
