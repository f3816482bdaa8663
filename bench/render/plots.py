"""PNG plots of a report's groups (matplotlib, Agg backend, imported only here).

Per sweep group:
  <sweep>-scaling.png    throughput, speedup and efficiency against GPUs with
                         the ideal lines (the study's Vector series beside ours
                         with --compare-paper); weak: throughput and E_w
  <sweep>-breakdown.png  step time per point in parts: data, forward,
                         backward, optimizer; beside them the time a collective
                         was in flight (it happens inside those parts)
  <sweep>-comm-memory.png  zero/ddp/placement: bytes sent per step (by the
                         algorithm, on the wire where counted, analytic), and the
                         model states per rank by category with the ZeRO paper's
                         formula and DeepSpeed's estimate
  <sweep>-batch.png      throughput and accuracy against the micro batch, one
                         line per GPU count (batch and paper sweeps)
  <sweep>-memory.png     memory: model states per rank by strategy (with the
                         formula), peak memory per rank on an axis of its own
                         (hundreds of MB of resident set beside a few MB of
                         states), and throughput
Plots draw what the analysis computed; nothing is re-derived here. A value
that is missing (null in the record: a pipeline's formula, a one-host run's
wire) is not drawn, never drawn as 0; the tick label says "n/a".
"""

from __future__ import annotations

import os
import re
from typing import Any

from bench.analysis import memory_report
from bench.analysis import report_analysis as ra

PARTS = ("data", "forward", "backward", "optimizer")


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "runs"


def write_all(out_dir: str, groups: list[ra.Group], *, compare_paper: bool = False) -> list[str]:
    from bench.core.errors import BadInput

    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as e:
        raise BadInput(f"--plots: cannot create {out_dir!r} ({e.strerror})") from None
    written = []
    ref = ra.paper_reference() if compare_paper else None
    for g in groups:
        base = os.path.join(out_dir, _slug(g.sweep))
        if any(len(s["points"]) for s in g.scaling):
            written.append(scaling(base + "-scaling.png", g, ref))
        if any(r["parts_s"] for r in g.rows):
            written.append(breakdown(base + "-breakdown.png", g))
        if g.suite in ("batch", "paper") and len({r["micro_batch"] for r in g.rows}) > 1:
            written.append(batch_curves(base + "-batch.png", g))
        if g.suite in ("zero", "ddp", "placement", "memory") and any(r["states"] for r in g.rows):
            written.append(comm_memory(base + "-comm-memory.png", g))
        if g.suite == "memory" and any(r["states"] for r in g.rows):
            written.append(memory(base + "-memory.png", g))
    return written


def scaling(path: str, g: ra.Group, ref: dict[str, Any] | None) -> str:
    plt = _plt()
    weak = all(s["kind"] == "weak" for s in g.scaling)
    panels = 2 if weak else 3
    fig, axes = plt.subplots(1, panels, figsize=(5 * panels, 4.2))
    top = max((p["gpus"] for s in g.scaling for p in s["points"]), default=1)
    if ref and not weak:
        top = max(top, 8)
    xs_ideal = list(range(1, top + 1))
    for s in g.scaling:
        pts = s["points"]
        ns = [p["gpus"] for p in pts]
        line = axes[0].plot(ns, [p["images_per_s"] for p in pts], "o-", label=s["series"])[0]
        one = next((p for p in pts if p["gpus"] == 1), None)
        if one:
            ideal = [one["images_per_s"] * n for n in ns]
            axes[0].plot(ns, ideal, ":", color=line.get_color(), alpha=0.6, label=f"ideal ({s['series']})")
        if weak:
            e = [(p["gpus"], p["weak_efficiency"]) for p in pts if p["weak_efficiency"] is not None]
            axes[1].plot([n for n, _ in e], [v * 100 for _, v in e], "o-", label=s["series"])
            continue
        sp = [(p["gpus"], p["speedup"], p["efficiency"]) for p in pts if p["speedup"] is not None]
        axes[1].plot([n for n, _, _ in sp], [v for _, v, _ in sp], "o-", color=line.get_color(), label=s["series"])
        axes[2].plot([n for n, _, _ in sp], [e * 100 for _, _, e in sp], "o-", color=line.get_color(),
                     label=s["series"])
    if ref and not weak:
        for st in ref["strong"]:
            if st["name"] == "tesla":
                continue
            pts = [p for p in st["points"] if p["gpus"] <= top]
            kw = dict(linestyle="--", marker="s", alpha=0.7, label=f"study {st['name']}")
            axes[1].plot([p["gpus"] for p in pts], [p["speedup"] for p in pts], **kw)
            axes[2].plot([p["gpus"] for p in pts], [p["efficiency"] * 100 for p in pts], **kw)
    if ref and weak:
        stated = sorted((int(n), e) for n, e in ref["weak_efficiency"].items())
        axes[1].plot([n for n, _ in stated], [e * 100 for _, e in stated], "s", color="C1", markersize=8,
                     label="study (Vector, stated)")
    axes[0].set(title="throughput", xlabel="GPUs (ranks)", ylabel="images/s")
    if weak:
        axes[1].axhline(100, color="k", linestyle=":", label="ideal")
        axes[1].set(title="weak-scaling efficiency E_w = T1/TN", xlabel="GPUs (ranks)", ylabel="%")
    else:
        axes[1].plot(xs_ideal, xs_ideal, "k:", label="ideal S = N")
        axes[1].set(title="speedup S = T1/TN", xlabel="GPUs (ranks)", ylabel="x")
        axes[2].axhline(100, color="k", linestyle=":", label="ideal")
        axes[2].set(title="efficiency E = S/N", xlabel="GPUs (ranks)", ylabel="%")
    from matplotlib.ticker import MaxNLocator

    for ax in axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"{g.sweep} ({g.suite})")
    return _save(plt, fig, path)


