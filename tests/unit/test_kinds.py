"""pipecheck.kinds: every finding kind pipecheck emits is in the catalogue, the Literal aliases
match the constants, and a report holding values a newer pipecheck may write still loads."""

from __future__ import annotations

import ast
import json
import pathlib
import typing

import pytest

import pipecheck
from pipecheck import kinds
from pipecheck.errors import ReportFormatError
from pipecheck.kinds import FINDING_KINDS, VERDICT_FINDING, WORKERS_FINDING, FindingKind
from pipecheck.render.formats import RENDERERS
from pipecheck.report import Report
from report_factory import sample_report

PACKAGE = pathlib.Path(pipecheck.__file__).parent
SOURCES = sorted(p for p in PACKAGE.rglob("*.py") if p.name != "kinds.py")
KIND_TABLES = {"VERDICT_FINDING": VERDICT_FINDING, "WORKERS_FINDING": WORKERS_FINDING}
"""The kinds.py tables a ``Finding(kind=TABLE[...])`` may look its kind up in."""


def _literal_values(alias: object) -> set[str]:
    """The strings of a (possibly nested) ``Literal`` alias."""
    values: set[str] = set()
    for arg in typing.get_args(alias):
        if typing.get_origin(arg) is typing.Literal:
            values |= _literal_values(arg)
        else:
            values.add(arg)
    return values


def _kind_arguments() -> list[tuple[str, ast.expr]]:
    """``(where, kind expression)`` of every ``Finding(...)`` call in pipecheck's source."""
    found = []
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Finding":
                keywords = {k.arg: k.value for k in node.keywords}
                kind = keywords.get("kind", node.args[0] if node.args else None)
                assert kind is not None, f"{path.name}:{node.lineno}: Finding without a kind"
                found.append((f"{path.relative_to(PACKAGE)}:{node.lineno}", kind))
    return found


def test_every_finding_pipecheck_emits_names_a_catalogued_kind():
    calls = _kind_arguments()
    assert len(calls) >= 30  # the scan found the Finding(...) calls (34 when written)
    emitted: set[str] = set()
    for where, kind in calls:
        if isinstance(kind, ast.Attribute) and getattr(kind.value, "id", None) == "FindingKind":
            assert kind.attr.isupper() and hasattr(FindingKind, kind.attr), where
            emitted.add(getattr(FindingKind, kind.attr))
        elif isinstance(kind, ast.Subscript) and getattr(kind.value, "id", None) in KIND_TABLES:
            emitted |= set(KIND_TABLES[kind.value.id].values())
        else:
            pytest.fail(f"{where}: Finding kind {ast.unparse(kind)} is not a FindingKind "
                        "constant or a kinds.py table lookup")
    assert emitted <= FINDING_KINDS
    # and the catalogue lists nothing pipecheck never emits
    assert FINDING_KINDS == emitted


def test_no_module_spells_a_finding_kind_as_a_bare_string():
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and node.value in FINDING_KINDS:
                pytest.fail(f"{path.relative_to(PACKAGE)}:{node.lineno}: {node.value!r} "
                            "spelled out; use pipecheck.kinds")


def test_literal_aliases_match_the_constants():
    assert _literal_values(kinds.FindingKindName) == FINDING_KINDS
    assert _literal_values(kinds.Verdict) == set(kinds.VERDICTS)
    assert _literal_values(kinds.Severity) == set(kinds.SEVERITIES)
    assert _literal_values(kinds.ConsumerStatus) == set(kinds.CONSUMER_STATUSES)
    assert _literal_values(kinds.ProcessRole) == set(kinds.PROCESS_ROLES)
    assert _literal_values(kinds.WorkerBound) == set(kinds.WORKER_BOUNDS)
    assert _literal_values(kinds.ReportKind) == set(kinds.REPORT_KINDS)
    assert set(WORKERS_FINDING) == set(kinds.WORKER_BOUNDS)
    assert set(VERDICT_FINDING) == set(kinds.VERDICTS) - {kinds.NO_DATA}


def test_every_catalogued_kind_has_a_docstring():
    source = ast.parse((PACKAGE / "kinds.py").read_text())
    catalogue = next(n for n in source.body
                     if isinstance(n, ast.ClassDef) and n.name == "FindingKind")
    body = catalogue.body
    documented = {
        stmt.target.id for i, stmt in enumerate(body)
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
        and i + 1 < len(body) and isinstance(body[i + 1], ast.Expr)
        and isinstance(body[i + 1].value, ast.Constant)
    }
    names = {name for name in vars(FindingKind) if name.isupper()}
    assert names and documented == names


def _newer_report() -> dict:
    """A saved report as a newer pipecheck might write it: a finding kind, a severity, a
    verdict, a consumer status and a worker bound class this one does not know."""
    data = json.loads(json.dumps(sample_report().to_dict()))
    data["diagnosis"]["verdict"] = "memory-bound"
    data["diagnosis"]["findings"].append({"kind": "future-kind", "severity": "fatal",
                                          "message": "from the future", "evidence": {"x": 1}})
    data["consumer"]["status"] = "paused"
    data["producer"]["workers"][0]["bound"] = "gpu-bound"
    return data


def test_a_report_with_values_this_pipecheck_does_not_know_still_loads():
    data = _newer_report()
    report = Report.from_dict(data)
    assert report.diagnosis.findings[-1].kind == "future-kind"
    assert report.diagnosis.findings[-1].severity == "fatal"
    assert report.diagnosis.verdict == "memory-bound"
    assert report.consumer.status == "paused"
    assert report.producer.workers[0].bound == "gpu-bound"
    assert report.to_dict() == data  # written back unchanged


@pytest.mark.parametrize("path, value", [
    (("diagnosis", "findings", 0, "kind"), 7),
    (("diagnosis", "findings", 0, "severity"), None),
    (("diagnosis", "verdict"), ["input-bound"]),
])
def test_a_kind_that_is_not_a_string_still_fails_the_load(path, value):
    data = _newer_report()
    holder = data
    for key in path[:-1]:
        holder = holder[key]
    holder[path[-1]] = value
    with pytest.raises(ReportFormatError, match=r"report\.diagnosis\."):
        Report.from_dict(data)


@pytest.mark.parametrize("name", ["terminal", "markdown", "html"])
def test_a_report_with_unknown_values_renders_its_findings(name):
    out = RENDERERS[name]().render(Report.from_dict(_newer_report()))
    assert "from the future" in out
