"""bench validate --soak DURATION: a burn-in, the per-GPU, numerics and link checks again, round after round.

    bench validate --hostfile H --soak 2h --metrics-file /var/lib/node_exporter/textfile/vitbench.prom
    bench validate --hostfile H --soak 2h        # the same command again: resumes where it stopped

New GPU batches fail in their first days; a burn-in finds them. Preflight,
inventory and DCGM's diagnostic (bench.validate.dcgm, where asked for) run
once per invocation, then rounds of throughput, numerics,
intra-node and inter-node (narrowed by --checks), each ending with every
node's health read again (the Xids and counters the round's stress raised:
the first round's since boot or --since, later ones since the soak began),
until the rounds' time adds
up to DURATION, or a round has a FAIL (--soak-keep-going goes on). Every
round is a validate record appended to OUT/soak-<key>/results.jsonl as soon
as it ends (key: the hosts, level, checks and precision, so the same command
finds its own folder and resumes; Ctrl-C loses only the round in progress),
and the metrics file is rewritten with it. The soak's record ("soak") gives
per GPU and per link the spread over the rounds, the worst round, the rounds
that failed and the round from which a part stayed bad (bench.analysis.soak).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import time
from dataclasses import dataclass
from typing import Any, Callable

from bench.analysis import references, soak as trends
from bench.cluster.hostfile import HostSelection
from bench.core import results, storage
from bench.core.errors import BadInput
from bench.validate import checks, dcgm, health, nodes, numerics, stages, tree
from bench.validate.config import ValidateConfig, duration
from bench.validate.state import Stage, Validation
from bench.validate.where import where

# Every round's checks, in order: those the registry marks (bench.validate.checks).
ROUND = tuple((c.name, c.runner()) for c in checks.soak_round())


def parse_duration(text: str) -> float:
    """'2h', '30m', '90s', '1h30m' or plain seconds -> seconds; BadInput naming --soak otherwise."""
    return duration(text, "--soak")


def identity(cfg: ValidateConfig, resources: dict[str, list[int]]) -> dict[str, Any]:
    return {"resources": resources, "level": cfg.level, "precision": cfg.precision,
            "checks": [n for n, _ in ROUND if cfg.wanted(n)]}


def folder(cfg: ValidateConfig, ident: dict[str, Any]) -> str:
    key = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:10]
    return os.path.abspath(os.path.join(cfg.out, f"soak-{key}"))


@contextlib.contextmanager
def _no_interrupt():
    """Ctrl-C (or SIGTERM) held back for the block and delivered right after it: a round's record is never on disk
    without the metrics file written from it (a scraper would read the round before)."""
    held = {signal.SIGINT, signal.SIGTERM}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _started_at(d: str) -> float | None:
    """When the soak in folder d began (its soak.json), for a resumed invocation."""
    try:
        with open(os.path.join(d, "soak.json")) as f:
            return json.load(f).get("started_at")
    except (OSError, ValueError, AttributeError):
        return None


def done_rounds(path: str) -> list[dict[str, Any]]:
    """The rounds already recorded in the soak's results.jsonl (a torn last line is skipped)."""
    if not os.path.exists(path):
        return []
    return [r for r in results.read(path).records if r.get("kind") == "validate" and r.get("soak")]


def _timed(v: Validation, name: str, stage: Callable[[Validation], None]) -> None:
    s0, launches, ranks = time.time(), v.launches, sum(len(s) for s in v.good_resources().values())
    stage(v)
    v.stages.append(Stage(name, time.time() - s0, ranks, v.launches - launches))


@dataclass
class _Base:
    """What the first round learnt that every round reuses: the inventory, and what preflight and inventory ruled
    out (each round judges every GPU again: only those stay out)."""

    v: Validation
    hosts: set[str]
    gpus: set[tuple[str, int]]


def _one_round(v: Validation, base: _Base | None, cfg: ValidateConfig, since: float | None) -> _Base:
    """A round's checks into v; the first round also preflights and takes the inventory."""
    if base is None:
        for name, stage in (("preflight", nodes.preflight), ("inventory", nodes.inventory)):
            _timed(v, name, stage)
        if cfg.wanted("dcgm"):  # once, before the first round's stress: minutes at its level (bench.validate.dcgm)
            _timed(v, "dcgm", dcgm.dcgm)
        base = _Base(v, set(v.failed_hosts), set(v.failed_gpus))
    else:
        v.hostname_of, v.inventory, v.device = base.v.hostname_of, base.v.inventory, base.v.device
        v.figures["verdict"] = base.v.figures.get("verdict")
        v.failed_hosts, v.failed_gpus = set(base.hosts), set(base.gpus)
    for name, stage in ROUND:
        if cfg.wanted(name):
            _timed(v, name, stage)
    if cfg.wanted("health"):
        # Each round ends with every node's health read again: the Xids and counters its stress raised.
        s0 = time.time()
        nodes.reread_health(v, since)
        health.health(v)
        v.stages.append(Stage("health", time.time() - s0, 0, 0))
    return base


