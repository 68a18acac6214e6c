"""Hot stacks with py-spy: the burning worker function comes out on top (real workers, spawn),
and a missing or denied py-spy leaves a ``stacks-unavailable`` finding and everything else."""

from __future__ import annotations

import json
import os
import pickle
import re
import signal
import stat
import subprocess
import sys
import threading
import time

import psutil
import pytest
from torch.utils.data import DataLoader

import pipecheck
from paths import SUPPORT
from pipecheck import _owned
from cause_datasets import BusyDataset, burn_in_map_stage
from pipecheck.probes import py_spy_setup, stacks
from pipecheck.demo_data import ensure_shards
from pipecheck.probes.speedscope import Frame, SampledStack, parse_speedscope
from pipecheck.probes.py_spy_setup import PtracerOptIn, unavailable_reason
from pipecheck.probes.stacks import StackSampler, hot_functions, main_wait, stage_of

HOT = "burn_cpu_in_pipecheck_test_worker"


def _busy_run(context="fork", workers=2, **wrap_options):
    loader = DataLoader(BusyDataset(160, 0.01), batch_size=4, num_workers=workers,
                        multiprocessing_context=context)
    with pipecheck.wrap(loader, host_interval_s=0.2, **wrap_options) as wrapped:
        for _ in wrapped:
            time.sleep(0.002)
        return wrapped.report()


@pytest.mark.slow  # 5 s of py-spy; the default run's stage-grouping test samples for real too
@pytest.mark.skipif(py_spy_setup.find_py_spy() is None, reason="py-spy not installed")
def test_the_burning_worker_function_is_the_top_hot_function():
    # spawn: the opt-in wrapper must survive pickling; its start-up must not count as hot
    report = _busy_run("spawn", workers=1, stacks=True, stacks_window_s=30.0,
                       stacks_rate_hz=100)
    assert report.stacks.status == "ok", report.stacks.note
    top = report.stacks.top[0]
    assert top.function == HOT and top.file.endswith("cause_datasets.py")
    assert top.fraction > 0.5 and report.stacks.worker_samples >= 50
    assert report.stacks.worker_other_samples > 0  # spawned workers importing torch
    # The main thread mostly waits for the single slow worker: on an empty queue, or receiving
    # the fd of each batch from that worker's resource-sharer thread, which waits for the GIL
    # the burning loop holds (30-50% of the wait measured here, so neither share is asserted top).
    wait = report.stacks.main_wait
    assert report.stacks.main_wait_samples > 0 and set(wait) == {"queue-empty", "receiving", "other"}
    assert wait["queue-empty"] + wait["receiving"] > 0.6 and wait["queue-empty"] > 0.2, wait
    # py-spy's own CPU, read from its process (root here): sampling at 100 Hz costs some, and
    # never more than every core for the whole run
    overhead = report.stacks.overhead_cpu_s
    assert overhead is not None and 0 < overhead < report.consumer.wall_s * os.cpu_count()
    data = json.loads(report.to_json())
    assert data["stacks"]["top"][0]["function"] == HOT
    assert {"function", "file", "line", "fraction"} <= set(data["stacks"]["top"][0])
    assert pipecheck.Report.from_dict(data).stacks == report.stacks
    hot = [f for f in report.diagnosis.findings if f.kind == "hot-function"]
    assert hot and HOT in hot[0].message
    assert HOT in report.render(width=100)


@pytest.mark.skipif(py_spy_setup.find_py_spy() is None, reason="py-spy not installed")
def test_hot_functions_are_grouped_under_their_webdataset_stage(tmp_path):
    import webdataset as wds

    urls = ensure_shards(tmp_path, images=96, shards=2, size=32)
    pipeline = (wds.WebDataset(urls, shardshuffle=False, empty_check=False)
                .decode("pil").to_tuple("jpg", "cls").map(burn_in_map_stage))
    loader = wds.WebLoader(pipeline, batch_size=8, num_workers=1)
    with pipecheck.wrap(loader, stacks=True, stacks_rate_hz=100) as wrapped:
        for _ in wrapped:
            pass
        report = wrapped.report()
    top = report.stacks.top[0]
    assert top.function == HOT and top.stage == "map", report.stacks.top[:3]
    assert max(report.stacks.stages, key=report.stacks.stages.get) == "map"
    assert "map" in report.render(width=100)


