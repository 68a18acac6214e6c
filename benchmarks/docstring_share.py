"""The share of ``pipecheck/``'s lines that are docstrings (issue 29: rationale belongs in docs/,
docstrings keep what a caller needs).

Counts every string-expression statement (module, class, function and attribute docstrings),
found with :mod:`ast`, against all lines of every ``.py`` file under ``pipecheck/``.

    python benchmarks/docstring_share.py
"""

from __future__ import annotations

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "pipecheck"


def main() -> None:
    total = docstrings = 0
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        total += source.count("\n")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) \
                    and isinstance(node.value.value, str):
                docstrings += node.end_lineno - node.lineno + 1  # type: ignore[operator]
    print(f"{docstrings:,} docstring lines of {total:,}: {docstrings / total:.1%}")


if __name__ == "__main__":
    main()
