"""The package's import structure: no import cycles and the layer order of docs/architecture.md,
every import counted (function-level and typing-only ones included), and reading a saved report
needs no torch.

The graph is built by parsing every module under ``pipecheck/`` with :mod:`ast`, so it sees the
imports inside functions that a runtime check would miss, and those under ``if TYPE_CHECKING:``:
they never run, but a type named across a circle still ties the two modules together.
"""

from __future__ import annotations

import ast
import json
import os
import pathlib
import subprocess
import sys

import pytest
from paths import REPO_ROOT

PACKAGE = REPO_ROOT / "pipecheck"


def _module_name(path: pathlib.Path, package: pathlib.Path) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, typing: bool = True) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement in ``tree`` at any depth; with ``typing=False``, except those
    under ``if TYPE_CHECKING:``."""
    found: list[ast.Import | ast.ImportFrom] = []
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if not typing and isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return found


def import_graph(package: pathlib.Path = PACKAGE, typing: bool = True) -> dict[str, set[str]]:
    """``{module: modules of the package it imports}``, relative imports resolved; with
    ``typing=False``, imports under ``if TYPE_CHECKING:`` left out.

    ``from pipecheck.x import y`` counts as importing ``pipecheck.x.y`` when that is a module,
    else ``pipecheck.x``. Importing ``a.b.c`` also runs ``a/__init__`` and ``a/b/__init__``, so
    those edges are added too.
    """
    paths = {_module_name(p, package): p for p in package.rglob("*.py")}
    modules = set(paths)
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        is_package = path.name == "__init__.py"
        targets: set[str] = set()
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path)), typing):
            if isinstance(node, ast.Import):
                bases = [alias.name for alias in node.names]
                names: list[str] = []
            else:
                if node.level:
                    anchor = name.split(".") if is_package else name.split(".")[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                bases = [base]
                names = [alias.name for alias in node.names]
            for base in bases:
                candidates = [f"{base}.{n}" for n in names if f"{base}.{n}" in modules]
                for target in candidates or [base]:
                    if target in modules:
                        targets.add(target)  # named explicitly: counts even for a parent
                    parts = target.split(".")
                    for i in range(1, len(parts)):  # parent packages run first
                        prefix = ".".join(parts[:i])
                        # A package's own __init__ runs before its submodules: no edge back.
                        if prefix in modules and not name.startswith(prefix + "."):
                            targets.add(prefix)
        targets.discard(name)
        graph[name] = targets
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each strongly connected component of more than one module (Tarjan), as a sorted list."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def _one_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest closed path through the component's first module, for the failure message."""
    members = set(component)
    start = component[0]
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt_frontier = []
        for node in frontier:
            for nxt in sorted(graph[node] & members):
                if nxt == start:
                    return paths[node] + [start]
                if nxt not in paths:
                    paths[nxt] = paths[node] + [nxt]
                    nxt_frontier.append(nxt)
        frontier = nxt_frontier
    return component


def test_graph_sees_function_level_and_relative_imports(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from .sub import b\n")
    (pkg / "sub" / "b.py").write_text("from ..a import f\n")
    (pkg / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n")
    (pkg / "d.py").write_text("def version():\n    import pkg\n    return pkg\n")
    graph = import_graph(pkg)
    assert graph["pkg.a"] == {"pkg.sub", "pkg.sub.b"}
    assert graph["pkg.sub.b"] == {"pkg.a"}  # its own parent package runs first: no edge
    assert graph["pkg.c"] == {"pkg.a"}  # a typing-only import is an arrow too
    assert import_graph(pkg, typing=False)["pkg.c"] == set()
    assert graph["pkg.d"] == {"pkg"}  # importing the parent by name is an edge
    assert find_cycles(graph) == [["pkg.a", "pkg.sub.b"]]
    (pkg / "__init__.py").write_text("from pkg.d import version\n")
    assert sorted(find_cycles(import_graph(pkg))) == [["pkg", "pkg.d"], ["pkg.a", "pkg.sub.b"]]


def test_no_import_cycles():
    graph = import_graph()
    cycles = [f"{' -> '.join(_one_cycle(graph, c))} (modules in the cycle: {', '.join(c)})"
              for c in find_cycles(graph)]
    assert not cycles, ("import cycles in pipecheck/ (function-level and typing-only imports "
                        "count):\n" + "\n".join(cycles))


@pytest.fixture(scope="module")
def saved_report(tmp_path_factory):
    """A small saved report, written by a subprocess so this test process's imports stay clean
    (once for the module: the tests only read it)."""
    path = tmp_path_factory.mktemp("saved") / "run.json"
    script = (
        "import sys, torch, pipecheck\n"
        "from torch.utils.data import DataLoader, TensorDataset\n"
        "loader = pipecheck.wrap(DataLoader(TensorDataset(torch.zeros(64, 2)), batch_size=8))\n"
        "for _ in loader: pass\n"
        "loader.report().save(sys.argv[1])\n"
    )
    subprocess.run([sys.executable, "-c", script, str(path)], check=True, timeout=120)
    return path


def _env() -> dict[str, str]:
    env = dict(os.environ)
    root = str(PACKAGE.parent)
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    return env


@pytest.mark.parametrize("command, expected", [
    (["report"], "wrap report"),
    (["check", "--max-stall", "1"], "stall"),
])
def test_reading_commands_import_no_torch(saved_report, command, expected):
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "pipecheck", command[0], str(saved_report),
         *command[1:]], capture_output=True, text=True, timeout=120, env=_env())
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert expected in proc.stdout
    imported = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()
                if line.startswith("import time:") and "|" in line]
    assert "pipecheck.report" in imported
    torch_modules = [m for m in imported if m == "torch" or m.startswith("torch.")]
    assert not torch_modules, f"pipecheck {command[0]} imported {torch_modules[:5]}"