def _folder(cfg: ValidateConfig, hosts: HostSelection, resources: dict[str, list[int]], hostfile_text: str | None,
            duration: float) -> tuple[str, HostSelection, list[dict[str, Any]], float]:
    """(the soak's folder, the hosts its launches read, the rounds already recorded, when it began)."""
    ident = identity(cfg, resources)
    if not ident["checks"]:
        raise BadInput(f"--checks: none of {', '.join(n for n, _ in ROUND)} asked: a soak repeats those")
    d = folder(cfg, ident)
    os.makedirs(d, exist_ok=True)
    if hostfile_text is not None:  # a Slurm allocation: its hosts, as every round's launches read them
        results.write_text_atomic(os.path.join(d, "hostfile"), hostfile_text)
        hosts = HostSelection(hostfile=os.path.join(d, "hostfile"))
    storage.check_room(cfg.out, sum(len(s) for s in resources.values()))
    rounds = done_rounds(os.path.join(d, "results.jsonl"))
    # Kept across resumes: "since the soak began" is the first invocation's.
    started = (_started_at(d) if rounds else None) or time.time()
    results.write_json_atomic(os.path.join(d, "soak.json"), {**ident, "duration_s": duration, "started_at": started})
    return d, hosts, rounds, started


def soak(cfg: ValidateConfig, hosts: HostSelection,
         on_round: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    duration = parse_duration(cfg.soak or "")
    w = where(cfg, hosts)
    found = tree.find(cfg, len(w.resources))
    table = references.load(cfg.reference)
    numerics.load_references(cfg.numerics_reference)
    d, hosts, rounds, started = _folder(cfg, hosts, w.resources, w.hostfile_text, duration)
    elapsed = sum(r["duration_s"] for r in rounds)
    base: _Base | None = None
    stopped = None
    t_start = time.time()
    while elapsed < duration:
        k = len(rounds) + 1
        v = Validation(cfg, hosts, w.resources, table, os.path.join(d, f"round-{k}-{int(time.time())}"),
                       launcher=w.launcher)
        v.confirm_stragglers = False
        v.tree, v.topology_tried = found.tree, found.tried
        t0 = time.time()
        # The first round's health counts events since boot (or --since), the later ones' since the soak began.
        base = _one_round(v, base, cfg, health.since_of(cfg) if k == 1 else started)
        # One --max-drain for the whole soak: what earlier rounds (this invocation's or a resumed one's) drained
        # counts toward it, not a fresh limit per round.
        earlier = list(dict.fromkeys(x["host"] for r in rounds for x in r.get("drained") or [] if x.get("drained")))
        rec = stages.record(v, f"soak-{os.path.basename(d)}-round-{k}", time.time() - t0, earlier=earlier)
        rec["soak"] = {"round": k, "elapsed_s": elapsed + rec["duration_s"], "duration_s": duration, "folder": d}
        with _no_interrupt():  # the round's record and what is written for it (the metrics file) together
            results.append(os.path.join(d, "results.jsonl"), rec)
            if on_round is not None:
                on_round(rec)
        rounds.append(rec)
        elapsed += rec["duration_s"]
        if rec["result"] == "FAIL" and not cfg.soak_keep_going:
            stopped = f"round {k} has a FAIL (--soak-keep-going goes on)"
            break
    return record(cfg, d, rounds, duration, stopped, time.time() - t_start)


def record(cfg: ValidateConfig, d: str, rounds: list[dict[str, Any]], duration: float, stopped: str | None,
           took: float) -> dict[str, Any]:
    rows = trends.summarise(trends.subjects(rounds))
    failed = [r["soak"]["round"] for r in rounds if r["result"] == "FAIL"]
    seen = {r["result"] for r in rounds}
    result = "FAIL" if failed else next((x for x in ("ERROR", "WARN") if x in seen), "PASS")
    last = rounds[-1] if rounds else {}
    rec = results.make_record(
        "soak", "failed" if failed else "ok", run_id=os.path.basename(d), run_dir=d, duration_s=took,
        result=result, level=cfg.level, hosts=last.get("hosts", []), rounds=len(rounds), failed_rounds=failed,
        elapsed_s=sum(r["duration_s"] for r in rounds), soak_duration_s=duration,
        stopped=stopped or ("the rounds' time reached the duration" if rounds else "no round ran"),
        trends=[t.to_dict() for t in rows], drain=last.get("drain", []), exclude=last.get("exclude", ""),
        identity={**(last.get("identity") or {}), "soak": True})
    results.append(os.path.join(d, "soak-results.jsonl"), rec)
    return rec
