"""A record's headline figures as a Prometheus text file, for node_exporter's textfile collector.

    write("/var/lib/node_exporter/textfile/vitbench.prom", rec)   # a run, comm or validate record

One gauge per figure, every one with the run id, and a host and GPU model
label where the figure belongs to one (the GPU model is what the rank
reported: a CUDA device name, or "cpu"). Units are in the names (seconds,
bytes per second), as Prometheus' naming guide asks. A check is 1 when it
passed and 0 when it warned or failed (its status is a label); a skipped
check measured nothing and is left out. The file is written whole into a
temporary beside it and renamed, so the collector never reads half of one.

    vitbench_run_success                        1 when the run ended ok
    vitbench_images_per_second                  global throughput of a run
    vitbench_rank_images_per_second             per rank: rank, host, gpu_model
    vitbench_step_seconds                       a run's steady step: stat = mean, median, p90
    vitbench_comm_busbw_bytes_per_second        bench comm: op, group, size_bytes
    vitbench_validate_check                     validate: check, node, status (1 = PASS)
    vitbench_gpu_images_per_second              validate: host, slot, gpu_model (each GPU alone, all at once)
    vitbench_node_images_per_second             validate: host, gpu_model (its GPUs alone, summed)
    vitbench_node_intra_busbw_bytes_per_second  validate: host (the all-reduce over its own GPUs)
    vitbench_node_busbw_bytes_per_second        validate: host (its best link to other nodes)
    vitbench_validate_drain                     validate: host, gpu, check (1 per thing to drain)
    vitbench_node_verdict                       validate: host, verdict (0 healthy, 1 degraded, 2 unknown, 3 drain)
    vitbench_health_finding                     validate: host, code, severity, action, gpu (1 per finding)
    vitbench_cluster_images_per_second          validate: the data-parallel run over the good nodes
    vitbench_record_timestamp_seconds           when the record was made (to alert on a stale file)
"""

from __future__ import annotations

import math
import os
from datetime import datetime
from typing import Any, Callable

HELP = {
    "vitbench_run_success": "1 when the bench run ended ok, else 0",
    "vitbench_images_per_second": "global training throughput of the run (steady steps)",
    "vitbench_rank_images_per_second": "one rank's training throughput (steady steps)",
    "vitbench_step_seconds": "steady training step time",
    "vitbench_comm_busbw_bytes_per_second": "collective bus bandwidth (nccl-tests' busbw) per message size",
    "vitbench_validate_check": "1 when the validate check passed, 0 when it warned or failed",
    "vitbench_gpu_images_per_second": "one GPU's training throughput alone (every GPU at once, no communication)",
    "vitbench_node_images_per_second": "one node's GPUs' throughput alone, summed",
    "vitbench_node_intra_busbw_bytes_per_second": "all-reduce bus bandwidth over one node's own GPUs",
    "vitbench_node_busbw_bytes_per_second": "a node's best all-reduce bus bandwidth to other nodes (pairs)",
    "vitbench_validate_drain": "1 for each node or GPU and check the verdict drains",
    "vitbench_node_verdict": "each node's verdict: 0 healthy, 1 degraded, 2 unknown (not checked), 3 drain",
    "vitbench_health_finding": "1 for each finding of a node's health check (code, severity, action)",
    "vitbench_cluster_images_per_second": "throughput of the validate data-parallel run",
    "vitbench_record_timestamp_seconds": "Unix time of the record",
}


# Worse is higher, so one alert rule (>= 2) catches every node a scheduler must not trust.
VERDICT_VALUE = {"healthy": 0, "degraded": 1, "unknown": 2, "drain": 3}


def _escape(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _line(name: str, labels: dict[str, Any], value: float) -> str:
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items() if v is not None)
    return f"{name}{{{inner}}} {value!r}"


Add = Callable[..., None]


