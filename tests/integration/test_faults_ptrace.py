"""The Yama opt-in that lets py-spy attach (``PR_SET_PTRACER_ANY``) lasts only as long as the
stack-sampling window: it is withdrawn (``PR_SET_PTRACER 0``) when the window ends, whether
sampling worked or py-spy failed to start."""

from __future__ import annotations

import subprocess

from pipecheck.probes import py_spy_setup, stacks
from pipecheck.probes.stacks import StackSampler


def _record_prctl(monkeypatch) -> list[int]:
    calls: list[int] = []

    def set_ptracer(value):  # the real prctl, recorded
        calls.append(value.value)
        return True

    monkeypatch.setattr(py_spy_setup, "_set_ptracer", set_ptracer)
    monkeypatch.setattr(py_spy_setup, "ptrace_scope", lambda: 1)
    return calls


def test_the_ptrace_opt_in_is_withdrawn_when_the_window_ends(monkeypatch):
    calls = _record_prctl(monkeypatch)
    # Stand-ins for py-spy that end on SIGINT, as py-spy does at the end of the window.
    monkeypatch.setattr(stacks, "_launch", lambda command: subprocess.Popen(
        ["sleep", "30"], stderr=subprocess.PIPE))
    sampler = StackSampler(window_s=0.2, py_spy="/usr/bin/true")
    sampler.start()
    assert calls == [py_spy_setup._PR_SET_PTRACER_ANY.value]  # open during the window
    sampler.stop()
    assert calls == [py_spy_setup._PR_SET_PTRACER_ANY.value, 0]
    sampler.stop()  # idempotent: nothing more
    assert calls == [py_spy_setup._PR_SET_PTRACER_ANY.value, 0]


def test_the_ptrace_opt_in_is_withdrawn_when_py_spy_cannot_start(monkeypatch):
    calls = _record_prctl(monkeypatch)

    def cannot_launch(command):
        raise OSError("no more processes")

    monkeypatch.setattr(stacks, "_launch", cannot_launch)
    sampler = StackSampler(window_s=5.0, py_spy="/usr/bin/true")
    sampler.start()
    assert sampler.record().status == "failed"
    assert calls == [py_spy_setup._PR_SET_PTRACER_ANY.value, 0]
