"""Output paths another user controls: a symlink planted in a sticky, world-writable directory
(as in ``/tmp``) is not followed, as the kernel's ``fs.protected_symlinks`` would not follow it;
a file replaced keeps its mode and owner; a file with several hard links is written in place
(every name sees the new text), or refused in a sticky, world-writable directory.

The sticky directory is a folder of mode 1777 in the test's own tmp path; "another user" is
uid 65534 (``nobody``), given to a symlink with ``os.lchown``: that needs root, so these tests
skip elsewhere."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest
from torch.utils.data import DataLoader

import pipecheck
from pipecheck._atomic import UnsafePath, output_problem, write_text_atomic
from pipecheck.report import load
from report_factory import sample_report

OTHER = 65534
"""The other user's uid (``nobody``)."""

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user "
                                "(os.lchown) needs root")


@pytest.fixture
def sticky(tmp_path):
    """A sticky, world-writable folder (mode 1777, as /tmp), owned by this test's user."""
    folder = tmp_path / "shared"
    folder.mkdir()
    os.chmod(folder, 0o1777)
    return folder


@pytest.fixture
def victim(tmp_path):
    """A file of this user's with mode 0600, which a planted link would have us overwrite."""
    path = tmp_path / "private" / "secret"
    path.parent.mkdir()
    path.write_text("secret\n")
    os.chmod(path, 0o600)
    return path


def _planted(link, target, owner=OTHER):
    link.symlink_to(target)
    os.lchown(link, owner, owner)
    return link


@needs_root
def test_the_cli_refuses_a_symlink_another_user_planted_in_a_sticky_folder(saved, sticky,
                                                                          victim):
    link = _planted(sticky / "run.json", victim)
    done = subprocess.run([sys.executable, "-m", "pipecheck", "report", str(saved), "--json",
                           str(link)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("pipecheck: error: ")
    assert (f"{link} is a symlink owned by another user (uid {OTHER}) in the sticky, "
            f"world-writable directory {sticky}") in done.stderr
    assert victim.read_text() == "secret\n" and stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert done.stdout == ""  # refused before anything was rendered


@needs_root
def test_every_writer_refuses_it_and_wrap_says_so_up_front(sticky, victim):
    link = _planted(sticky / "run.json", victim)
    for write in (lambda: write_text_atomic(link, "x", "trace"),
                  lambda: sample_report().save(link, per_rank=False)):
        with pytest.raises(UnsafePath, match="fs.protected_symlinks"):
            write()
    assert "fs.protected_symlinks" in output_problem(link)
    with pytest.raises(ValueError, match="symlink owned by another user"):
        pipecheck.wrap(DataLoader(list(range(8))), save=link, host=False)
    assert victim.read_text() == "secret\n"


@needs_root
def test_a_planted_symlink_to_a_folder_on_the_way_is_refused_too(sticky, victim):
    folder_link = _planted(sticky / "out", victim.parent)
    with pytest.raises(UnsafePath, match=f"{folder_link} is a symlink owned by another user"):
        write_text_atomic(folder_link / "secret", "x", "report")
    assert victim.read_text() == "secret\n"


@needs_root
def test_links_the_kernel_follows_are_followed(tmp_path, sticky, victim):
    """Owned by this user, or by the folder's owner, or anywhere outside a sticky folder."""
    mine = _planted(sticky / "mine.json", victim, owner=os.geteuid())
    write_text_atomic(mine, "one\n", "report")
    assert victim.read_text() == "one\n" and mine.is_symlink()
    os.chown(sticky, OTHER, OTHER)  # the folder's owner planted it: followed
    owners = _planted(sticky / "owners.json", victim)
    write_text_atomic(owners, "two\n", "report")
    assert victim.read_text() == "two\n"
    plain = tmp_path / "plain"
    plain.mkdir(mode=0o777)  # world-writable but not sticky
    write_text_atomic(_planted(plain / "x.json", victim), "three\n", "report")
    assert victim.read_text() == "three\n"


@needs_root
def test_a_replaced_file_keeps_its_mode_and_owner(tmp_path):
    path = tmp_path / "run.json"
    path.write_text("old")
    os.chmod(path, 0o600)
    os.chown(path, OTHER, OTHER)
    sample_report().save(path, per_rank=False)
    after = path.stat()
    assert stat.S_IMODE(after.st_mode) == 0o600 and (after.st_uid, after.st_gid) == (OTHER, OTHER)
    assert load(path).kind == "wrap"
    os.chmod(path, 0o4751)  # setuid is not carried onto a report
    write_text_atomic(path, "x", "report")
    assert stat.S_IMODE(path.stat().st_mode) == 0o751


def test_a_hard_linked_file_is_written_in_place(tmp_path):
    first = tmp_path / "run.json"
    first.write_text("old")
    os.chmod(first, 0o640)
    second = tmp_path / "copy.json"
    os.link(first, second)
    inode = first.stat().st_ino
    sample_report().save(first, per_rank=False)
    assert second.read_text() == first.read_text() and load(second).kind == "wrap"
    assert first.stat().st_ino == inode and first.stat().st_nlink == 2
    assert stat.S_IMODE(first.stat().st_mode) == 0o640
    write_text_atomic(first, "short\n", "report")  # truncated, not left with the old tail
    assert second.read_text() == "short\n"
    assert sorted(os.listdir(tmp_path)) == ["copy.json", "run.json"]  # no temporary left


def test_a_hard_linked_file_in_a_sticky_folder_is_refused(sticky, tmp_path):
    first = sticky / "run.json"
    first.write_text("old")
    os.link(first, tmp_path / "elsewhere")
    with pytest.raises(UnsafePath, match="has 2 hard links and sits in the sticky"):
        write_text_atomic(first, "new", "report")
    assert "has 2 hard links" in output_problem(first)
    assert first.read_text() == "old"
