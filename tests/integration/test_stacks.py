"""Hot stacks with py-spy: the burning worker function comes out on top (real workers, spawn),
and a missing or denied py-spy leaves a ``stacks-unavailable`` finding and everything else."""

from __future__ import annotations

import json
import os
import pickle
import stat
import subprocess
import sys
import time

import pytest
from torch.utils.data import DataLoader

import pipecheck
from paths import SUPPORT
from cause_datasets import BusyDataset, burn_in_map_stage
from pipecheck.probes import stacks
from pipecheck.demo_data import ensure_shards
from pipecheck.probes.stacks import (PtracerOptIn, StackSampler, parse_main_wait, parse_raw,
                                     stage_of, unavailable_reason)

HOT = "burn_cpu_in_pipecheck_test_worker"


def _busy_run(context="fork", workers=2, **wrap_options):
    loader = DataLoader(BusyDataset(160, 0.01), batch_size=4, num_workers=workers,
                        multiprocessing_context=context)
    with pipecheck.wrap(loader, host_interval_s=0.2, **wrap_options) as wrapped:
        for _ in wrapped:
            time.sleep(0.002)
        return wrapped.report()


@pytest.mark.skipif(stacks.find_py_spy() is None, reason="py-spy not installed")
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
    assert report.stacks.overhead_cpu_s is None or report.stacks.overhead_cpu_s >= 0
    data = json.loads(report.to_json())
    assert data["stacks"]["top"][0]["function"] == HOT
    assert {"function", "file", "line", "fraction"} <= set(data["stacks"]["top"][0])
    assert pipecheck.Report.from_dict(data).stacks == report.stacks
    hot = [f for f in report.diagnosis.findings if f.kind == "hot-function"]
    assert hot and HOT in hot[0].message
    assert HOT in report.render(width=100)


@pytest.mark.skipif(stacks.find_py_spy() is None, reason="py-spy not installed")
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


def test_stage_of_names_the_innermost_stage():
    wds = "/site-packages/webdataset/"
    loop = "_worker_loop (/torch/utils/data/_utils/worker.py:1)"
    fetch = "_IterableDatasetFetcher.fetch (/torch/utils/data/_utils/fetch.py:5)"
    assert stage_of([loop, fetch, f"_map ({wds}filters.py:10)", "user_fn (/u.py:3)"]) == "map"
    assert stage_of([loop, fetch, f"_map ({wds}filters.py:10)",
                     f"_decode ({wds}filters.py:20)", f"Decoder.__call__ ({wds}autodecode.py:5)"]
                    ) == "decode"
    assert stage_of([loop, fetch, f"ResampledShards.__iter__ ({wds}shardlists.py:9)"]
                    ) == "ResampledShards"
    assert stage_of([loop, "default_collate (/torch/utils/data/_utils/collate.py:3)"]
                    ) == "collate"
    assert stage_of([loop, fetch, "MyData.__getitem__ (/u.py:9)"]) == "fetch"
    assert stage_of([loop, "Queue.get (/py/queues.py:1)"]) == "worker loop"