def _frame(text: str) -> Frame:
    """``"NAME (FILE:LINE)"`` as py-spy's frame (test shorthand; names here hold no " (")."""
    name, _, rest = text.partition(" (")
    file, _, line = rest.rstrip(")").rpartition(":")
    return Frame(name, file, int(line))


def _stack(*frames: str, samples: int, pid=None, thread=None) -> SampledStack:
    return SampledStack(pid, thread, tuple(_frame(f) for f in frames), samples)


def test_stage_of_names_the_innermost_stage():
    wds = "/site-packages/webdataset/"
    loop = "_worker_loop (/torch/utils/data/_utils/worker.py:1)"
    fetch = "_IterableDatasetFetcher.fetch (/torch/utils/data/_utils/fetch.py:5)"

    def stage(*frames):
        return stage_of([_frame(f) for f in frames])

    assert stage(loop, fetch, f"_map ({wds}filters.py:10)", "user_fn (/u.py:3)") == "map"
    assert stage(loop, fetch, f"_map ({wds}filters.py:10)", f"_decode ({wds}filters.py:20)",
                 f"Decoder.__call__ ({wds}autodecode.py:5)") == "decode"
    assert stage(loop, fetch, f"ResampledShards.__iter__ ({wds}shardlists.py:9)"
                 ) == "ResampledShards"
    assert stage(loop, "default_collate (/torch/utils/data/_utils/collate.py:3)") == "collate"
    assert stage(loop, fetch, "MyData.__getitem__ (/u.py:9)") == "fetch"
    assert stage(loop, "Queue.get (/py/queues.py:1)") == "worker loop"


