"""The subcommands that measure a loader themselves: ``pipecheck demo``, ``pipecheck stress``
and the shard dry run ``pipecheck shards``."""

from __future__ import annotations

import argparse
import sys

from pipecheck.records import MAX_WORLD_SIZE
from pipecheck.codec import to_jsonable
from pipecheck.render.sections.sharding import sharding_section
from pipecheck.render.terminal import MIN_WIDTH, render_section

from pipecheck.cli.arguments import (DEMO_MAX_IMAGES, DEMO_MAX_STEPS, MAX_BATCH_SIZE, MAX_COUNTED,
                                     MAX_PREFETCH_FACTOR, MAX_SECONDS, MAX_THREADS, MAX_WIDTH,
                                     MAX_WORKERS, baseline, batch_size, count, int_list, number,
                                     output_file, seconds, step_time, width, workers)
from pipecheck.cli.output import (Command, EXIT_INTERRUPTED, EXIT_OK, PROG, add_output_options,
                                  emit, say)


class DemoCommand(Command):
    """Run the embedded demo and print its report.

    A real JPEG WebDataset feeds a small CNN trained on the CPU through pipecheck.wrap.
    Options left out keep the demo's own defaults. The demo data (synthetic JPEG shards) is
    written once into --data (default: $PIPECHECK_CACHE, else ~/.cache/pipecheck/demo) and
    reused.
    """

    name = "demo"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--data", metavar="DIR", help="folder for the demo shards")
        # No defaults here: options left out keep run_demo's own defaults (one source of truth).
        parser.add_argument("--workers", metavar="N", type=workers,
                            help=f"DataLoader num_workers, 0 to {MAX_WORKERS:,}")
        parser.add_argument("--steps", metavar="N", type=count(1, DEMO_MAX_STEPS, "steps"),
                            help=f"training steps to run, 1 to {DEMO_MAX_STEPS:,}")
        parser.add_argument("--batch-size", metavar="N", type=batch_size,
                            help="samples per batch")
        parser.add_argument("--images", metavar="N", type=count(1, DEMO_MAX_IMAGES, "images"),
                            help=f"images in the dataset, 1 to {DEMO_MAX_IMAGES:,} (each one "
                            "is a JPEG written to --data)")
        parser.add_argument(
            "--no-progress", action="store_true", help="do not show a progress bar while training"
        )
        add_output_options(parser)

    def run(self, args: argparse.Namespace) -> int:
        from pipecheck import demo

        given = {
            name: getattr(args, name)
            for name in ("workers", "steps", "batch_size", "images")
            if getattr(args, name) is not None
        }
        try:
            report = demo.run_demo(
                data_dir=args.data, progress=not (args.no_progress or args.quiet), **given
            )
        except demo.DemoInterrupted as interrupted:
            # Ctrl-C: the report of the steps done so far still comes out, then exit 130.
            emit(interrupted.report, args)
            print(f"{PROG}: interrupted; the report covers the steps run so far",
                  file=sys.stderr)
            return EXIT_INTERRUPTED
        emit(report, args)
        return EXIT_OK


