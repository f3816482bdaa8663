"""What bench validate will do, before it does it: stages, launches, rounds and pairs, each launch's timeout,
and the predicted time to a verdict (`bench validate --dry-run`); and the timeouts the run itself uses.

    p = plan(ValidateConfig(level="full"), {"n0001": [0, 1, 2, 3, 4, 5, 6, 7], ...}, "pdsh", references.load())
    p["predicted_s"], p["budget_s"]       # the expected time to verdict; with every launch hung and looked at twice
    launch_timeout(240.0, nodes=1000, ranks=8000)   # 240 + 8 (torch's barrier) + 60 (the head's ssh) = 308

Timeouts grow with the cluster as torch's own do: its store barrier waits
1 s longer per 1,000 ranks (pytorch#109218), and the head starts one ssh
(pdsh, preflight, inventory) per node, about 60 ms of its CPU each
(bench/data/validate_costs.json, measured). The prediction adds what each
launch costs (the launcher's fan-out: pdsh's ssh per node from the head,
srun's and mpirun's trees; a node's ranks starting side by side; the
store's rendezvous per rank) to its work: per-GPU steps (and the burn) at
the slowest published images/s for the level's model and precision,
every round's all-reduce at the slowest published NIC's busbw, one launch
per rail of --rails (without it the rails are found at run time: the plan
counts none and says what each would cost), and DCGM's diagnostic at the
length NVIDIA documents for its level. A
prediction from the slowest published figures errs long on faster
hardware; second looks (a straggler's second round, a link measured
again) are counted apart and in the budget, not in the prediction, since
a healthy cluster needs none.
"""

from __future__ import annotations

import functools
import json
import math
import os
from typing import Any

from bench.cluster import topology
from bench.cluster.health.dcgm import DOCUMENTED_S, timeout_for
from bench.cluster.preflight import inventory_wait_s, wait_s
from bench.core.model_size import shape_of, vit_params
from bench.core.models import resolve_model
from bench.launch.registry import get
from bench.validate import pairing, tree
from bench.validate.config import LEVELS, ValidateConfig

COSTS_PATH = os.path.join(os.path.dirname(__file__), os.pardir, "data", "validate_costs.json")
# The comm ranks' calibration before timing (bench.worker.comm.CALIBRATION): collectives beside warm-up and iters.
CALIBRATION = 3


@functools.cache
def costs() -> dict[str, float]:
    with open(COSTS_PATH) as f:
        raw = json.load(f)
    return {k: float(v["value"]) for k, v in raw.items() if not k.startswith("_")}


def head_s(nodes: int) -> float:
    """The head's share of reaching every node: one ssh (or step) each, counted serially on one core."""
    return nodes * costs()["head_per_node_s"]


def fanout_s(launcher: str, nodes: int) -> float:
    """The head's share of reaching every node through `launcher`: pdsh (and preflight, inventory over ssh) starts
    one ssh per node itself; srun's step and mpirun's daemons fan out through a tree (slurmd's TreeWidth, orted's
    radix), the head reaching its width and each of those the next, in parallel. Every hop is costed as an ssh
    (head_per_node_s), which errs long for slurmd's messages."""
    width = {"slurm": costs()["slurm_tree_width"], "openmpi": costs()["mpirun_tree_radix"]}.get(launcher)
    if width is None:
        return head_s(nodes)
    total, parents, reached = 0.0, 1, 0
    while reached < nodes:
        new = min(nodes - reached, parents * int(width))
        total += math.ceil(new / parents) * costs()["head_per_node_s"]
        reached, parents = reached + new, new
    return total


def launch_timeout(base: float, nodes: int, ranks: int) -> float:
    """A launch's timeout over `nodes` nodes and `ranks` ranks: the level's, plus torch's barrier growth and the
    head's share of starting every node."""
    return round(base + ranks * costs()["barrier_per_rank_s"] + head_s(nodes), 1)


def reach_timeout(base: float, nodes: int) -> float:
    """How long preflight and the inventory wait for a host: their base, plus the head's share."""
    return round(base + head_s(nodes), 1)


def _slowest_ips(table, model: str, precision: str) -> tuple[float, str] | None:
    """The slowest published images/s for the model and precision (any GPU, any batch), and its GPU."""
    refs = [r for r in table.throughput if r.model == model and r.precision == precision] or \
           [r for r in table.throughput if r.model == model]
    if not refs:
        return None
    r = min(refs, key=lambda r: r.value)
    return r.value, f"{r.gpu} {r.precision} {r.model}: {r.value:g} images/s"


def _slowest_nic(table) -> tuple[float, str]:
    nics = [e for e in table.inter if not e.derived and e.value > 0]
    e = min(nics, key=lambda e: e.value)
    return e.value, e.label