def test_without_py_spy_the_report_says_so_and_the_rest_works(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no py-spy anywhere on PATH
    monkeypatch.setattr(py_spy_setup, "py_spy_dirs", lambda: [str(tmp_path)])  # nor beside Python
    report = _busy_run(stacks=True)
    assert report.stacks.status == "unavailable"
    (finding,) = [f for f in report.diagnosis.findings if f.kind == "stacks-unavailable"]
    assert "py-spy is not installed" in finding.message
    assert report.diagnosis.verdict == "input-bound"
    assert report.producer.capacity_batches_per_s and report.producer.workers_class
    # the analysis ran to the end (whether a change is proposed depends on the machine's load)
    assert report.diagnosis.judgement is not None and report.diagnosis.judgement.steady
    assert "stacks-unavailable" not in json.dumps(report.to_dict()["stress"] or {})


_UNACTIVATED_RUN = """
import sys, time
import pipecheck
from torch.utils.data import DataLoader
from cause_datasets import BusyDataset
# 2 s of work: py-spy, started beside it, takes a while to attach on a loaded machine.
loader = DataLoader(BusyDataset(200, 0.01), batch_size=4, num_workers=1)
with pipecheck.wrap(loader, stacks=True, stacks_window_s=30.0, host=False) as wrapped:
    for _ in wrapped:
        time.sleep(0.002)
    wrapped.report().save(sys.argv[1])
"""


@pytest.mark.slow
@pytest.mark.skipif(py_spy_setup.find_py_spy() is None, reason="py-spy not installed")
def test_py_spy_beside_an_unactivated_venvs_python_is_found(tmp_path):
    # Job scripts run venv/bin/python train.py without activating the venv: PATH lacks its bin.
    bare_path = os.pathsep.join(d for d in ("/usr/local/bin", "/usr/bin", "/bin")
                                if py_spy_setup.shutil.which("py-spy", path=d) is None)
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    if not os.access(beside, os.X_OK):
        pytest.skip(f"py-spy is not beside {sys.executable}")
    script = tmp_path / "train.py"
    script.write_text(_UNACTIVATED_RUN)
    env = {**os.environ, "PATH": bare_path,
           "PYTHONPATH": os.pathsep.join([str(SUPPORT)] + sys.path)}
    subprocess.run([sys.executable, str(script), str(tmp_path / "run.json")], env=env,
                   check=True, timeout=240, cwd=tmp_path)
    record = pipecheck.load(tmp_path / "run.json").stacks
    assert "not installed" not in (record.note or ""), record.note
    if record.status == "failed" and "denied" in (record.note or ""):
        pytest.skip(f"py-spy may not attach here: {record.note}")
    assert record.status == "ok", record.note
    assert record.worker_samples + record.main_samples > 0


def test_py_spy_is_looked_up_beside_python_then_in_scripts_dirs_then_on_path(monkeypatch,
                                                                            tmp_path):
    beside, scripts, user, on_path = (tmp_path / name for name in ("venv", "scripts", "user",
                                                                   "path"))
    for directory in (beside, scripts, user, on_path):
        directory.mkdir()
        fake = directory / "py-spy"
        fake.write_text("#!/bin/sh\n")
        fake.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(beside / "python"))
    schemes = {None: str(scripts), "user": str(user)}
    monkeypatch.setattr(py_spy_setup.sysconfig, "get_path",
                        lambda name, scheme=None: schemes[scheme])
    monkeypatch.setattr(py_spy_setup.sysconfig, "get_preferred_scheme", lambda key: key)
    monkeypatch.setenv("PATH", str(on_path))
    assert py_spy_setup.py_spy_dirs() == [str(beside), str(scripts), str(user)]
    found = []
    for directory in (beside, scripts, user, on_path):
        found.append(py_spy_setup.find_py_spy())
        (directory / "py-spy").unlink()
    found.append(py_spy_setup.find_py_spy())
    assert found == [str(d / "py-spy") for d in (beside, scripts, user, on_path)] + [None]


def _fake_py_spy(tmp_path, script: str) -> str:
    path = tmp_path / "py-spy"
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_a_denied_py_spy_is_reported_with_how_to_enable_it(tmp_path):
    fake = _fake_py_spy(tmp_path, 'echo "Error: Permission denied (os error 13)" >&2\nexit 1\n')
    sampler = StackSampler(window_s=0.2, py_spy=fake)
    sampler.start()
    time.sleep(0.3)
    sampler.stop()
    record = sampler.record()
    assert record.status == "failed"
    assert "Permission denied" in record.note and "--cap-add SYS_PTRACE" in record.note


def test_unavailable_reasons_say_how_to_enable():
    assert unavailable_reason("/usr/bin/py-spy", None, False) is None
    assert unavailable_reason("/usr/bin/py-spy", 1, False) is None  # workers opt in
    assert "CAP_SYS_PTRACE" in unavailable_reason("/usr/bin/py-spy", 2, False)
    assert "--cap-add SYS_PTRACE" in unavailable_reason("/usr/bin/py-spy", 2, False)
    assert unavailable_reason("/usr/bin/py-spy", 2, True) is None
    assert "until reboot" in unavailable_reason("/usr/bin/py-spy", 3, True)
    assert "pip install py-spy" in unavailable_reason(None, None, False)


