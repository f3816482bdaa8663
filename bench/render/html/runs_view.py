"""Runs and sweeps as the page shows them: the very tables `bench report` prints, and the plots `bench report
--plots` draws, as pictures.

    sections = runs_view(groups, page, compare_paper=False)   # [{"title", "tables": html, "plots": [uri...]}]

The tables are bench.render.report's rich tables, exported by rich as HTML
with inline styles (so print and page cannot drift); the plots are
bench.render.plots', written into a temporary folder and read back into
the page.
"""

from __future__ import annotations

import io
import os
import tempfile
from typing import Any

from bench.analysis import report_analysis as ra


def _tables_html(g: ra.Group, compare_paper: bool) -> str:
    from rich.console import Console

    from bench.render.report import print_group

    console = Console(record=True, file=io.StringIO(), width=160, color_system="truecolor", force_terminal=True)
    print_group(console, g, compare_paper)
    return console.export_html(inline_styles=True, code_format="<pre class=\"rich\">{code}</pre>")


def runs_view(groups: list[ra.Group], page, compare_paper: bool = False) -> list[dict[str, Any]]:
    from bench.render import plots

    out = []
    with tempfile.TemporaryDirectory(prefix="bench-report-") as tmp:
        for i, g in enumerate(groups):
            folder = os.path.join(tmp, str(i))
            written = plots.write_all(folder, [g], compare_paper=compare_paper)
            pictures = []
            for path in written:
                with open(path, "rb") as f:
                    pictures.append({"name": os.path.basename(path), "src": page.picture(f.read())})
            out.append({"title": f"{g.sweep} ({g.suite}): {len(g.rows)} point(s)",
                        "tables": _tables_html(g, compare_paper), "plots": pictures})
    return out
