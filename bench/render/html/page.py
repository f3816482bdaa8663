"""One self-contained HTML file: the templates (Jinja2), the pictures and the data inside it, and what each part weighs.

    page = Page()
    src = page.picture(png_bytes)                 # a data: URI, its bytes counted as "pictures"
    blob = page.packed({"nodes": ...})            # gzip + base64, counted as "data" (the page's script unpacks it)
    html = page.render("validate.html.j2", sections=[...])
    sizes = page.write("report.html", html)       # {"styles": ..., "script": ..., "data": ..., "pictures": ..., ...}

Nothing on the page is fetched: styles and script are inlined from this
folder's templates, pictures are data: URIs, the data a script element.
That is what lets it open from a shared filesystem on an air-gapped
cluster (file://). The packed data is unpacked in the browser by its own
DecompressionStream (no library); the summary, grid and tables are plain
HTML, readable without JavaScript.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
from functools import cache
from typing import Any

from bench.core import results

TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")

# The colours of a status and of a node's verdict: the grid, the tables and the pictures use these, and the browser
# test reads the FAIL one back from a drained node's cell.
COLOURS = {"PASS": "#2e7d32", "WARN": "#f9a825", "FAIL": "#c62828", "ERROR": "#8e24aa", "SKIP": "#9e9e9e"}
VERDICT_STATUS = {"healthy": "PASS", "degraded": "WARN", "drain": "FAIL", "unknown": "ERROR"}


@cache
def _environment():
    import jinja2

    # A key an older record lacks renders as nothing (default Undefined): a results folder from an older bench
    # still opens. Every string is escaped (autoescape): host names, reasons and tool messages came from the nodes.
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True, trim_blocks=True,
                             lstrip_blocks=True)
    env.filters["pct"] = lambda x: "-" if not isinstance(x, (int, float)) else f"{x * 100:.1f}%"
    env.filters["num"] = lambda x, fmt=",.1f": "-" if not isinstance(x, (int, float)) else format(x, fmt)
    return env


def _asset(name: str) -> str:
    with open(os.path.join(TEMPLATES, name)) as f:
        return f.read()


class Page:
    """The parts of one page as they are made, and what each adds to its size."""

    def __init__(self) -> None:
        self.sizes = {"styles": 0, "script": 0, "data": 0, "pictures": 0, "markup": 0}

    def picture(self, png: bytes) -> str:
        uri = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
        self.sizes["pictures"] += len(uri)
        return uri

    def packed(self, obj: Any) -> str:
        """obj as JSON, gzip-compressed, base64: the rows of thousands of nodes repeat their words (27 MB of rows at
        1,000 nodes pack to under 2 MB)."""
        raw = json.dumps(obj, separators=(",", ":")).encode()
        text = base64.b64encode(gzip.compress(raw, compresslevel=6, mtime=0)).decode("ascii")
        self.sizes["data"] += len(text)
        return text

    def render(self, template: str, **context: Any) -> str:
        css, js = _asset("report.css"), _asset("report.js")
        self.sizes["styles"], self.sizes["script"] = len(css), len(js)
        html = _environment().get_template(template).render(css=css, js=js, colours=COLOURS, **context)
        self.sizes["markup"] = len(html.encode()) - sum(v for k, v in self.sizes.items() if k != "markup")
        return html

    def write(self, path: str, html: str) -> dict[str, int]:
        """The page, written whole (a reader never sees half of it); its size in bytes by part, and in all."""
        results.write_text_atomic(path, html)
        return {**self.sizes, "total": os.path.getsize(path)}


def unpack(text: str) -> Any:
    """What packed() put in (tests and tools read a page's data with this)."""
    return json.loads(gzip.decompress(base64.b64decode(text)))
