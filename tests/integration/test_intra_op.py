"""The calling thread's CPU beside the process's while a real ``num_workers=0`` DataLoader
produces batches: what tells torch's intra-op overhead (which workers, on one thread, do not
pay) from the work itself (:func:`pipecheck.analysis.producer.intra_op_inflation`)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import pipecheck
from pipecheck.analysis import analyze
from pipecheck.analysis.model import POOL_EVIDENCE_MIN_CORES, pool_extra_cores
from pipecheck.analysis.producer import INTRA_OP_INFLATION_MIN
from pipecheck.loader_settings import LoaderSettings
from pipecheck.recommend.limits import pool_worker_limit, producer_class
from pipecheck.records import RunRecord


class TorchOps(Dataset):
    """A to-tensor and normalize of a 224x224 image with torch ops (intra-op pool sized)."""

    def __init__(self) -> None:
        self.pixels = torch.from_numpy(
            (np.random.default_rng(0).random((224, 224, 3)) * 255).astype(np.uint8))
        self.mean = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
        self.std = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)

    def __len__(self) -> int:
        return 256

    def __getitem__(self, index: int) -> torch.Tensor:
        tensor = self.pixels.permute(2, 0, 1).float().div(255)
        return tensor.sub(self.mean).div(self.std)


class PurePython(Dataset):
    def __len__(self) -> int:
        return 256

    def __getitem__(self, index: int) -> list[int]:
        return [sum(i * i for i in range(3000))]


def run(dataset: Dataset) -> tuple[RunRecord, pipecheck.Report]:
    wrapped = pipecheck.wrap(DataLoader(dataset, batch_size=8))
    for _ in range(3):
        for batch in wrapped:
            torch.as_tensor(np.asarray(batch), dtype=torch.float32).relu().sum()
    record, report = wrapped.record(), wrapped.report()
    wrapped.close()
    return record, report


def inflation_of(record: RunRecord) -> float:
    consumer = record.consumer
    assert consumer.sampled_wait_thread_cpu_s is not None
    assert 0 < consumer.sampled_wait_thread_cpu_s <= consumer.sampled_wait_cpu_s * 1.05
    return consumer.sampled_wait_cpu_s / consumer.sampled_wait_thread_cpu_s


def test_torch_op_production_records_the_calling_threads_cpu_and_the_thread_count():
    record, report = run(TorchOps())
    assert report.environment.intra_op_threads == torch.get_num_threads()
    assert record.consumer.batch_tensors == 1  # one stacked image tensor a batch
    inflation = inflation_of(record)
    found = any(f.kind == "intra-op-threads" for f in report.diagnosis.findings)
    # The finding follows the measured gap, whatever this machine's pool did.
    assert found == (torch.get_num_threads() > 1 and inflation >= INTRA_OP_INFLATION_MIN)
    # So does the what-if model: an active pool counts whole beside the workers, and
    # CPU-bound workers stay within the cores left to the run.
    model = analyze(record).model
    if found and model is not None and model.load is not None:
        assert model.pool_threads == torch.get_num_threads()
        proposals = [r for r in report.recommendations if r.setting == "num_workers"]
        if proposals and producer_class(model) == "cpu-bound":
            assert proposals[0].proposed <= pool_worker_limit(model)
    # The one-thread model reads the real run's thread count and step clocks, and a thread
    # change is proposed, with its figure, only where the pool would wait beside the workers.
    if model is not None:
        assert model.main_threads == torch.get_num_threads()
        assert model.step_thread_cores is not None and 0 < model.step_thread_cores <= 1
        steps = model.one_thread_step_s()
        if steps is not None:
            point, low, high = steps
            assert low <= point <= high
        for rec in report.recommendations:
            if rec.setting == "torch_num_threads" and rec.expected.samples_per_s is not None:
                workers = next(r.proposed for r in report.recommendations
                               if r.setting == "num_workers")
                assert model.pool_waits_beside(workers)
                assert rec.expected.samples_per_s_low <= rec.expected.samples_per_s
        check_unsure_flags(model, report)



def test_pure_python_production_shows_no_intra_op_gap():
    record, report = run(PurePython())
    assert inflation_of(record) < INTRA_OP_INFLATION_MIN
    assert all(f.kind != "intra-op-threads" for f in report.diagnosis.findings)


class Sleeping(Dataset):
    """A remote read: 5 ms of sleep and a 2-element tensor per item, no torch ops."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(0.005)
        return torch.tensor([index, index])


@pytest.mark.skipif(torch.get_num_threads() < 2, reason="needs 2+ torch intra-op threads")
def test_a_sleeping_loaders_other_threads_are_no_evidence_of_a_pool_and_torch_ops_are():
    # The process's other threads (pipecheck's sampler, the GC) land in a sleeping loader's
    # short windows: under POOL_EVIDENCE_MIN_CORES, whatever the ratios, so no pool and no
    # thread proposal; torch ops on the pool use far more.
    record, report = run(Sleeping())
    extra = pool_extra_cores(record.consumer)
    assert extra is not None and extra < POOL_EVIDENCE_MIN_CORES
    assert analyze(record).model.pool_threads == 0
    assert all(r.setting != "torch_num_threads" for r in report.recommendations)
    record, _ = run(TorchOps())
    assert pool_extra_cores(record.consumer) > POOL_EVIDENCE_MIN_CORES