class StressCommand(Command):
    """Run a loader alone under several DataLoader settings and report the fastest.

    TARGET is file.py:function or package.module:function; the function takes DataLoader
    keyword arguments (num_workers, prefetch_factor, persistent_workers, pin_memory,
    in_order, batch_size) and returns a DataLoader or a Dataset. Each configuration runs in
    its own child process for --trial-seconds (epochs following one another; each epoch's
    first batch is warm-up, the first one reported as startup), with an optional emulated
    training step per batch. A trial that delivers nothing for
    --timeout seconds is killed and recorded as failed, as is one whose loader raises; the
    sweep goes on. --budget bounds the whole run: a trial starts only when it is expected to
    end within it, time for the epoch-start and profiling trials held back; a configuration whose
    workers would not fit in the available memory is skipped with the reason. The baseline
    (--baseline; else with --workers auto the defaults of the function's num_workers /
    prefetch_factor / persistent_workers parameters, else num_workers=0; else the first
    configuration of the --workers list) runs first; the recommendation's gain is
    measured against it. Without a --workers list the what-if model guides the search: after
    calibration trials (the baseline and num_workers 1) it measures only settings predicted to
    beat the best measured by more than the measured noise; the rest are listed as predicted,
    and the best reported is always measured.
    """

    name = "stress"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("target", metavar="TARGET", help="file.py:function or module:function")
        parser.add_argument("--workers", metavar="N,N,...|auto", default="auto",
                            type=int_list(0, MAX_WORKERS, auto=True),
                            help="num_workers values, run as a grid; auto (default): 0 up to "
                            "max(8, 4 x usable CPUs), at most 32, searched as --search says")
        parser.add_argument("--search", choices=("model", "grid"), default="model",
                            help="with --workers auto: model (default) measures only the "
                            "settings the what-if model predicts may beat the best measured; "
                            "grid measures them all")
        parser.add_argument("--prefetch-factor", metavar="N,N,...",
                            type=int_list(1, MAX_PREFETCH_FACTOR),
                            help="prefetch_factor values, tried with workers > 0 (default 2)")
        parser.add_argument("--persistent-workers", action=argparse.BooleanOptionalAction,
                            default=None,
                            help="keep workers alive in every trial (2 epochs each), or never; "
                            "default: measure the best configuration's epoch restart both ways "
                            "and recommend persistent workers when epoch start matters")
        parser.add_argument("--in-order", metavar="true,false",
                            help="in_order values tried with 2+ workers (torch >= 2.6; default "
                            "with --workers auto: true,false)")
        parser.add_argument("--batch-size", metavar="N,N,...",
                            type=int_list(1, MAX_BATCH_SIZE),
                            help="batch sizes to compare (default: the target's own)")
        parser.add_argument("--torch-threads", metavar="N,N,...", type=int_list(1, MAX_THREADS),
                            help="the training process's torch intra-op threads tried with each "
                            "configuration (torch.set_num_threads; default: its own); it "
                            "matters with your own CPU step (--step): the emulated one runs "
                            "no intra-op threads")
        parser.add_argument("--baseline", metavar="KEY=VALUE,...", type=baseline,
                            help="the configuration to beat, e.g. num_workers=4,prefetch_factor=2")
        parser.add_argument("--stacks", action=argparse.BooleanOptionalAction, default=None,
                            help="profile the best configuration with py-spy in one extra trial "
                            "(default: when py-spy is installed and permitted)")
        parser.add_argument("--step-time", metavar="S[+-J]", type=step_time,
                            help="emulated step per batch in seconds, e.g. 0.05 or 0.05+-0.01")
        parser.add_argument("--step-cpu", metavar="F",
                            type=number(float, 0.0, 1.0, what="a share from 0 to 1"), default=0.0,
                            help="share of each emulated step spent busy on the CPU, the rest "
                            "asleep: 0 (default) for a GPU step, up to 1 for a CPU step; a "
                            "wrapped run's report gives the step's measured share")
        parser.add_argument("--step", metavar="FILE:FN",
                            help="your own training step instead, called with each batch "
                            "(file.py:function or package.module:function)")
        parser.add_argument("--budget", metavar="S", type=seconds, default=60.0,
                            help="seconds the whole run may take, every trial included "
                            f"(default 60 s, at most {MAX_SECONDS:,.0f} s)")
        parser.add_argument("--timeout", metavar="S", type=seconds, default=30.0,
                            help="fail a trial silent for S seconds (default 30 s, at most "
                            f"{MAX_SECONDS:,.0f} s)")
        parser.add_argument("--batches", metavar="N", type=count(2, MAX_BATCH_SIZE, "batches"),
                            default=None,
                            help="batches per trial at most, across epochs (default: no limit)")
        parser.add_argument("--trial-seconds", metavar="S", type=seconds, default=None,
                            help="wall-clock seconds each trial runs, epochs following one "
                            "another (default 3 s, at most "
                            f"{MAX_SECONDS:,.0f} s)")
        add_output_options(parser)

    def run(self, args: argparse.Namespace) -> int:
        from pipecheck.stress import stress
        from pipecheck.stress.settings import DEFAULT_TRIAL_S, parse_bool_list
        from pipecheck.stress.progress import SweepProgress

        # --workers, --prefetch-factor, --batch-size, --baseline and --step-time arrive parsed
        # and range-checked (their argparse types).
        workers = args.workers if args.workers != "auto" else None
        orders = parse_bool_list(args.in_order, "--in-order") if args.in_order else None
        with SweepProgress(enabled=not args.quiet) as progress:
            report = stress(args.target, num_workers=workers, prefetch_factors=args.prefetch_factor,
                            persistent_workers=args.persistent_workers,
                            in_order=orders, step_time_s=args.step_time,
                            step_cpu_share=args.step_cpu, step=args.step,
                            batch_size=args.batch_size, baseline=args.baseline,
                            stacks=args.stacks,
                            budget_s=args.budget, timeout_s=args.timeout,
                            trial_batches=args.batches,
                            trial_s=args.trial_seconds or DEFAULT_TRIAL_S,
                            progress=progress, search=args.search,
                            torch_threads=args.torch_threads)
        emit(report, args)
        if args.quiet:  # otherwise the summary lists failed and skipped trials itself
            for line in progress.problems(report.stress):
                say(f"{PROG}: {line}", sys.stderr)
        note = progress.budget_note(report.stress, args.budget)
        if note is not None:
            say(f"{PROG}: {note}", sys.stderr)
        return EXIT_OK


