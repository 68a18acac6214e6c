"""Typed sections of a :class:`~pipecheck.report.Report` that only one driver writes: ``attach``
(``pipecheck attach PID``) and ``stress`` (``pipecheck stress``).

Frozen dataclasses of JSON-friendly fields like :mod:`pipecheck.records` (same unit conventions:
``_s`` seconds, ``_bytes`` bytes, ``_per_s`` per second, ``_fraction`` 0-1, ``None`` "not
measured"); the field names are the JSON keys, in the order they are written, so reports saved
when these sections were plain dicts load and write back the same text. Where an entry's keys
depend on its kind (an unmeasured trial has no ``run_*`` rates; ``epoch_start`` and ``profile``
change shape with their ``status``) its ``json_keys()`` names the keys written, in order
(:func:`pipecheck.codec.to_jsonable`); keys it leaves out load as their default. Loaded and
checked by
:func:`pipecheck.codec.from_jsonable` (a wrongly typed value fails the load naming its path).
Nothing here measures or renders, and nothing imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from pipecheck.kinds import WorkerBound


@dataclass(frozen=True)
class AttachWorker:
    """One DataLoader worker seen in torch's worker loop while attached
    (:func:`pipecheck.analysis.attach.analyze_attach`).

    ``samples``: its py-spy samples inside the worker loop; ``busy_fraction`` (0-1) the share
    of them fetching or collating, ``busy_interval`` that share's Wilson 95% interval
    ``[low, high]``. ``observed_s``: seconds psutil saw the process, ``busy_s`` the busy share
    of them; ``cpu_s`` its CPU seconds; ``cpu_fraction`` / ``runqueue_fraction`` CPU and
    run-queue seconds per busy second, ``storage_read_bytes_per_s`` storage bytes per busy
    second; ``bound`` their class (:func:`pipecheck.analysis.bound.classify`). Memory: peak
    RSS and USS in bytes, the USS slope in bytes per second (may be negative) and whether it is
    significant (:mod:`pipecheck.analysis.memory`). ``None``: not measured (psutil did not see
    the process, or too few readings)."""

    pid: int
    samples: int
    busy_fraction: Optional[float]
    busy_interval: Optional[list[float]]
    observed_s: Optional[float]
    busy_s: Optional[float]
    cpu_s: Optional[float]
    cpu_fraction: Optional[float]
    runqueue_fraction: Optional[float]
    storage_read_bytes_per_s: Optional[float]
    bound: Optional[WorkerBound]
    rss_max_bytes: Optional[int]
    uss_max_bytes: Optional[int]
    memory_growth_bytes_per_s: Optional[float]
    memory_growth_significant: Optional[bool]


@dataclass(frozen=True)
class AttachSection:
    """What ``pipecheck attach PID`` concluded from stack samples and psutil alone, the report's
    ``attach`` section (:func:`pipecheck.analysis.attach.analyze_attach`).

    ``status``: ``complete``, ``interrupted`` (SIGINT: Ctrl-C), ``terminated`` (SIGTERM or
    SIGHUP) or ``target-exited`` (it exited, or its PID now names a process with another start
    time); ``signal``: the signal that ended the window (``"SIGINT"``, ``"SIGTERM"``,
    ``"SIGHUP"``; ``None`` when none did, and in reports written before it existed); the window runs
    from ``window_start_unix_s`` to ``window_end_unix_s`` (``time.time()`` seconds),
    ``duration_s`` long, sampled at ``rate_hz``. ``stall_fraction`` (0-1): ``next_samples`` of
    the ``main_thread_samples`` were inside the DataLoader's ``__next__``; ``stall_interval``
    its ``[low, high]`` interval by ``interval_method``; both ``None`` without samples.
    ``dataloader_seen``: a sample was inside ``__next__`` or a worker loop. ``num_workers``:
    workers seen (``None`` when the sampler failed), ``workers`` each of them,
    ``workers_class`` the class holding most of their busy time. The main process's USS slope
    (bytes per second, may be negative) and whether it is significant. ``batches_per_s`` is
    always ``None`` (stack samples do not count batches); ``unknown`` lists, in words, what
    cannot be known without wrapping."""

    pid: int
    status: str
    window_start_unix_s: float
    window_end_unix_s: float
    duration_s: float
    rate_hz: int
    main_thread_samples: int
    next_samples: int
    stall_fraction: Optional[float]
    stall_interval: Optional[list[float]]
    interval_method: str
    dataloader_seen: bool
    num_workers: Optional[int]
    workers: list[AttachWorker]
    workers_class: Optional[WorkerBound]
    main_memory_growth_bytes_per_s: Optional[float]
    main_memory_growth_significant: Optional[bool]
    batches_per_s: Optional[float]
    unknown: list[str]
    signal: Optional[str] = None


_TRIAL_KEYS = ("config", "samples_per_s", "batches_per_s", "stall_fraction", "measured",
               "startup_s", "batches", "wall_s", "error")


@dataclass(frozen=True)
class TrialEntry:
    """One measured stress trial (:class:`pipecheck.stress.trial.TrialResult`'s figures).

    ``config``: its DataLoader keywords (:meth:`pipecheck.stress.settings.LoaderSettings.to_dict`).
    ``samples_per_s`` / ``batches_per_s``: steady rates (each epoch's first batch left out);
    ``run_samples_per_s`` / ``run_batches_per_s``: the whole run's, start-ups included;
    ``stall_fraction`` (0-1) the steady data wait over loop time; ``startup_s`` the first
    batch's latency; ``batches`` delivered in ``wall_s`` seconds; ``error``: why it failed
    (``None``: it did not). ``measured`` is ``False`` only for a candidate the model-guided
    search predicted instead of measuring (:class:`SweepTrial`): its rate fields then hold
    the prediction and it has no ``run_*`` rates."""

    config: dict[str, Any]
    samples_per_s: Optional[float]
    batches_per_s: Optional[float]
    stall_fraction: Optional[float]
    measured: bool
    startup_s: Optional[float]
    batches: int
    wall_s: float
    error: Optional[str]
    run_samples_per_s: Optional[float] = None
    run_batches_per_s: Optional[float] = None

    def json_keys(self) -> tuple[str, ...]:
        """The keys written: the ``run_*`` rates only for a measured trial."""
        return _TRIAL_KEYS + (("run_samples_per_s", "run_batches_per_s") if self.measured
                              else ())


@dataclass(frozen=True)
class SweepTrial(TrialEntry):
    """A trial of the sweep (the section's ``trials`` and ``best``), with
    ``predicted_samples_per_s`` (the search model's figure before it ran; ``None`` for grid and
    calibration trials) and ``epochs`` (epochs it ran; ``None`` in ``best``, which leaves it
    out)."""

    predicted_samples_per_s: Optional[float] = None
    epochs: Optional[int] = None

    def json_keys(self) -> tuple[str, ...]:
        """Measured: the trial's keys, then ``predicted_samples_per_s`` and ``epochs``;
        predicted only: ``predicted_samples_per_s`` right after ``measured`` (the order the
        sweep has written them in)."""
        epochs = ("epochs",) if self.epochs is not None else ()
        if self.measured:
            return super().json_keys() + ("predicted_samples_per_s",) + epochs
        return _TRIAL_KEYS[:5] + ("predicted_samples_per_s",) + _TRIAL_KEYS[5:] + epochs


@dataclass(frozen=True)
class ExpectedRate:
    """The recommended configuration's measured ``samples_per_s`` and ``stall_fraction``
    (0-1), and ``epoch_saving_s`` (seconds per epoch ``persistent_workers=True`` saves; only
    when epoch start matters, left out of the JSON otherwise)."""

    samples_per_s: Optional[float]
    stall_fraction: Optional[float]
    epoch_saving_s: Optional[float] = None

    def json_keys(self) -> tuple[str, ...]:
        """``epoch_saving_s`` only when set."""
        return ("samples_per_s", "stall_fraction") + (
            ("epoch_saving_s",) if self.epoch_saving_s is not None else ())


@dataclass(frozen=True)
class StressChoice:
    """The section's ``recommended``: the cheapest measured configuration within the noise of
    the best (:mod:`pipecheck.stress.choice`; ``tolerance_fraction`` says how close counts as
    a tie), its ``expected`` figures, the ``baseline`` configuration and its samples/s,
    ``gain`` (samples/s over the baseline's; ``None`` when the baseline did not measure) and
    ``changes``: the settings that differ from the baseline's, ``{name: [from, to]}``."""

    config: dict[str, Any]
    expected: ExpectedRate
    baseline: Optional[dict[str, Any]]
    baseline_samples_per_s: Optional[float]
    gain: Optional[float]
    changes: dict[str, list[Any]]
    tolerance_fraction: Optional[float] = None


@dataclass(frozen=True)
class SkippedConfig:
    """A configuration the sweep did not run, with the ``reason`` (budget, memory)."""

    config: dict[str, Any]
    reason: str

    @staticmethod
    def json_upgrade(data: dict[str, Any]) -> dict[str, Any]:
        """Reports written before skip reasons existed list the bare configuration, skipped
        for lack of budget."""
        return data if "config" in data else {"config": data, "reason": "budget spent"}


@dataclass(frozen=True)
class SearchSummary:
    """How a model-guided search ran (:mod:`pipecheck.stress.search`): ``candidates`` in all,
    ``measured`` trials, the ``calibration`` and ``verified`` configurations, the best trial's
    ``noise_fraction`` and the ``threshold_fraction`` a predicted gain had to beat (relative
    spreads, not bounded by 1), and why it stopped (``stop_reasons``, joined in
    ``stop_reason``). Defaults fill keys that reports written before them lack."""

    method: str = "model"
    candidates: int = 0
    measured: int = 0
    calibration: list[dict[str, Any]] = field(default_factory=list)
    noise_fraction: Optional[float] = None
    threshold_fraction: Optional[float] = None
    verified: list[dict[str, Any]] = field(default_factory=list)
    stop_reason: str = ""
    stop_reasons: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class PersistentPair:
    """One figure measured with and without ``persistent_workers``, in seconds."""

    persistent: float
    not_persistent: float


@dataclass(frozen=True)
class EpochStart:
    """The section's ``epoch_start`` (:func:`pipecheck.stress.epoch_start.measure_epoch_start`):
    ``status`` ``ok``, ``failed`` or ``skipped`` with ``reason``. ``failed`` adds its
    ``trials``; ``ok`` adds ``config`` (the best, without ``persistent_workers``),
    ``restart_s`` and ``short_epoch_s`` (medians over the later epochs), ``saving_s`` (seconds
    per epoch, may be negative), ``epoch_s`` (a full epoch, seconds; ``None`` without a
    length), ``fraction`` (0-1), ``matters``, ``method`` (``shortened`` or ``cut``) and
    ``trials``."""

    status: str
    reason: Optional[str]
    config: Optional[dict[str, Any]] = None
    restart_s: Optional[PersistentPair] = None
    short_epoch_s: Optional[PersistentPair] = None
    saving_s: Optional[float] = None
    epoch_s: Optional[float] = None
    fraction: Optional[float] = None
    matters: Optional[bool] = None
    method: Optional[str] = None
    trials: list[TrialEntry] = field(default_factory=list)

    def json_keys(self) -> tuple[str, ...]:
        """``skipped``: status and reason; ``failed``: and trials; ``ok``: every key."""
        if self.status == "ok":
            return ("status", "reason", "config", "restart_s", "short_epoch_s", "saving_s",
                    "epoch_s", "fraction", "matters", "method", "trials")
        return ("status", "reason") + (("trials",) if self.status == "failed" else ())


@dataclass(frozen=True)
class ProfileOutcome:
    """The section's ``profile``: the profiling trial (py-spy) of the recommended configuration.
    ``status`` ``ok`` (with its ``config`` and ``samples_per_s``, not compared: sampling costs
    throughput), ``failed`` (with its ``config``), ``skipped`` or ``off``; ``reason`` says why
    not ``ok``."""

    status: str
    config: Optional[dict[str, Any]] = None
    samples_per_s: Optional[float] = None
    reason: Optional[str] = None

    def json_keys(self) -> tuple[str, ...]:
        """``config`` once a trial ran, ``samples_per_s`` when it took stacks."""
        if self.status == "ok":
            return ("status", "config", "samples_per_s", "reason")
        if self.status == "failed":
            return ("status", "config", "reason")
        return ("status", "reason")


@dataclass(frozen=True)
class StressHeadline:
    """The sweep trial whose record gives a stress report's ``consumer``, ``producer`` and
    ``host`` sections (:func:`pipecheck.stress.headline`): its ``config``, ``source``
    (``sweep``), steady rates (each epoch's first batch left out) and whole-run rates, per
    second."""

    config: dict[str, Any]
    source: str
    steady_samples_per_s: Optional[float]
    steady_batches_per_s: Optional[float]
    run_samples_per_s: Optional[float]
    run_batches_per_s: Optional[float]


@dataclass(frozen=True)
class StressStep:
    """The training step each stress trial ran after every batch. ``kind``: ``"none"`` (the
    loader alone, as fast as it delivers), ``"emulated"`` (``mean_s`` seconds per batch,
    +- ``jitter_s``, of which the share ``cpu_share``, 0-1, busy on the CPU and the rest asleep)
    or ``"function"`` (the user's own, ``function`` naming it as ``file.py:function``)."""

    kind: str
    mean_s: Optional[float] = None
    jitter_s: Optional[float] = None
    cpu_share: Optional[float] = None
    function: Optional[str] = None


@dataclass(frozen=True)
class StressSection:
    """The report's ``stress`` section (:meth:`pipecheck.stress.runner.Sweep.section`, completed
    by :func:`pipecheck.stress.stress`): every ``trials`` entry in run order (then the
    candidates the search predicted instead of measuring), ``best`` (the fastest measured),
    ``recommended``, ``skipped`` configurations, ``search`` (``None`` for a grid), and, after
    the sweep, ``epoch_start``, ``profile``, ``headline`` and ``step`` (the step the trials ran,
    :class:`StressStep`; left out of the JSON while ``None``, as in reports before it)."""

    trials: list[SweepTrial]
    best: Optional[SweepTrial]
    recommended: Optional[StressChoice]
    skipped: list[SkippedConfig]
    search: Optional[SearchSummary]
    epoch_start: Optional[EpochStart] = None
    profile: Optional[ProfileOutcome] = None
    headline: Optional[StressHeadline] = None
    step: Optional[StressStep] = None

    def budget_skipped_all_but_baseline(self) -> int:
        """How many configurations the budget kept from running when it held the baseline
        trial only (nothing else measured); 0 when anything else was measured or nothing was
        skipped for the budget."""
        if sum(1 for trial in self.trials if trial.measured) > 1:
            return 0
        return sum(1 for entry in self.skipped if entry.reason.startswith("budget"))

    def json_keys(self) -> tuple[str, ...]:
        """The sweep's keys, then those of the later trials that are set."""
        return ("trials", "best", "recommended", "skipped", "search") + tuple(
            key for key in ("epoch_start", "profile", "headline", "step")
            if getattr(self, key) is not None)
