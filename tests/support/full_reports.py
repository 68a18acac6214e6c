"""Reports with every section filled, and generic walks over their strings and numbers, for the
hostile-input tests: a string planted in every string field of a report (found by walking the
dataclasses, not by a list of fields), a number replaced in every numeric leaf of its JSON."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, Callable, Iterator

from pipecheck.render.inert import CONTROL

from pipecheck.records import (
    ChangedValue,
    ComparedFigure,
    Comparison,
    DeviceRecord,
    HeadOfLineSummary,
    HotFunction,
    RankInfo,
    RankSummary,
    RanksSummary,
    StacksRecord,
    StageRow,
    TuneSection,
    TuneTrial,
)
from pipecheck.loader_settings import LoaderSettings
from pipecheck.report import Report, load
from paths import SUPPORT
from render_fixtures import stress_section
from report_factory import replace_consumer, sample_report

NOT_PLANTED = {"report.kind", "report.schema"}
"""String fields a report cannot load without (an unknown kind or schema is refused)."""


def every_section_report() -> Report:
    """A stress report (sweep, findings with evidence, recommendations) that also has pipeline
    stages, head-of-line blocking, hot stacks, a GPU section, its rank, every rank side by side
    (two more than reported: missing ranks), a shard assignment, a comparison with an earlier
    run and a run that ended in an error: every section the terminal, markdown and HTML
    show."""
    report = replace_consumer(sample_report(kind="stress", stress=stress_section()),
                              status="error", error="ValueError: bad sample 7")
    stages = [StageRow(name=f"decode{i}", where="workers", exclusive_s=1.0 / (i + 1),
                       fraction=0.1, samples_in=4, samples_out=4, bytes_read=10,
                       workers={"0": 0.5, "1": 0.5}) for i in range(3)]
    hol = HeadOfLineSummary(status="ok", note="in-order delivery", waits=10, wait_s=1.0,
                            blocked_waits=4, blocked_wait_s=0.5, mean_ready_later=1.5,
                            wait_s_by_worker={"0": 0.6, "1": 0.4},
                            blocked_s_by_worker={"0": 0.3})
    producer = dataclasses.replace(report.producer, stages=stages, head_of_line=hol,
                                   workers_class="cpu-bound",
                                   workers_class_basis="CPU per busy second 0.94")
    stacks = StacksRecord(
        status="ok", window_s=1.0, rate_hz=50, worker_samples=10, worker_other_samples=2,
        main_samples=5, main_wait={"queue-empty": 0.7, "pin-memory": 0.3},
        main_wait_samples=4, stages={"decode0": 1.0},
        top=[HotFunction(function=f"decode{i}", file=f"/src/d{i}.py", line=i, fraction=0.1,
                         stage="decode0") for i in range(7)],
        main_top=[HotFunction(function="step", file="/src/t.py", line=2, fraction=0.5)],
        note="sampled by py-spy")
    device = DeviceRecord(status="ok", backend="torch.cuda", batches=3, idle_s=0.1,
                          idle_fraction=0.1, note="CUDA events")
    summaries = [RankSummary(rank=r, batches=10, samples=40, wall_s=1.0, wait_s=0.1 * (r + 1),
                             compute_s=0.5, stall_fraction=0.2, samples_per_s=40.0,
                             wait_per_batch_s=0.01, verdict="input-bound",
                             hostname=f"node{r}", source=f"run.rank{r}.json")
                 for r in range(2)]
    sharding = load(SUPPORT / "old_reports" / "wrap_sharding.json").sharding
    return dataclasses.replace(
        report, producer=producer, stacks=stacks, device=device,
        rank=RankInfo(rank=1, world_size=4, hostname="node1", backend="gloo",
                      shards=[["a.tar"], ["b.tar"]]),
        ranks=RanksSummary(world_size=4, ranks=summaries, straggler=1, missing=[2, 3]),
        sharding=sharding, comparison=comparison(), tune=tune_section())


def tune_section() -> TuneSection:
    """Online tuning that settled on 2 workers after three trials, with a guard's note."""
    start = LoaderSettings(num_workers=0)
    chosen = LoaderSettings(num_workers=2, prefetch_factor=2)
    trials = [TuneTrial(settings=s, batches=40, samples=160, seconds=secs,
                        samples_per_s=160 / secs, stall_fraction=stall, noise_fraction=0.02,
                        warmup_batches=w)
              for s, secs, stall, w in ((start, 0.8, 0.9, 1), (chosen, 0.4, 0.5, 5),
                                        (LoaderSettings(2, 4), 0.41, 0.5, 9))]
    return TuneSection(status="settled", reason=None, start=start, chosen=chosen,
                       trials=trials, speedup=2.0, tuning_s=1.7, cost_s=0.05, tuning_batches=120, retunes=1,
                       pin_line="DataLoader(..., num_workers=2, prefetch_factor=2)",
                       notes=["num_workers=4 not tried: 4 x 900 MiB measured per worker is "
                              "more than 50% of the 3000 MiB available"])