def test_hot_functions_split_worker_and_main_samples():
    main, step = "main (/t/train.py:1)", "step (/t/train.py:9)"
    loop = "_worker_loop (/w.py:3)"
    stacks = [
        _stack(main, step, samples=30, pid=10),
        _stack(loop, "decode (/d.py:7)", samples=60, pid=11),
        _stack(loop, samples=20, pid=11),
        _stack("resize (/d.py:20)", samples=20, pid=13),
    ]
    parsed = hot_functions(stacks, main_pid=10)
    assert parsed["worker_samples"] == 80 and parsed["main_samples"] == 30
    assert parsed["worker_other_samples"] == 20  # resize ran outside the worker loop
    assert [(f.function, f.file, f.line) for f in parsed["top"]] == [
        ("decode", "/d.py", 7), ("_worker_loop", "/w.py", 3)]
    assert parsed["top"][0].fraction == pytest.approx(0.75)
    assert parsed["top"][1].inclusive_fraction == pytest.approx(1.0)
    assert parsed["main_top"][0].function == "step"
    # Not torch workers (no worker loop anywhere): every sample of theirs counts.
    plain = hot_functions([_stack("crunch (/c.py:4)", samples=5, pid=2)], main_pid=1)
    assert plain["worker_samples"] == 5 and plain["top"][0].function == "crunch"
    own = hot_functions([_stack("HostProbe._run (/p/host.py:9)", "read (/p/x.py:1)",
                                samples=9)], main_pid=1)
    assert own["main_samples"] == 0  # pipecheck's sampler thread is not the user's code


def test_speedscope_names_cannot_forge_frames_processes_or_counts():
    # What py-spy 0.4 writes with --subprocesses, with names a raw-text parser would split.
    forged = "step;_worker_loop (/w.py:3)\n<module> (/x.py:1) 999"
    thread = 'Thread 7 "evil\nProcess 99 Thread 99 \\"x\\""'
    text = json.dumps({
        "$schema": "https://www.speedscope.app/file-format-schema.json",
        "shared": {"frames": [
            {"name": "<module>", "file": "/t/train.py", "line": 1, "col": None},
            {"name": forged, "file": "/odd dir;\nx.py", "line": 5, "col": None},
            {"name": "_worker_loop", "file": "/torch/utils/data/_utils/worker.py", "line": 3,
             "col": None},
        ]},
        "profiles": [
            {"type": "sampled", "name": f'Process 10 {thread}', "unit": "seconds",
             "startValue": 0, "endValue": 1, "samples": [[0, 1]] * 30 + [[0]] * 10,
             "weights": [0.02] * 40},
            {"type": "sampled", "name": 'Process 11 Thread 11 "MainThread"',
             "unit": "seconds", "startValue": 0, "endValue": 1, "samples": [[2]] * 4,
             "weights": [0.02] * 4},
        ],
    })
    stacks = sorted(parse_speedscope(text), key=lambda s: (s.pid, -s.samples))
    assert [(s.pid, s.thread_id, len(s.frames), s.samples) for s in stacks] == [
        (10, 7, 2, 30), (10, 7, 1, 10), (11, 11, 1, 4)]
    assert stacks[0].frames[1] == Frame(forged, "/odd dir;\nx.py", 5)
    parsed = hot_functions(stacks, main_pid=10)
    assert parsed["main_samples"] == 40 and parsed["worker_samples"] == 4
    assert parsed["main_top"][0].function == forged and parsed["main_top"][0].samples == 30


@pytest.mark.parametrize("text, what", [
    ("", "not JSON"),
    ("[1]", "no 'shared'"),
    ('{"shared": {"frames": []}, "profiles": [{"name": "Thread 1", "samples": [[0]]}]}',
     "names no known frame"),
    ('{"shared": {"frames": [{"name": "f"}]}, "profiles": [{"name": "Thread 1", '
     '"samples": [[-1]]}]}', "names no known frame"),
    ('{"shared": {"frames": [{"name": "f"}]}, "profiles": [{"name": "Thread 1", '
     '"samples": [[{}]]}]}', "not a list of frame indices"),
    ('{"shared": {"frames": [{"name": "f"}]}, "profiles": [{"name": "cpu 1", '
     '"samples": [[0]]}]}', "not '[Process PID ]Thread TID"),
    ('{"shared": {"frames": [{"name": "f", "line": "x"}]}, "profiles": []}',
     "bad file or line"),
])
def test_output_that_is_not_py_spys_speedscope_is_refused_naming_what(text, what):
    with pytest.raises(ValueError, match=re.escape(what)):
        parse_speedscope(text)


