"""HTML report: sections and numbers, inline SVG charts, escaping of user strings, no external
references, generic rendering of sections this renderer does not know, and save_html."""

from __future__ import annotations

import dataclasses
import html
import re
from html.parser import HTMLParser
from typing import Any, Optional

import pytest

from pipecheck.errors import BadInputError
from pipecheck.records import BatchTiming, StageRow, Timeline, WorkerBatch
from pipecheck.render.html import CONTENT_SECURITY_POLICY, render_html
from pipecheck.report import Report
from render_fixtures import SCRIPT, hostile_report, real_report, stress_report
from report_factory import sample_report


class _Page(HTMLParser):
    """Collects tags, attributes and text of a page (the standard library's HTML tokenizer)."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, Optional[str]]]] = []
        self.text: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, Optional[str]]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def count(self, tag: str) -> int:
        return sum(1 for name, _ in self.tags if name == tag)

    def visible_text(self) -> str:
        return " ".join(" ".join(self.text).split())


def _headings(page: _Page, source: str) -> list[str]:
    return [html.unescape(m) for m in re.findall(r"<h2>(.*?)</h2>", source)]


def test_sections_numbers_and_charts_of_a_stress_report():
    text = render_html(stress_report())
    page = _Page(text)
    assert text.startswith("<!DOCTYPE html>")
    # the short view open first (the cards hold the key figures), then every section,
    # collapsed: <details> the reader opens, no script
    assert _headings(page, text) == [
        "Changes that matter", "Findings",
        "Throughput", "Data wait (stall)", "Producer vs consumer", "Host", "Findings",
        "Recommendations", "Stress sweep"]
    assert text.count('<details class="section">') == 7
    words = page.visible_text()
    assert ("INPUT-BOUND: the training loop waited for data 41.2% of the time (threshold 10%)"
            in words)
    for number in ("256 samples/s", "41.2%", "13.6 batches/s", "9.50 batches/s", "0.70x",
                   "1.20 s", "410 samples/s", "6.0%", "capped by 2 usable CPUs"):
        assert number in words, number
    # step timeline, rates, workers, CPU, IO, memory, stress search
    assert page.count("svg") == 7
    assert "num_workers=3 prefetch_factor=2" in words and "ValueError: corrupt sample 7" in words
    assert "3.33x" in words and "skipped (budget spent):" in words
    assert "epoch start:" in words and "2.10 s longer" in words


def test_each_chart_is_inline_svg_with_drawn_content():
    text = render_html(stress_report())
    svgs = re.findall(r"<svg\b.*?</svg>", text, flags=re.S)
    assert len(svgs) == 7
    for svg in svgs:
        assert 'viewBox="' in svg
        assert len(re.findall(r"<path\b", svg)) > 5  # axes, ticks and the data itself
        assert "<?xml" not in svg and "<!DOCTYPE" not in svg
    # ids are unique in the page, and every reference points at an id of the same page
    ids = re.findall(r'\bid="([^"]+)"', text)
    assert len(ids) == len(set(ids))
    references = set(re.findall(r'(?:url\(#|href="#)([^)"]+)', text))
    assert references and references <= set(ids)


def test_every_user_string_is_escaped():
    text = render_html(hostile_report())
    assert "<script" not in text.lower()
    page = _Page(text)
    assert page.count("script") == 0
    words = page.visible_text()
    assert f"MyLoader{SCRIPT}" in words  # the loader type, shown as text
    assert f"<MyDataset {SCRIPT} at 0x7f>" in words  # the dataset repr
    assert f"ValueError: bad sample {SCRIPT}" in words  # the run's exception text
    assert f"sample {SCRIPT} slow" in words and f"because {SCRIPT} & more" in words
    assert f"prefetch_factor={SCRIPT!r}" in words  # a stress config value
    assert f"RuntimeError: {SCRIPT}" in words  # a trial's error
    assert f"/data/{SCRIPT}.tar" in words  # a path in a finding's evidence


def test_markup_in_chart_labels_is_escaped_by_the_svg_writer():
    # A stress config value lands in the stress chart's tick labels (no num_workers axis).
    report = hostile_report()
    assert report.stress is not None
    stress = dataclasses.replace(report.stress, trials=[
        dataclasses.replace(t, config={"batch_size": f"{SCRIPT}$x$", "num_workers": None})
        for t in report.stress.trials[:2]])
    text = render_html(dataclasses.replace(report, stress=stress))
    stress_svg = re.findall(r"<svg\b.*?</svg>", text, flags=re.S)[-1]
    assert "&lt;script&gt;" in stress_svg and "<script" not in stress_svg
    assert "$x$" in html.unescape(stress_svg)  # shown literally, not parsed as mathtext


def test_nothing_is_fetched_and_no_script_may_run():
    text = render_html(real_report())
    page = _Page(text)
    policy = [attrs for tag, attrs in page.tags if tag == "meta"
              and attrs.get("http-equiv") == "Content-Security-Policy"]
    assert policy and policy[0]["content"] == CONTENT_SECURITY_POLICY
    for tag, attrs in page.tags:
        for name in ("src", "href", "xlink:href", "action"):
            value = attrs.get(name)
            assert value is None or value.startswith(("#", "data:")), (tag, name, value)
    assert "url(http" not in text and "@import" not in text


def test_a_real_report_renders_every_chart():
    report = real_report()
    assert report.producer.workers and report.timeline.host
    page = _Page(render_html(report))
    assert page.count("svg") == 6  # no stress chart in a wrap report
    assert "worker 1" in page.visible_text()


def test_dense_timelines_stay_small():
    # 3,000 batches and 2 x 1,000 worker batches: drawn as images embedded in the SVG (vector
    # paths would take about 0.6 MB for the step timeline alone)
    report = sample_report()
    batches = [BatchTiming(index=i, epoch=0, start_at_s=0.01 * i, wait_s=0.001 * (i % 7),
                           compute_s=0.008, samples=8) for i in range(3000)]
    worker_batches = [WorkerBatch(worker_id=i % 2, end_at_s=0.02 * i, fetch_s=0.015,
                                  collate_s=0.002, samples=8) for i in range(2000)]
    timeline = dataclasses.replace(report.timeline, batches=batches,
                                   worker_batches=worker_batches)
    consumer = dataclasses.replace(report.consumer, batches=3000)
    text = render_html(dataclasses.replace(report, timeline=timeline, consumer=consumer))
    assert len(text.encode()) < 400_000
    assert text.count('xlink:href="data:image/png;base64,') == 2  # step timeline, worker spans


def test_missing_data_is_said_instead_of_an_empty_chart():
    bare = sample_report(timeline=Timeline(), host=None)
    producer = dataclasses.replace(bare.producer, workers=[], probe="none")
    text = render_html(dataclasses.replace(bare, producer=producer))
    words = _Page(text).visible_text()
    assert _Page(text).count("svg") == 0
    assert "No per-batch timeline was recorded." in words
    assert "no per-worker timing (worker probe: none)" in words
    assert "host sampling was not run" in words


@dataclasses.dataclass(frozen=True)
class _ReportWithExtras(Report):
    """A report as a later pipecheck might produce: sections this renderer has no layout for."""

    hot_paths: Optional[dict[str, Any]] = None
    gpu_notes: Optional[dict[str, Any]] = None


def test_unknown_sections_render_generically_only_when_present():
    base = sample_report()
    fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(base)}
    hot_paths = {"samples": 120, "interval_s": 0.01, "rate_hz": 100,
                 "top": [{"function": f"decode {SCRIPT}", "file": "/src/data.py", "line": 1200,
                          "fraction": 0.42, "self_s": 1.25}]}
    report = _ReportWithExtras(**fields, hot_paths=hot_paths, gpu_notes={})
    text = render_html(report)
    page = _Page(text)
    headings = _headings(page, text)
    assert headings[-1] == "Hot paths"
    assert "Gpu notes" not in headings  # empty: no section
    words = page.visible_text()
    assert f"decode {SCRIPT}" in words and "<script" not in text.lower()
    # units from the key names: fraction, seconds, hertz; line numbers as written
    assert "42.0%" in words and "1.25 s" in words and "10.0 ms" in words and "100 Hz" in words
    assert "1200" in words


def test_save_html_writes_atomically_and_reports_bad_paths(tmp_path):
    report = sample_report(timeline=Timeline(), host=None)  # no charts: fast to render
    target = report.save_html(tmp_path / "run.html")
    assert target.read_text(encoding="utf-8") == render_html(report)
    assert [p.name for p in tmp_path.iterdir()] == ["run.html"]  # no temporary file left
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(BadInputError, match=r"^cannot write HTML report to .*file/run\.html: "):
        report.save_html(blocker / "run.html")
    with pytest.raises(BadInputError, match="is a directory"):
        report.save_html(tmp_path)


def test_pipeline_stages_get_a_chart_and_an_escaped_table():
    rows = [StageRow(name="<script>decode</script>", where="workers", exclusive_s=2.0,
                     fraction=0.8, samples_in=10, samples_out=10, workers={"0": 2.0}),
            StageRow(name="DataLoader", where="main", exclusive_s=0.5, fraction=1.0,
                     samples_in=None, samples_out=5, workers={"main": 0.5})]
    report = sample_report()
    report = dataclasses.replace(report, producer=dataclasses.replace(report.producer,
                                                                      stages=rows))
    page = render_html(report)
    assert "Pipeline stages" in page and "<script>decode" not in page
    assert "&lt;script&gt;decode&lt;/script&gt;" in page
    assert 'id="stages-' in page  # the stage chart was drawn (its salted ids)


def test_evidence_numbers_keep_their_units():
    from pipecheck.render.generic import format_value

    # memory-growth evidence: an interval's bounds and a per-batch size, not bare numbers
    assert format_value("uss_bytes_per_s_low", 1.5e6) == "1.50 MB/s"
    assert format_value("uss_bytes_per_s_high", 2.5e6) == "2.50 MB/s"
    assert format_value("bytes_per_batch", float(2**20)) == "1.00 MiB/batch"
    assert format_value("bytes_per_s", 2e6) == "2.00 MB/s"


def test_stack_shares_are_shown_as_percentages():
    from pipecheck.records import StacksRecord

    stacks = StacksRecord(status="ok", window_s=10.0, rate_hz=20, worker_samples=100,
                          main_wait={"queue-empty": 0.7, "other": 0.3}, main_wait_samples=10,
                          stages={"map": 0.8, "collate": 0.2})
    report = sample_report(timeline=Timeline(), host=None)
    words = _Page(render_html(dataclasses.replace(report, stacks=stacks))).visible_text()
    assert "queue-empty 70.0%" in words and "map 80.0%" in words and "0.700" not in words


def _path_vertices(svg: str, color: str) -> list[list[tuple[float, float]]]:
    """The vertices of each stroked line of ``color`` in ``svg`` (markers are <use> elements)."""
    lines = []
    for d, style in re.findall(r'<path d="([^"]*)"[^>]*style="([^"]*)"', svg):
        if f"stroke: {color}" in style and "fill: none" in style:
            numbers = [float(n) for n in re.findall(r"-?\d+(?:\.\d+)?", d)]
            lines.append(list(zip(numbers[::2], numbers[1::2])))
    return lines


def test_host_charts_draw_steps_between_samples_not_diagonals():
    from pipecheck.render import charts

    report = sample_report()
    first, last = report.timeline.host[0], report.timeline.host[-1]
    two = [dataclasses.replace(first, main_cpu_percent=20.0, main_rss_bytes=100 * 2**20),
           dataclasses.replace(last, at_s=1.0, main_cpu_percent=90.0,
                               main_rss_bytes=300 * 2**20)]
    report = dataclasses.replace(report, timeline=dataclasses.replace(report.timeline, host=two))
    for svg in (charts.host_cpu_svg(report), charts.host_memory_svg(report)):
        main = _path_vertices(svg, charts.MAIN_COLOR)[0]  # the data line (then its legend key)
        assert len(main) == 3  # one step: across, then up (or up, then across)
        for (x0, y0), (x1, y1) in zip(main, main[1:]):
            assert x0 == x1 or y0 == y1, main  # no segment is a slope nobody measured


def test_legend_fits_the_chart_width():
    from pipecheck.render import charts

    fig, ax = charts._figure(3.0)
    for i in range(6):
        ax.plot([0, 1], [i, i], label=f"measured, prefetch_factor={i} pin_memory=True "
                                      f"in_order=False")
    charts._legend(fig, ax)
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    (legend,) = fig.legends
    box = legend.get_window_extent(renderer)
    assert box.x0 >= 0 and box.x1 <= fig.bbox.width  # not cut off at the right edge


def test_the_rates_chart_counts_the_batches_between_kept_timeline_entries():
    # A fast loop's sparse stretches leave gaps of many batches between timed entries; each
    # entry stands for the batches up to the next one, so the binned rate adds up to them all.
    from pipecheck.render import charts

    indices = [0, 1, 2, 3, 67, 68, 69, 200, 201]
    batches = [BatchTiming(index=i, epoch=0, start_at_s=i * 1e-3, wait_s=0.0, compute_s=1e-3,
                           samples=1) for i in indices]
    weights = charts._weights(batches)
    assert weights == [1, 1, 1, 64, 1, 1, 131, 1, 1]
    edges = charts._bin_edges((0.0, 0.202), 4)
    _, rates = charts._binned_rate([b.start_at_s for b in batches], edges, weights)
    width = edges[1] - edges[0]
    assert sum(rate * width for rate in rates) == pytest.approx(202)


@pytest.mark.slow
def test_a_report_of_huge_lists_renders_a_page_of_bounded_size():
    """Every list and map of a report thousands of entries long (found by walking its
    dataclasses): tables, evidence, charts and timelines are capped or thinned, each cap
    saying how much it left out."""
    from full_reports import every_section_report, inflate

    small = render_html(every_section_report())
    page = render_html(inflate(every_section_report(), 3_000))
    for said in ("... and 2,950 more findings (see the JSON)",
                 "... and 2,800 more epochs (see the JSON)",
                 "... and 2,800 more processes (see the JSON)",
                 "... and 2,936 more workers (see the JSON)",
                 "2,950 more keys (see the JSON)"):  # one finding's evidence
        assert said in page, said
    assert len(page) < len(small) + 3_000_000
    assert _Page(page).count("svg") == _Page(small).count("svg")


def test_key_number_cards_show_the_figure_large_and_the_words_below():
    text = render_html(stress_report())
    cards = re.findall(r'<div class="number">(.*?)</div></div>', text)
    capacity = next(card for card in cards if "capacity / demand" in card)
    assert '<div class="v">0.70x</div>' in capacity
    assert '<div class="s">the loader cannot keep up with the step' in capacity
    stall = next(card for card in cards if ">data stall<" in card)
    assert '<div class="v">41.2%</div><div class="s">(steady state 38.0%)' in stall


def test_list_numbers_stay_on_their_line():
    text = render_html(stress_report())
    # the numbered reasons' first column never wraps ("1." would otherwise break from "." with
    # overflow-wrap:anywhere)
    assert '<td class="nw">1.</td>' in text
    assert "td.nw{white-space:nowrap" in text
