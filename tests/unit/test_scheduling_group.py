"""Which scheduling group a process is in (:func:`pipecheck.probes.neighbours.scheduling_group`),
read from fake ``/proc`` and cgroup trees laid out as the kernel writes them (``cgroups(7)``,
``sched(7)``)."""

from __future__ import annotations

import pytest

from pipecheck.probes.neighbours import scheduling_group


def fake_proc(tmp_path, pid, cgroup, autogroup="/autogroup-7 nice 0", enabled="1"):
    proc = tmp_path / "proc"
    (proc / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "cgroup").write_text(cgroup)
    (proc / str(pid) / "autogroup").write_text(autogroup + "\n")
    (proc / "sys" / "kernel").mkdir(parents=True, exist_ok=True)
    (proc / "sys" / "kernel" / "sched_autogroup_enabled").write_text(enabled + "\n")
    return str(proc)


def test_v1_cpu_controller_path_and_autogroup_at_the_root(tmp_path):
    proc = fake_proc(tmp_path, 5, "4:memory:/x\n2:cpu,cpuacct:/\n1:name=systemd:/\n")
    assert scheduling_group(5, proc) == ("/", "/autogroup-7")


def test_autogroup_ignored_outside_the_root_cgroup_or_when_disabled(tmp_path):
    proc = fake_proc(tmp_path, 5, "2:cpu,cpuacct:/docker/abc\n")
    assert scheduling_group(5, proc) == ("/docker/abc", None)
    proc = fake_proc(tmp_path / "off", 6, "2:cpu:/\n", enabled="0")
    assert scheduling_group(6, proc) == ("/", None)


def test_v2_path_is_the_deepest_ancestor_with_the_cpu_controller(tmp_path):
    root = tmp_path / "cgroup"
    (root / "user.slice" / "session-3.scope").mkdir(parents=True)
    (root / "user.slice" / "cgroup.controllers").write_text("cpu memory pids\n")
    (root / "user.slice" / "session-3.scope" / "cgroup.controllers").write_text("memory pids\n")
    proc = fake_proc(tmp_path, 9, "0::/user.slice/session-3.scope\n")
    assert scheduling_group(9, proc, str(root)) == ("/user.slice", None)
    # No cpu controller anywhere below the root: the root group, where autogroups apply.
    (root / "user.slice" / "cgroup.controllers").write_text("memory pids\n")
    assert scheduling_group(9, proc, str(root)) == ("/", "/autogroup-7")


def test_v2_in_a_cgroup_namespace_takes_the_path_as_is(tmp_path):
    proc = fake_proc(tmp_path, 9, "0::/job/step\n")
    assert scheduling_group(9, proc, str(tmp_path / "missing")) == ("/job/step", None)


@pytest.mark.parametrize("cgroup", ["", "garbage\n", "3:memory:/x\n"])
def test_unreadable_or_cpu_less_files_give_none(tmp_path, cgroup):
    proc = fake_proc(tmp_path, 5, cgroup)
    assert scheduling_group(5, proc) is None
    assert scheduling_group(12345, str(tmp_path / "nowhere")) is None
