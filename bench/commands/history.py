"""`bench history`: every verdict kept, across validates: a node's or GPU's figures over time, repeat drains,
nodes that failed again after a repair, slow drifts, and what changed.

    bench history                                   # repeat drains, relapses and drifts in the store
    bench history import results/                   # every validate, run and sweep record of earlier folders
    bench history show node0007                     # its verdict, drains and link figures per run
    bench history show node0007:3 --json            # one GPU's images/s per run, as one JSON document
    bench history drained --times 3 --days 30       # nodes drained at least 3 times in 30 days
    bench history relapses --days 7                 # drained again within 7 days of being found in service
    bench history drift --runs 20                   # GPUs and links losing speed over their last 20 runs
    bench history changed node0007                  # driver, firmware, image, kernel: last healthy run -> latest
    bench history prune --keep-days 90              # retention by hand, then the file compacted

The store is SQLite on this head's local disk (bench.history.store: --store, else $VITBENCH_HISTORY, else
$XDG_STATE_HOME/vitbench/history.sqlite), or a PostgreSQL server by a postgresql:// URL in the same places, for
several heads (bench.history.pg); bench validate writes to it at its end and reads its drifts (bench.history.hook). Exit 0; 2 bad input or a store that cannot be read (one line, why).
"""

from __future__ import annotations

import argparse
import json

from bench.core.errors import BadInput
from bench.history import drift, importer, queries, store, write

HELP = "every verdict kept: a node's or GPU's history, repeat drains, relapses, slow drifts, what changed"


def _common(p, after: bool = False) -> argparse.ArgumentParser:
    """--store and --json, before the action or after it (after: absent leaves what was given before)."""
    keep = {"default": argparse.SUPPRESS} if after else {}
    p.add_argument("--store", metavar="PATH", help=f"the history store: a path, or a postgresql:// URL (default "
                   f"${store.ENV}, else {store.default_path()})", **({"default": None} | keep))
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout and nothing else", **keep)
    return p


def add_arguments(p) -> None:
    _common(p)
    common = _common(argparse.ArgumentParser(add_help=False), after=True)
    sub = p.add_subparsers(dest="history_action", metavar="ACTION")
    a = sub.add_parser("import", parents=[common], help="store every record of results folders")
    a.add_argument("dirs", nargs="+", metavar="DIR")
    a = sub.add_parser("show", parents=[common], help="a node's (HOST) or GPU's (HOST:SLOT) runs")
    a.add_argument("subject", metavar="HOST|HOST:SLOT")
    a = sub.add_parser("drained", parents=[common], help="nodes drained at least --times times in --days")
    a.add_argument("--times", type=_positive_int, default=3)
    a.add_argument("--days", type=_positive, default=30.0)
    a = sub.add_parser("relapses", parents=[common], help="nodes drained again within --days of a return")
    a.add_argument("--days", type=_positive, default=7.0)
    a = sub.add_parser("drift", parents=[common], help="GPUs and links drifting down (" + drift.STATISTIC.replace("%", "%%") + ")")
    a.add_argument("--runs", type=_positive_int, default=drift.WINDOW, help=f"the window (default {drift.WINDOW})")
    a = sub.add_parser("changed", parents=[common], help="a node's provenance: last healthy run -> latest")
    a.add_argument("host", metavar="HOST")
    a = sub.add_parser("prune", parents=[common], help="delete runs older than --keep-days, then compact")
    a.add_argument("--keep-days", type=_positive, required=True)


def _positive(text: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not x > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be above 0")
    return x


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number above 0")
    return int(text)


def main(args) -> int:
    from bench.render import history as view

    action = args.history_action or "summary"
    try:
        conn = store.open_store(args.store, create=action == "import")
    except store.Unavailable as e:
        raise BadInput(f"--store: {e}") from None
    try:
        doc = _answer(conn, action, args)
    finally:
        conn.close()
    if args.json:
        print(json.dumps(doc))
    else:
        view.render(action, doc)
    return 0


def _answer(conn, action: str, args) -> dict:
    if action == "import":
        return {"action": action, **importer.import_dirs(conn, args.dirs)}
    if action == "show":
        return {"action": action, "subject": args.subject, "runs": queries.series(conn, args.subject)}
    if action == "drained":
        return {"action": action, "times": args.times, "days": args.days,
                "nodes": queries.drained(conn, args.times, args.days)}
    if action == "relapses":
        return {"action": action, "days": args.days, "relapses": queries.relapses(conn, args.days)}
    if action == "drift":
        return {"action": action, "statistic": drift.STATISTIC, "drifts": queries.drifts(conn, args.runs)}
    if action == "changed":
        return {"action": action, "host": args.host, "changed": queries.changed(conn, args.host)}
    if action == "prune":
        gone = write.prune(conn, args.keep_days)
        conn.execute("VACUUM")
        return {"action": action, "keep_days": args.keep_days, "pruned": gone}
    return {"action": "summary", "statistic": drift.STATISTIC, "drained": queries.drained(conn),
            "relapses": queries.relapses(conn), "drifts": queries.drifts(conn)}
