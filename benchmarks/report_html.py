"""report.html at 8 to 8,000 GPUs: how long the page takes to write, what it weighs by part, how soon Chromium shows it.

    .venv/bin/python benchmarks/report_html.py                               # 1, 10, 100, 1,000 nodes x 8 GPUs
    .venv/bin/python benchmarks/report_html.py --nodes 1 --levels quick --repeats 1   # the suite's smoke run

For each size and level it makes the validate record with nothing launched
(tests/scale_fixtures.py: recorded H200 x8 nodes, one bad node in a
hundred; the full level has a 180 s burn of every node, sampled every 10 s),
then times bench.render.html.report.write in this process (the median of
--repeats; the first write of the process, which imports Jinja2 and
matplotlib, is reported apart as "cold"), and gives the page's size by part
(styles, script, packed rows, pictures, markup). Then Debian's headless
Chromium (tests/browser.py) opens it by file://: the seconds until its load
event (the summary and the grid are plain HTML: they are there by then), the
browser's own mark of the page parsed (domContentLoaded), that the grid holds one
cell per node, the seconds until a drained node's cell, clicked, shows its
rows, and every request the browser made besides the file (must be none).

Issue 49's lines at 1,000 nodes: written in under 5 s, under 10 MB, the
summary and grid shown in under 3 s. "full" is the record alone, as bench
report --html gets a record copied without its pictures: the worst node's
burn picture is drawn. "full+pngs" is the folder bench validate leaves, its
burn-<node>.png beside the record (drawn before the timing): the 24 worst
are read back into the page.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._common import machine  # noqa: E402
from tests import scale_fixtures  # noqa: E402

LIMITS = {"write_s": 5.0, "total_bytes": 10e6, "open_s": 3.0}  # issue 49, at 1,000 nodes


def record(nodes: int, level: str, tmp: str) -> dict:
    import pytest

    from bench.cluster.hostfile import HostSelection
    from bench.validate import stages
    from bench.validate.config import ValidateConfig

    cluster = scale_fixtures.Cluster(nodes)
    with pytest.MonkeyPatch.context() as mp:
        cluster.install(mp.setattr)
        return stages.validate(ValidateConfig(level=level, out=os.path.join(tmp, "results")),
                               HostSelection(hostfile=cluster.hostfile(tmp)))


def beside(rec: dict) -> str:
    """The record's folder with burn-<node>.png of the nodes the page reads back, as bench validate leaves them
    (drawn here, outside any timing)."""
    from bench.render.burn import picture_name, plot
    from bench.render.html.pictures import BURN_READ, burn_order

    for host in burn_order(rec)[:BURN_READ]:
        plot(os.path.join(rec["run_dir"], picture_name(host)), host, rec["measured"]["burn"][host])
    return rec["run_dir"]


def written(rec: dict, folder: str | None, path: str, repeats: int) -> tuple[list[float], dict]:
    from bench.render.html.report import write

    times, sizes = [], {}
    for _ in range(repeats):
        t0 = time.perf_counter()
        sizes = write(path, [(rec, folder)], [])
        times.append(time.perf_counter() - t0)
    return times, sizes


def opened(browser, path: str, rec: dict) -> dict:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    d = browser.driver
    load_s = browser.open(path)
    marks = d.execute_script(
        "const n = performance.getEntriesByType('navigation')[0];"
        "return {dcl: n.domContentLoadedEventEnd, load: n.loadEventEnd,"
        " cells: document.querySelectorAll('.cell').length};")
    requests = [u for u in browser.requests() if u != Path(path).resolve().as_uri()]
    host = next((e["host"] for e in rec.get("drain") or []), rec["hosts"][0])
    t0 = time.perf_counter()
    d.find_element(By.CSS_SELECTOR, f'.cell[data-host="{host}"]').click()
    panel = d.find_element(By.ID, "v0-panel")
    WebDriverWait(d, 30).until(lambda _: panel.get_attribute("data-host") == host)
    return {"load_s": load_s, **marks, "node_s": time.perf_counter() - t0, "other_requests": requests,
            "errors": browser.errors()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", default="1,10,100,1000", help="node counts (8 GPUs each), comma-separated")
    p.add_argument("--levels", default="quick,full,full+pngs",
                   help="full+pngs: the full level with burn-<node>.png beside the record, as bench validate leaves "
                        "it (read back, not drawn)")
    p.add_argument("--repeats", type=int, default=3, help="writes per size, the median kept")
    args = p.parse_args()
    from tests.browser import chromium

    print(machine(), flush=True)
    print(f"uptime load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    head = (f"{'level':10s}{'nodes':>6s}{'rows':>7s}{'write s':>9s}{'cold s':>8s}{'total MB':>9s}{'data':>7s}"
            f"{'pics':>7s}{'markup':>7s}{'script':>7s}{'styles':>7s}{'load s':>8s}{'DCL ms':>8s}{'cells':>7s}"
            f"{'node s':>8s}  other requests")
    rows, over = [head, "-" * len(head)], []
    cold: float | None = None
    with tempfile.TemporaryDirectory() as tmp, chromium(Path(tmp)) as browser:
        for level in args.levels.split(","):
            for n in (int(x) for x in args.nodes.split(",")):
                folder = tempfile.mkdtemp(dir=tmp)
                rec = record(n, level.split("+")[0], folder)
                path = os.path.join(folder, "report.html")
                times, sizes = written(rec, beside(rec) if level.endswith("+pngs") else None, path, args.repeats)
                first = times[0] if cold is None else None
                cold = times[0] if cold is None else cold
                write_s = statistics.median(times[1:] if first is not None and len(times) > 1 else times)
                o = opened(browser, path, rec)
                mb = {k: v / 1e6 for k, v in sizes.items()}
                rows.append(f"{level:10s}{n:6d}{len(rec['checks']):7d}{write_s:9.2f}"
                            f"{first if first is not None else float('nan'):8.2f}{mb['total']:9.2f}{mb['data']:7.2f}"
                            f"{mb['pictures']:7.2f}{mb['markup']:7.2f}{mb['script']:7.3f}{mb['styles']:7.3f}"
                            f"{o['load_s']:8.2f}{o['dcl']:8.0f}{o['cells']:7d}{o['node_s']:8.2f}  "
                            f"{len(o['other_requests'])}{' ' + ' '.join(o['other_requests'][:3]) if o['other_requests'] else ''}"
                            f"{' ERRORS: ' + '; '.join(o['errors']) if o['errors'] else ''}")
                print(rows[-1], flush=True)
                if o["cells"] != n or o["other_requests"] or o["errors"]:
                    over.append(f"{level} {n}: cells {o['cells']}, requests {o['other_requests']}, errors {o['errors']}")
                if n >= 1000:
                    for key, got in (("write_s", write_s), ("total_bytes", sizes["total"]), ("open_s", o["load_s"])):
                        if got > LIMITS[key]:
                            over.append(f"{level} {n}: {key} {got:,.2f} over {LIMITS[key]:,}")
    print("\n".join(["", *rows, ""]))
    print("MB: 10^6 bytes. data: the nodes' rows, gzip + base64; pics: data: URIs (matplotlib PNGs); load s: "
          "driver.get until the load event; DCL: the page parsed, by the browser's own clock (Navigation Timing's "
          "domContentLoadedEventEnd: the summary and grid are in it); node s: a drained node's cell "
          "clicked until its rows are in its panel.")
    print(f"uptime load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for line in over:
        print(f"OVER: {line}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