class ShardsCommand(Command):
    """Dry-run how WebDataset shards are split across ranks and DataLoader workers.

    URLS are shard paths or URLs, brace notation allowed (data-{000..099}.tar). For every
    (rank, worker) it replays the real split (webdataset's split_by_node then split_by_worker,
    or --node-splitter / --worker-splitter given as file.py:function or module:function) and
    reports the shards and estimated samples each one reads, from the local shards' tar headers
    (up to --count shards counted, the rest estimated by size). Findings: empty-workers,
    shard-imbalance, unequal-rank-batches, shard-size-skew, small-shuffle-buffer; with the
    sharding changes that fix them.
    """

    name = "shards"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("urls", metavar="URLS", nargs="+", help="shard paths or URLs")
        parser.add_argument("--workers", metavar="N", type=workers, required=True,
                            help=f"DataLoader num_workers per rank, 0 to {MAX_WORKERS:,}")
        parser.add_argument("--world-size", metavar="W", type=count(1, MAX_WORLD_SIZE, "ranks"),
                            help=f"ranks, 1 to {MAX_WORLD_SIZE:,} (default: torch.distributed, "
                            "else $WORLD_SIZE, else 1)")
        parser.add_argument("--batch-size", metavar="N", type=batch_size,
                            help="samples per batch, to count batches per rank")
        parser.add_argument("--drop-last", action="store_true",
                            help="the DataLoader drops each worker's last partial batch")
        parser.add_argument("--shuffle-buffer", metavar="N",
                            type=count(0, MAX_BATCH_SIZE, "samples"),
                            help="the pipeline's shuffle(N) buffer, in samples")
        parser.add_argument("--resampled", action="store_true",
                            help="shards are resampled (WebDataset(resampled=True))")
        parser.add_argument("--node-splitter", metavar="TARGET",
                            help="file.py:function or module:function splitting by rank")
        parser.add_argument("--worker-splitter", metavar="TARGET",
                            help="file.py:function or module:function splitting by worker")
        parser.add_argument("--count", metavar="N", type=count(1, MAX_COUNTED, "shards"),
                            default=16, help="shards whose samples are counted (default 16, at "
                            f"most {MAX_COUNTED:,})")
        parser.add_argument("--json", metavar="FILE", type=output_file,
                            help="save the sharding analysis as JSON to FILE")
        parser.add_argument("--quiet", action="store_true", help="print nothing but errors")
        parser.add_argument("--width", metavar="N", type=width,
                            help=f"columns for the summary, {MIN_WIDTH} to {MAX_WIDTH:,} "
                            "(default: the terminal's)")

    def run(self, args: argparse.Namespace) -> int:
        import json
        import shutil

        from pipecheck._atomic import write_text_atomic
        from pipecheck.shards import SCHEMA, shards
        from pipecheck.stress.target import load_factory

        section = shards(
            args.urls, num_workers=args.workers, world_size=args.world_size,
            batch_size=args.batch_size, drop_last=args.drop_last,
            shuffle_buffer=args.shuffle_buffer, resampled=args.resampled,
            node_splitter=load_factory(args.node_splitter) if args.node_splitter else None,
            worker_splitter=load_factory(args.worker_splitter) if args.worker_splitter else None,
            max_counted=args.count)
        if args.json:
            text = json.dumps({"schema": SCHEMA, **to_jsonable(section)}, indent=2) + "\n"
            saved = write_text_atomic(args.json, text, "sharding analysis")
            if not args.quiet:
                say(f"{PROG}: sharding analysis saved to {saved}", sys.stderr)
        if not args.quiet:
            width = args.width or shutil.get_terminal_size(fallback=(100, 24)).columns
            sys.stdout.write(render_section(sharding_section(section),
                                            width=max(width, MIN_WIDTH)))
            sys.stdout.flush()
        return EXIT_OK
