"""Rich tables of records. Rendering only: every number shown comes from the record."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table


def _ms(s: float | None) -> str:
    return "-" if s is None else f"{s * 1000:.1f} ms"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f}%"


def _mb(b: float | None) -> str:
    return "-" if b is None else f"{b / 1e6:,.3f} MB"


def _mib(b: float) -> str:
    return f"{b / 2**20:,.0f} MiB"


def strategy_label(cfg: dict[str, Any]) -> str:
    """How the run trained, in a few words: "ZeRO 3 + nvme", "FSDP2 (kept after forward)", "2 pipeline stages"."""
    tp = cfg.get("tensor_parallel") or 1
    if tp > 1:
        return f"TP {tp} (" + ("DTensor) x FSDP2" if cfg.get("engine") == "fsdp2" else
                              f"DeepSpeed AutoTP) x ZeRO {cfg['zero_stage']}")
    if cfg.get("engine") == "fsdp2":
        return "FSDP2 (" + ("resharded" if cfg.get("reshard_after_forward", True) else "kept") + " after forward)"
    if cfg.get("engine") == "ddp":
        return "DDP"
    label = f"ZeRO {cfg['zero_stage']}"
    off = cfg.get("offload")
    if off:
        label += f" + {'cpu' if off is True else off} offload"
    if (cfg.get("pipeline_stages") or 1) > 1:
        label += f", {cfg['pipeline_stages']} pipeline stages"
    return label


def run_table(rec: dict[str, Any]) -> Table:
    """The run's figures, one row each, in the order a reader asks: pace, parallelism, communication,
    model states, training, FLOPs."""
    cfg = rec["config"]
    fig = rec.get("figures") or {}
    title = (f"bench run {rec.get('run_id', '')}: {cfg['model']} on {cfg['dataset']}, "
             f"{rec['plan']['device']} x{rec['plan']['world_size']}, {strategy_label(cfg)}, {cfg['precision']}"
             f" — {rec['status'].upper()}")
    t = Table(title=title, box=box.SIMPLE_HEAVY, show_header=True, title_justify="left")
    t.add_column("figure")
    t.add_column("value", justify="right")
    t.add_column("note", style="dim")
    if not fig:
        err = rec.get("error") or {}
        t.add_row("status", rec["status"], err.get("reason", ""))
        return t
    for rows in (_pace_rows, _parallel_rows, _comm_rows, _model_state_rows, _training_rows):
        rows(t, fig)
    return t


def _pace_rows(t: Table, fig: dict[str, Any]) -> None:
    step = fig["step_s"]
    parts = fig["parts_s"]
    t.add_row("images/s (global)", f"{fig['images_per_s']:,.1f}",
              f"global batch {fig['global_batch']}, steady steps only")
    t.add_row("images/s per rank", ", ".join(f"{x:,.1f}" for x in fig["images_per_s_per_rank"]), "")
    p90 = _ms(step["p90"]) if step.get("p90") is not None else f"null ({step.get('p90_reason') or 'too few steps'})"
    t.add_row("step time", _ms(step["median"]),
              f"{step['n']} samples (steady steps x ranks): min {_ms(step['min'])}  "
              f"p90 {p90}  max {_ms(step['max'])}")
    if parts:
        for k in ("data", "forward", "backward", "optimizer"):
            t.add_row(f"  {k}", _ms(parts.get(k)), "")
    else:
        t.add_row("  parts", "null", fig.get("parts_reason") or "")


def _parallel_rows(t: Table, fig: dict[str, Any]) -> None:
    pipe = fig.get("pipeline")
    if pipe:
        stages = "; ".join(f"{s['stage']}: {s['layers'][0]}..{s['layers'][-1]} {s['params']:,} params"
                           for s in pipe["per_stage"])
        t.add_row("pipeline stages", f"{pipe['stages']} x {pipe['data_parallel']} dp", stages)
        t.add_row("  bubble", _pct(pipe["bubble"]), f"(P-1)/(m+P-1), m = {pipe['micro_batches']} micro batches")
    tpf = fig.get("tensor_parallel")
    if tpf:
        local = ", ".join(f"{x:,}" for x in tpf["local_split_params_per_rank"] if x is not None)
        t.add_row("tensor parallel", f"{tpf['size']} x {tpf['data_parallel']} dp",
                  f"{tpf['how']}; split layers {tpf['split_params']:,} params, held per rank {local}; whole "
                  f"{tpf['replicated_params']:,}")
        t.add_row("  images/s per replica", f"{fig['images_per_s_per_replica']:,.1f}", "a TP group trains one")


def _comm_rows(t: Table, fig: dict[str, Any]) -> None:
    comm = fig.get("comm") or {}
    analytic = comm.get("analytic") or {}
    if comm.get("bytes_per_step") is not None:
        ops = ", ".join(f"{op} x{v['calls']:g}" for op, v in sorted((comm.get("ops_rank0") or {}).items()))
        t.add_row("communication / step", _mb(comm["bytes_per_step"]), f"sent by the algorithm, per rank: {ops}")
        wire = comm.get("wire") or {}
        t.add_row("  on the wire", _mb(wire.get("bytes_per_step")),
                  f"{wire['over_sent']:.3f}x of it: the hosts' NIC/IB counters, per rank" if wire.get("over_sent")
                  else f"null: {wire.get('reason') or 'not recorded'}")
        if analytic:
            t.add_row("  analytic", _mb(analytic["bytes_per_step"]),
                      f"{analytic['formula']}; measured {comm['measured_over_analytic']:.2f}x")
        tpc = comm.get("tensor_parallel") or {}
        if tpc.get("bytes_per_step") is not None:
            t.add_row("  tensor parallel", _mb(tpc["bytes_per_step"]),
                      f"its group's calls; Megatron's {tpc['analytic']['formula']} = "
                      f"{_mb(tpc['analytic']['bytes_per_step'])}, measured {tpc['measured_over_analytic']:.3f}x")
    t.add_row("  in flight", _ms(comm.get("seconds_per_step")), "union of collectives' intervals per step"
              if comm.get("seconds_per_step") is not None else (fig.get("comm_share_reason") or ""))
    t.add_row("communication share", _pct(fig["comm_share"]),
              "in flight / step" if fig["comm_share"] is not None else "null: see above")


def _model_state_rows(t: Table, fig: dict[str, Any]) -> None:
    states = (fig.get("model_states") or {})
    measured, formula = states.get("measured") or {}, states.get("formula") or {}
    if measured:
        t.add_row("model states / rank", _mb(measured["total"]),
                  f"params {_mb(measured['params'])}, grads {_mb(measured['grads'])}, master "
                  f"{_mb(measured['master_params'])}, optimizer {_mb(measured['optimizer_states'])}")
        est = (states.get("deepspeed_estimate") or {}).get("bytes_per_rank")
        t.add_row("  formula", _mb(formula.get("total")),
                  "ZeRO paper" + (f"; DeepSpeed's estimate {_mb(est)} (mixed precision)" if est else ""))


def _training_rows(t: Table, fig: dict[str, Any]) -> None:
    t.add_row("data share", _pct(fig["data_share"]), "")
    t.add_row("time per epoch" + (" (estimated)" if fig["epoch_s_estimated"] else " (measured)"),
              f"{fig['epoch_s']:,.1f} s", fig.get("epoch_s_how") or f"{fig['steps_per_epoch']} steps/epoch")
    t.add_row("warm-up (excluded)", f"{fig['warmup']['seconds']:.2f} s", f"{fig['warmup']['steps']} steps")
    t.add_row(f"peak memory ({fig['memory_kind']})", _mib(max(fig["peak_memory_bytes"])), "max over ranks")
    t.add_row("loss", f"{fig['loss']['first']:.3f} -> {fig['loss']['last']:.3f}",
              "fell" if fig["sanity"]["loss_fell"] else "DID NOT FALL")
    t.add_row("train accuracy", _pct(fig["train_acc"]), "last quarter of steps" if fig["train_acc"] is not None
              else fig.get("train_acc_reason") or "")
    t.add_row("test accuracy", _pct(fig["test_acc"]), "whole test set" if fig["test_acc"] is not None else "off")
    if fig.get("tflops") is not None:
        t.add_row("TFLOP/s", f"{fig['tflops']:.3f}", "analytic ViT FLOPs x images/s")
        t.add_row("MFU", _pct(fig.get("mfu")),
                  "over the GPU table's peak" if fig.get("mfu") is not None else fig.get("mfu_reason") or "no peak")


def ranks_table(rec: dict[str, Any]) -> Table:
    t = Table(box=box.SIMPLE, title="ranks", title_justify="left")
    for c in ("host:rank", "device", "images/s", "step", "peak memory"):
        t.add_column(c, justify="right" if c not in ("host:rank", "device") else "left")
    for r in (rec.get("figures") or {}).get("ranks", []):
        t.add_row(f"{r['host']}:{r['rank']}", r["device"], f"{r['images_per_s']:,.1f}", _ms(r["step_s_mean"]),
                  _mib(r["peak_memory_bytes"]))
    return t


def print_run(rec: dict[str, Any], console: Console | None = None) -> None:
    console = console or Console()
    console.print(run_table(rec))
    if rec.get("figures"):
        console.print(ranks_table(rec))
    if rec.get("error"):
        err = rec["error"]
        console.print(f"[red]failed[/red] {err.get('where', '')}: {err.get('reason', '')}")
        for line in err.get("log_tail", []):
            console.print(f"  {line}", markup=False, highlight=False)
