"""Head-of-line blocking: one slow worker holds back batches the others already finished."""

from __future__ import annotations

import time

import pytest
from torch.utils.data import DataLoader, Dataset

from pipecheck.analysis.hol import head_of_line_finding
from pipecheck.recommend.head_of_line import in_order_recommendation
from pipecheck.kinds import FindingKind
from pipecheck.probes.hol import HeadOfLineProbe
from pipecheck.records import HeadOfLineSummary


class OddBatchesSlow(Dataset):
    """Batches of 2; with 2 workers torch sends batch i to worker i % 2, so every sample of an
    odd batch (worker 1's) sleeps ``slow_s`` and the others ``fast_s``."""

    def __init__(self, n: int = 48, slow_s: float = 0.03, fast_s: float = 0.002) -> None:
        self.n, self.slow_s, self.fast_s = n, slow_s, fast_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        time.sleep(self.slow_s if (index // 2) % 2 else self.fast_s)
        return index

    def batch_s(self) -> dict[str, float]:
        """True production time per batch of each worker (2 samples each), seconds."""
        return {"0": 2 * self.fast_s, "1": 2 * self.slow_s}


def _measure(dataset, **loader_kwargs):
    loader = DataLoader(dataset, batch_size=2, num_workers=2, prefetch_factor=4,
                        **loader_kwargs)
    probe = HeadOfLineProbe()
    iterator = iter(loader)
    attached = probe.attach(iterator)
    wait_total = 0.0
    while True:
        probe.before_next()
        started = time.perf_counter()
        try:
            next(iterator)
        except StopIteration:
            break
        waited = time.perf_counter() - started
        wait_total += waited
        probe.after_next(waited)
        time.sleep(0.001)  # a short step
    return attached, probe.record()


def test_a_slow_worker_shows_head_of_line_blocking():
    dataset = OddBatchesSlow()
    attached, summary = _measure(dataset)
    assert attached and summary.status == "ok"
    assert summary.blocked_wait_s > 0.5 * summary.wait_s
    assert summary.mean_ready_later >= 1
    by_worker = summary.blocked_s_by_worker
    assert by_worker.get("1", 0.0) > 0.8 * summary.blocked_wait_s
    loop_s = summary.wait_s + 24 * 0.001
    finding = head_of_line_finding(summary, loop_s, dataset.batch_s())
    assert finding is not None and finding.kind == FindingKind.HEAD_OF_LINE_BLOCKING
    assert "worker 1's batches (60.0 ms each vs 4.0 ms" in finding.message
    rec = in_order_recommendation(finding, wait_s=summary.wait_s, compute_s=0.024,
                                  samples=48, torch_has_in_order=True)
    assert (rec.setting, rec.current, rec.proposed) == ("in_order", True, False)
    assert rec.expected.stall_fraction < summary.wait_s / loop_s
    assert in_order_recommendation(finding, wait_s=1, compute_s=1, samples=1,
                                   torch_has_in_order=False) is None


BALANCED_S = 0.03
"""Seconds each sample of a balanced dataset sleeps: 60 ms batches, so a busy machine's
wake-up delays (a few ms a sample beside two busy processes) stay well under the 25% a worker
must be slower by to be blamed (:data:`pipecheck.analysis.hol.IMBALANCE_THRESHOLD`). With 10 ms
samples one loaded default run in ten measured a worker 25% slower and blamed it."""


def test_a_clean_pipeline_shows_none():
    # Balanced workers: blocked waits happen (whichever of two equal workers finishes last),
    # but no worker is slower, so nothing is blamed.
    dataset = OddBatchesSlow(slow_s=BALANCED_S, fast_s=BALANCED_S)
    attached, summary = _measure(dataset)
    assert attached
    assert head_of_line_finding(summary, summary.wait_s + 24 * 0.001,
                                dataset.batch_s()) is None


def test_the_probe_stays_off_where_order_cannot_block():
    probe = HeadOfLineProbe()
    assert not probe.attach(iter(DataLoader(list(range(8)), batch_size=2)))
    assert probe.record().status == "unavailable"
    if "in_order" in DataLoader.__init__.__code__.co_varnames:
        loader = DataLoader(OddBatchesSlow(8), batch_size=2, num_workers=2, in_order=False)
        iterator = iter(loader)
        assert not probe.attach(iterator) and "in_order=False" in probe.record().note
        del iterator
    probe.before_next()
    probe.after_next(1.0)  # detached: nothing is counted
    assert probe.record().waits == 0
    assert head_of_line_finding(None, 1.0, {}) is None


@pytest.mark.parametrize("loop_s", [0.0, -1.0])
def test_no_finding_without_loop_time(loop_s):
    summary = HeadOfLineSummary(status="ok", note=None, waits=1, wait_s=1.0, blocked_waits=1,
                                blocked_wait_s=1.0, mean_ready_later=1.0,
                                blocked_s_by_worker={"0": 1.0})
    assert head_of_line_finding(summary, loop_s, {"0": 1.0}) is None


def test_wrap_finds_the_slow_worker_and_recommends_in_order_false():
    import pipecheck

    loader = DataLoader(OddBatchesSlow(n=64), batch_size=2, num_workers=2, prefetch_factor=4)
    with pipecheck.wrap(loader, host=False) as wrapped:
        for _ in wrapped:
            time.sleep(0.001)
    report = wrapped.report()
    assert report.producer.head_of_line is not None
    assert report.producer.head_of_line.status == "ok"
    kinds = [f.kind for f in report.diagnosis.findings]
    assert "head-of-line-blocking" in kinds
    if "in_order" in DataLoader.__init__.__code__.co_varnames:
        assert any(r.setting == "in_order" and r.proposed is False
                   for r in report.recommendations)
    balanced = DataLoader(OddBatchesSlow(n=64, slow_s=BALANCED_S, fast_s=BALANCED_S), batch_size=2,
                          num_workers=2, prefetch_factor=4)
    with pipecheck.wrap(balanced, host=False) as wrapped:
        for _ in wrapped:
            time.sleep(0.001)
    assert "head-of-line-blocking" not in [f.kind for f in wrapped.report().diagnosis.findings]


def test_an_awaited_batch_that_already_arrived_is_not_a_blocked_wait():
    # torch's iterator state after batch 5 (worker 1) arrived out of turn while the consumer
    # waited on batch 4: _task_info[5] holds (worker_id, data), batch 6 is still out.
    from types import SimpleNamespace

    iterator = SimpleNamespace(_task_info={5: (1, "data"), 6: (0,), 7: (1, "data")},
                               _rcvd_idx=5, _in_order=True, _num_workers=2)
    probe = HeadOfLineProbe()
    assert probe.attach(iterator)
    probe.before_next()  # batch 5 is here already: next() does not wait on a worker
    probe.after_next(0.0001)
    iterator._task_info, iterator._rcvd_idx = {6: (0,), 7: (1, "data")}, 6
    probe.before_next()  # batch 6 is out while batch 7 is done: head-of-line blocked
    probe.after_next(0.02)
    summary = probe.record()
    assert (summary.waits, summary.blocked_waits) == (2, 1)
    assert summary.blocked_wait_s == pytest.approx(0.02)
    assert summary.mean_ready_later == 1  # batch 7 only, never the awaited batch itself
    assert summary.blocked_s_by_worker == {"0": pytest.approx(0.02)}


def test_a_failing_head_of_line_probe_is_turned_off_with_a_note_and_the_run_goes_on(
        monkeypatch):
    import pipecheck

    def broken(self) -> None:
        raise RuntimeError("torch changed _task_info")

    monkeypatch.setattr(HeadOfLineProbe, "before_next", broken)
    loader = DataLoader(OddBatchesSlow(n=16, slow_s=0.0, fast_s=0.0), batch_size=2,
                        num_workers=2)
    wrapped = pipecheck.wrap(loader, host=False)
    assert [b.tolist() for b in wrapped] == [b.tolist() for b in loader]
    assert [b.tolist() for b in wrapped] == [b.tolist() for b in loader]  # a second epoch
    record = wrapped.record()
    report = wrapped.report()
    wrapped.close()
    assert record.consumer.batches == 16 and report.consumer.batches == 16
    assert record.probes_off["head_of_line"] == \
        "head_of_line probe off: RuntimeError: torch changed _task_info"
    assert record.head_of_line is None  # its half-counted figures are not reported
