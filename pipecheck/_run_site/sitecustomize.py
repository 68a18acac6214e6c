"""Loaded by every Python process that ``pipecheck run`` starts (its folder is first on
``PYTHONPATH``): installs the measuring hook (:mod:`pipecheck.run_hook`) when
``PIPECHECK_RUN_DIR`` is set, then runs the ``sitecustomize`` this one shadows, if any.
Never raises: a failure turns the hook off with one line on stderr."""

import os
import sys


def _install() -> None:
    if not os.environ.get("PIPECHECK_RUN_DIR"):
        return
    try:
        from pipecheck.run_hook import install

        install()
    except Exception as err:  # pipecheck missing in this interpreter, or broken: run unmeasured
        print(f"pipecheck run: measuring is off in this process: {type(err).__name__}: {err}",
              file=sys.stderr)


def _chain() -> None:
    """Run the next ``sitecustomize`` on the path (Debian's, a venv's), as Python would have."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        print(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n"
              f"{type(err).__name__}: {err}", file=sys.stderr)


_install()
_chain()