def _present(xs: list[int], values: list[Any]) -> tuple[list[int], list[float]]:
    """The (x, value) pairs whose value exists: a missing figure is left out, not drawn at 0."""
    kept = [(x, v) for x, v in zip(xs, values) if isinstance(v, (int, float))]
    return [x for x, _ in kept], [v for _, v in kept]


def _save(plt, fig, path: str) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def breakdown(path: str, g: ra.Group) -> str:
    plt = _plt()
    rows = [r for r in g.rows if r["parts_s"]]
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(rows) + 3), 4.5))
    names = [str(r["id"]).split("/", 1)[-1] for r in rows]
    xs = list(range(len(rows)))
    bottom = [0.0] * len(rows)
    for part in PARTS:
        ms = [r["parts_s"].get(part, 0) * 1000 for r in rows]
        ax.bar([x - 0.2 for x in xs], ms, width=0.4, bottom=bottom, label=part)
        bottom = [b + v for b, v in zip(bottom, ms)]
    # Communication happens inside forward, backward and the optimizer step: a bar of its own, not a layer.
    comm = [(r["comm_s"] or 0) * 1000 for r in rows]
    ax.bar([x + 0.2 for x in xs], comm, width=0.4, color="0.3", hatch="//", label="collectives in flight")
    for x, r in zip(xs, rows):
        if r["comm_s"] is None:
            ax.text(x + 0.2, 0, "n/a", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(xs, names)
    ax.set(title=f"{g.sweep}: step time by part (mean per step) and time with a collective in flight", ylabel="ms")
    ax.tick_params(axis="x", rotation=30, labelsize=8)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return _save(plt, fig, path)


def comm_memory(path: str, g: ra.Group) -> str:
    plt = _plt()
    rows = [r for r in g.rows if r["status"] == "ok" and r["states"]]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(max(10, 1.6 * len(rows) + 4), 4.5))
    names = [str(r["id"]).split("/", 1)[-1] for r in rows]
    xs = list(range(len(rows)))
    series = [(key, label) for key, label in (("comm_bytes", "sent by the algorithm"),
                                              ("comm_wire", "on the wire (hosts' NIC counters)"),
                                              ("comm_bytes_analytic", "analytic (ZeRO paper, ring)"))
              if any(r.get(key) is not None for r in rows)]  # a one-host sweep has no wire: no empty slot
    width = 0.8 / max(len(series), 1)
    for i, (key, label) in enumerate(series):
        bx, bv = _present(xs, [r.get(key) for r in rows])
        a1.bar([x + (i - (len(series) - 1) / 2) * width for x in bx], [v / 1e6 for v in bv], width=width,
               label=label)
    a1.set(title="bytes one rank sends per optimizer step", ylabel="MB")
    bottom = [0.0] * len(rows)
    for cat in ("params", "grads", "master_params", "optimizer_states"):
        mb = [(r["states"].get(cat) or 0) / 1e6 for r in rows]
        a2.bar(xs, mb, width=0.5, bottom=bottom, label=cat)
        bottom = [b + v for b, v in zip(bottom, mb)]
    fx, fv = _present(xs, [(r["states_formula"] or {}).get("total") for r in rows])
    a2.plot(fx, [v / 1e6 for v in fv], "kD", label="formula total")
    est = [(x, r["states_deepspeed"] / 1e6) for x, r in zip(xs, rows) if r["states_deepspeed"]]
    if est:
        a2.plot([x for x, _ in est], [v for _, v in est], "r^", label="DeepSpeed estimate (mixed precision)")
    a2.set(title="model states per rank (measured tensors)", ylabel="MB")
    for ax in (a1, a2):
        ax.set_xticks(xs, names)
        ax.tick_params(axis="x", rotation=30, labelsize=8)
        ax.legend(fontsize=7)
        ax.grid(axis="y", alpha=0.3)
    a1.set_xticks(xs, [n + ("\n(no analytic)" if r["comm_bytes_analytic"] is None else "") for n, r in zip(names, rows)])
    a2.set_xticks(xs, [n + ("\n(no formula)" if not r["states_formula"] else "") for n, r in zip(names, rows)])
    fig.suptitle(f"{g.sweep} ({g.suite})")
    return _save(plt, fig, path)


