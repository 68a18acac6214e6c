"""Fault injection: output paths that are not plain files. Atomic replace is for regular files
only; devices and pipes are written through, a symlink keeps pointing at its (replaced)
target, and ``-`` means stdout. Real CLI subprocesses where stdout matters.

The device cases use stand-ins in the test's folder, a character device node equal to
``/dev/null`` and a symlink to ``/proc/self/fd/1`` equal to ``/dev/stdout``: run as root, a
regression would otherwise replace the machine's own ``/dev/null`` with a plain file (as the
code before this fix did)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

from pipecheck._atomic import write_text_atomic
from pipecheck.report import load

from report_factory import sample_report


def _cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipecheck", *args], capture_output=True,
                          text=True, timeout=120, cwd=cwd)


@pytest.fixture
def dev_null(tmp_path):
    """A character device node equal to /dev/null (1, 3) in the test's folder."""
    node = tmp_path / "dev" / "null"
    node.parent.mkdir()
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("making a device node needs CAP_MKNOD (root)")
    return node


@pytest.fixture
def dev_stdout(tmp_path):
    """A symlink to /proc/self/fd/1, as /dev/stdout is."""
    link = tmp_path / "dev" / "stdout"
    link.parent.mkdir(exist_ok=True)
    link.symlink_to("/proc/self/fd/1")
    return link


def test_dev_null_stays_a_character_device(dev_null):
    write_text_atomic(dev_null, "x" * 100, "report")
    sample_report().save(dev_null, per_rank=False)
    assert stat.S_ISCHR(os.stat(dev_null).st_mode)
    assert os.listdir(dev_null.parent) == ["null"]


def test_a_symlink_is_kept_and_its_target_replaced(tmp_path):
    target = tmp_path / "data" / "real.json"
    target.parent.mkdir()
    target.write_text("old")
    link = tmp_path / "latest.json"
    link.symlink_to(target)
    sample_report().save(link, per_rank=False)
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert load(target).kind == "wrap"
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


def test_a_fifo_is_written_through(tmp_path):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE, text=True)
    write_text_atomic(fifo, "through the pipe\n", "report")
    assert reader.communicate(timeout=30)[0] == "through the pipe\n"
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_json_to_dev_stdout_reaches_stdout(saved, dev_stdout):
    done = _cli("report", str(saved), "--json", str(dev_stdout), "--quiet")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["kind"] == "wrap"
    assert os.readlink(dev_stdout) == "/proc/self/fd/1"


@pytest.mark.slow
def test_html_to_dev_stdout_reaches_stdout(saved, dev_stdout):
    done = _cli("report", str(saved), "--html", str(dev_stdout), "--quiet")
    assert done.returncode == 0, done.stderr
    assert done.stdout.lstrip().lower().startswith("<!doctype html")
    assert os.readlink(dev_stdout) == "/proc/self/fd/1"


def test_dash_means_stdout_and_nothing_else_is_printed_there(saved, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    done = _cli("report", str(saved), "--json", "-", cwd=work)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["kind"] == "wrap"  # no summary mixed in
    assert os.listdir(work) == []  # no file named "-"


def test_two_outputs_on_stdout_is_bad_input(saved):
    done = _cli("report", str(saved), "--json", "-", "--html", "-")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "stdout" in done.stderr
