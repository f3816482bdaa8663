"""report.html: one self-contained page from any records: validates, runs, sweeps, several at once.

    sizes = write("report.html", [(rec, folder)], groups)        # bench report --html FILE PATH...
    path, sizes = beside(rec)                                    # bench validate: report.html in its run folder

Each validate record gets its section (verdict and counts, the grid of
nodes, the drain lines, the pairs, the GPUs' figures, the scaling), each
group of run or point records its tables and plots (bench.render.html.
runs_view). The page is bench.render.html.page's: nothing fetched.
"""

from __future__ import annotations

import os
from typing import Any

from bench.analysis import report_analysis as ra
from bench.render.html import gpu_tables, pairs_view, pictures
from bench.render.html.node_data import node_data
from bench.render.html.page import Page
from bench.render.html.validate_view import validate_view

NAME = "report.html"


def _validate_section(rec: dict[str, Any], folder: str | None, page: Page, index: int) -> dict[str, Any]:
    view = validate_view(rec)
    burn = {h: page.picture(png) for h, png in pictures.burn(rec, folder).items()}
    ids = {h: f"v{index}-burn-{i}" for i, h in enumerate(burn)}
    pics: dict[str, str | None] = {"gpus": None, "copies": None}
    tables: dict[str, list] = {"gpus": [], "copies": []}
    if len(gpu_tables.figures(rec)) >= gpu_tables.PICTURE_MIN:
        for name, draw in (("gpus", pictures.gpu_lines), ("copies", pictures.copies)):
            png = draw(rec)
            pics[name] = page.picture(png) if png else None
    else:
        tables = {"gpus": gpu_tables.gpu_table(rec), "copies": gpu_tables.copies_table(rec)}
    return {**view, "index": index, "data": page.packed(node_data(rec, ids)), "tables": tables,
            "burn": [{"id": ids[h], "host": h, "src": src} for h, src in burn.items()],
            "burn_total": len((rec.get("measured") or {}).get("burn") or {}), "pictures": pics,
            "pairs": pairs_view.matrix(rec), "lowest_best": pairs_view.lowest_best(rec)}


def title_of(validates: list[dict[str, Any]], groups: list[ra.Group]) -> str:
    if len(validates) == 1 and not groups:
        v = validates[0]
        return f"bench validate {v.get('run_id')}: {v.get('result')}"
    parts = [f"{len(validates)} validate(s)"] * bool(validates) + [f"{len(groups)} sweep(s)/run group(s)"] * bool(groups)
    return "bench report: " + ", ".join(parts)


def write(path: str, validates: list[tuple[dict[str, Any], str | None]], groups: list[ra.Group],
          compare_paper: bool = False) -> dict[str, int]:
    """validates: (record, the folder its results.jsonl is in: where its burn pictures may be)."""
    from bench.render.html.runs_view import runs_view

    page = Page()
    sections = [_validate_section(rec, folder, page, i) for i, (rec, folder) in enumerate(validates)]
    runs = runs_view(groups, page, compare_paper) if groups else []
    html = page.render("page.html.j2", title=title_of([r for r, _ in validates], groups), validates=sections,
                       runs=runs)
    return page.write(path, html)


def beside(rec: dict[str, Any]) -> tuple[str, dict[str, int]]:
    """The validate's own page, in its run folder beside results.jsonl."""
    path = os.path.join(rec["run_dir"], NAME)
    return path, write(path, [(rec, rec["run_dir"])], [])