def _allreduce_s(size: int, ranks: int, busbw: float) -> float:
    """One all-reduce of `size` bytes over `ranks` ranks at `busbw` (docs/metrics.md: busbw = algbw x 2(n-1)/n)."""
    if ranks < 2:
        return 0.0
    return costs()["collective_latency_s"] + size * 2 * (ranks - 1) / ranks / busbw


def plan(cfg: ValidateConfig, resources: dict[str, list[int]], launcher: str, table,
         found: tree.Found | None = None) -> dict[str, Any]:
    """The stages a validate of `resources` runs, with their launches, rounds, pairs, timeouts and predicted
    seconds; the sum of the predictions (predicted_s), and that plus every wait for a hang (budget_s: a launch's
    timeout is how long it may go without progress, not how long it may run). found: its topology
    (bench.validate.tree.find; default: --topology's file, else none)."""
    lv = LEVELS[cfg.level]
    nodes, ranks = len(resources), sum(len(s) for s in resources.values())
    c = costs()
    via = get(launcher).preflight_via or "ssh"
    timeout = launch_timeout(cfg.timeout or lv.timeout, nodes, ranks)   # --timeout, else the level's
    reach = fanout_s(launcher, nodes)
    start = reach + c["rank_start_s"]
    model, batch = lv.cuda_model, lv.cuda_micro_batch
    spec = resolve_model(model, lv.cuda_img_size, 10)
    shape = shape_of(spec)
    params = vit_params(shape) if shape else 0
    size = params * (2 if cfg.precision in ("fp16", "bf16") else 4) or lv.fallback_size
    ips = _slowest_ips(table, model, cfg.precision)
    step = batch / ips[0] if ips else lv.timeout / max(lv.steps, 1)
    nic, nic_label = _slowest_nic(table)
    if found is None:
        found = tree.Found(topology.read(cfg.topology) if cfg.topology else None)
    leaves = tree.leaves(found, list(resources), {})
    rounds = pairing.first_rounds(lv.pairs, nodes, cfg.pairs_seed, lv.matchings, leaves) if nodes >= 2 else []
    per_look = lv.comm_warmup + lv.iters + CALIBRATION
    pair_s = per_look * _allreduce_s(size, 2 * max(len(s) for s in resources.values()), nic)
    whole_s = per_look * _allreduce_s(size, ranks, nic) if nodes > 2 else 0.0
    intra_s = per_look * _allreduce_s(size, max(len(s) for s in resources.values()), nic)
    wanted = {name: cfg.wanted(name) for name in ("health", "throughput", "numerics", "intra-node", "inter-node",
                                                     "training", "stragglers", "scaling")}
    stages: list[dict[str, Any]] = [
        {"stage": "preflight", "launches": 0, "timeout_s": reach_timeout(wait_s(via), nodes),
         "predicted_s": round(reach + 0.5, 1), "how": f"every node at once ({via})"},
        {"stage": "inventory", "launches": 0, "timeout_s": reach_timeout(inventory_wait_s(via), nodes),
         "predicted_s": round(reach + c["node_probe_s"], 1),
         "how": "bench probe on every node at once" + (", reading its health" if wanted["health"] else "")},
    ]

    def launch(name: str, work: float, how: str, looks: int = 1, rendezvous: bool = True, **extra) -> None:
        pred = start + (ranks * c["rendezvous_per_rank_s"] if rendezvous else 0.0) + work
        stages.append({"stage": name, "launches": 1, "looks": looks, "second_looks": looks - 1, "timeout_s": timeout,
                       "predicted_s": round(pred, 1), "how": how, **extra})

    def none(name: str, how: str, looks: int = 0) -> None:
        """A stage that launches nothing of its own (looks: launches it may still need, a second look)."""
        stages.append({"stage": name, "launches": 0, "looks": looks, "second_looks": looks,
                       "timeout_s": timeout if looks else 0.0, "predicted_s": 0.0, "how": how})

    if wanted["health"]:
        none("health", "read by the inventory's probe")
    if cfg.wanted("dcgm"):
        stages.append(dcgm_stage(cfg, via, nodes, reach + c["node_probe_s"]))
    numerics_first = wanted["numerics"]
    # The copies (each GPU of a node in turn, then all at once: about a second each on a GPU) and the burn ride
    # the per-GPU launch (bench.validate.copies, bench.validate.burn).
    burn_s = cfg.burn_s() if cfg.wanted("burn") else 0.0
    extra_s = (max(len(s) for s in resources.values()) + 1 if cfg.wanted("copies") or cfg.wanted("memory") else 0) \
        + burn_s
    if wanted["throughput"]:
        launch("throughput", lv.steps * step * cfg.repeats + (lv.numerics_steps * 0.1 if numerics_first else 0.0)
               + extra_s, f"every GPU alone, all at once: {lv.steps} steps of {model}, batch {batch}"
               + (", the numerics job first" if numerics_first else "") + (", copies" if extra_s > burn_s else "")
               + (f", then every GPU hot at once for {burn_s:.0f} s" if burn_s else ""), looks=2, rendezvous=False)
    if numerics_first and not wanted["throughput"]:
        launch("numerics", lv.numerics_steps * 0.1, f"{lv.numerics_model}, {lv.numerics_steps} steps on every GPU",
               rendezvous=False)
    elif numerics_first:
        none("numerics", "run first in the per-GPU launch")
    links = wanted["intra-node"] or wanted["inter-node"]
    if links:
        passes = lv.pair_looks * cfg.repeats  # the first launch's looks at each pair (bench.validate.pairs)
        n_rounds = (1 if wanted["intra-node"] else 0) + (len(rounds) * passes + (nodes > 2)
                                                         if wanted["inter-node"] else 0)
        launch("intra-node" if wanted["intra-node"] else "inter-node",
               intra_s * wanted["intra-node"] + (pair_s * len(rounds) * passes + whole_s) * wanted["inter-node"],
               f"all-reduce of {size} B: each node's own GPUs" * wanted["intra-node"]
               + (", then " if wanted["intra-node"] and wanted["inter-node"] else "")
               + (f"{len(rounds)} round(s) of node pairs" + (f" {passes} times" if passes > 1 else "")
                  + " and the whole set" if wanted["inter-node"] else ""),
               looks=2, rounds=n_rounds)
    if wanted["inter-node"]:
        stage_pairs = sum(len(r) for r in rounds)
        if wanted["intra-node"]:
            none("inter-node", "measured in the intra-node launch; a second look only where a pair fell short",
                 looks=1)
        crossing = sum(1 for r in rounds for a, b in r if leaves and leaves[a] != leaves[b])
        stages[-1].update(pairs=stage_pairs, pairing=pairing.describe(lv.pairs, nodes, lv.matchings)
                          + (f"; {crossing} of {stage_pairs} pairs across leaf switches"
                             if leaves else "")
                          + f"; the ring's order: {pairing.describe_order(lv.pairs, nodes, leaves, cfg.pairs_seed)}",
                          seed=cfg.pairs_seed, partners=min((len(p) for p in pairing.partners(rounds).values()),
                                                            default=0))
    rails = rails_of(cfg, resources)
    rail_s = start + ranks * c["rendezvous_per_rank_s"] + pair_s * len(rounds) * cfg.repeats
    if rails:  # one launch per rail (bench.validate.rails), the level's first rounds of pairs each
        stages.append({"stage": "rails", "launches": len(rails[0]), "looks": len(rails[0]), "second_looks": 0,
                       "timeout_s": timeout,
                       "predicted_s": round(rail_s * len(rails[0]), 1), "rounds": len(rounds) * cfg.repeats,
                       "how": f"{len(rails[0])} rail(s), each alone in a launch of {len(rounds)} round(s) of node "
                              f"pairs: {rails[1]}"})
    if wanted["training"]:
        launch("training", lv.dp_steps * (step + _allreduce_s(size, ranks, nic)),
               f"data-parallel {model} over every good GPU, {lv.dp_steps} steps")
    for name in ("stragglers", "scaling"):
        if wanted[name]:
            none(name, "judged from what was measured")
    predicted = sum(s["predicted_s"] for s in stages)
    # A launch hangs after its last progress, so its wait comes on top of its work; a second look repeats both.
    second = sum(_second_look_s(s) for s in stages)
    budget = predicted + second + sum(s["timeout_s"] * s.get("looks", 1) for s in stages if s["timeout_s"])
    return {"level": cfg.level, "launcher": launcher, "nodes": nodes, "ranks": ranks, "stages": stages,
            "predicted_s": round(predicted, 1), "budget_s": round(budget, 1),
            "second_looks": {"launches": sum(s.get("second_looks", 0) for s in stages),
                             "predicted_s": round(second, 1)},
            "message_bytes": size, "topology": tree.record(found, list(resources), {}, cfg.pairs_seed, lv.pairs),
            "topology_lines": tree.lines(found, list(resources), {}, cfg.pairs_seed, lv.pairs)
            if wanted["inter-node"] else [],
            "assumes": {
                "gpu": ips[1] if ips else f"no published figure for {model}: a step is the timeout over the steps",
                "nic": nic_label, "rails": rail_note(cfg, resources, round(rail_s, 1)),
                "fanout": f"{launcher}: the head's share of reaching {nodes} nodes, {reach:.3g} s",
                "costs": os.path.relpath(os.path.normpath(COSTS_PATH), os.getcwd())
                if os.path.isabs(COSTS_PATH) else COSTS_PATH},
            "timeouts": f"each launch {timeout:g} s: the level's {lv.timeout:g} s + {ranks * c['barrier_per_rank_s']:g}"
                        f" s for {ranks} ranks (torch's barrier, 1 s per 1,000) + {head_s(nodes):g} s for the "
                        f"head's ssh to {nodes} nodes"}


