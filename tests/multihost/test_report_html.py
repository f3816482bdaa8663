"""The page bench validate leaves beside its record, opened in a real browser (Debian's Chromium, driven by its
chromedriver: tests/browser.py): the 3-host validate with one slow GPU planted (conftest.slow_gpu_validate, the run
test_validate judges; no run of its own). The drained node's cell is the FAIL colour, opening it shows the slow
GPU's row and its action, the drain line is on the page, and the browser asked for nothing but the file.
A screenshot of the opened node is kept under the test's tmp folder (its path printed: pytest -s)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from bench.core.scontrol import drain_argv, drain_reason
from bench.render.html.page import COLOURS
from tests.browser import chromium

from .validate_runs import row, skip_if_load_hid

pytestmark = [pytest.mark.multihost, pytest.mark.slow]


def _rgb(colour: str) -> tuple[int, ...]:
    """A CSS colour, "#c62828" or as the browser computes it ("rgba(198, 40, 40, 1)"), as (r, g, b)."""
    if colour.startswith("#"):
        return tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))
    return tuple(int(float(x)) for x in re.findall(r"[\d.]+", colour)[:3])


def test_the_slow_gpu_validate_page_shows_the_drained_node_its_row_and_drain_line_and_fetches_nothing(
        cluster, slow_gpu_validate, tmp_path):
    v, _ = slow_gpu_validate
    rec = v.rec
    slow = cluster.hosts[1]
    gpu = f"{slow}:1"
    skip_if_load_hid(rec, gpu)  # then nothing is drained: test_validate says why
    # What test_validate judges of this run (the baseline's row too) is its; the page needs the drained GPU.
    assert (slow, 1, "throughput") in [(e["host"], e["gpu"], e["check"]) for e in rec["drain"]], rec["drain"]
    page = Path(rec["run_dir"]) / "report.html"
    assert page.is_file() and f"report: {page}" in v.proc.stderr, v.proc.stderr[-2000:]
    with chromium(tmp_path) as b:  # says so if selenium is missing (requirements-test.lock)
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import WebDriverWait

        b.open(page)
        d = b.driver
        cells = {c.get_attribute("data-host"): c for c in d.find_elements(By.CSS_SELECTOR, ".cell")}
        assert sorted(cells) == sorted(cluster.hosts)
        colour = {h: _rgb(c.value_of_css_property("background-color")) for h, c in cells.items()}
        assert colour[slow] == _rgb(COLOURS["FAIL"]), colour
        assert all(colour[h] == _rgb(COLOURS["PASS"]) for h in cluster.hosts if h != slow), colour
        # The drain line and the exclude, as a person copies them.
        text = d.find_element(By.TAG_NAME, "body").text
        line = shlex.join(drain_argv(slow, drain_reason(rec["drain"], slow)))
        assert line in d.find_element(By.ID, "v0-scontrol").text, text[:3000]
        assert d.find_element(By.ID, "v0-exclude").text == f"--exclude {gpu}"
        # Open the drained node: its slow GPU's throughput row, FAIL, with the action its verdict gives.
        cells[slow].click()
        panel = d.find_element(By.ID, "v0-panel")
        WebDriverWait(d, 10).until(lambda _: panel.get_attribute("data-host") == slow)
        r = row(rec, "throughput", gpu)
        (finding,) = [f for f in rec["nodes"][slow]["findings"] if (f["check"], f["gpu"]) == ("throughput", 1)]
        shown = [[td.text for td in tr.find_elements(By.TAG_NAME, "td")]
                 for tr in panel.find_elements(By.CSS_SELECTOR, "tr[data-status]")]
        mine = [s for s in shown if s[:3] == ["throughput", gpu, "FAIL"]]
        assert len(mine) == 1, shown
        assert mine[0][3:7] == [r["value"], r["reference"], r["reason"], finding["action"]] and finding["action"], mine
        d.execute_script("document.getElementById('v0-grid').scrollIntoView()")  # the grid and the open node
        shot = tmp_path / "report-slow-gpu.png"
        d.save_screenshot(str(shot))
        print(f"screenshot: {shot}")
        assert b.requests() == [page.as_uri()]
        assert b.errors() == []
