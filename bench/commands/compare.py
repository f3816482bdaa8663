"""`bench compare BASELINE NEW`: each figure's change between two result folders, and whether it regressed.

    bench compare results/acceptance results/after-maintenance           # table; exit 1 on a regression
    bench compare results/validate-A results/validate-B --threshold 3%   # two validate runs
    bench compare base/ new/ --json                                      # one JSON document

Records are matched by what they measured (bench.analysis.compare_subjects:
kind, config, point, comm size, validate node and identity), never by run
id. Exit 1 when a throughput or bandwidth figure fell by more than
--threshold and, where both sides have repeats, by more than their spread,
or when a subject ok in the baseline failed, ran out of memory or is
missing in the new records, naming the subject and the figure or the new
record's reason; 0 otherwise; 2 when the two sides share nothing to
compare, or when a subject was measured differently on the two sides (the
fields that differ are named: nothing is judged across them).
"""

from __future__ import annotations

import json
import sys

from bench.analysis import compare as cmp
from bench.commands.common import add_json_flag
from bench.core.errors import BadInput, EXIT_FAILED

HELP = "each figure's change between two result folders or validate runs; exit 1 on a regression"


def threshold(text: str) -> float:
    return cmp.parse_threshold(text)


def add_arguments(p) -> None:
    p.add_argument("baseline", metavar="BASELINE", help="results folder, results.jsonl or validate run of before")
    p.add_argument("new", metavar="NEW", help="the same, of after")
    p.add_argument("--threshold", default="5%", metavar="SHARE",
                   help="a fall larger than this (and than the run-to-run spread) is a regression (default 5%%)")
    add_json_flag(p)


def main(args) -> int:
    limit = threshold(args.threshold)
    sides = {}
    for name, path in (("BASELINE", args.baseline), ("NEW", args.new)):
        records, skipped = cmp.load(path)
        for why in skipped:
            print(f"bench compare: {why}", file=sys.stderr)
        got = cmp.samples(records)
        if not got and not got.failed:
            raise BadInput(f"{name} {path}: no run, point, comm or validate record found")
        sides[name] = got
    result = cmp.compare(sides["BASELINE"], sides["NEW"], limit)
    if result.incomparable:
        more = len(result.incomparable) - 1
        raise BadInput(f"{args.baseline} and {args.new} measured {len(result.incomparable)} subject(s) differently, "
                       f"not judged: {result.incomparable[0]}" + (f" (and {more} more)" if more else ""))
    if not result.matched:
        differs = (f"baseline has {', '.join(result.only_base[:3])}; new has {', '.join(result.only_new[:3])}")
        raise BadInput(f"{args.baseline} and {args.new} measured nothing alike: {differs}")
    if args.json:
        print(json.dumps(result.to_dict()))
    else:
        from bench.render.compare import print_result
        print_result(result)
    for r in result.regressions:
        spread = f", spread {r.spread:.1%}" if r.spread is not None else ", no repeats: threshold only"
        print(f"bench compare: regressed: {r.subject}: {r.figure} {r.change:+.1%} (threshold {limit:.0%}{spread})",
              file=sys.stderr)
    for x in result.lost:
        print(f"bench compare: regressed: {x.subject}: {x.base} -> {x.new}: {x.reason}", file=sys.stderr)
    return EXIT_FAILED if result.regressions or result.lost else 0