def comparison() -> Comparison:
    """A comparison with an earlier run: throughput fell although the stall fell, on another
    machine, with other data and changed settings."""
    figures = [ComparedFigure(name, old, new, new / old) for name, old, new in (
        ("samples_per_s", 325.0, 259.0), ("tokens_per_s", 5e4, 4e4),
        ("batches_per_s", 10.2, 8.1), ("steady_step_s", 0.072, 0.102),
        ("wait_per_batch_s", 0.0099, 0.0043), ("stall_fraction", 0.12, 0.04),
        ("goodput_fraction", 0.88, 0.96))]
    return Comparison(
        old_path="earlier/run.json", status="compared", old_created="2024-04-30T12:00:00+00:00",
        verdict="fell", samples_per_s_ratio=259 / 325, old_noise_fraction=0.02,
        new_noise_fraction=0.03, noise_fraction=0.036, beyond_noise=True, figures=figures,
        settings=[ChangedValue("num_workers", 0, 2), ChangedValue("batch_size", 32, 64)],
        machine=[ChangedValue("cpu_count", 16, 2), ChangedValue("torch", "2.5.0", "2.6.0")],
        data=[ChangedValue("dataset_len", 3200, 1600)])


def attach_report() -> Report:
    """A ``pipecheck attach`` report (its section stands in for the batch-timing ones)."""
    return load(SUPPORT / "old_reports" / "attach.json")


def plant_strings(value: Any, make: Callable[[str, str], str], where: str = "report"
                  ) -> tuple[Any, list[str]]:
    """``value`` (a report, or anything in one) with every string replaced by ``make(path,
    original)``: dataclass fields of any type (found with :func:`dataclasses.fields`),
    strings in lists and dicts, dict keys, free-form values (evidence, configurations);
    :data:`NOT_PLANTED` kept. Returns the new value and the paths planted."""
    planted: list[str] = []

    def walk(item: Any, path: str) -> Any:
        if isinstance(item, str):
            if path in NOT_PLANTED:
                return item
            planted.append(path)
            return make(path, item)
        if dataclasses.is_dataclass(item) and not isinstance(item, type):
            changes = {f.name: walk(getattr(item, f.name), f"{path}.{f.name}")
                       for f in dataclasses.fields(item) if f.init}
            return dataclasses.replace(item, **changes)
        if isinstance(item, list):
            return [walk(v, f"{path}[{i}]") for i, v in enumerate(item)]
        if isinstance(item, tuple):
            return tuple(walk(v, f"{path}[{i}]") for i, v in enumerate(item))
        if isinstance(item, dict):
            out = {}
            for key, v in item.items():
                new_key = walk(key, f"{path}.<key {key}>") if isinstance(key, str) else key
                out[new_key] = walk(v, f"{path}.{key}")
            return out
        return item

    return walk(value, where), planted


