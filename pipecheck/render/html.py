"""The HTML report: one self-contained page (inline CSS and SVG charts, no script, no network),
serialized from the render model (:mod:`pipecheck.render.sections`).

:func:`render_html` takes a finished :class:`~pipecheck.report_data.ReportData` and returns the page as
text; :meth:`pipecheck.Report.save_html` writes it. The page has every section the terminal
summary shows (:mod:`pipecheck.render.terminal`), in the same order, under a verdict banner with
the key numbers; it adds the charts the sections refer to (:data:`pipecheck.render.charts.CHARTS`)
and the detail blocks (epoch and process tables, each finding's evidence). ReportData fields no
section shows (from later versions) are rendered generically from their JSON.

Safety: every string that comes from the run (dataset and loader type names, exception text,
paths, config values, finding messages) goes through :func:`html.escape`; chart text is escaped
by matplotlib's SVG writer. The finished page then passes :func:`pipecheck.render.inert.visible`
(control characters and bidirectional overrides as visible escapes, as in the terminal), so a
string cannot reorder the page's text. A Content-Security-Policy meta tag forbids scripts and every
network fetch, so the page cannot load anything even if a string slipped through.
"""

from __future__ import annotations

import dataclasses
import html
import re
from typing import TYPE_CHECKING, Any

from pipecheck.kinds import BALANCED, COMPUTE_BOUND, INPUT_BOUND
from pipecheck.codec import to_jsonable
from pipecheck.render import charts
from pipecheck.render.base import Renderer
from pipecheck.render.generic import to_html as generic_html
from pipecheck.render.inert import visible
from pipecheck.render.model import Block, Chart, Document, Facts, Items, Note, Table
from pipecheck.render.sections import RENDERED_FIELDS, build_document

if TYPE_CHECKING:
    from pipecheck.report_data import ReportData

CONTENT_SECURITY_POLICY = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
"""The page's policy: inline styles and data: images only; no script, no fetch of any kind."""

_VERDICT_CLASSES = {INPUT_BOUND: "bad", COMPUTE_BOUND: "good", BALANCED: "warn"}
_TONE_CLASSES = {"plain": "", "dim": "dim", "bold": "bold", "warning": "alert",
                 "alert": "alert"}

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;
 margin:0;background:#f6f7f9;color:#1d2330}
main{max-width:1080px;margin:0 auto;padding:16px 20px 40px}
h1{font-size:20px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ccd;
 padding-bottom:3px}h3{font-size:14px;margin:14px 0 4px}
