"""report.html from records, read back as HTML (no browser: tests/multihost/test_report_html.py opens one): the grid
grouped by leaf switch or hostfile order, rows about switches kept, what to drain, nothing fetched, every string
escaped, bench report --html on a sweep and a validate together, and its bad input."""

from __future__ import annotations

import copy
import html.parser
import json
import os
import re
import subprocess
import sys

import pytest

from bench.core import results
from bench.render.html.page import unpack
from bench.render.html.report import write
from tests import scale_fixtures
from tests.conftest import REPO, assert_bad_input, cli
from tests.unit.test_report import VECTOR, point


class Parsed(html.parser.HTMLParser):
    """The page's elements as (tag, attrs), its visible text, and the text of each element with an id."""

    def __init__(self, text: str):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.by_id: dict[str, str] = {}
        self.text: list[str] = []
        self._open: list[str | None] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag not in ("meta", "input", "br", "img", "link"):
            self._open.append(a.get("id"))
            if a.get("id"):
                self.by_id[a["id"]] = ""

    def handle_endtag(self, tag):
        if self._open and tag not in ("meta", "input", "br", "img", "link"):
            self._open.pop()

    def handle_data(self, data):
        self.text.append(data)
        for i in self._open:
            if i:
                self.by_id[i] += data

    def cells(self) -> list[dict]:
        return [a for t, a in self.tags if t == "a" and "cell" in (a.get("class") or "")]


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A quick validate of 12 nodes, every launch answered by tests/scale_fixtures.py (node 7 has a slow GPU)."""
    from bench.cluster.hostfile import HostSelection
    from bench.validate import stages
    from bench.validate.config import ValidateConfig

    tmp = tmp_path_factory.mktemp("small")
    cluster = scale_fixtures.Cluster(12)
    with pytest.MonkeyPatch.context() as mp:
        cluster.install(mp.setattr)
        rec = stages.validate(ValidateConfig(level="quick", out=str(tmp / "results")),
                              HostSelection(hostfile=cluster.hostfile(str(tmp))))
    return rec


def _page(tmp_path, rec) -> tuple[str, Parsed]:
    path = tmp_path / "report.html"
    write(str(path), [(rec, None)], [])
    text = path.read_text()
    return text, Parsed(text)


def _groups(text: str) -> list[tuple[str, list[str]]]:
    """(heading, the hosts of its cells) per group of the grid, in page order."""
    out = []
    for block in text.split("<div class=\"group\" data-group>")[1:]:
        head = re.search(r"<h3>(.*?) <span", block)[1]
        out.append((head, re.findall(r'data-host="([^"]+)"', block.split("</div>\n</div>")[0])))
    return out


def test_without_a_topology_the_grid_is_in_hostfile_order_and_the_drained_node_is_a_fail_cell(small, tmp_path):
    text, page = _page(tmp_path, small)
    assert _groups(text) == [("hostfile order", small["hosts"])]
    cells = {c["data-host"]: c for c in page.cells()}
    assert cells["node0007"]["class"] == "cell s-FAIL" and cells["node0007"]["data-verdict"] == "drain"
    assert "throughput" in cells["node0007"]["data-bad"].split()
    assert {c["class"] for h, c in cells.items() if h != "node0007"} == {"cell s-PASS"}
    assert page.by_id["v0-exclude"] == "--exclude node0007:3"
    assert page.by_id["v0-scontrol"].startswith("scontrol update NodeName=node0007 State=DRAIN 'Reason=bench validate: "
                                                "throughput (GPU 3): ")


def test_a_topology_groups_the_cells_by_leaf_and_a_string_one_does_not(small, tmp_path):
    rec = copy.deepcopy(small)
    hosts = rec["hosts"]
    rec["topology"] = {"source": "topology.conf", "leaf_of": {h: f"leaf{'ab'[i % 2]}" for i, h in enumerate(hosts)},
                       "up": {"leafa": "spine", "leafb": "spine"}}
    text, _ = _page(tmp_path, rec)
    assert _groups(text) == [("leafa", hosts[0::2]), ("leafb", hosts[1::2])]
    assert "grouped by leaf switch" in text
    # The pairs' matrix is leaf by leaf: within each leaf and across.
    assert re.search(r"<th>leafa</th><th>leafb</th>", text)
    rec["topology"] = "/etc/slurm/topology.conf"  # the record before it carried the object: the path only
    text, _ = _page(tmp_path, rec)
    assert _groups(text) == [("hostfile order", hosts)]


def test_rows_about_a_switch_are_shown_under_fabric_and_beside_their_leaf_not_dropped(small, tmp_path):
    rec = copy.deepcopy(small)
    rec["topology"] = {"source": "slurm", "leaf_of": {h: "leafa" if i < 6 else "leafb"
                                                      for i, h in enumerate(rec["hosts"])}, "up": {}}
    rec["checks"].append({"check": "fabric", "node": "leafb", "status": "FAIL", "value": "uplinks 40% of leafa's",
                          "reference": "the other leaves' uplinks", "reason": "its nodes held, not drained",
                          "duration_s": 0.0, "host": "leafb", "gpu": None, "figure": None, "action": "check leafb"})
    text, page = _page(tmp_path, rec)
    fabric = text.split('id="v0-fabric">')[1].split("</table>")[0]
    assert "leafb" in fabric and "uplinks 40% of leafa&#39;s" in fabric and "check leafb" in fabric
    leafb = text.split("<h3>leafb")[1].split('<div class="cells">')[0]
    assert "uplinks 40% of leafa&#39;s" in leafb and "FAIL" in leafb
    assert "leafb" not in {c["data-host"] for c in page.cells()}
    # Not a node: its row is in no node's panel.
    data = unpack(page.by_id["v0-data"])
    assert all(data["s"][r[0]] != "fabric" for r in data["rows"])


def test_every_string_of_the_record_is_escaped_and_nothing_is_fetched(small, tmp_path):
    rec = copy.deepcopy(small)
    evil = '<script>alert(1)</script><img src="http://example.invalid/x.png">'
    for c in rec["checks"]:
        if c["node"] == "node0003:0":
            c["reason"] += evil
    rec["drain"][0]["reason"] += evil
    text, page = _page(tmp_path, rec)
    assert evil not in text and "&lt;script&gt;alert(1)" in text
    # Only inline things: no src or href leaves the page (data: pictures, #anchors), no <link>, a policy that
    # forbids any fetch.
    refs = [a.get("src") or a.get("href") for t, a in page.tags if a.get("src") or a.get("href")]
    assert refs and all(r.startswith(("data:", "#")) for r in refs), [r for r in refs if not r.startswith(("data:", "#"))]
    assert not [t for t, _ in page.tags if t == "link"]
    assert "default-src 'none'" in text
    # The panel's data still carries the reason as it was (the script sets it as text, never as markup).
    data = unpack(page.by_id["v0-data"])
    assert any(s.endswith(evil) for s in data["s"])


def test_a_record_of_an_older_bench_without_verdicts_or_figures_still_makes_a_page(small, tmp_path):
    rec = {k: v for k, v in copy.deepcopy(small).items() if k not in ("nodes", "measured", "launcher", "drain",
                                                                       "exclude", "pairing", "stages")}
    _, page = _page(tmp_path, rec)
    assert len(page.cells()) == 12 and {c["data-verdict"] for c in page.cells()} == {"unknown"}


def test_a_cluster_of_a_few_gpus_gets_its_gpus_as_a_table_not_a_picture(tmp_path):
    """Below PICTURE_MIN GPUs each GPU is a row (its figure, against the median, its status): what a dozen dots
    would say, readable, and no matplotlib for the small validates most runs are."""
    from bench.cluster.hostfile import HostSelection
    from bench.render.html.gpu_tables import PICTURE_MIN
    from bench.validate import stages
    from bench.validate.config import ValidateConfig

    cluster = scale_fixtures.Cluster(1)
    with pytest.MonkeyPatch.context() as mp:
        cluster.install(mp.setattr)
        rec = stages.validate(ValidateConfig(level="quick", out=str(tmp_path / "results")),
                              HostSelection(hostfile=cluster.hostfile(str(tmp_path))))
    assert len(rec["measured"]["gpu_images_per_s"]) == 8 < PICTURE_MIN
    text, page = _page(tmp_path, rec)
    assert not [a for t, a in page.tags if t == "img"]
    gpus = text.split('id="v0-gpus"')[1].split("</table>")[0]
    rows = re.findall(r"<tr><td>(node0000:\d)</td><td class=\"num\">([\d,.]+)</td>", gpus)
    figures = rec["measured"]["gpu_images_per_s"]
    assert [g for g, _ in rows] == sorted(figures, key=figures.get)  # slowest first
    assert all(float(x.replace(",", "")) == pytest.approx(figures[g], abs=0.05) for g, x in rows)


def test_the_summary_reads_without_javascript(small, tmp_path):
    """Counts, verdicts, the drain, the rows that are not PASS: in the HTML itself, not made by the script."""
    text, page = _page(tmp_path, small)
    counts = page.by_id["v0-counts"]
    for status, n in small["counts"].items():
        assert f"{status} {n} row(s)" in " ".join(counts.split()), (status, counts)
    assert "drain 1 node(s)" in " ".join(page.by_id["v0-verdicts"].split())
    rows = text.split('id="v0-rows"')[1].split("</table>")[0]
    assert "node0007:3" in rows and "FAIL" in rows


def test_bench_report_html_puts_a_sweep_and_a_validate_on_one_page(small, tmp_path):
    sweep = tmp_path / "strong"
    sweep.mkdir()
    for g, s in VECTOR.items():
        results.append(str(sweep / "results.jsonl"), point("strong", f"strong/g{g}", g, s))
    folder = tmp_path / "copied-validate"
    (folder / "runs" / "training-1").mkdir(parents=True)
    results.append(str(folder / "results.jsonl"), small)
    # A validate's own launches are part of it, not runs of their own.
    results.append(str(folder / "runs" / "training-1" / "results.jsonl"), point("runs", "x/own", 1, 10.0))
    out = tmp_path / "page.html"
    r = cli("report", "--html", str(out), str(sweep), str(folder))
    assert r.returncode == 0, r.stderr
    assert "1 validate(s), 8 run or point record(s)" in r.stderr
    text = out.read_text()
    page = Parsed(text)
    assert len(page.cells()) == 12 and "strong (strong): 8 point(s)" in text and "x/own" not in text
    pictures = [a["alt"] for t, a in page.tags if t == "img" and a["src"].startswith("data:image/png;base64,")]
    assert "strong-scaling.png" in pictures and "strong-breakdown.png" in pictures
    # The very tables bench report prints: its strong-scaling series, row for row.
    for g, s in VECTOR.items():
        assert re.search(rf"\b{g}\s+{s:,.2f} s", " ".join(page.text)), g


def test_bench_report_html_bad_input(tmp_path):
    r = cli("report", "--html", str(tmp_path / "no-such-folder" / "x.html"), str(tmp_path))
    assert_bad_input(r, "no validate, run or point records")
    (tmp_path / "results.jsonl").write_text(json.dumps(point("strong", "strong/g1", 1, 10.0)) + "\n")
    assert_bad_input(cli("report", "--html", str(tmp_path / "no-such-folder" / "x.html"), str(tmp_path)), "--html",
                     "no-such-folder")


@pytest.mark.process
def test_the_benchmark_writes_and_opens_a_page_at_its_smallest_size():
    """benchmarks/report_html.py at 1 node, quick, once: its row says a cell per node, no other request, no error."""
    proc = subprocess.run([sys.executable, os.path.join("benchmarks", "report_html.py"), "--nodes", "1", "--levels",
                           "quick", "--repeats", "1"], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (row,) = [ln for ln in proc.stdout.splitlines() if re.match(r"quick\s+1\s", ln)][-1:]
    cells, other_requests = row.split()[-3], row.split()[-1]
    assert (cells, other_requests) == ("1", "0"), row


def test_burn_curves_are_read_back_from_beside_the_record_else_drawn_for_the_worst_nodes(tmp_path):
    """bench validate draws burn-<node>.png beside its record; the page takes those (a node opens its own), and draws
    the worst node's where the record came alone (bench report --html on a copied record)."""
    import base64

    from bench.cluster.hostfile import HostSelection
    from bench.render.burn import picture_name
    from bench.render.html.pictures import burn_order
    from bench.validate import stages
    from bench.validate.config import ValidateConfig

    cluster = scale_fixtures.Cluster(2)
    with pytest.MonkeyPatch.context() as mp:
        cluster.install(mp.setattr)
        rec = stages.validate(ValidateConfig(level="full", out=str(tmp_path / "results")),
                              HostSelection(hostfile=cluster.hostfile(str(tmp_path))))
    folder = rec["run_dir"]
    # Files beside the record that differ from what would be drawn (bench.render.burn.plots' names; its drawing is
    # test_burn's).
    marked = {h: b"\x89PNG\r\n\x1a\n" + f"as drawn by bench validate: {h}".encode() for h in cluster.hosts}
    for h, png in marked.items():
        with open(os.path.join(folder, picture_name(h)), "wb") as f:
            f.write(png)
    for source, where in (("read", folder), ("drawn", None)):
        path = tmp_path / f"{source}.html"
        write(str(path), [(rec, where)], [])
        text = path.read_text()
        got = {h: base64.b64decode(b) for h, b in re.findall(
            r'<template id="v0-burn-\d+"><img class="plot" alt="burn of ([^"]+)" src="data:image/png;base64,([^"]+)">',
            text)}
        # Read back: every node's (up to BURN_READ); drawn: the worst node's alone (BURN_DRAWN).
        assert list(got) == (burn_order(rec) if source == "read" else burn_order(rec)[:1]), source
        data = unpack(Parsed(text).by_id["v0-data"])
        assert [h for h in cluster.hosts if data["nodes"][h]["burn"]] == list(got)  # each node's panel its own
        for h, png in got.items():
            assert png.startswith(b"\x89PNG") and (png == marked[h]) == (source == "read"), (source, h)