def rails_of(cfg: ValidateConfig, resources: dict[str, list[int]]) -> tuple[list[str], str] | None:
    """(the rails the plan counts, what it says of them), or None where it counts none: --rails, two or more. Without
    --rails the run takes the Active HCAs every node has, which only its inventory knows: the plan counts none and
    says so, with the cost of each (rail_note)."""
    if not cfg.wanted("rails") or len(resources) < 2 or not cfg.rails or len(cfg.rails) < 2:
        return None
    return list(cfg.rails), f"{', '.join(cfg.rails)} (--rails)"


def rail_note(cfg: ValidateConfig, resources: dict[str, list[int]], per_rail_s: float) -> str:
    """What the plan assumed of the rails check."""
    if not cfg.wanted("rails") or len(resources) < 2:
        return "none: the rails check is not run"
    if cfg.rails and len(cfg.rails) < 2:
        return f"none: one rail given ({cfg.rails[0]}), which the inter-node check measures"
    if cfg.rails:
        return f"{', '.join(cfg.rails)} (--rails), {per_rail_s:g} s each"
    gpus = max(len(s) for s in resources.values())
    return (f"none counted: without --rails the run measures the Active InfiniBand/RoCE HCAs every node has, found "
            f"by its inventory, {per_rail_s:g} s each (one per GPU here: {gpus}, {gpus * per_rail_s:g} s more); "
            "--rails names them and the plan counts them")