.banner{border-radius:8px;padding:14px 18px;color:#fff;background:#555}
.banner.bad{background:#b3261e}.banner.good{background:#2e7d32}.banner.warn{background:#b26a00}
.banner .context{opacity:.9;font-size:12px;margin-top:4px;word-break:break-word}
.numbers{display:grid;grid-template-columns:repeat(auto-fill,minmax(190px,1fr));gap:8px;
 margin:12px 0}
.number{background:#fff;border:1px solid #dde;border-radius:6px;padding:8px 10px}
.number .v{font-size:20px;font-weight:600;overflow-wrap:anywhere}.number .k{font-size:12px;color:#556}
.number .s{font-size:12px;color:#334;margin-top:2px}
details.section>summary{cursor:pointer}details.section>summary h2{display:inline-block}
td.nw{white-space:nowrap;overflow-wrap:normal}
.alert{background:#fff4ce;border:1px solid #e0c060;border-radius:6px;padding:8px 12px;margin:10px 0}
.chart{background:#fff;border:1px solid #dde;border-radius:6px;padding:6px;margin:8px 0}
.chart svg{width:100%;height:auto;display:block}
.caption{font-size:12px;color:#556;margin:2px 4px}
table{border-collapse:collapse;background:#fff;margin:6px 0;font-size:13px}
th,td{border:1px solid #dde;padding:3px 8px;text-align:left;vertical-align:top;
 overflow-wrap:anywhere}
td.n,th.n{text-align:right;white-space:nowrap}
ul.facts{list-style:none;padding:0;margin:4px 0}
ul.facts li{display:inline-block;margin:2px 22px 2px 0}
ul.findings{padding-left:0;list-style:none;margin:4px 0}ul.findings li{margin:3px 0}
table.grid{background:none}table.grid td{border:none;padding:1px 8px 1px 0}.bold{font-weight:600}
.dim{color:#667}.sev{display:inline-block;min-width:62px;font-weight:600}
.sev.critical{color:#b3261e}.sev.warning{color:#b26a00}.sev.info{color:#1565c0}
dl.kv{display:grid;grid-template-columns:max-content auto;gap:2px 12px;margin:4px 0}
dl.kv dt{color:#556}dl.kv dd{margin:0}
footer{margin-top:30px;font-size:12px;color:#667}
code{font-size:12px}
"""


class HtmlRenderer(Renderer):
    """The report as one self-contained HTML5 page (UTF-8 text). Charts are inline SVG drawn by
    matplotlib; a chart whose data the report lacks is replaced by a sentence saying what is
    missing."""

    name = "html"
    what = "HTML report"
    to_file = True

    def render(self, report: "ReportData") -> str:
        document = build_document(report)
        body = [_banner(document)]
        # The short view open (the changes that matter, the findings in a line or two; the
        # cards above hold the key figures), then every section collapsed.
        body += [_section(section.title, [_block(block, report) for block in section.blocks])
                 for section in document.summary if section.key != "figures"]
        body += [_section(section.title, [_block(block, report) for block in section.blocks],
                          collapsed=bool(document.summary))
                 for section in document.sections]
        for name, value in _extra_sections(report):
            body.append(_section(name.replace("_", " ").capitalize(),
                                 [generic_html(value, name)], collapsed=True))
        body.append(f"<footer>{_e(document.footer)} · self-contained page: no script, no "
                    "network</footer>\n")
        return visible(
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{CONTENT_SECURITY_POLICY}">'
            '<meta name="viewport" content="width=device-width,initial-scale=1">'
            f"<title>pipecheck: {_e(document.verdict)}</title><style>{_CSS}</style></head>\n"
            f"<body><main>\n{''.join(body)}</main></body></html>\n"
        )


def render_html(report: "ReportData") -> str:
    """The report as one self-contained HTML5 page (:class:`HtmlRenderer`). Raises nothing for
    any report that :meth:`pipecheck.Report.from_dict` accepts."""
    return HtmlRenderer().render(report)


# -- building blocks -----------------------------------------------------------------------------


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _section(title: str, parts: list[str], collapsed: bool = False) -> str:
    """A titled section; ``collapsed``: a ``<details>`` element the reader opens (no script)."""
    if collapsed:
        return (f'<details class="section"><summary><h2>{_e(title)}</h2></summary>\n'
                f"{''.join(parts)}</details>\n")
    return f"<section><h2>{_e(title)}</h2>\n{''.join(parts)}</section>\n"


_CARD_SPLIT = re.compile(r" · |: | \(|, ")
"""Where a key number's value leaves its figure for the words about it."""


def card_parts(value: str) -> tuple[str, str]:
    """A key number's value as the figure with its unit (large type on its card) and the
    rest (normal type below it): ``41.2% (steady state 38.0%)`` ->
    ``("41.2%", "(steady state 38.0%)")``, ``0.70x: the loader ...`` -> ``("0.70x", "the
    loader ...")``."""
    match = _CARD_SPLIT.search(value)
    if match is None:
        return value, ""
    rest = value[match.end():] if match.group() in (": ", " · ", ", ") else value[match.start():]
    return value[:match.start()], rest.strip()


def _banner(document: Document) -> str:
    cards = []
    for fact in document.headline:
        figure, words = card_parts(fact.value)
        # A card keeps its words' first clause (the sections below carry the rest; the whole
        # value is the card's tooltip), so a long measured phrase never stretches the row.
        short = words.split("; ")[0]
        title = f' title="{_e(words)}"' if short != words else ""
        below = f'<div class="s"{title}>{_e(short)}</div>' if words else ""
        cards.append(f'<div class="number"><div class="k">{_e(fact.label)}</div>'
                     f'<div class="v">{_e(figure)}</div>{below}</div>')
    numbers = "".join(cards)
    notes = "".join(_note(note) for note in document.notes)
    return (
        f'<header class="banner {_VERDICT_CLASSES.get(document.verdict_kind, "")}">'
        f"<h1>{_e(document.verdict)}</h1>"
        f'<div class="context">{_e(document.context)}</div></header>\n'
        f'{notes}<div class="numbers">{numbers}</div>\n'
    )


def _block(block: Block, report: "ReportData") -> str:
    if isinstance(block, Facts):
        items = "".join(f'<li><span class="dim">{_e(f.label)}</span> {_e(f.value)}</li>'
                        if f.label else f"<li>{_e(f.value)}</li>" for f in block.facts)
        return f'<ul class="facts">{items}</ul>'
    if isinstance(block, Note):
        return _note(block)
    if isinstance(block, Table):
        return _table(block)
    if isinstance(block, Items):
        return _items(block)
    if isinstance(block, Chart):
        svg = charts.CHARTS[block.name](report)
        if svg is None:
            return f'<p class="dim">{_e(block.missing)}</p>'
        # svg is trusted: matplotlib escapes its text.
        return (f'<figure class="chart">{svg}<figcaption class="caption">{_e(block.caption)}'
                "</figcaption></figure>")
    return ""


def _note(note: Note) -> str:
    css = _TONE_CLASSES.get(note.tone, "")
    return f'<p class="{css}">{_e(note.text)}</p>' if css else f"<p>{_e(note.text)}</p>"


def _table(block: Table) -> str:
    """An HTML table of finished (unescaped) cells; ``right`` columns right-aligned."""
    def cls(i: int) -> str:
        if i in block.right:
            return ' class="n"'
        return ' class="nw"' if i in block.no_wrap else ""  # "1." never breaks from its text

    def cell(i: int, text: str) -> str:
        return f"<code>{_e(text)}</code>" if i in block.code else _e(text)

    head = ""
    if block.headers:
        head = "<thead><tr>" + "".join(f"<th{cls(i)}>{_e(h)}</th>"
                                       for i, h in enumerate(block.headers)) + "</tr></thead>"
    body = "".join("<tr>" + "".join(f"<td{cls(i)}>{cell(i, c)}</td>" for i, c in enumerate(row))
                   + "</tr>" for row in block.rows)
    css = ' class="grid"' if block.grid else ""
    if block.collapsed:
        summary = _e(block.title or f"{len(block.rows):,} rows")
        return (f"<details><summary>{summary}</summary><table{css}>{head}<tbody>{body}</tbody>"
                "</table></details>")
    title = f"<h3>{_e(block.title)}</h3>" if block.title else ""
    return f"{title}<table{css}>{head}<tbody>{body}</tbody></table>"


def _items(block: Items) -> str:
    items = []
    for item in block.items:
        evidence = ""
        if item.evidence:
            evidence = (f'<details><summary class="dim">evidence</summary>'
                        f"{generic_html(item.evidence)}</details>")
        kind = f' <span class="dim">({_e(item.kind)})</span>' if item.kind else ""
        items.append(f'<li><span class="sev {_e(item.severity)}">[{_e(item.severity)}]</span> '
                     f"{_e(item.text)}{kind}{evidence}</li>")
    return f'<ul class="findings">{"".join(items)}</ul>'


def _extra_sections(report: "ReportData") -> list[tuple[str, Any]]:
    """Non-empty ReportData fields no section shows, as JSON values, in field order."""
    found = []
    for f in dataclasses.fields(report):
        if f.name in RENDERED_FIELDS:
            continue
        value = to_jsonable(getattr(report, f.name))
        if value not in (None, {}, [], ""):
            found.append((f.name, value))
    return found
