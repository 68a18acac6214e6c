"""``pipecheck run -- COMMAND``: unmodified programs (they never import pipecheck), measured
through the real CLI in subprocesses, with real DataLoader workers."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import pipecheck

TRAIN = textwrap.dedent("""
    import sys, time
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Slow(Dataset):
        # 5 ms of waiting per sample: the loop is input-bound on any machine
        def __len__(self):
            return 64

        def __getitem__(self, index):
            time.sleep(0.005)
            return torch.tensor([index])

    def main():
        workers, context, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
        context = None if context == "none" else context
        train = DataLoader(Slow(), batch_size=4, num_workers=workers,
                           multiprocessing_context=context if workers else None)
        val = DataLoader(Slow(), batch_size=16)
        seen = 0
        for epoch in range(2):
            for batch in train:
                seen += 1
                if mode == "raise" and seen == 20:
                    raise RuntimeError("the model diverged")
                if mode == "wait" and seen == 20:
                    print("waiting", flush=True)
                    time.sleep(60)
            for batch in val:
                pass
        print("trained", seen, flush=True)
        sys.exit(3 if mode == "exit3" else 0)


    if __name__ == "__main__":  # spawn workers import this file
        main()
""")


def _pipecheck(*args: str, cwd: Path, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipecheck", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=240, **kw)


@pytest.fixture
def program(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text(TRAIN)
    return tmp_path


@pytest.mark.parametrize("workers,context", [
    (0, "none"), pytest.param(2, "fork", marks=pytest.mark.slow),
    pytest.param(2, "spawn", marks=pytest.mark.slow)])
def test_an_unmodified_script_is_measured_with_its_own_exit_code(program, workers, context):
    result = _pipecheck("run", "--json", "run.json", "--quiet", "--", sys.executable, "train.py",
                        str(workers), context, "exit3", cwd=program)
    assert result.returncode == 3, result.stderr
    assert "trained 32" in result.stdout
    train = pipecheck.load(program / "run.json")
    assert train.consumer.batches == 32 and train.consumer.epochs == 2  # 2 x 64 / 4
    assert train.consumer.status == "complete"
    assert train.diagnosis.verdict == "input-bound"
    assert train.loader.num_workers == workers
    assert train.producer.probe == ("workers" if workers else "main-process")
    val = pipecheck.load(program / "run.loader1.json")  # the validation loader, beside it
    assert val.consumer.batches == 8 and val.loader.batch_size == 16


@pytest.mark.slow
def test_an_exception_in_the_script_still_gives_the_report(program):
    result = _pipecheck("run", "--json", "run.json", "--", "train.py", "2", "fork", "raise",
                        cwd=program)
    assert result.returncode == 1
    assert "RuntimeError: the model diverged" in result.stderr  # the program's own traceback
    report = pipecheck.load(program / "run.json")
    assert report.consumer.batches == 20
    assert "INPUT-BOUND" in result.stdout  # the terminal summary of what was measured


@pytest.mark.slow
def test_sigterm_to_pipecheck_reaches_the_program_and_the_report_is_saved(program):
    process = subprocess.Popen(
        [sys.executable, "-m", "pipecheck", "run", "--json", "run.json", "--quiet", "--",
         "train.py", "2", "fork", "wait"], cwd=program, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == "waiting"
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 128 + signal.SIGTERM, err
    assert pipecheck.load(program / "run.json").consumer.batches == 20


def test_a_command_that_cannot_run_is_one_line_exit_2(program):
    result = _pipecheck("run", "--", "no_such_script.py", cwd=program)
    assert result.returncode == 2
    assert result.stderr.strip() == "pipecheck: error: no such script: no_such_script.py"
    result = _pipecheck("run", cwd=program)
    assert result.returncode == 2 and "needs a command" in result.stderr


DIST_TRAIN = textwrap.dedent("""
    import time
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, Dataset, DistributedSampler

    class Slow(Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, index):
            time.sleep(0.002)
            return torch.tensor([index])

    dist.init_process_group("gloo")
    dataset = Slow()
    loader = DataLoader(dataset, batch_size=4, sampler=DistributedSampler(dataset))
    for batch in loader:
        pass
    dist.barrier()
    dist.destroy_process_group()
""")


@pytest.mark.skipif(shutil.which("torchrun") is None and not os.path.exists(
    os.path.join(os.path.dirname(sys.executable), "torchrun")), reason="torchrun not installed")
@pytest.mark.slow
def test_torchrun_ranks_write_their_own_files_and_are_merged(tmp_path):
    (tmp_path / "dist_train.py").write_text(DIST_TRAIN)
    torchrun = shutil.which("torchrun") or os.path.join(os.path.dirname(sys.executable),
                                                        "torchrun")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    result = _pipecheck("run", "--json", "run.json", "--quiet", "--", torchrun,
                        "--nproc-per-node", "2", "--master-port", str(29500 + os.getpid() % 1000),
                        "dist_train.py", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "run.json").read_text())
    ranks = report["ranks"]
    assert ranks["world_size"] == 2 and [r["rank"] for r in ranks["ranks"]] == [0, 1]
    assert [r["batches"] for r in ranks["ranks"]] == [8, 8]


def test_python_startup_is_unchanged_when_no_run_is_active(tmp_path):
    # The hook's folder on PYTHONPATH without PIPECHECK_RUN_DIR: nothing happens, and a
    # sitecustomize the environment had still runs.
    from pipecheck.launch import SITE_DIR

    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import builtins; builtins.CHAINED = True\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([SITE_DIR, str(other)]))
    env.pop("PIPECHECK_RUN_DIR", None)
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", "import builtins, sys; "
                             "print(getattr(builtins, 'CHAINED', False), "
                             "'pipecheck.run_hook' in sys.modules)"],
                            env=env, capture_output=True, text=True, timeout=60)
    assert result.stdout.split() == ["True", "False"], result.stderr
    assert result.stderr == "" and time.perf_counter() - started < 30