def test_without_py_spy_the_report_says_so_and_the_rest_works(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no py-spy anywhere on PATH
    monkeypatch.setattr(stacks, "py_spy_dirs", lambda: [str(tmp_path)])  # nor beside Python
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
@pytest.mark.skipif(stacks.find_py_spy() is None, reason="py-spy not installed")
def test_py_spy_beside_an_unactivated_venvs_python_is_found(tmp_path):
    # Job scripts run venv/bin/python train.py without activating the venv: PATH lacks its bin.
    bare_path = os.pathsep.join(d for d in ("/usr/local/bin", "/usr/bin", "/bin")
                                if stacks.shutil.which("py-spy", path=d) is None)
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
    monkeypatch.setattr(stacks.sysconfig, "get_path",
                        lambda name, scheme=None: schemes[scheme])
    monkeypatch.setattr(stacks.sysconfig, "get_preferred_scheme", lambda key: key)
    monkeypatch.setenv("PATH", str(on_path))
    assert stacks.py_spy_dirs() == [str(beside), str(scripts), str(user)]
    found = []
    for directory in (beside, scripts, user, on_path):
        found.append(stacks.find_py_spy())
        (directory / "py-spy").unlink()
    found.append(stacks.find_py_spy())
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


def test_parse_raw_splits_worker_and_main_samples():
    text = "\n".join([
        'process 10:"python train.py";main (/t/train.py:1);step (/t/train.py:9) 30',
        'process 10:"python train.py";process 11:"python train.py";_worker_loop (/w.py:3);'
        'decode (/d.py:7) 60',
        'process 10:"python train.py";process 11:"python train.py";_worker_loop (/w.py:3) 20',
        'process 10:"x";process 12:"x";process 13:"x";resize (/d.py:20) 20',
        "garbage line",
    ])
    parsed = parse_raw(text, main_pid=10)
    assert parsed["worker_samples"] == 80 and parsed["main_samples"] == 30
    assert parsed["worker_other_samples"] == 20  # resize ran outside the worker loop
    assert [(f.function, f.file, f.line) for f in parsed["top"]] == [
        ("decode", "/d.py", 7), ("_worker_loop", "/w.py", 3)]
    assert parsed["top"][0].fraction == pytest.approx(0.75)
    assert parsed["top"][1].inclusive_fraction == pytest.approx(1.0)
    assert parsed["main_top"][0].function == "step"
    # Not torch workers (no worker loop anywhere): every sample of theirs counts.
    plain = parse_raw('process 1:"a";process 2:"a";crunch (/c.py:4) 5', main_pid=1)
    assert plain["worker_samples"] == 5 and plain["top"][0].function == "crunch"
    own = parse_raw('process 1:"a";HostProbe._run (/p/host.py:9);read (/p/x.py:1) 9', main_pid=1)
    assert own["main_samples"] == 0  # pipecheck's sampler thread is not the user's code


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


def test_parse_main_wait_splits_the_main_threads_time_in_next():
    root = 'train (/t/train.py:1);_BaseDataLoaderIter.__next__ (/torch/dataloader.py:720);'
    text = "\n".join([
        root + "_MultiProcessingDataLoaderIter._next_data (/torch/dataloader.py:1400);"
        "Queue.get (/py/multiprocessing/queues.py:98);"
        "_PollLikeSelector.select (/py/selectors.py:402) 70",
        root + "Queue.get (/py/multiprocessing/queues.py:98);"
        "rebuild_storage_fd (/site/torch/multiprocessing/reductions.py:537) 20",
        root + "_MultiProcessingDataLoaderIter._shutdown_workers (/torch/dataloader.py:1500) 10",
        "train (/t/train.py:1);step (/t/train.py:9) 300",  # the step: not in next()
        "Thread._bootstrap (/py/threading.py:1);_pin_memory_loop (/torch/pin_memory.py:18);"
        "pin_memory (/torch/pin_memory.py:60) 5",
        "Thread._bootstrap (/py/threading.py:1);_pin_memory_loop (/torch/pin_memory.py:18);"
        "Queue.get (/py/queue.py:154) 15",
        "Thread._bootstrap (/py/threading.py:1);HostProbe._run (/p/host.py:9) 40",
    ])
    parsed = parse_main_wait(text)
    assert parsed["main_wait_samples"] == 100
    assert parsed["main_wait"] == pytest.approx(
        {"queue-empty": 0.7, "receiving": 0.2, "other": 0.1})
    assert parsed["pin_memory_busy_fraction"] == pytest.approx(0.25)
    assert parsed["main_thread_samples"] == 400  # in next() and the step, not other threads
    assert parse_main_wait("") == {"main_wait": {}, "main_wait_samples": 0,
                                   "main_thread_samples": 0, "pin_memory_busy_fraction": None,
                                   "worker_busy_samples": {}, "worker_samples_by_pid": {}}


def test_parse_main_wait_counts_each_workers_busy_samples_apart_from_the_main_thread():
    main, worker = 'process 10:"python train.py"', 'process 11:"python train.py"'
    loop = "_worker_loop (/torch/utils/data/_utils/worker.py:300);"
    text = "\n".join([
        main + ";train (/t/train.py:1);_BaseDataLoaderIter.__next__ (/torch/dataloader.py:720);"
        "Queue.get (/py/multiprocessing/queues.py:98) 30",
        main + ";train (/t/train.py:1);step (/t/train.py:9) 70",
        f"{main};{worker};" + loop + "fetch (/torch/utils/data/_utils/fetch.py:50);"
        "__getitem__ (/t/train.py:20) 60",
        f"{main};{worker};" + loop + "Queue.get (/py/multiprocessing/queues.py:98) 40",
        f"{main};{worker};Thread._bootstrap (/py/threading.py:1) 9",  # not in the worker loop
    ])
    parsed = parse_main_wait(text, 10)
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
    monkeypatch.setattr(stacks, "ptrace_scope", lambda: None)
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