def numeric_leaves(data: Any, where: str = "report") -> Iterator[tuple[str, tuple]]:
    """``(path as pipecheck names it, key path)`` for every number (not a boolean) in ``data``
    (a report's JSON)."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield from ((p, (key, *k)) for p, k in numeric_leaves(value, f"{where}.{key}"))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            yield from ((p, (i, *k)) for p, k in numeric_leaves(value, f"{where}[{i}]"))
    elif isinstance(data, (int, float)) and not isinstance(data, bool):
        yield where, ()


def json_with(data: dict, keys: tuple, literal: str) -> str:
    """``data`` as JSON text with the number at ``keys`` written as ``literal`` (``1e999``:
    JSON text ``json.dumps`` would never write)."""
    marker = "__PIPECHECK_NUMBER__"
    copy = json.loads(json.dumps(data))
    holder = copy
    for key in keys[:-1]:
        holder = holder[key]
    holder[keys[-1]] = marker
    return json.dumps(copy).replace(f'"{marker}"', literal)


def inflate(value: Any, count: int) -> Any:
    """``value`` (a report) with every non-empty list made ``count`` items long (its first item
    repeated) and every non-empty dict ``count`` entries long (its first value under new keys),
    at every depth: a report as large as a runaway or hostile writer could make one, found by
    walking the dataclasses, not from a list of fields."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{
            f.name: inflate(getattr(value, f.name), count)
            for f in dataclasses.fields(value) if f.init})
    if isinstance(value, list) and value:
        return [inflate(value[0], count)] * count
    if isinstance(value, dict) and value:
        key, first = next(iter(value.items()))
        if not isinstance(key, str):
            return value
        item = inflate(first, count)
        return {key: item, **{f"{key}{i}": item for i in range(1, count)}}
    return value


# -- forged lines --------------------------------------------------------------------------------

SEPARATORS = {"\n": "\\n", "\r\n": "\\r\\n", "\r": "\\r", "\v": "\\x0b", "\f": "\\x0c",
              "\x1c": "\\x1c", "\x1d": "\\x1d", "\x1e": "\\x1e", "\x85": "\\x85",
              "\u2028": "\\u2028", "\u2029": "\\u2029", "\u202e": "\\u202e",
              "\x1b[2K\r": "\\x1b[2K\\r"}
"""Line feed, CR LF, carriage return, vertical tab, form feed, the information separators,
NEL, the Unicode line and paragraph separators, a right-to-left override, and "erase the line,
back to its start": each with the escape it must show as."""

MARKER = re.compile(r"FORGED(\d+)")


def forged(report: Report) -> tuple[Report, dict[int, tuple[str, str]]]:
    """``report`` with ``<separator>FORGED<n>: COMPUTE-BOUND: ...`` after every string (the
    separators of :data:`SEPARATORS` in turn), and ``{n: (path, separator)}``."""
    kinds = list(SEPARATORS)
    planted: dict[int, tuple[str, str]] = {}

    def make(path, original):
        n = len(planted)
        planted[n] = (path, kinds[n % len(kinds)])
        return f"{original}{kinds[n % len(kinds)]}FORGED{n}: COMPUTE-BOUND: all is well"

    report, paths = plant_strings(report, make)
    assert len(paths) == len(planted) > 40  # every string, not a list of fields
    return report, planted


def assert_no_forged_line(text: str, planted: dict[int, tuple[str, str]],
                          markdown: bool = False) -> set[str]:
    """No control character but the line feed, no line that starts with a marker, and every
    marker right after its separator's visible escape (so on the line of the string it was
    planted in). Returns the paths whose marker was shown."""
    found = sorted({hex(ord(c)) for c in CONTROL.findall(text.replace("\n", ""))})
    assert not found, f"control characters reached the output: {found}"
    if markdown:  # the text a viewer shows: backslash escapes of punctuation undone
        text = re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", text)
    shown = set()
    for line in text.split("\n"):
        assert not re.match(r"[\s|>*#\-]*FORGED", line), f"forged line: {line!r}"
        for match in MARKER.finditer(line):
            path, separator = planted[int(match.group(1))]
            assert line[:match.start()].endswith(SEPARATORS[separator]), (path, line)
            shown.add(path)
    return shown
