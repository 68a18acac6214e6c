"""README.md against the project: its install lines name only this project's distribution (PyPI's
``pipecheck`` is another project), its prose lines render, and every command that takes the
output options is listed with them."""

from __future__ import annotations

import argparse
import re
import shlex
import sys

from paths import REPO_ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = None

README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")

DISTRIBUTION = "torch-pipecheck"
"""This project's distribution name (pyproject.toml's ``[project] name``)."""

ALLOWED_FROM_INDEXES = {"torch"}
"""Third-party distributions the README may tell a user to install by name."""


def _pyproject_name() -> str:
    text = (REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8")
    if tomllib is not None:
        return tomllib.loads(text)["project"]["name"]
    return re.search(r'^name = "([^"]+)"', text, re.M).group(1)  # type: ignore[union-attr]


def _install_commands(text: str) -> list[str]:
    """Every ``pip install ...`` in the text (code blocks and inline code), up to the end of
    its line, a comment or a closing backtick."""
    return [m.group(1).strip() for m in re.finditer(r"pip install([^`#\n]*)", text)]


def _requirements(command: str) -> list[str]:
    """The requirement arguments of one ``pip install`` command line (options and their
    values left out)."""
    words = shlex.split(command)
    takes_value = {"--index-url", "--extra-index-url", "-i", "-c", "-r", "--target", "-t",
                   "--constraint", "--requirement", "-f", "--find-links"}
    found, skip = [], False
    for word in words:
        if skip:
            skip = False
        elif word in takes_value:
            skip = True
        elif not word.startswith("-"):
            found.append(word)
    return found


def _names_this_project(requirement: str) -> bool:
    if requirement.startswith((".", "/")):  # a checkout, with or without extras
        return True
    name = re.split(r"[\[<>=!~ ;]", requirement, maxsplit=1)[0].lower().replace("_", "-")
    return name == DISTRIBUTION or name in ALLOWED_FROM_INDEXES


def test_the_distribution_name_is_ours():
    assert _pyproject_name() == DISTRIBUTION


def test_the_readme_installs_only_this_project():
    commands = _install_commands(README)
    assert any(".[" in c for c in commands), "the README says how to install from a checkout"
    wrong = [r for c in commands for r in _requirements(c) if not _names_this_project(r)]
    assert wrong == [], f"install lines naming another project: {wrong}"
    assert DISTRIBUTION in README


def test_the_install_check_catches_the_other_projects_name():
    bad = 'Run `pip install "pipecheck[integrations]"` then `python -m pip install -U pipecheck`.'
    found = [r for c in _install_commands(bad) for r in _requirements(c)]
    assert found and not any(_names_this_project(r) for r in found)


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks and outside tables (a markdown table row
    cannot be broken)."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
            continue
        if not fenced and not line.startswith("|"):
            lines.append((number, line))
    return lines


def test_prose_lines_render():
    long = [(n, len(line)) for n, line in _prose_lines(README) if len(line) > 120]
    assert long == [], f"README lines over 120 characters (line, length): {long}"


def test_table_cells_stay_readable():
    """Table rows cannot be wrapped; none is a paragraph pasted into a cell (one was 2,283
    characters)."""
    rows = [(n, len(line)) for n, line in enumerate(README.splitlines(), 1)
            if line.startswith("|") and len(line) > 600]
    assert rows == [], f"table rows over 600 characters (line, length): {rows}"


def test_every_command_with_output_options_is_listed_with_them():
    from pipecheck.cli import build_parser

    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    takes = sorted(name for name, sub in subparsers.choices.items()
                   if any("--html" in action.option_strings for action in sub._actions))
    assert {"run", "attach", "stress", "demo", "report"} <= set(takes)
    section = README.split("## HTML, trace timeline and markdown", 1)[1].split("\n## ", 1)[0]
    intro = section.split("|", 1)[0]
    missing = [name for name in takes if f"`pipecheck {name}`" not in intro]
    assert missing == [], f"commands with output options the README does not list: {missing}"
    for option in ("--json FILE", "--html FILE", "--trace FILE", "--markdown", "--quiet",
                   "--width N"):
        assert f"`{option}`" in section, option


def _sample_report_block() -> list[str]:
    """The lines of the README's sample terminal report (the first ``text`` block of "What the
    report looks like")."""
    section = README.split("## What the report looks like", 1)[1]
    return section.split("```text\n", 1)[1].split("```", 1)[0].splitlines()


def test_the_sample_report_has_todays_sections_and_key_figures():
    """The sample output is today's short view: the same section headings and closing hint as
    the renderer prints now, in the same order, and the key figures it always shows. A change
    to the short view that leaves the README's sample behind fails here."""
    sys.path.insert(0, str(REPO_ROOT / "tests" / "support"))
    from report_factory import sample_report

    rendered = sample_report().render(width=100).splitlines()
    sample = _sample_report_block()

    def headings(lines: list[str]) -> list[str]:
        # A section heading is an unindented line after the verdict and the header line.
        return [line for line in lines[2:] if line and not line.startswith(" ")
                and not line.startswith(("wrap report", "INPUT-BOUND"))]

    assert headings(sample) == headings(rendered)
    key = [line.strip() for line in rendered[rendered.index("Key figures") + 1:]
           if line.startswith("  ") and not line.startswith("    ")][:4]
    labels = [re.split(r" \d", line, maxsplit=1)[0] for line in key]
    assert labels == ["throughput", "data stall", "demand", "capacity / demand"]
    for label in labels:
        assert any(line.startswith(f"  {label} ") for line in sample), label
    # A recommendation's predicted figure comes with its interval (or says "uncertain").
    assert re.search(r"90%: [\d,.]+-[\d,.]+\)|uncertain", "\n".join(sample))
