"""Debian's Chromium driven by its chromedriver (selenium), for the tests and benchmarks that open report.html.

    with chromium(tmp) as b:               # headless, no sandbox (root), nothing it may reach on its own
        b.open(path)                       # file://PATH; returns the seconds until the page's load event
        b.requests()                       # every URL asked for since the page was opened (data:, chrome:// aside)
        b.driver.find_element(...)

Never a browser a tool downloads: /usr/bin/chromium and /usr/bin/chromedriver
from Debian (scripts/install-system.sh), the same version. The flags are the
ones ENVIRONMENT.md found this machine needs ("Found 2026-12-06"): without
them Chromium calls hosts that cannot be reached from here.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from pathlib import Path

CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
INSTALL = Path(__file__).resolve().parents[1] / "scripts" / "install-system.sh"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--disable-extensions", "--window-size=1400,1000")


def ensure_installed() -> None:
    """CI's fresh Debian has no browser: the project's own install step brings it (we are root)."""
    if not (os.access(CHROMIUM, os.X_OK) and os.access(DRIVER, os.X_OK)):
        subprocess.run(["sh", str(INSTALL)], check=True)


class Browser:
    def __init__(self, driver):
        self.driver = driver

    def open(self, path: str | Path, fragment: str = "") -> float:
        """Seconds until the page's load event; requests() from here on are this page's."""
        self.driver.get_log("performance")  # what the browser's own start page asked for (chrome://) is not the page's
        t0 = time.perf_counter()
        self.driver.get(Path(path).resolve().as_uri() + fragment)
        return time.perf_counter() - t0

    def requests(self) -> list[str]:
        """The URLs of every request the browser logged (DevTools' Network.requestWillBeSent) since open(): file,
        http(s), ws, anything that reads past the page. Not inline data: URIs, nor chrome:// (the browser's own
        start page, which goes on loading its resources from inside the browser as the test's page opens)."""
        urls = []
        for entry in self.driver.get_log("performance"):
            msg = json.loads(entry["message"])["message"]
            if msg.get("method") == "Network.requestWillBeSent":
                url = msg["params"]["request"]["url"]
                if not url.startswith(("data:", "chrome:", "chrome-untrusted:")):
                    urls.append(url)
        return urls

    def errors(self) -> list[str]:
        """What the page's console logged as SEVERE (a script error, a refused load)."""
        return [e["message"] for e in self.driver.get_log("browser") if e.get("level") == "SEVERE"]


@contextlib.contextmanager
def chromium(tmp: Path):
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError as e:
        raise AssertionError(f"{e}: selenium is a test requirement (pip install -r requirements-test.lock)") from None
    ensure_installed()
    profile = tmp / "chromium-profile"
    profile.mkdir(exist_ok=True)
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    driver = webdriver.Chrome(options=opts, service=Service(executable_path=DRIVER, log_output=str(tmp / "chromedriver.log")))
    try:
        yield Browser(driver)
    finally:
        driver.quit()