def _remember_worker(worker_id: int) -> None:
    os.environ["PIPECHECK_TEST_WORKER"] = str(worker_id)


def test_ptracer_opt_in_calls_the_loaders_worker_init_fn_and_pickles():
    wrapped = pickle.loads(pickle.dumps(PtracerOptIn(_remember_worker)))
    wrapped(3)
    assert os.environ.pop("PIPECHECK_TEST_WORKER") == "3"
    PtracerOptIn(None)(0)  # no function of the loader's own: nothing else to call


def test_the_users_loader_is_not_modified():
    loader = DataLoader(BusyDataset(8, 0.0), batch_size=4, num_workers=1)
    wrapped = pipecheck.wrap(loader, stacks=True, workers=False, host=False)
    wrapped.close()
    assert loader.worker_init_fn is None


def test_bad_window_is_refused():
    with pytest.raises(ValueError, match="stacks_window_s"):
        pipecheck.wrap([1, 2], stacks_window_s=0)


def test_main_wait_splits_the_main_threads_time_in_next():
    root = ("train (/t/train.py:1)", "_BaseDataLoaderIter.__next__ (/torch/dataloader.py:720)")
    boot = "Thread._bootstrap (/py/threading.py:1)"
    pin_loop = "_pin_memory_loop (/torch/pin_memory.py:18)"
    stacks = [
        _stack(*root, "_MultiProcessingDataLoaderIter._next_data (/torch/dataloader.py:1400)",
               "Queue.get (/py/multiprocessing/queues.py:98)",
               "_PollLikeSelector.select (/py/selectors.py:402)", samples=70),
        _stack(*root, "Queue.get (/py/multiprocessing/queues.py:98)",
               "rebuild_storage_fd (/site/torch/multiprocessing/reductions.py:537)", samples=20),
        _stack(*root, "_MultiProcessingDataLoaderIter._shutdown_workers "
               "(/torch/dataloader.py:1500)", samples=10),
        _stack("train (/t/train.py:1)", "step (/t/train.py:9)", samples=300),  # not in next()
        _stack(boot, pin_loop, "pin_memory (/torch/pin_memory.py:60)", samples=5),
        _stack(boot, pin_loop, "Queue.get (/py/queue.py:154)", samples=15),
        _stack(boot, "HostProbe._run (/p/host.py:9)", samples=40),
    ]
    parsed = main_wait(stacks)
    assert parsed["main_wait_samples"] == 100
    assert parsed["main_wait"] == pytest.approx(
        {"queue-empty": 0.7, "receiving": 0.2, "other": 0.1})
    assert parsed["pin_memory_busy_fraction"] == pytest.approx(0.25)
    assert parsed["main_thread_samples"] == 400  # in next() and the step, not other threads
    assert main_wait([]) == {"main_wait": {}, "main_wait_samples": 0,
                             "main_thread_samples": 0, "pin_memory_busy_fraction": None,
                             "worker_busy_samples": {}, "worker_samples_by_pid": {}}


def test_main_wait_takes_the_thread_whose_id_is_the_pid_as_the_main_thread():
    # py-spy gives Linux thread ids: the main thread's is the pid, whatever its stack's root.
    next_frame = "_BaseDataLoaderIter.__next__ (/torch/dataloader.py:720)"
    stacks = [
        _stack("run (/t/train.py:1)", next_frame, samples=30, pid=10, thread=10),
        _stack("run (/t/train.py:1)", "step (/t/train.py:9)", samples=70, pid=10, thread=10),
        _stack("loop (/t/side.py:1)", next_frame, samples=50, pid=10, thread=12),  # a thread
    ]
    parsed = main_wait(stacks, 10)
    assert (parsed["main_wait_samples"], parsed["main_thread_samples"]) == (30, 100)


