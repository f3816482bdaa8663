"""What the history store costs bench validate at 8 to 8,000 GPUs: a record written, the drifts and sparklines read.

    .venv/bin/python benchmarks/history_store.py                 # 1, 100, 1,000 nodes x 8 GPUs, 20 runs each
    .venv/bin/python benchmarks/history_store.py --smoke         # 1 and 10 nodes, 10 runs

One quick validate per size (bench.validate.stages.validate in-process, its launches answered by
tests/scale_fixtures.py from recorded real outputs, the store off), its record written RUNS times under new run ids
into a fresh SQLite store (bench.history.write.keep: what bench validate's hook does after the run's folder), then
what the next validate's hook reads: every GPU's and link's drift test over the RUNS runs and this one
(queries.drifts), and each node's trail for report.html (queries.trails). Medians; the file's size after RUNS runs.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._common import machine, parse_smoke  # noqa: E402


def size(nodes: int, runs: int, tmp: str) -> dict:
    import pytest

    from bench.cluster.hostfile import HostSelection
    from bench.history import queries, store, write
    from bench.history.hook import now_figures
    from bench.validate import stages
    from bench.validate.config import ValidateConfig
    from tests import scale_fixtures

    folder = tempfile.mkdtemp(dir=tmp)
    cluster = scale_fixtures.Cluster(nodes)
    with pytest.MonkeyPatch.context() as mp:
        cluster.install(mp.setattr)
        mp.setenv(store.ENV, "off")
        rec = stages.validate(ValidateConfig(level="quick", out=os.path.join(folder, "r")),
                              HostSelection(hostfile=cluster.hostfile(folder)))
    path = os.path.join(folder, "history.sqlite")
    conn = store.open_store(path)
    took = []
    for i in range(runs):
        r = copy.deepcopy(rec)
        r["run_id"], r["time"] = f"run-{i}", f"2026-11-{i % 28 + 1:02d}T{i // 28:02d}:00:00+0000"
        t0 = time.perf_counter()
        write.keep(conn, r)
        took.append(time.perf_counter() - t0)
    ident = queries.identity_of(rec["identity"])
    t0 = time.perf_counter()
    queries.drifts(conn, identity=ident, now=now_figures(rec["measured"]))
    drift_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    queries.trails(conn, rec["hosts"], ident)
    trail_s = time.perf_counter() - t0
    conn.close()
    return {"nodes": nodes, "gpus": nodes * 8, "rows": len(rec["checks"]), "runs": runs,
            "keep_s": statistics.median(took), "drifts_s": drift_s, "trails_s": trail_s,
            "mb": os.path.getsize(path) / 1e6}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", default="1,100,1000", help="cluster sizes (nodes of 8 GPUs), comma-separated")
    p.add_argument("--runs", type=int, default=20)
    args = parse_smoke(p, argv, {"nodes": "1,10", "runs": 10})
    print(machine(), flush=True)
    print(f"{'nodes':>6} {'GPUs':>6} {'rows':>7} {'runs':>5} {'keep s':>8} {'drifts s':>9} {'trails s':>9} "
          f"{'MB':>8} {'MB/run':>7}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in map(int, args.nodes.split(",")):
            r = size(n, args.runs, tmp)
            print(f"{r['nodes']:>6} {r['gpus']:>6} {r['rows']:>7} {r['runs']:>5} {r['keep_s']:>8.3f} "
                  f"{r['drifts_s']:>9.3f} {r['trails_s']:>9.3f} {r['mb']:>8.1f} {r['mb'] / r['runs']:>7.2f}",
                  flush=True)
    print(f"history_store: load {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
