"""The subcommands that read saved reports: ``pipecheck report`` (render, merge, compare) and
``pipecheck check`` (CI thresholds)."""

from __future__ import annotations

import dataclasses
import argparse
import sys
from typing import TYPE_CHECKING, Optional, Sequence

from pipecheck.errors import BadInputError, CheckFailed
from pipecheck.render.markdown import MarkdownRenderer
from pipecheck.render.terminal import TerminalRenderer

if TYPE_CHECKING:
    from pipecheck.report import Report
from pipecheck.cli.arguments import (MAX_SAMPLES_PER_S, MAX_SECONDS, MIN_THRESHOLD, UsageError,
                                     fraction, number)
from pipecheck.cli.output import (Command, EXIT_OK, OUTPUT_OPTIONS, PROG, add_output_options, emit,
                                  save_outputs, say, use_color)


class ReportCommand(Command):
    """Render saved JSON reports in the terminal.

    RUN.json is a file written by report.save() or --json. Several files of one
    torch.distributed run (run.rank0.json run.rank1.json ..., or run.rank*.json) are merged
    into one report, reading one file at a time: the terminal shows the job summary (data
    wait per step over ranks and nodes, the slowest ranks and nodes, whether the straggler
    is a rank, a node or the whole job, ranks missing or failed, the straggler's diagnosis);
    --verbose adds the straggler rank's full report and every rank's row; --html and --json
    hold both. Other files are rendered in turn under a header naming each; --json then takes
    a single report.

    --compare OLD.json NEW.json compares a later run with an earlier report of the same
    script: a verdict line first that says whether throughput (samples/s) rose or fell, by
    how much and whether beyond the runs' own noise (judged by samples/s, never by the
    stall), then throughput, steady step, data wait, stall and goodput side by side, the
    loader settings that changed, and a note when the runs were on different machines or
    read other data. --json saves NEW's report with the comparison in it.
    """

    name = "report"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("runs", metavar="RUN.json", nargs="+", help="saved report file(s)")
        parser.add_argument("--compare", action="store_true",
                            help="compare two reports of the same script, RUN.json OLD NEW: "
                            "did throughput rise or fall, and what changed")
        add_output_options(parser)

    def run(self, args: argparse.Namespace) -> int:
        if args.compare:
            return self._compare(args)
        merged = _merged_rank_files(args.runs)
        if merged is not None:
            emit(merged, args)
            return EXIT_OK
        # Load every file before printing anything: a bad file fails the command up front.
        reports = _load_reports(args.runs)
        if len(reports) > 1 and any(report.rank is not None for _, report in reports):
            from pipecheck.merge import merge_reports

            emit(merge_reports(reports), args)
            return EXIT_OK
        for option in OUTPUT_OPTIONS:
            if getattr(args, option) and len(args.runs) > 1:
                raise UsageError(f"--{option} takes a single report, or the rank files of one "
                                 "torch.distributed run (which are merged)")
        several = len(reports) > 1
        for i, (path, report) in enumerate(reports):
            if i and (args.markdown or not args.quiet):
                print()
            emit(report, args, title=path if several else None)
        return EXIT_OK


    def _compare(self, args: argparse.Namespace) -> int:
        """``--compare OLD NEW``: NEW's report with its comparison against OLD, to every output
        asked for; the terminal and markdown show the comparison alone."""
        from pipecheck.analysis.compare import compare_reports
        from pipecheck.render.sections import build_comparison_document

        if len(args.runs) != 2:
            raise UsageError(f"--compare takes two reports, OLD.json NEW.json; got "
                             f"{len(args.runs)}")
        (old_path, old), (new_path, new) = _load_reports(args.runs)
        for path, report in ((old_path, old), (new_path, new)):
            if report.ranks is not None:
                raise BadInputError(f"{path} is a merged multi-rank report; --compare takes "
                                    "one rank's file of each run (run.rank0.json)")
        if old.rank is not None and new.rank is not None and old.created == new.created \
                and old.rank.rank != new.rank.rank:
            raise BadInputError(f"{old_path} and {new_path} are two ranks of one "
                                "torch.distributed run (pipecheck report merges them); "
                                "--compare takes one rank's file of each of two runs")
        compared = dataclasses.replace(new, comparison=compare_reports(old, new, old_path))
        quiet = save_outputs(compared, args, "report with the comparison")
        document = build_comparison_document(compared, new_path)
        if args.markdown:
            sys.stdout.write(MarkdownRenderer().render_document(document))
        elif not quiet:
            sys.stdout.write(TerminalRenderer(width=args.width, color=use_color(sys.stdout),
                                              verbose=args.verbose)
                             .render_document(document))
        sys.stdout.flush()
        return EXIT_OK


