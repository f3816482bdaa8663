"""`bench report PATH...`: tables, scaling analysis and plots from records.

    bench report results/strong                    # a sweep folder (or any results.jsonl / folder of them)
    bench report results/ --json > report.json     # one JSON document
    bench report results/strong --plots plots/ --compare-paper
    bench report --html report.html results/validate-20261206-013941-ff4739 results/strong   # one page, any records

Reads run and point records (torn lines, and records that do not match the
schema, are named and skipped; an unknown schema_version is refused), keeps
the latest record of each sweep point, and prints per sweep: each point's
throughput, step time, time per epoch, communication share, memory and
accuracy; for strong scaling and the batch sweep S(N) = T1/TN, E(N) = S/N,
Karp-Flatt and an Amdahl fit; for weak scaling E_w(N) = T1/TN; packed vs
spread and DeepSpeed vs DDP speedups. Every formula is
bench/analysis/metrics.py's (docs/metrics.md). Only the records are read, never
the run directories, so results copied from a cluster report the same here.
--html FILE writes one self-contained page (bench.render.html) of every
validate record and every run or sweep found: what bench validate leaves as
report.html beside its record, and these tables and plots as pictures.
"""

from __future__ import annotations

import json
import sys

from bench.analysis import report_analysis as ra
from bench.commands.common import add_json_flag
from bench.core.errors import BadInput

HELP = "tables, scaling analysis and plots from run/sweep records (works on copied results)"


def add_arguments(p) -> None:
    p.add_argument("paths", nargs="+", metavar="PATH", help="results.jsonl files or folders holding them")
    p.add_argument("--plots", metavar="DIR", default=None, help="write PNG plots into DIR (default: no plots)")
    p.add_argument("--html", metavar="FILE", default=None,
                   help="write one self-contained page (no network request; opens by file://) of these records: "
                        "validates, runs, sweeps (default: no page; bench validate writes report.html beside its "
                        "record)")
    p.add_argument("--compare-paper", action="store_true",
                   help="put the study's published figures (arXiv 2602.21081) beside these")
    add_json_flag(p)


def main(args) -> int:
    if args.html:
        return _html(args)
    loaded = ra.load(args.paths)
    for why in loaded.skipped:
        print(f"bench report: {why}", file=sys.stderr)
    if not loaded.records:
        raise BadInput(f"{' '.join(args.paths)}: no run or point records found")
    groups = ra.group(loaded.records)
    written: list[str] = []
    if args.plots:
        from bench.render import plots
        written = plots.write_all(args.plots, groups, compare_paper=args.compare_paper)
    if args.json:
        doc = ra.to_json(loaded, groups, args.compare_paper)
        doc["plots"] = written
        print(json.dumps(doc))
        return 0
    from rich.console import Console

    from bench.render.report import print_group, print_paper
    # Piped output keeps whole rows rather than folding them to 80 columns.
    console = Console(width=None if sys.stdout.isatty() else 160)
    for g in groups:
        print_group(console, g, args.compare_paper)
    if args.compare_paper:
        print_paper(console, ra.paper_reference())
    for path in written:
        print(f"plot: {path}", file=sys.stderr)
    return 0


def _html(args) -> int:
    """--html FILE: the validates and the run/sweep groups of PATH... on one page; the usual tables are not printed."""
    from bench.render.html.records import load
    from bench.render.html.report import write

    found = load(args.paths)
    for why in found.skipped:
        print(f"bench report: {why}", file=sys.stderr)
    if not found.validates and not found.runs:
        raise BadInput(f"{' '.join(args.paths)}: no validate, run or point records found")
    try:
        open(args.html, "a").close()
    except OSError as e:
        raise BadInput(f"--html: cannot write {args.html!r} ({e.strerror})") from None
    sizes = write(args.html, found.validates, ra.group(found.runs) if found.runs else [], args.compare_paper)
    print(f"report: {args.html} ({sizes['total'] / 1e6:.1f} MB: {len(found.validates)} validate(s), "
          f"{len(found.runs)} run or point record(s))", file=sys.stderr)
    return 0