def samples(rec: dict[str, Any]) -> list[tuple[str, dict[str, Any], float]]:
    """(metric, labels, value) for every figure the record has; none for a figure it lacks."""
    out: list[tuple[str, dict[str, Any], float]] = []
    base = {"run_id": rec.get("run_id"), "kind": rec.get("kind")}

    def add(name: str, value: Any, **labels: Any) -> None:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out.append((name, {**base, **labels}, float(value)))

    kind = rec.get("kind")
    if kind in ("run", "point"):
        _run(rec, add)
    elif kind == "comm":
        _comm(rec, add)
    elif kind == "validate":
        _validate(rec, add)
    stamp = rec.get("time")
    if isinstance(stamp, str):
        try:
            add("vitbench_record_timestamp_seconds", datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S%z").timestamp())
        except ValueError:
            pass
    return out


def _run(rec: dict[str, Any], add: Add) -> None:
    cfg, fig = rec.get("config") or {}, rec.get("figures") or {}
    what = {"model": cfg.get("model"), "engine": cfg.get("engine"), "zero_stage": cfg.get("zero_stage"),
            "precision": cfg.get("precision"), "world_size": fig.get("world_size")}
    add("vitbench_run_success", 1 if rec.get("status") == "ok" else 0, **what)
    add("vitbench_images_per_second", fig.get("images_per_s"), **what)
    devices = {d.get("rank"): d for d in (rec.get("provenance") or {}).get("devices") or []}
    for rank, ips in enumerate(fig.get("images_per_s_per_rank") or []):
        d = devices.get(rank, {})
        add("vitbench_rank_images_per_second", ips, rank=rank, host=d.get("host"), gpu_model=d.get("device"),
            model=cfg.get("model"))
    for stat in ("mean", "median", "p90"):
        add("vitbench_step_seconds", (fig.get("step_s") or {}).get(stat), stat=stat, **what)


def _comm(rec: dict[str, Any], add: Add) -> None:
    spec, plan = rec.get("comm") or {}, rec.get("plan") or {}
    for row in rec.get("rows") or []:
        add("vitbench_comm_busbw_bytes_per_second", row.get("busbw"), op=row.get("op"), group=row.get("group"),
            size_bytes=row.get("size"), ranks=row.get("ranks"), nodes=plan.get("nodes"),
            device=plan.get("device") or spec.get("device"))


def _validate(rec: dict[str, Any], add: Add) -> None:
    m, level = rec.get("measured") or {}, rec.get("level")
    models = m.get("gpu_model") or {}
    for c in rec.get("checks") or []:
        if c.get("status") != "SKIP":
            add("vitbench_validate_check", 1 if c["status"] == "PASS" else 0, check=c.get("check"),
                node=c.get("node"), status=c.get("status"), level=level)
    for name, ips in (m.get("gpu_images_per_s") or {}).items():
        host, slot = name.rsplit(":", 1)
        add("vitbench_gpu_images_per_second", ips, host=host, slot=slot, gpu_model=models.get(host), level=level)
    for host, ips in (m.get("node_images_per_s") or {}).items():
        add("vitbench_node_images_per_second", ips, host=host, gpu_model=models.get(host), level=level)
    for host, bw in (m.get("intra_busbw") or {}).items():
        add("vitbench_node_intra_busbw_bytes_per_second", bw, host=host, gpu_model=models.get(host))
    for host, bw in (m.get("node_busbw") or {}).items():
        add("vitbench_node_busbw_bytes_per_second", bw, host=host, gpu_model=models.get(host))
    for e in rec.get("drain") or []:
        add("vitbench_validate_drain", 1, host=e.get("host"), gpu=e.get("gpu"), check=e.get("check"))
    for host, n in (rec.get("nodes") or {}).items():
        add("vitbench_node_verdict", VERDICT_VALUE.get(n.get("verdict"), 2), host=host, verdict=n.get("verdict"),
            level=level)
    for host, report in (m.get("health") or {}).items():
        for f in report.get("findings") or []:
            add("vitbench_health_finding", 1, host=host, code=f.get("code"), severity=f.get("severity"),
                action=f.get("action"), gpu=f.get("gpu_index"))
    dp = m.get("dp") or {}
    add("vitbench_cluster_images_per_second", dp.get("images_per_s"), world_size=dp.get("world_size"), level=level)


def text(rec: dict[str, Any]) -> str:
    """The text exposition format: # HELP and # TYPE once per metric, then its samples."""
    lines: list[str] = []
    seen: set[str] = set()
    got = samples(rec)
    for name in dict.fromkeys(n for n, _, _ in got):
        if name not in seen:
            seen.add(name)
            lines += [f"# HELP {name} {HELP[name]}", f"# TYPE {name} gauge"]
        lines += [_line(n, labels, v) for n, labels, v in got if n == name]
    return "\n".join(lines) + "\n"


def write(path: str, rec: dict[str, Any]) -> None:
    """The whole file at once: a temporary beside it, then a rename (what node_exporter's docs ask)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w") as f:
            f.write(text(rec))
        os.replace(tmp, path)
    except OSError:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