def batch_curves(path: str, g: ra.Group) -> str:
    plt = _plt()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4.2))
    by_gpus: dict[int, list[dict[str, Any]]] = {}
    for r in g.rows:
        if r["status"] == "ok":
            by_gpus.setdefault(r["gpus"], []).append(r)
    for n, rs in sorted(by_gpus.items()):
        rs = sorted(rs, key=lambda r: r["micro_batch"])
        mbs = [r["micro_batch"] for r in rs]
        line = a1.plot(mbs, [r["images_per_s"] for r in rs], "o-", label=f"{n} GPU(s)")[0]
        tx, tv = _present(mbs, [r["train_acc"] for r in rs])
        a2.plot(tx, [v * 100 for v in tv], "o-", color=line.get_color(), label=f"train, {n} GPU(s)")
        test = [(r["micro_batch"], r["test_acc"]) for r in rs if r["test_acc"] is not None]
        if test:
            a2.plot([m for m, _ in test], [t * 100 for _, t in test], "s--", color=line.get_color(),
                    label=f"test, {n} GPU(s)")
    oom = [r for r in g.rows if r["status"] == "oom"]
    for r in oom:
        a1.axvline(r["micro_batch"], color="r", alpha=0.3)
    mbs_all = sorted({r["micro_batch"] for r in g.rows if r["micro_batch"]})
    for ax in (a1, a2):
        ax.set_xscale("log", base=2)
        ax.set_xticks(mbs_all, [str(m) for m in mbs_all])
        ax.minorticks_off()
        ax.set_xlabel("micro batch per GPU")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    a1.set(title="throughput" + (" (red: OOM)" if oom else ""), ylabel="images/s")
    a2.set(title="accuracy", ylabel="%")
    fig.suptitle(f"{g.sweep} ({g.suite})")
    return _save(plt, fig, path)


def memory(path: str, g: ra.Group) -> str:
    """Model states, peak memory and throughput per strategy, each on its own axis (they differ 100-fold)."""
    plt = _plt()
    rows = [s for s in memory_report.strategies(g.rows) if s["status"] == "ok" and s["states"]]
    fig, (a1, a2, a3) = plt.subplots(1, 3, figsize=(max(14, 2.0 * len(rows) + 5), 4.6))
    xs = list(range(len(rows)))
    bottom = [0.0] * len(rows)
    for cat in ("params", "grads", "master_params", "optimizer_states"):
        mb = [(s["states"].get(cat) or 0) / 1e6 for s in rows]
        a1.bar(xs, mb, width=0.5, bottom=bottom, label=cat)
        bottom = [b + v for b, v in zip(bottom, mb)]
    swapped = [(s.get("states_nvme") or 0) / 1e6 for s in rows]
    if any(swapped):
        a1.bar(xs, swapped, width=0.5, bottom=bottom, label="on NVMe (swap files)", color="none", edgecolor="grey",
               hatch="//")
    fx, fv = _present(xs, [(s["states_formula"] or {}).get("total") for s in rows])
    a1.plot(fx, [v / 1e6 for v in fv], "kD", label="formula (ZeRO paper)")
    a1.set(title="model states per rank (measured tensors)", ylabel="MB")
    kind = next((s["memory_kind"] for s in rows if s["memory_kind"]), None)
    px, pv = _present(xs, [s["peak_memory_bytes"] for s in rows])
    a2.bar(px, [v / 1e6 for v in pv], width=0.5, color="tab:red", alpha=0.7)
    a2.set(title="peak memory per rank" + (" (resident set: everything the rank touched)" if kind == "rss"
                                           else f" ({kind or 'device'})"), ylabel="MB")
    a3.bar(xs, [s["images_per_s"] or 0 for s in rows], width=0.5, color="tab:green")
    a3.set(title="throughput (all ranks)", ylabel="images/s")
    labels = [s["strategy"] + (f"\n{s['split']}" if s.get("split") else "") +
              ("\n(no formula)" if not s["states_formula"] else "") for s in rows]
    for ax in (a1, a2, a3):
        ax.set_xticks(xs, labels)
        ax.tick_params(axis="x", rotation=30, labelsize=8)
        ax.grid(axis="y", alpha=0.3)
    a1.legend(fontsize=7)
    fig.suptitle(f"{g.sweep} (memory)")
    return _save(plt, fig, path)
