"""How long ``pipecheck report`` takes, and how much memory it needs, on reports with huge lists.

    PYTHONPATH=$PWD python benchmarks/render_large.py [--findings 900000] [--rows 5000]
        [--formats load,terminal,markdown,html,trace] [--timeout 900] [--memory-gib 6]
        [--before DIR]

Writes two reports to a temporary folder, each just under the 64 MiB a report may be
(:data:`pipecheck.report.MAX_REPORT_BYTES`), and runs ``python -m pipecheck report`` on each in a
fresh process per format, printing the wall time, the CPU time (user + system: on a shared,
busy machine the steadier figure) and the peak resident memory (``ru_maxrss``) of that
process, from ``os.wait4``, for each run:

* ``findings``: a plausible report plus ``--findings`` findings (each a message and a small
  evidence object, as a hostile or runaway writer could produce);
* ``every list``: ``--rows`` items in every list the renderers show or chart: findings,
  recommendations, workers, pipeline stages, processes, epochs, the consumer, worker and host
  timelines, ranks (a world of ``--rows`` ranks), hot stacks, shard readers, sharding findings
  and evidence keys.

``load`` is ``pipecheck.load`` alone (no rendering), so the rest can be read as load plus
rendering. ``terminal`` prints the summary, ``markdown`` prints ``--markdown``, ``html`` and
``trace`` write ``--html`` / ``--trace`` files. Output goes to ``/dev/null``. A run that fails
or passes ``--timeout`` seconds is reported as such; each process may map at most
``--memory-gib`` GiB (``RLIMIT_AS``: a run that needs more fails with a MemoryError instead of
exhausting a shared machine). ``--before DIR`` also runs each format with an other copy of the
package first on ``PYTHONPATH`` (e.g. ``git archive HEAD~5 pipecheck | tar -x -C DIR``),
alternating with this one, so both meet the same load on a shared machine. Needs nothing but
pipecheck.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from pipecheck.report import MAX_REPORT_BYTES

FORMATS = ("load", "terminal", "markdown", "html", "trace")


def base_report() -> dict:
    """A small plausible wrap report as JSON (built without the test helpers)."""
    from pipecheck.records import (ConsumerSummary, Diagnosis, Environment, LoaderConfig,
                                   ProducerSummary, Quantiles, Timeline)
    from pipecheck.report import Report

    return Report(
        kind="wrap", created="2026-01-01T00:00:00+00:00",
        environment=Environment(cpu_count=8, usable_cpus=8, python="3.11", torch="2.13.0",
                                platform="Linux", cuda=False, pipecheck="0.1.0"),
        loader=LoaderConfig(type="DataLoader", num_workers=4, batch_size=32,
                            prefetch_factor=2, dataset_type="ImageFolder"),
        consumer=ConsumerSummary(batches=1000, samples=32_000, wall_s=100.0, wait_s=40.0,
                                 compute_s=60.0, stall_fraction=0.4, samples_per_s=320.0,
                                 batches_per_s=10.0, tokens_per_s=None, first_batch_s=1.5,
                                 epochs=2, steady_stall_fraction=0.38,
                                 demand_batches_per_s=16.0,
                                 wait_time_s=Quantiles(0.04, 0.03, 0.08, 0.2),
                                 compute_time_s=Quantiles(0.06, 0.06, 0.07, 0.09)),
        producer=ProducerSummary(capacity_batches_per_s=10.5, batch_time_s=None, workers=[]),
        host=None,
        diagnosis=Diagnosis(verdict="input-bound", bottleneck="worker CPU", findings=[]),
        recommendations=[], timeline=Timeline()).to_dict()


def findings_report(count: int) -> dict:
    data = base_report()
    data["diagnosis"]["findings"] = [
        {"kind": "slow", "severity": "info", "message": str(i), "evidence": {}}
        for i in range(count)]
    return data


def every_list_report(rows: int) -> dict:
    """``rows`` items in each list the renderers show, chart or trace."""
    data = base_report()
    data["diagnosis"]["findings"] = [
        {"kind": "slow-sample", "severity": "warning", "message": f"sample {i} was slow",
         "evidence": {f"k{j}": j for j in range(rows // 100)} if i == 0 else {}}
        for i in range(rows)]
    expected = {"samples_per_s": 400.0, "stall_fraction": 0.1}
    data["recommendations"] = [{"setting": f"s{i}", "current": 1, "proposed": 2,
                                "expected": expected, "reason": "r"} for i in range(rows)]
    data["producer"]["workers"] = [
        {"id": i, "pid": 1000 + i, "batches": 10, "busy_s": 1.0, "samples": 320, "fetch_s": 0.9,
         "collate_s": 0.1, "cpu_s": 0.9, "rate_batches_per_s": 10.0} for i in range(rows)]
    data["producer"]["stages"] = [
        {"name": f"stage{i}", "where": "workers", "exclusive_s": 1.0, "fraction": 0.0,
         "samples_in": 1, "samples_out": 1} for i in range(rows)]
    data["host"] = {"status": "ok", "interval_s": 0.5, "samples_taken": rows, "duration_s": 100.0,
                    "system_cpu_percent_mean": 50.0, "iowait_fraction_mean": 0.0,
                    "read_bytes_per_s": 0.0, "read_chars_per_s": 0.0, "main_cpu_s": 1.0,
                    "workers_cpu_s": 1.0, "overhead_cpu_s": 0.01,
                    "processes": [{"pid": i, "role": "worker", "cpu_s": 1.0,
                                   "cpu_percent_mean": 1.0, "rss_max_bytes": 1,
                                   "pss_max_bytes": None, "read_bytes": 0, "read_chars": 0,
                                   "first_seen_at_s": 0.0, "last_seen_at_s": 1.0}
                                  for i in range(rows)]}
    timeline = data["timeline"]
    timeline["epochs"] = [{"epoch": i, "started_at_s": float(i), "batches": 1, "samples": 32,
                           "wait_s": 0.1, "compute_s": 0.1, "wall_s": 0.2,
                           "first_batch_s": 0.1, "ended": "exhausted"} for i in range(rows)]
    timeline["batches"] = [{"index": i, "epoch": 0, "start_at_s": 0.1 * i, "wait_s": 0.04,
                            "compute_s": 0.06, "samples": 32} for i in range(rows)]
    timeline["worker_batches"] = [{"worker_id": i % 4, "end_at_s": 0.1 * i, "fetch_s": 0.3,
                                   "collate_s": 0.01, "samples": 32} for i in range(rows)]
    timeline["host"] = [{"at_s": 0.5 * i, "system_cpu_percent": 50.0, "iowait_percent": 0.0,
                         "main_cpu_percent": 90.0, "workers_cpu_percent": 300.0,
                         "main_rss_bytes": 2**30, "workers_rss_bytes": 2**31,
                         "workers_pss_bytes": None, "read_bytes_per_s": 0.0,
                         "read_chars_per_s": 0.0, "available_memory_bytes": 2**33}
                        for i in range(rows)]
    data["rank"] = {"rank": 0, "world_size": rows, "local_rank": 0, "backend": "nccl",
                    "hostname": "node0"}
    data["ranks"] = {"world_size": rows, "straggler": rows - 1, "missing": [],
                     "samples_per_s": 320.0 * rows,
                     "ranks": [{"rank": r, "batches": 1000, "samples": 32_000, "wall_s": 100.0,
                                "wait_s": 40.0, "compute_s": 60.0, "stall_fraction": 0.4,
                                "samples_per_s": 320.0, "wait_per_batch_s": 0.04,
                                "verdict": "input-bound", "hostname": f"node{r}"}
                               for r in range(rows)]}
    data["stacks"] = {"status": "ok", "window_s": 10.0, "rate_hz": 50, "worker_samples": rows,
                      "main_wait": {f"w{i}": 1 / rows for i in range(rows)},
                      "stages": {f"st{i}": 1 / rows for i in range(rows)},
                      "top": [{"function": f"f{i}", "file": "/x.py", "line": i,
                               "fraction": 1 / rows} for i in range(rows)]}
    data["sharding"] = {"world_size": 1, "num_workers": rows, "world_size_source": "given",
                        "splitters": {"chain": [f"split{i}" for i in range(rows)]},
                        "shards": rows, "samples_total": 1.0 * rows, "counted_shards": rows,
                        "resampled": False,
                        "assignments": [{"rank": 0, "worker": i, "shards": 1, "samples": 1.0}
                                        for i in range(rows)],
                        "ranks": [{"rank": r, "samples": 1.0, "batches": 1}
                                  for r in range(rows)],
                        "idle_fraction_at_epoch_end": 0.0,
                        "findings": [{"kind": "shard-imbalance", "severity": "info",
                                      "message": f"m{i}", "evidence": {}} for i in range(rows)],
                        "recommendations": data["recommendations"]}
    return data


def run_one(fmt: str, path: str, folder: str, timeout: float, memory_bytes: int,
            pythonpath: str | None = None) -> str:
    """One ``pipecheck`` process for ``fmt`` on ``path``: ``"12.3 s, 456 MiB"`` or why not."""
    if fmt == "load":
        command = [sys.executable, "-c", "import sys, pipecheck; pipecheck.load(sys.argv[1])",
                   path]
    else:
        extra = {"terminal": ["--width", "100"], "markdown": ["--markdown"],
                 "html": ["--quiet", "--html", os.path.join(folder, "out.html")],
                 "trace": ["--quiet", "--trace", os.path.join(folder, "out.trace.json")]}[fmt]
        command = [sys.executable, "-m", "pipecheck", "report", path, *extra]
    start = time.perf_counter()
    with open(os.devnull, "w") as sink:
        # The limit is set by a shell that then execs the command: a preexec_fn would make
        # subprocess fork this (large) process, and the child's peak RSS would count its pages.
        limited = ["sh", "-c", f'ulimit -v {memory_bytes // 1024} && exec "$@"', "sh", *command]
        env = dict(os.environ)
        if pythonpath:
            env["PYTHONPATH"] = pythonpath
        process = subprocess.Popen(limited, stdout=sink, stderr=subprocess.PIPE, env=env)
        deadline = start + timeout
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                process.kill()
                _, _, usage = os.wait4(process.pid, 0)
                return (f"over {timeout:.0f} s (killed; CPU "
                        f"{usage.ru_utime + usage.ru_stime:.1f} s by then)")
            time.sleep(0.05)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    process.returncode = code
    error = process.stderr.read().decode("utf-8", "replace").strip() if process.stderr else ""
    cpu = usage.ru_utime + usage.ru_stime
    result = f"wall {wall:6.1f} s, CPU {cpu:6.1f} s, peak {usage.ru_maxrss / 1024:5.0f} MiB"
    return result if code == 0 else f"{result}, exit {code}: {error[-200:]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--findings", type=int, default=900_000)
    parser.add_argument("--rows", type=int, default=5_000)
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--memory-gib", type=float, default=6.0)
    parser.add_argument("--before", metavar="DIR",
                        help="a folder holding another pipecheck package to compare with")
    parser.add_argument("--write", nargs=3, metavar=("CASE", "COUNT", "PATH"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.write:
        case, count, path = args.write
        build = findings_report if case == "findings" else every_list_report
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(build(int(count)), handle, separators=(",", ":"))
        return
    formats = [f for f in args.formats.split(",") if f]
    with tempfile.TemporaryDirectory() as folder:
        cases = [(f"findings ({args.findings:,})", "findings", args.findings),
                 (f"every list ({args.rows:,} each)", "lists", args.rows)]
        for name, case, count in cases:
            path = os.path.join(folder, "run.json")
            # Built in a child process: this one stays small, since a child's peak RSS
            # (ru_maxrss) counts the pages of the process that spawned it.
            subprocess.run([sys.executable, __file__, "--write", case, str(count), path],
                           check=True)
            size = os.path.getsize(path)
            if size > MAX_REPORT_BYTES:
                print(f"{name}: {size / 2**20:.1f} MiB is over the load limit; use fewer")
                continue
            print(f"{name}, {size / 2**20:.1f} MiB:", flush=True)
            limit = int(args.memory_gib * 2**30)
            for fmt in formats:
                if args.before:
                    before = run_one(fmt, path, folder, args.timeout, limit, args.before)
                    print(f"  {fmt:9s} before {before}", flush=True)
                outcome = run_one(fmt, path, folder, args.timeout, limit)
                print(f"  {fmt:9s} {'now    ' if args.before else ''}{outcome}", flush=True)


if __name__ == "__main__":
    main()