def test_report_compare_imports_no_torch(saved_report):
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "pipecheck", "report", "--compare",
         str(saved_report), str(saved_report)], capture_output=True, text=True, timeout=120,
        env=_env())
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "NO MEASURABLE CHANGE" in proc.stdout
    imported = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()
                if line.startswith("import time:") and "|" in line]
    assert "pipecheck.analysis.compare" in imported
    torch_modules = [m for m in imported if m == "torch" or m.startswith("torch.")]
    assert not torch_modules, f"pipecheck report --compare imported {torch_modules[:5]}"


def test_load_imports_no_torch(saved_report):
    script = (
        "import json, sys, pipecheck\n"
        "report = pipecheck.load(sys.argv[1])\n"
        "print(json.dumps({'batches': report.consumer.batches,\n"
        "                  'torch': sorted(m for m in sys.modules if m.split('.')[0] == 'torch')}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script, str(saved_report)],
                          capture_output=True, text=True, timeout=120, env=_env())
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    assert result["batches"] == 8
    assert result["torch"] == []


ARCHITECTURE = REPO_ROOT / "docs" / "architecture.md"


def documented_layers(text: str) -> list[list[str]]:
    """The layer lines of ``docs/architecture.md``'s "Layers" block, top (lowest) first, each
    a list of its entries as written (``records``, ``probes/``, ``cli.py``,
    ``pipecheck/__init__.py``); a line's description starts after a run of 3 or more spaces."""
    section = text.split("## Layers", 1)[1]
    block = section.split("```", 2)[1]
    layers = []
    for row in block.splitlines():
        entries = row.split("   ", 1)[0].split()
        if entries:
            layers.append(entries)
    return layers


def _layer_of(module: str, layers: list[list[str]]) -> int | None:
    """The index of the line naming ``module`` (``pipecheck.probes.workers`` is named by
    ``probes/``, ``pipecheck.cli`` by ``cli.py`` or ``cli``), or ``None``."""
    if module == "pipecheck":
        names = {"pipecheck/__init__.py"}
    else:
        first = module.split(".")[1]  # the package or module right under pipecheck/
        names = {f"{first}/", f"{first}.py", first}
    for index, entries in enumerate(layers):
        if names & set(entries):
            return index
    return None


def upward_imports(graph: dict[str, set[str]], layers: list[list[str]]) -> list[str]:
    """Each import in ``graph`` to a module on a lower line of ``layers`` than its importer's
    (a line further down the block), in words."""
    return [f"{module} (line {_layer_of(module, layers) + 1}) imports {target} "
            f"(line {_layer_of(target, layers) + 1})"
            for module, targets in sorted(graph.items()) for target in sorted(targets)
            if _layer_of(target, layers) > _layer_of(module, layers)]


def test_layers_parse_from_the_architecture_block():
    layers = documented_layers(ARCHITECTURE.read_text(encoding="utf-8"))
    assert layers[0][:3] == ["_version", "kinds", "errors"]
    assert _layer_of("pipecheck.records", layers) == 0
    assert _layer_of("pipecheck.probes.workers", layers) == _layer_of("pipecheck.probes", layers)
    assert _layer_of("pipecheck.cli", layers) == len(layers) - 1
    # an import from the plain-data line down to the CLI is caught; one up is not
    assert upward_imports({"pipecheck.records": {"pipecheck.cli"}}, layers) == [
        f"pipecheck.records (line 1) imports pipecheck.cli (line {len(layers)})"]
    assert upward_imports({"pipecheck.cli": {"pipecheck.records"}}, layers) == []


def test_every_import_goes_to_its_own_layer_or_one_above_it():
    """The layer order of docs/architecture.md, checked: each module of the package has a line,
    and every import it makes (function-level and ``if TYPE_CHECKING:`` ones included) goes to
    a module on its own line or a line above it."""
    layers = documented_layers(ARCHITECTURE.read_text(encoding="utf-8"))
    graph = import_graph()
    unplaced = sorted(m for m in graph if _layer_of(m, layers) is None)
    assert not unplaced, ("modules with no line in the Layers block of docs/architecture.md: "
                          f"{unplaced}")
    upward = upward_imports(graph, layers)
    assert not upward, ("imports against the layer order of docs/architecture.md:\n"
                        + "\n".join(upward))