STARVED_CHILD = """
import json, os, time
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one CPU for 2 intra-op threads
import torch
torch.set_num_threads(2)
from torch.utils.data import DataLoader
import pipecheck
from pipecheck.analysis import analyze
from test_intra_op import TorchOps
wrapped = pipecheck.wrap(DataLoader(TorchOps(), batch_size=8))
started = time.perf_counter()
while time.perf_counter() - started < 3.0:
    for batch in wrapped:
        batch.relu().sum()
record, report = wrapped.record(), wrapped.report()
wrapped.close()
model = analyze(record).model
print(json.dumps({
    "pool_threads": model.pool_threads, "starved": model.pool_starved,
    "share": model.load.share,
    "proposals": [[r.setting, r.proposed, r.expected.samples_per_s, r.expected.note]
                  for r in report.recommendations]}))
"""


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs sched_setaffinity")
def test_a_pool_starved_of_cores_gets_workers_proposed_without_a_prediction():
    # A real num_workers=0 loader of torch ops whose process has 2 intra-op threads and one
    # CPU: the pool's threads wait for each other's core, so the serial figures say nothing
    # of a worker's cost and the proposal comes with no prediction.
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [here] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    done = subprocess.run([sys.executable, "-c", STARVED_CHILD], env=env, capture_output=True,
                          text=True, timeout=240, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["pool_threads"] == 2
    assert result["starved"], result
    workers = [p for p in result["proposals"] if p[0] == "num_workers"]
    assert workers == [["num_workers", 1, None, "not predictable from this run"]]
    # Then one thread for the main process, with no figure either, ending the chain.
    settings = [p[0] for p in result["proposals"]]
    assert settings[settings.index("num_workers") + 1] == "torch_num_threads"
    threads = result["proposals"][settings.index("num_workers") + 1]
    assert threads == ["torch_num_threads", 1, None, "not predictable from this run"]


STARVED_STEP_CHILD = """
import json, os, time
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one CPU for 2 intra-op threads
import torch
torch.set_num_threads(2)
from torch.utils.data import DataLoader, Dataset
import pipecheck
from pipecheck.analysis import analyze
from pipecheck.kinds import CPU_BOUND
from pipecheck.recommend.limits import producer_class

class Sleepy(Dataset):  # latency-bound production: 4 ms a sample, on the calling thread
    def __len__(self):
        return 64
    def __getitem__(self, index):
        time.sleep(0.004)
        return torch.zeros(4)

signal = torch.randn(1_000_000)  # elementwise ops this large run on the intra-op pool
wrapped = pipecheck.wrap(DataLoader(Sleepy(), batch_size=8))
started = time.perf_counter()
while time.perf_counter() - started < 4.0:
    for batch in wrapped:
        for _ in range(int(os.environ.get("STEP_OPS", "10"))):  # the step's size
            signal.mul(1.0001).relu_().sum()
record, report = wrapped.record(), wrapped.report()
wrapped.close()
consumer = record.consumer
model = analyze(record).model
print(json.dumps({
    "step_wall": consumer.sampled_compute_wall_s, "step_cpu": consumer.sampled_compute_cpu_s,
    "step_thread": consumer.sampled_compute_thread_cpu_s, "compute": consumer.compute_s,
    "step_s": 1 / model.demand_batches_per_s, "unstarved": model.unstarved_step_s,
    "starved": model.pool_starved, "waiting": producer_class(model) != CPU_BOUND,
    "capacities": [model.capacity(n)[0] for n in range(1, 4 * model.usable_cpus + 1)],
    "demand": model.demand_batches_per_s,
    "workers": [r.proposed for r in report.recommendations if r.setting == "num_workers"],
    "reasons": [r.reason for r in report.recommendations if r.setting == "num_workers"]}))
"""


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs sched_setaffinity")
def test_a_step_whose_pool_waits_for_a_core_is_measured_at_its_calling_threads_cpu():
    # A real num_workers=0 loader with a step of torch ops on 2 intra-op threads and one CPU:
    # the calling thread runs about half the step, its teammate the other half, so the
    # step's wall time holds waits for a core that need not recur beside workers.
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [here] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    done = subprocess.run([sys.executable, "-c", STARVED_STEP_CHILD], env=env,
                          capture_output=True, text=True, timeout=240, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    # Every step after the first is sampled (slow batches), with the calling thread's CPU.
    assert result["step_thread"] is not None, result
    assert result["step_wall"] >= 0.8 * result["compute"], result
    assert result["step_cpu"] >= 1.2 * result["step_thread"], result
    assert result["unstarved"] is not None, result
    assert result["unstarved"] < 0.8 * result["step_s"], result
    assert any("waited for a core" in reason for reason in result["reasons"]), result
    # Named, never predicted: the measured step is the step's own ceiling (issue 26).
    assert all("the prediction keeps the measured step" in reason
               for reason in result["reasons"] if "waited for a core" in reason), result


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs sched_setaffinity")
def test_waiting_workers_beside_a_starved_step_are_sized_for_the_producer():
    # The same real loader (4 ms of sleep a sample) before a step 15x larger on a starved
    # pool: sized to that step's demand 1 worker would look roomy, but on one thread the step
    # may be far shorter, so the count is the producer's best (rules._step_unknown).
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, STEP_OPS="150", PYTHONPATH=os.pathsep.join(
        [here] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    done = subprocess.run([sys.executable, "-c", STARVED_STEP_CHILD], env=env,
                          capture_output=True, text=True, timeout=240, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["starved"] and result["waiting"], result
    assert len(result["workers"]) == 1, result
    capacities = result["capacities"]
    best = max(capacities)
    smallest_near = 1 + next(i for i, rate in enumerate(capacities) if rate * 1.05 >= best)
    assert result["workers"] == [smallest_near], result
    assert "producer's best capacity" in result["reasons"][0], result


class Steady(Dataset):
    def __len__(self) -> int:
        return 96

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.full((4,), float(index))


@pytest.mark.parametrize("context", ["fork", pytest.param("spawn", marks=pytest.mark.slow)])
def test_a_slow_first_step_is_a_warm_up_left_out_of_the_step_rate(context):
    # A real loader with workers whose first step does one-time work (lazy initialization):
    # the consumer demand and the model's step are the steady steps', not a mean the first
    # step dominates (0.6 s against 24 steps of 5 ms would triple it).
    wrapped = pipecheck.wrap(DataLoader(Steady(), batch_size=4, num_workers=2,
                                        multiprocessing_context=context))
    for index, _ in enumerate(wrapped):
        time.sleep(0.6 if index == 0 else 0.005)
    record, report = wrapped.record(), wrapped.report()
    wrapped.close()
    step_s = 1.0 / report.consumer.demand_batches_per_s
    # sleep() never returns early; the mean with the first step in it is 0.03 s
    assert 0.005 <= step_s < 0.02, step_s
    model = analyze(record).model
    if model is not None:
        assert model.warmup_step_s >= 0.5


def check_unsure_flags(model, report) -> None:
    """A figure is called unsure exactly where the worker CPU the pool hides moves it by over
    15% (cumulative settings), and then names the stress run that measures it."""
    settings = model.measured
    fields = {f.name for f in dataclasses.fields(LoaderSettings)}
    for rec in report.recommendations:
        if rec.setting in fields:  # cumulative: each figure assumes the changes above it
            settings = dataclasses.replace(settings, **{rec.setting: rec.proposed})
        if rec.expected.samples_per_s_low is None:
            continue
        spread = model.worker_cpu_spread(settings)
        unsure = spread is not None and spread.unsure
        assert (rec.expected.uncertain_reason is not None) == unsure, rec
        if unsure:
            assert rec.expected.uncertain is True
            assert "pipecheck stress FILE.py:make_loader --workers 0," in (
                rec.expected.uncertain_reason)


class MatrixOps(Dataset):
    """A 256 x 256 matrix product and a tanh per item: CPU work on the intra-op pool."""

    def __len__(self) -> int:
        return 1024

    def __getitem__(self, index: int) -> torch.Tensor:
        matrix = torch.randn((256, 256), generator=torch.Generator().manual_seed(index))
        return torch.tanh(matrix @ matrix.T / 16)[:8, :8]


@pytest.mark.skipif(torch.get_num_threads() < 2, reason="needs torch's intra-op pool")
def test_a_real_pools_hidden_worker_cpu_spreads_the_worker_figures_and_flags_them():
    wrapped = pipecheck.wrap(DataLoader(MatrixOps(), batch_size=16))
    for batch in wrapped:
        batch.sum()
    record, report = wrapped.record(), wrapped.report()
    wrapped.close()
    model = analyze(record).model
    assert model is not None
    if model.worker_cpu_range_s is None:
        assert inflation_of(record) < INTRA_OP_INFLATION_MIN  # no pool seen: nothing hidden
        return
    low_cpu_s, high_cpu_s = model.worker_cpu_range_s
    spread = model.worker_cpu_spread(LoaderSettings(num_workers=2))
    assert spread is not None
    assert (spread.low_cpu_s, spread.high_cpu_s) == (low_cpu_s, high_cpu_s)
    assert low_cpu_s < high_cpu_s
    assert 0 < spread.slow_batches_per_s <= spread.fast_batches_per_s
    check_unsure_flags(model, report)
