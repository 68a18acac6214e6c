"""Loaded by every Python process that ``pipecheck run`` starts (its folder is first on
``PYTHONPATH``): installs the measuring hook (:mod:`pipecheck.run_hook`) when
``PIPECHECK_RUN_DIR`` is set and this interpreter can run the pipecheck that started the run,
then runs the ``sitecustomize`` this one shadows, if any.

The interpreter is served when its Python is one pipecheck supports (``_MIN_PYTHON``) and the
``pipecheck`` it imports is the parent's: the same package folder (``PIPECHECK_RUN_PACKAGE``),
or another install of the same version (``PIPECHECK_RUN_VERSION``). The parent's own environment
(``PIPECHECK_RUN_PREFIX``, its ``sys.prefix``) can always import it: when pipecheck came from a
folder that is not on this process's path yet (the current directory), that folder is appended
to ``sys.path``. Any other interpreter (a system Python, another venv, Python 2) is left as it
would be: nothing is imported or printed, and the run's variables (with ``PIPECHECK_STAGE_DIR``,
which a measured parent sets for its DataLoader workers) and this folder's ``PYTHONPATH`` entry
are taken out of its ``os.environ`` and ``sys.path``, so the processes it starts do not see them
either.

Written for any Python (no f-strings, no annotations): a Python 2 or an old Python 3 reads this
file too. Never raises: a failure in a served process turns the hook off with one line on stderr.
"""

import os
import sys

# The names pipecheck.launch sets (kept equal by tests/integration/test_run_environment.py).
_RUN_DIR = "PIPECHECK_RUN_DIR"
_PACKAGE = "PIPECHECK_RUN_PACKAGE"
_VERSION = "PIPECHECK_RUN_VERSION"
_PREFIX = "PIPECHECK_RUN_PREFIX"
_STAGE_DIR = "PIPECHECK_STAGE_DIR"  # pipecheck.probes.stages.STAGE_DIR_ENV, set by a measured parent
_RUN_VARIABLES = (_RUN_DIR, _PACKAGE, _VERSION, _PREFIX, _STAGE_DIR)
_MIN_PYTHON = (3, 10)  # pyproject.toml's requires-python

_HERE = os.path.dirname(os.path.abspath(__file__))


def _same_path(a, b):
    return bool(a) and bool(b) and os.path.realpath(a) == os.path.realpath(b)


def _version_in(package_dir):
    """The ``__version__`` written in ``package_dir/_version.py``, read as text (importing
    another install's package could run anything), or ``None``."""
    try:
        with open(os.path.join(package_dir, "_version.py")) as handle:
            for line in handle:
                if line.startswith("__version__"):
                    return line.split("=", 1)[1].strip().strip("\"'")
    except Exception:
        pass
    return None


def _find_pipecheck():
    """The folder of the ``pipecheck`` package this interpreter would import, or ``None``."""
    try:
        from importlib.util import find_spec

        spec = find_spec("pipecheck")
    except Exception:  # no importlib.util (Python 2), or a broken finder
        return None
    if spec is None or not getattr(spec, "origin", None):
        return None
    return os.path.dirname(spec.origin)


def _served():
    """Whether this interpreter can run the pipecheck that started the run (module docstring);
    makes the parent's package importable in the parent's own environment."""
    if tuple(sys.version_info[:2]) < _MIN_PYTHON:
        return False
    package = os.environ.get(_PACKAGE, "")
    found = _find_pipecheck()
    if found is None and package and _same_path(sys.prefix, os.environ.get(_PREFIX)):
        sys.path.append(os.path.dirname(package))  # e.g. pipecheck run from a source checkout
        found = _find_pipecheck()
    if found is None:
        return False
    if _same_path(found, package):
        return True
    wanted = os.environ.get(_VERSION)
    return wanted is not None and _version_in(found) == wanted


def _leave_no_trace():
    """An interpreter the hook cannot serve: take the run's variables and this folder out of
    the environment its own children get, and out of its ``sys.path``."""
    for name in _RUN_VARIABLES:
        if name in os.environ:
            del os.environ[name]  # del, not pop: Python 2's pop leaves the C environment as is
    entries = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    kept = [entry for entry in entries if entry and not _same_path(entry, _HERE)]
    if kept:
        os.environ["PYTHONPATH"] = os.pathsep.join(kept)
    elif "PYTHONPATH" in os.environ:
        del os.environ["PYTHONPATH"]
    sys.path[:] = [entry for entry in sys.path if not _same_path(entry, _HERE)]


def _install():
    if not os.environ.get(_RUN_DIR):
        return
    try:
        served = _served()
    except Exception:
        served = False
    if not served:
        try:
            _leave_no_trace()
        except Exception:
            pass
        return
    try:
        from pipecheck.run_hook import install

        install()
    except Exception as err:  # pipecheck broken in this interpreter: run unmeasured
        sys.stderr.write("pipecheck run: measuring is off in this process: %s: %s\n"
                         % (type(err).__name__, err))


def _chain():
    """Run the next ``sitecustomize`` on the path (Debian's, a venv's), as Python would have."""
    try:
        import importlib.machinery
        import importlib.util
    except ImportError:  # Python 2: nothing to chain with
        return
    rest = [p for p in sys.path if not _same_path(p or os.curdir, _HERE)]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        sys.stderr.write("Error in sitecustomize; set PYTHONVERBOSE for traceback:\n%s: %s\n"
                         % (type(err).__name__, err))


_install()
_chain()
