"""One render model for every format: the terminal, markdown and HTML show the same sections
with the same titles, one context line, and no rows without data."""

from __future__ import annotations

import html
import re

from pipecheck.records import (
    DeviceRecord,
    HotFunction,
    RankInfo,
    ShardingSection,
    ShardRank,
    ShardReader,
    StacksRecord,
    Timeline,
)
from pipecheck.render.base import Renderer
from pipecheck.render.formats import FILE_FORMATS, RENDERERS
from pipecheck.render.html import render_html
from pipecheck.render.markdown import render_markdown
from pipecheck.render.sections import build_document
from pipecheck.render.terminal import render_terminal
from report_factory import sample_report, stress_of

SHARDING = ShardingSection(
    shards=2, samples_total=8, counted_shards=2, world_size=1, world_size_source="given",
    num_workers=2, splitters={"chain": ["split_by_worker"]}, resampled=False,
    assignments=[ShardReader(rank=0, worker=0, shards=1, samples=4),
                 ShardReader(rank=0, worker=1, shards=1, samples=4)],
    ranks=[ShardRank(rank=0, samples=8, batches=None)], idle_fraction_at_epoch_end=None,
    findings=[], recommendations=[],
)


def _probed_report():
    """A report with every optional section a terminal shows (no chart data: fast to render)."""
    stacks = StacksRecord(status="ok", window_s=2.0, rate_hz=50, worker_samples=100,
                          main_wait={"queue-empty": 1.0}, main_wait_samples=20,
                          top=[HotFunction(function="decode", file="/src/d.py", line=3,
                                           fraction=0.5, inclusive_fraction=0.75)])
    device = DeviceRecord(status="ok", backend="torch.cuda", batches=3, idle_s=0.1,
                          idle_fraction=0.1)
    return sample_report(timeline=Timeline(), stacks=stacks, device=device, sharding=SHARDING,
                         rank=RankInfo(rank=1, world_size=2, hostname="node", backend="gloo"))


def test_every_format_shows_the_same_sections_under_the_same_titles():
    report = _probed_report()
    titles = [section.title for section in build_document(report).sections]
    assert titles == ["Throughput", "Data wait (stall)", "Producer vs consumer", "Host",
                      "Shard assignment", "Hot stacks (py-spy)", "GPU (CUDA events)", "Findings",
                      "Recommendations"]
    terminal = render_terminal(report, width=100, verbose=True).splitlines()
    assert [line for line in terminal if line in titles] == titles
    markdown = render_markdown(report).splitlines()
    assert [line[4:] for line in markdown if line.startswith("### ")] == titles
    page = render_html(report)
    # the page opens with the short view, then every section (collapsed)
    summary = [section.title for section in build_document(report).summary
               if section.key != "figures"]
    assert summary == ["Changes that matter", "Findings"]
    assert [html.unescape(t) for t in re.findall(r"<h2>(.*?)</h2>", page)] == summary + titles


def test_probe_sections_are_real_sections_in_html_not_key_value_dumps():
    page = render_html(_probed_report())
    outside_evidence = re.sub(r"<details>.*?</details>", "", page, flags=re.S)
    assert 'class="kv"' not in outside_evidence  # no generic key/value dump
    text = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", outside_evidence)).split())
    assert "GPU idle waiting for data 100 ms" in text
    assert "main thread in next(): queue-empty 100.0%" in text
    assert "50.0% 75.0% decode /src/d.py:3" in text
    assert "2 shards, 8 samples; world size 1 (given)" in text
    assert "note n/a" not in text and "batches n/a" not in text


def test_one_context_line_with_rank_dataset_and_platform_in_every_format():
    report = _probed_report()
    context = build_document(report).context
    assert context.startswith("wrap report, rank 1 of 2, 2024-05-01T12:00:00+00:00 · DataLoader")
    assert f"dataset {report.loader.dataset_type}" in context
    assert context.endswith(report.environment.platform)
    terminal = render_terminal(report, width=400, verbose=True).splitlines()
    assert terminal[1] == context
    # the short view's context: the kind, the loader type and its main settings, the machine
    brief = build_document(report).brief_context
    assert brief == ("wrap report, rank 1 of 2 · DataLoader num_workers=2 prefetch_factor=2 "
                     "batch_size=32 · 2 CPUs (2 usable), no CUDA")
    assert render_terminal(report, width=400).splitlines()[1] == brief
    assert f"<sub>{context}</sub>" in render_markdown(report).splitlines()
    assert f'<div class="context">{html.escape(context)}</div>' in render_html(report)


def test_candidates_without_a_figure_are_left_out_of_every_trial_table():
    trials = [{"config": {"num_workers": 2}, "samples_per_s": 120.0, "batches_per_s": 3.75,
               "stall_fraction": 0.3, "measured": True}]
    trials += [{"config": {"num_workers": n}, "samples_per_s": None, "batches_per_s": None,
                "stall_fraction": None, "measured": False} for n in range(3, 18)]
    report = sample_report(kind="stress", stress=stress_of({"trials": trials}), timeline=Timeline(),
                           host=None)
    markdown = render_markdown(report)
    page = re.sub(r"<[^>]+>", " ", render_html(report))
    terminal = render_terminal(report, width=100)
    for text in (markdown, page, terminal):
        rows = [" ".join(line.replace("|", " ").split()) for line in text.splitlines()]
        assert not any(row.endswith("n/a n/a n/a predicted") for row in rows)
        assert not any(row.endswith("predicted") for row in rows)
    assert "| 2 | 120 | 3.75 | 30.0% | measured |" in markdown


def test_formats_are_registered_by_name_and_the_file_formats_are_the_cli_options():
    assert set(RENDERERS) == {"terminal", "markdown", "html", "trace"}
    assert all(issubclass(cls, Renderer) and RENDERERS[cls.name] is cls
               for cls in RENDERERS.values())
    assert [cls.name for cls in FILE_FORMATS] == ["html", "trace"]
    report = sample_report(timeline=Timeline(), host=None)
    assert RENDERERS["markdown"]().render(report) == render_markdown(report)