def _merged_rank_files(paths: Sequence[str]) -> Optional["Report"]:
    """Several files whose first has a rank: the rank files of one run, merged streaming
    (:func:`pipecheck.merge.merge_files`: one file read at a time, summaries kept); ``None``
    for a single file or when the first has no rank (then each is loaded in full)."""
    if len(paths) < 2:
        return None
    from pipecheck.merge import merge_files, read_rank_file

    if read_rank_file(paths[0]).rank is None:
        return None
    return merge_files(paths)


def _load_reports(paths: Sequence[str]) -> list[tuple[str, "Report"]]:
    from pipecheck.report import load

    return [(path, load(path)) for path in paths]


class CheckCommand(Command):
    """Fail (exit 1) when a saved run misses an input-pipeline threshold, for CI.

    RUN.json is a saved report; several files of one torch.distributed run
    (run.rank*.json) are merged first, then stall and wait are judged on the straggler
    rank and throughput on the ranks' summed samples/s. --max-stall is a 0-1 fraction of
    loop time spent waiting for data, steady state (0.05 = 5%); --min-samples-per-s the
    throughput in samples/s; --max-wait-per-batch-s the mean data wait per batch in
    seconds. Prints one line per threshold: violated ones on stderr (exit 1), passed ones on
    stdout unless --quiet (exit 0). A figure the run did not measure violates its threshold.
    Unreadable files and bad values exit 2.
    """

    name = "check"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("runs", metavar="RUN.json", nargs="+", help="saved report file(s)")
        parser.add_argument("--max-stall", metavar="F", type=fraction,
                            help="largest steady-state data stall allowed, 0-1 (0.05 = 5%%)")
        parser.add_argument("--min-samples-per-s", metavar="N",
                            type=number(float, MIN_THRESHOLD, MAX_SAMPLES_PER_S, "samples/s"),
                            help="smallest throughput allowed, in samples/s "
                            f"({MIN_THRESHOLD:g} to {MAX_SAMPLES_PER_S:g})")
        parser.add_argument("--max-wait-per-batch-s", metavar="S",
                            type=number(float, MIN_THRESHOLD, MAX_SECONDS, "seconds"),
                            help="largest mean data wait per batch allowed, in seconds "
                            f"({MIN_THRESHOLD:g} to {MAX_SECONDS:,.0f})")
        parser.add_argument("--quiet", action="store_true", help="print violations only")

    def run(self, args: argparse.Namespace) -> int:
        from pipecheck.check import Thresholds, check

        try:
            thresholds = Thresholds(max_stall=args.max_stall,
                                    min_samples_per_s=args.min_samples_per_s,
                                    max_wait_per_batch_s=args.max_wait_per_batch_s)
        except ValueError as err:
            raise UsageError(str(err)) from None
        merged = _merged_rank_files(args.runs)
        if merged is not None:
            reports = [(" ".join(args.runs), merged)]
        else:
            reports = _load_reports(args.runs)
        if len(reports) > 1 and any(report.rank is not None for _, report in reports):
            from pipecheck.merge import merge_reports

            reports = [(" ".join(args.runs), merge_reports(reports))]
        failed = 0
        for path, report in reports:
            label = f" ({path})" if len(reports) > 1 else ""
            for outcome in check(report, thresholds):
                if outcome.passed:
                    if not args.quiet:
                        say(f"{PROG}: check passed: {outcome.line}{label}", sys.stdout)
                else:
                    failed += 1
                    say(f"{PROG}: check failed: {outcome.line}{label}", sys.stderr)
        return CheckFailed.exit_code if failed else EXIT_OK
