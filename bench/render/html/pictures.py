"""The validate page's pictures, drawn by matplotlib as PNG bytes: every GPU's throughput against its peer lines,
every GPU's copies, and the burn's curves of the nodes a person is likely to open.

    png = gpu_lines(rec)          # None when the record has no per-GPU figure
    png = copies(rec)
    pngs = burn(rec, folder)      # {host: png}, the worst burns first: BURN_READ read back, BURN_DRAWN drawn

What is drawn is the record's: the throughput lines are measured.gpu_lines
(bench.analysis.peer_lines: median, noise, fail); a dot's colour is its
row's status. The copies' lines are not in the record (bench.validate.copies
judges and keeps the figures only), so their panels give each figure
coloured by its row and the peers' median.
"""

from __future__ import annotations

import io
import os
from typing import Any

from bench.analysis.stats import percentile
from bench.render.html.page import COLOURS

# bench validate draws every node's burn-<node>.png beside its record (bench.render.burn): the page takes those of the
# worst BURN_READ nodes where they are (~80 kB each), and where they are not (a record copied alone) draws the worst
# node's: a burn picture is 0.4 s on a quiet machine and 2 s at load 8, and three took a 1,000-node page past its 5 s
# (benchmarks/report_html.py).
BURN_READ, BURN_DRAWN = 24, 1
DPI = 80
COPY_LABEL = {"h2d": "H2D", "d2h": "D2H", "both": "both ways", "d2d": "D2D (memory)", "local": "D2D (local)"}


def _png(fig) -> bytes:
    from bench.render.plots import _plt

    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=DPI)
    _plt().close(fig)
    return buf.getvalue()


def _dots(ax, pts: list[tuple[str, float]], status: dict[str, str]) -> None:
    """pts (sorted) as dots at their rank, one line of markers per status (a colour per dot in one scatter is ten
    times slower to draw at 8,000 GPUs)."""
    by: dict[str, tuple[list[int], list[float]]] = {}
    for i, (gpu, y) in enumerate(pts):
        xs, ys = by.setdefault(status.get(gpu, "SKIP"), ([], []))
        xs.append(i)
        ys.append(y)
    for s, (xs, ys) in by.items():
        ax.plot(xs, ys, ".", markersize=4 if len(pts) < 500 else 2, color=COLOURS.get(s, COLOURS["SKIP"]),
                label=f"{s} ({len(xs)})")


def _status(rec: dict[str, Any], check: str) -> dict[str, str]:
    return {c["node"]: c["status"] for c in rec.get("checks") or [] if c["check"] == check and c.get("gpu") is not None}


def gpu_lines(rec: dict[str, Any]) -> bytes | None:
    from bench.render.plots import _plt

    measured = rec.get("measured") or {}
    figs = {k: v for k, v in (measured.get("gpu_images_per_s") or {}).items() if isinstance(v, (int, float))}
    if not figs:
        return None
    lines = {m: x for m, x in (measured.get("gpu_lines") or {}).items() if x}
    model_of = measured.get("gpu_model") or {}
    by_model: dict[str, list[tuple[str, float]]] = {}
    for gpu, x in figs.items():
        model = model_of.get(gpu.rsplit(":", 1)[0]) if len(lines) > 1 else next(iter(lines), None)
        by_model.setdefault(str(model), []).append((gpu, x))
    status = _status(rec, "throughput")
    plt = _plt()
    fig, axes = plt.subplots(1, len(by_model), figsize=(7 * len(by_model), 3.6), squeeze=False)
    for ax, (model, pts) in zip(axes[0], sorted(by_model.items())):
        pts.sort(key=lambda p: p[1])
        _dots(ax, pts, status)
        ln = lines.get(model)
        if ln:
            for share, label, style in ((0.0, "peers' median", "-"), (ln["noise"], f"WARN below -{ln['noise']:.0%}",
                                                                        "--"), (ln["fail"], f"FAIL below -{ln['fail']:.0%}", ":")):
                ax.axhline(ln["median"] * (1 - share), color="k", linestyle=style, linewidth=1, label=label)
            ax.legend(fontsize=7, loc="lower right")
        ax.set(title=f"{model}: {len(pts)} GPU(s), slowest first" + ("" if ln else " (no peer lines)"),
               xlabel="GPUs, by throughput", ylabel="images/s")
        ax.grid(alpha=0.3)
    return _png(fig)


def copies(rec: dict[str, Any]) -> bytes | None:
    from bench.render.plots import _plt

    per_gpu = (rec.get("measured") or {}).get("copies") or {}
    kinds: dict[str, list[tuple[str, float]]] = {}
    for gpu, x in per_gpu.items():
        for kind, gbps in (((x or {}).get("phases") or {}).get("alone") or {}).items():
            if isinstance(gbps, (int, float)):
                kinds.setdefault(kind, []).append((gpu, gbps))
    if not kinds:
        return None
    status = {"copies": _status(rec, "copies"), "memory": _status(rec, "memory")}
    plt = _plt()
    fig, axes = plt.subplots(1, len(kinds), figsize=(3.6 * len(kinds), 3.4), squeeze=False)
    for ax, (kind, pts) in zip(axes[0], kinds.items()):
        pts.sort(key=lambda p: p[1])
        rows = status["memory" if kind in ("d2d", "local") else "copies"]
        _dots(ax, pts, rows)
        ax.axhline(percentile([y for _, y in pts], 50), color="k", linewidth=1, label="peers' median")
        ax.set(title=f"{COPY_LABEL.get(kind, kind)} alone", xlabel="GPUs, slowest first", ylabel="GB/s")
        ax.legend(fontsize=7, loc="lower right")
        ax.grid(alpha=0.3)
    return _png(fig)


def burn_order(rec: dict[str, Any]) -> list[str]:
    """The burn's nodes, the one a person opens first first: its worst burn row, then its slowest GPU's figure."""
    order = {"FAIL": 0, "ERROR": 1, "WARN": 2, "PASS": 3, "SKIP": 4}
    worst: dict[str, tuple[int, float]] = {}
    for c in rec.get("checks") or []:
        if c["check"] == "burn" and c.get("host") is not None:
            key = (order[c["status"]], c["figure"] if isinstance(c.get("figure"), (int, float)) else float("inf"))
            worst[c["host"]] = min(worst.get(c["host"], key), key)
    burned = ((rec.get("measured") or {}).get("burn") or {})
    return sorted(burned, key=lambda h: worst.get(h, (5, 0.0)))


def burn(rec: dict[str, Any], folder: str | None = None, read: int = BURN_READ,
         drawn: int = BURN_DRAWN) -> dict[str, bytes]:
    """folder: where the record's burn-<node>.png files may be (its run folder, or where it was copied to)."""
    from bench.render.burn import picture_name, plot

    burned = ((rec.get("measured") or {}).get("burn") or {})
    out: dict[str, bytes] = {}
    for host in burn_order(rec)[:max(read, drawn)]:
        there = os.path.join(folder, picture_name(host)) if folder else None
        if there and os.path.isfile(there) and read > 0:
            read -= 1
            with open(there, "rb") as f:
                out[host] = f.read()
        elif drawn > 0:
            drawn -= 1
            buf = io.BytesIO()
            plot(buf, host, burned[host])
            out[host] = buf.getvalue()
    return out