def dcgm_stage(cfg: ValidateConfig, via: str, nodes: int, reach: float) -> dict[str, Any]:
    """The dcgm stage: the level's documented length after every node is reached; a node's dcgmi is killed past
    its timeout, and the head waits that plus a node's start."""
    level = cfg.dcgm_level()
    node_timeout = cfg.dcgm_timeout if cfg.dcgm_timeout is not None else timeout_for(level)
    return {"stage": "dcgm", "launches": 0, "looks": 1, "second_looks": 0, "level": level,
            "timeout_s": reach_timeout(node_timeout + inventory_wait_s(via), nodes),
            "predicted_s": round(reach + min(DOCUMENTED_S[level], node_timeout), 1),
            "how": f"dcgmi diag -r {level} on every node that has dcgmi, all at once: about {DOCUMENTED_S[level]:g} s "
                   f"by NVIDIA's dcgmi reference; a node still running at {node_timeout:g} s is killed and unknown"}


def _second_look_s(s: dict[str, Any]) -> float:
    """The work a stage's second looks would repeat (a launch again where something fell short)."""
    return s["predicted_s"] / max(s["launches"], 1) * s.get("second_looks", 0)


def stage_rows(p: dict[str, Any]) -> list[str]:
    """The plan as plain lines (what --dry-run prints without --json)."""
    rows = [f"bench validate --level {p['level']} --dry-run: {p['nodes']} nodes, {p['ranks']} ranks, through "
            f"{p['launcher']}; nothing is launched"]
    for s in p["stages"]:
        extra = "".join(f", {k} {s[k]}" for k in ("rounds", "pairs", "partners", "seed") if k in s)
        again = s.get("second_looks", 0)
        extra = (f" + {again} second look(s)" if again else "") + extra
        rows.append(f"  {s['stage']:<11} {s['launches']} launch(es){extra}; timeout {s['timeout_s']:g} s; predicted "
                    f"{s['predicted_s']:g} s: {s['how']}" + (f" ({s['pairing']})" if "pairing" in s else ""))
    rows.append(f"predicted time to verdict: {p['predicted_s']:g} s ({p['predicted_s'] / 60:.1f} min); budget (every "
                f"launch hung to its timeout, every second look): {p['budget_s']:g} s "
                f"({math.ceil(p['budget_s'] / 60)} min)")
    rows.append(f"second looks: up to {p['second_looks']['launches']} launch(es) again where a figure fell short, "
                f"{p['second_looks']['predicted_s']:g} s more (in the budget, not the prediction)")
    rows += p["topology_lines"]
    rows.append(f"timeouts: {p['timeouts']}")
    rows.append(f"assumes: GPUs as slow as {p['assumes']['gpu']}; NICs as slow as {p['assumes']['nic']}; rails: "
                f"{p['assumes']['rails']}; {p['assumes']['fanout']}; costs from {p['assumes']['costs']}")
    return rows
