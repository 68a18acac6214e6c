"""The device probe (GPU idle around next()) against a fake event backend on a fake clock: no GPU
in CI. The fake stream runs queued work in order; an event completes when the stream reaches it."""

from __future__ import annotations

import pytest
import torch

import pipecheck
from pipecheck.probes.consumer import ConsumerProbe
from pipecheck.probes.device import DeviceProbe, TorchCudaEvents, cuda_backend


def observed(probe: DeviceProbe, source):
    """``source`` through the one epoch iterator, with ``probe`` as its batch observer."""
    return ConsumerProbe(run_start=0.0).iterate(source, observers=(probe,))


class FakeStream:
    """A host clock (``now``) and one device stream busy until ``busy_until``."""

    def __init__(self) -> None:
        self.now = 0.0
        self.busy_until = 0.0

    def launch(self, gpu_s: float) -> None:
        """The step enqueues ``gpu_s`` of kernels (asynchronously: the host does not wait)."""
        self.busy_until = max(self.now, self.busy_until) + gpu_s


class FakeEvent:
    def __init__(self) -> None:
        self.at = None


class FakeEvents:
    """EventBackend on a FakeStream; elapsed_s on an incomplete event is an error (it would block
    or fail on a real device), and there is no way to synchronize at all."""

    name = "fake"

    def __init__(self, stream: FakeStream) -> None:
        self.stream = stream
        self.created = 0

    def new_event(self) -> FakeEvent:
        self.created += 1
        return FakeEvent()

    def record(self, event: FakeEvent) -> None:
        event.at = max(self.stream.now, self.stream.busy_until)

    def query(self, event: FakeEvent) -> bool:
        return event.at is not None and event.at <= self.stream.now

    def elapsed_s(self, start: FakeEvent, end: FakeEvent) -> float:
        assert self.query(start) and self.query(end), "elapsed_s on an incomplete event"
        return end.at - start.at


def _loader(stream: FakeStream, batches: int, wait_s: float):
    for i in range(batches):
        stream.now += wait_s  # time the host spends inside next()
        yield torch.zeros(2)


def _train(probe: DeviceProbe, stream: FakeStream, batches: int, wait_s: float, gpu_s: float):
    for _ in observed(probe, _loader(stream, batches, wait_s)):
        stream.launch(gpu_s)
        stream.now += 0.001  # the host's own step time: launching kernels


def test_idle_is_the_wait_the_gpu_could_not_hide():
    stream = FakeStream()
    probe = DeviceProbe(FakeEvents(stream))
    _train(probe, stream, batches=20, wait_s=0.050, gpu_s=0.030)
    stream.now += 1.0  # let the stream finish so every pair resolves
    record = probe.record()
    assert record.status == "ok" and record.batches == 20 and record.unresolved == 0
    # First batch: the stream was empty for the whole 50 ms wait; later: 50 - 30 + 1 ms.
    assert record.idle_s == pytest.approx(0.050 + 19 * 0.021)
    assert 0 < record.idle_fraction < 1
    assert record.pinned_fraction == 0.0  # torch.zeros is pageable


def test_no_idle_when_the_gpu_has_queued_work_to_cover_the_wait():
    stream = FakeStream()
    probe = DeviceProbe(FakeEvents(stream))
    stream.launch(10.0)  # a long kernel queued before the loop
    _train(probe, stream, batches=10, wait_s=0.010, gpu_s=0.100)
    stream.now += 100.0
    record = probe.record()
    assert record.idle_s == pytest.approx(0.0) and record.batches == 10


def test_pairs_resolve_lazily_and_the_pool_bounds_memory():
    stream = FakeStream()
    backend = FakeEvents(stream)
    probe = DeviceProbe(backend, pool_size=4)
    stream.launch(100.0)  # the stream will not reach any event during the loop
    _train(probe, stream, batches=5, wait_s=0.01, gpu_s=0.01)
    record = probe.record()
    assert record.status == "no-data" and record.idle_s is None
    assert record.unresolved == 2 and record.dropped == 3  # two pairs in flight, then no events
    stream.now += 1000.0
    assert probe.record().batches == 2
    assert backend.created <= 6  # the pool, plus replacements for the span's two ends


def test_the_smallest_pool_times_every_batch_it_has_resolved():
    # Two events: one pair in flight at a time; the span's ends must not starve the pool.
    stream = FakeStream()
    probe = DeviceProbe(FakeEvents(stream), pool_size=2)
    for _ in observed(probe, _loader(stream, 5, wait_s=0.01)):
        stream.now += 0.001  # no GPU work queued: each pair completes before the next next()
    record = probe.record()
    assert record.batches == 5 and record.dropped == 0
    assert record.idle_s == pytest.approx(5 * 0.01)


def test_items_and_errors_pass_through_unchanged():
    stream = FakeStream()
    probe = DeviceProbe(FakeEvents(stream))

    def failing():
        yield 1
        raise ValueError("bad shard")

    items = []
    with pytest.raises(ValueError, match="bad shard"):
        for item in observed(probe, failing()):
            items.append(item)
    assert items == [1]
    assert list(observed(probe, iter([3, 4]))) == [3, 4]
    with pytest.raises(ValueError):
        DeviceProbe(FakeEvents(stream), pool_size=3)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only path")
def test_without_cuda_the_probe_is_off():
    assert cuda_backend() is None
    with pytest.raises(RuntimeError):
        TorchCudaEvents()
    wrapped = pipecheck.wrap([torch.zeros(2)] * 3, host=False)
    list(wrapped)
    report = wrapped.report()
    assert report.device is None and report.to_dict()["device"] is None