@pytest.mark.process
def test_the_grid_filters_by_verdict_by_check_and_by_name_in_a_browser(small, tmp_path):
    """The page's script in Debian's Chromium (tests/browser.py): the filters hide the cells they should, a deep link
    (#v0-node-HOST) opens that node, and nothing is fetched."""
    from tests.browser import chromium

    path = tmp_path / "report.html"
    write(str(path), [(small, None)], [])
    with chromium(tmp_path) as b:
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import Select, WebDriverWait

        b.open(path, "#v0-node-node0003")
        d = b.driver
        panel = d.find_element(By.ID, "v0-panel")
        WebDriverWait(d, 10).until(lambda _: panel.get_attribute("data-host") == "node0003")

        def shown() -> list[str]:
            return [c.get_attribute("data-host") for c in d.find_elements(By.CSS_SELECTOR, ".cell") if c.is_displayed()]

        assert shown() == small["hosts"]
        form = d.find_element(By.ID, "v0-filters")
        form.find_element(By.CSS_SELECTOR, "input[value=healthy]").click()  # healthy off: the drained node alone
        assert shown() == ["node0007"]
        form.find_element(By.CSS_SELECTOR, "input[value=healthy]").click()
        check = Select(form.find_element(By.CSS_SELECTOR, "select[name=check]"))
        check.select_by_value("throughput")
        assert shown() == ["node0007"]
        check.select_by_value("numerics")  # node0007's slow GPU left the numerics job: no row of it there FAILed
        assert shown() == []
        check.select_by_value("")
        form.find_element(By.CSS_SELECTOR, "input[name=q]").send_keys("node001")
        assert shown() == ["node0010", "node0011"]
        assert "2 of 12 node(s) shown" in form.text
        assert b.requests() == [path.resolve().as_uri()] and b.errors() == []  # the request carries no fragment