def test_main_wait_counts_each_workers_busy_samples_apart_from_the_main_thread():
    loop = "_worker_loop (/torch/utils/data/_utils/worker.py:300)"
    stacks = [
        _stack("train (/t/train.py:1)", "_BaseDataLoaderIter.__next__ (/torch/dataloader.py:720)",
               "Queue.get (/py/multiprocessing/queues.py:98)", samples=30, pid=10),
        _stack("train (/t/train.py:1)", "step (/t/train.py:9)", samples=70, pid=10),
        _stack(loop, "fetch (/torch/utils/data/_utils/fetch.py:50)",
               "__getitem__ (/t/train.py:20)", samples=60, pid=11),
        _stack(loop, "Queue.get (/py/multiprocessing/queues.py:98)", samples=40, pid=11),
        _stack("Thread._bootstrap (/py/threading.py:1)", samples=9, pid=11),  # not in the loop
    ]
    parsed = main_wait(stacks, 10)
    assert (parsed["main_wait_samples"], parsed["main_thread_samples"]) == (30, 100)
    assert parsed["worker_busy_samples"] == {"11": 60}
    assert parsed["worker_samples_by_pid"] == {"11": 100}


def test_a_second_py_spy_that_cannot_start_leaves_no_process_or_directory(monkeypatch):
    launched = []

    def launch_once(command):
        if launched:
            raise OSError("no more processes")
        launched.append(stacks.subprocess.Popen(["sleep", "30"], stderr=stacks.subprocess.PIPE))
        return launched[0]

    monkeypatch.setattr(stacks, "_launch", launch_once)
    monkeypatch.setattr(py_spy_setup, "ptrace_scope", lambda: None)
    sampler = StackSampler(window_s=5.0, py_spy="/usr/bin/true")
    sampler.start()
    record = sampler.record()
    assert record.status == "failed" and "no more processes" in record.note
    assert launched[0].returncode is not None  # the first py-spy was stopped and reaped
    assert not os.path.exists(sampler._dir)


def test_a_rate_below_one_sample_per_second_is_refused():
    # py-spy takes whole samples per second: 0.5 Hz must not silently become --rate 0
    with pytest.raises(ValueError, match="rate_hz must be >= 1"):
        StackSampler(rate_hz=0.5)
    with pytest.raises(ValueError, match="window_s must be > 0"):
        StackSampler(window_s=0)


def _hostile_target(tmp_path) -> subprocess.Popen:
    ready = tmp_path / "ready"
    target = subprocess.Popen([sys.executable, str(SUPPORT / "hostile_names.py"), "--ready",
                               str(ready)])
    deadline = time.monotonic() + 30
    while not ready.exists():
        assert target.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    return target


@pytest.mark.skipif(py_spy_setup.find_py_spy() is None, reason="py-spy not installed")
def test_names_with_newlines_and_semicolons_come_back_exactly_from_real_py_spy(tmp_path):
    from hostile_names import HOSTILE_FILE, HOSTILE_NAME, WAIT_NAME

    target = _hostile_target(tmp_path)
    try:
        sampler = StackSampler(target.pid, window_s=1.0, rate_hz=50, idle_subprocesses=True)
        sampler.start()
        time.sleep(1.0)
        sampler.stop()
        record = sampler.record()
    finally:
        target.kill()
        target.wait()
    assert record.status == "ok", record.note
    # Every stack is read whole: the step's name, forged frames and counts included, is one
    # frame with its own file; nothing forged a worker or a sample count.
    assert (HOSTILE_NAME, HOSTILE_FILE) in {(f.function, f.file) for f in record.main_top}
    fragments = set(re.split(r"[;\n]| \(", HOSTILE_NAME + ";" + WAIT_NAME))
    # Two fragments are also real frames of the script (the stand-in
    # _BaseDataLoaderIter.__next__ and its <module>), sampled now and then with its own file.
    forged = [f for f in record.main_top if f.function in fragments
              and os.path.basename(f.file or "") != "hostile_names.py"]
    assert not forged, record.main_top
    assert not {"/x/train.py", "/x/worker.py"} & {f.file for f in record.main_top}
    assert record.worker_samples == 0 and record.worker_samples_by_pid == {}
    assert record.main_samples <= 2 * 50  # no count of 99999 or 77 read from a name
    # The waits inside the stand-in __next__ are the main thread's, counted as such.
    assert 0 < record.main_wait_samples < record.main_thread_samples <= 2 * 50


