"""A node hot at once, as a plot per node: each GPU's throughput over the burn and, where its sampler read it, its SM
clock, temperature and power against its limit (throttled seconds marked).

    paths = plots(rec, out_dir)       # burn-<host>.png for each node of rec["measured"]["burn"]

Draws what the record holds (bench.validate.burn keeps every interval and
sampler's reading); nothing is re-derived but the time axis, seconds from the
node's burn start. A node without a sampler gets the throughput panel alone,
titled so.
"""

from __future__ import annotations

import os
from typing import Any

from bench.analysis.burn import THROTTLE
from bench.core.accel_names import GPU_SAMPLER_ABSENT


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-." else "_" for c in text)


def plot(path: str, host: str, node: dict[str, Any]) -> str:
    from bench.render.plots import _plt, _save

    plt = _plt()
    start, nvml = node.get("start") or 0.0, node.get("nvml")
    panels = [("throughput", "images/s")] + ([("sm_mhz", "SM clock (MHz)"), ("temp_c", "temperature (C)"),
                                               ("power", "power / limit")] if nvml else [])
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 2.6 * len(panels)), squeeze=False, sharex=True)
    bus_of = {str(g.get("bus_id") or "").lower()[-7:]: slot for slot, g in (node.get("gpus") or {}).items()}
    for slot, g in sorted((node.get("gpus") or {}).items(), key=lambda kv: int(kv[0])):
        pts = g.get("intervals") or []
        axes[0, 0].plot([t - start for t, _ in pts], [x for _, x in pts], label=f"{host}:{slot}")
    for bus, cols in (nvml or {}).items():
        label = f"{host}:{bus_of.get(bus.lower()[-7:], bus)}"
        ts = [t - start for t in cols.get("t") or []]
        for ax, (key, _) in zip(axes[1:, 0], panels[1:]):
            if key == "power":
                ys = [p / lim if p is not None and lim else None for p, lim in zip(cols.get("power_w") or [],
                                                                                  cols.get("power_limit_w") or [])]
            else:
                ys = cols.get(key) or []
            kept = [(t, y) for t, y in zip(ts, ys) if y is not None]
            (line,) = ax.plot([t for t, _ in kept], [y for _, y in kept], label=label)
            if key == "sm_mhz":
                hot = [(t, y) for t, y, r in zip(ts, ys, cols.get("reasons") or []) if y is not None and
                       r is not None and r & THROTTLE]
                if hot:
                    ax.plot([t for t, _ in hot], [y for _, y in hot], "x", color=line.get_color(), markersize=5)
    for ax, (_, unit) in zip(axes[:, 0], panels):
        ax.set_ylabel(unit)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=6, ncol=4)
    axes[-1, 0].set_xlabel("seconds since the burn began")
    said = "" if nvml else f"\n{node.get('nvml_error') or GPU_SAMPLER_ABSENT}: throughput only"
    axes[0, 0].set_title(f"{host}: every GPU at once for {node.get('seconds', 0):.0f} s (x: a throttle reason "
                         f"active){said}", fontsize=9)
    return _save(plt, fig, path)


def picture_name(host: str) -> str:
    """The file a node's burn plot is written to (report.html reads it back from beside the record)."""
    return f"burn-{_slug(host)}.png"


def plots(rec: dict[str, Any], out_dir: str) -> list[str]:
    """burn-<host>.png per node the record's burn covers."""
    return [plot(os.path.join(out_dir, picture_name(h)), h, node)
            for h, node in ((rec.get("measured") or {}).get("burn") or {}).items()]
