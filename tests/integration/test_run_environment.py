"""The hook's environment reaches only the Python processes it can serve: real interpreters
started with the environment ``pipecheck run`` gives its program (``launch.child_environment``).
Another interpreter (a venv without pipecheck, the system Python, Python 2) stays silent, and
what it starts sees none of pipecheck's variables; this interpreter is measured."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import pipecheck
from pipecheck import launch
from pipecheck._run_site import sitecustomize as site_hook
from pipecheck.probes.stages import STAGE_DIR_ENV
from pipecheck.run_hook import RUN_DIR_ENV

# What an interpreter sees of the run, and what a process it starts would inherit (through
# the C environment, as subprocess passes it on).
PROBE = textwrap.dedent("""
    import json, os, subprocess, sys
    names = %r
    child = subprocess.check_output(
        ["/usr/bin/env"], universal_newlines=True).splitlines()
    print(json.dumps({
        "measured": "pipecheck.run_hook" in sys.modules,
        "own": dict((n, os.environ.get(n)) for n in names),
        "inherited": sorted(line.split("=", 1)[0] for line in child
                            if line.split("=", 1)[0] in names),
    }))
""")
NAMES = [RUN_DIR_ENV, launch.PACKAGE_ENV, launch.VERSION_ENV, launch.PREFIX_ENV, STAGE_DIR_ENV,
         "PYTHONPATH"]


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory) -> str:
    """A real venv of this Python without pipecheck (or anything else) installed."""
    folder = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True,
                   timeout=120)
    return str(folder / "bin" / "python")


def _other_interpreters(bare_venv: str) -> list[str]:
    """The venv without pipecheck, the system Python, and a Python 2 and a Python 3 older
    than pipecheck supports where pyenv has them (they read the hook's file too)."""
    found = [bare_venv]
    pyenv = os.path.expanduser("~/.pyenv/versions")
    for candidate in ["/usr/bin/python3", *sorted(glob.glob(f"{pyenv}/2.*/bin/python"))[-1:],
                      *sorted(glob.glob(f"{pyenv}/3.[6-9].*/bin/python"))[:1]]:
        if os.access(candidate, os.X_OK) and candidate not in found:
            found.append(candidate)
    return found


def _probe(python: str, run_dir: Path, cwd: Path) -> tuple[dict, str]:
    env = launch.child_environment(str(run_dir))
    env[STAGE_DIR_ENV] = "/dev/shm/pipecheck-stages.example"  # as a measured parent has it
    result = subprocess.run([python, "-c", PROBE % (NAMES,)], env=env, cwd=cwd,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout), result.stderr


def test_another_interpreter_is_silent_and_passes_nothing_on(bare_venv, tmp_path):
    others = _other_interpreters(bare_venv)
    for python in others:
        seen, stderr = _probe(python, tmp_path, tmp_path)
        assert stderr == "", (python, stderr)  # was: "measuring is off ... ModuleNotFoundError"
        assert not seen["measured"], python
        assert seen["own"] == {name: None for name in NAMES}, python
        assert seen["inherited"] == [], python
    assert len(others) >= 2 or not os.path.exists("/usr/bin/python3")


def test_this_interpreter_is_measured_and_passes_the_run_on(tmp_path):
    seen, stderr = _probe(sys.executable, tmp_path, tmp_path)
    assert stderr == ""
    assert seen["measured"]
    assert seen["own"][RUN_DIR_ENV] == str(tmp_path)
    assert seen["own"]["PYTHONPATH"].split(os.pathsep)[0] == launch.SITE_DIR
    assert seen["inherited"] == sorted(NAMES)  # its own children (torchrun's ranks) get it too


def test_the_hook_and_the_launcher_agree_on_names():
    assert (site_hook._RUN_DIR, site_hook._PACKAGE, site_hook._VERSION, site_hook._PREFIX,
            site_hook._STAGE_DIR) == (RUN_DIR_ENV, launch.PACKAGE_ENV, launch.VERSION_ENV,
                                      launch.PREFIX_ENV, STAGE_DIR_ENV)
    pyproject = (Path(pipecheck.__file__).parents[1] / "pyproject.toml").read_text()
    wanted = ".".join(map(str, site_hook._MIN_PYTHON))
    assert f'requires-python = ">={wanted}"' in pyproject
    assert site_hook._version_in(os.path.dirname(pipecheck.__file__)) == pipecheck.__version__
    assert os.path.samefile(site_hook._HERE, launch.SITE_DIR)


@pytest.mark.slow
def test_the_parents_environment_is_served_from_a_source_checkout(tmp_path):
    """A venv whose site-packages reach torch but not the installed pipecheck: ``python -m
    pipecheck run`` from the checkout imports pipecheck from the current directory, which
    the program's interpreter does not have on its path; the hook adds the parent's."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    site = subprocess.check_output([str(venv / "bin" / "python"), "-c",
                                    "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                   text=True).strip()
    ours = subprocess.check_output([sys.executable, "-c",
                                    "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                   text=True).strip()
    # A bare path entry: this venv's .pth files (pipecheck's editable finder) are not run.
    Path(site, "deps.pth").write_text(ours + "\n")
    program = tmp_path / "train.py"
    program.write_text(textwrap.dedent("""
        import torch
        from torch.utils.data import DataLoader
        for batch in DataLoader(list(range(12)), batch_size=4):
            pass
    """))
    python = str(venv / "bin" / "python")
    checkout = Path(pipecheck.__file__).parents[1]
    assert subprocess.run([python, "-c", "import pipecheck"], cwd=tmp_path,
                          capture_output=True).returncode != 0  # not installed there
    result = subprocess.run([python, "-m", "pipecheck", "run", "--json", str(tmp_path / "r.json"),
                             "--quiet", "--", python, str(program)], cwd=checkout,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert pipecheck.load(tmp_path / "r.json").consumer.batches == 3