@pytest.mark.skipif(py_spy_setup.find_py_spy() is None, reason="py-spy not installed")
def test_py_spy_outlives_the_thread_that_opened_the_window(tmp_path):
    # PR_SET_PDEATHSIG fires when the *thread* that forked py-spy ends: a loader iterated in a
    # short-lived thread must not kill its own sampler with it.
    from py_spy_children import sampling

    target = _hostile_target(tmp_path)
    try:
        sampler = StackSampler(target.pid, window_s=30.0, rate_hz=20)
        opener = threading.Thread(target=sampler.start)
        opener.start()
        opener.join()
        time.sleep(0.5)
        processes = [psutil.Process(p.pid) for p in sampler._processes]
        assert len(processes) == 2 and all(sampling(p) for p in processes)
        sampler.stop()
    finally:
        target.kill()
        target.wait()
    assert sampler.record().status == "ok", sampler.record().note


_WRAPPED_FOREVER = """
import sys, time
import pipecheck
from torch.utils.data import DataLoader
from cause_datasets import BusyDataset
loader = DataLoader(BusyDataset(10**6, 0.001), batch_size=4, num_workers=1)
save = sys.argv[1] if len(sys.argv) > 1 else None
wrapped = pipecheck.wrap(loader, stacks=True, stacks_window_s=300.0, save=save)
for index, _ in enumerate(wrapped):
    if index == 0:
        print("iterating", flush=True)
    time.sleep(0.01)
"""


def _swept(folder: str, timeout_s: float = 10.0) -> bool:
    """Whether a sweep (what the next run does) removes ``folder`` within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while folder not in _owned.sweep(os.path.dirname(folder), stacks.DIR_PREFIX):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.mark.slow
@pytest.mark.skipif(py_spy_setup.find_py_spy() is None, reason="py-spy not installed")
@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM", "SIGTERM with save"])
def test_py_spy_dies_with_a_wrapped_program(tmp_path, how):
    from py_spy_children import output_folder, py_spy_children, wait_gone

    script = tmp_path / "train.py"
    script.write_text(_WRAPPED_FOREVER)
    saved = tmp_path / "run.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SUPPORT)] + sys.path),
           "TMPDIR": str(tmp_path)}
    program = subprocess.Popen([sys.executable, str(script)]
                               + ([str(saved)] if how.endswith("save") else []),
                               stdout=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        assert program.stdout is not None and program.stdout.readline() == "iterating\n"
        children = py_spy_children(program.pid)
        folder = output_folder(children)
        workers = [p for p in psutil.Process(program.pid).children() if p not in children]
        time.sleep(1.0)  # some samples
        program.send_signal(getattr(signal, how.split()[0]))
        program.wait(timeout=60)
    finally:
        program.kill()
        program.wait()
    assert wait_gone(children) == []  # no py-spy left sampling
    if how.endswith("save"):  # the SIGTERM save stopped py-spy and read its samples
        assert pipecheck.load(saved).stacks.status == "ok"
        assert not os.path.exists(folder)
    else:  # no code ran (or none of pipecheck's): the next run sweeps the folder once the
        # forked workers that share its lock are gone (torch's watchdog ends them)
        assert os.path.exists(folder)
        assert wait_gone(workers, timeout_s=60) == []
        assert _swept(folder)
