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
from bench.core.model_size import shape_of, vit_params
from bench.core.models import resolve_model
from bench.launch.registry import get
from bench.validate import checks, pairing, passes, tree
from bench.validate.checks.base import Launch, Phase
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


class Planner:
    """What the checks' plans (bench.validate.checks: each check's `plan`) read of a validate of `resources`, and
    the stage lines they add: a launch of their own, a stage that launches nothing, the riders of a shared launch."""

    def __init__(self, cfg: ValidateConfig, resources: dict[str, list[int]], launcher: str, table,
                 found: tree.Found) -> None:
        self.cfg, self.resources, self.found = cfg, resources, found
        self.lv = lv = LEVELS[cfg.level]
        self.nodes, self.ranks = len(resources), sum(len(s) for s in resources.values())
        self.gpus_per_node = max(len(s) for s in resources.values())
        self.c = costs()
        self.via = get(launcher).preflight_via or "ssh"
        self.timeout = launch_timeout(cfg.timeout or lv.timeout, self.nodes, self.ranks)  # --timeout, else the level's
        self.reach = fanout_s(launcher, self.nodes)
        self.start = self.reach + self.c["rank_start_s"]
        self.model, self.batch = lv.cuda_model, lv.cuda_micro_batch
        shape = shape_of(resolve_model(self.model, lv.cuda_img_size, 10))
        params = vit_params(shape) if shape else 0
        self.size = params * (2 if cfg.precision in ("fp16", "bf16") else 4) or lv.fallback_size
        self.ips = _slowest_ips(table, self.model, cfg.precision)
        self.step = self.batch / self.ips[0] if self.ips else lv.timeout / max(lv.steps, 1)
        self.nic, self.nic_label = _slowest_nic(table)
        self.leaves = tree.leaves(found, list(resources), {})
        self.rounds = pairing.first_rounds(lv.pairs, self.nodes, cfg.pairs_seed, lv.matchings, self.leaves) \
            if self.nodes >= 2 else []
        looks, across = lv.pair_looks * cfg.repeats, lv.across_looks and lv.across_looks * cfg.repeats
        self.schedule = passes.passes(self.rounds, looks, across, self.leaves)  # the first launch's pair rounds
        per_look = lv.comm_warmup + lv.iters + CALIBRATION
        self.pair_s = per_look * self.allreduce_s(self.size, 2 * self.gpus_per_node)
        self.whole_s = per_look * self.allreduce_s(self.size, self.ranks) if self.nodes > 2 else 0.0
        self.intra_s = per_look * self.allreduce_s(self.size, self.gpus_per_node)
        self.rails = rails_of(cfg, resources)
        self.rail_s = self.start + self.ranks * self.c["rendezvous_per_rank_s"] + \
            self.pair_s * len(self.rounds) * cfg.repeats
        self.stages: list[dict[str, Any]] = []

    def wanted(self, name: str) -> bool:
        return self.cfg.wanted(name)

    def allreduce_s(self, size: int, ranks: int) -> float:
        return _allreduce_s(size, ranks, self.nic)

    def reach_timeout(self, base: float) -> float:
        return reach_timeout(base, self.nodes)

    def riders(self, launch: Launch) -> tuple[Phase, ...]:
        """The phases of a shared launch the wanted checks ride (their costs and words are the launch's)."""
        return checks.phases(self.wanted, launch.name)

    def launch(self, name: str, work: float, how: str, looks: int = 1, rendezvous: bool = True, **extra) -> None:
        """A stage with a launch of its own: its start, its ranks' rendezvous, its work."""
        pred = self.start + (self.ranks * self.c["rendezvous_per_rank_s"] if rendezvous else 0.0) + work
        self.stages.append({"stage": name, "launches": 1, "looks": looks, "second_looks": looks - 1,
                            "timeout_s": self.timeout, "predicted_s": round(pred, 1), "how": how, **extra})

    def none(self, name: str, how: str, looks: int = 0) -> None:
        """A stage that launches nothing of its own (looks: launches it may still need, a second look)."""
        self.stages.append({"stage": name, "launches": 0, "looks": looks, "second_looks": looks,
                            "timeout_s": self.timeout if looks else 0.0, "predicted_s": 0.0, "how": how})


def plan(cfg: ValidateConfig, resources: dict[str, list[int]], launcher: str, table,
         found: tree.Found | None = None) -> dict[str, Any]:
    """The stages a validate of `resources` runs, with their launches, rounds, pairs, timeouts and predicted
    seconds (each check's own plan, bench.validate.checks, in the registry's order); the sum of the predictions
    (predicted_s), and that plus every wait for a hang (budget_s: a launch's timeout is how long it may go without
    progress, not how long it may run). found: its topology (bench.validate.tree.find; default: --topology's file,
    else none)."""
    if found is None:
        found = tree.Found(topology.read(cfg.topology) if cfg.topology else None)
    p = Planner(cfg, resources, launcher, table, found)
    for check in checks.REGISTRY:
        if check.always or cfg.wanted(check.name):
            check.planned(p)
    lv, stages, nodes, ranks, reach, ips = p.lv, p.stages, p.nodes, p.ranks, p.reach, p.ips
    model, nic_label, size, rail_s, timeout, c = p.model, p.nic_label, p.size, p.rail_s, p.timeout, p.c
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
            if cfg.wanted("inter-node") else [],
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


def _second_look_s(s: dict[str, Any]) -> float:
    """The work a stage's second looks would repeat (a launch again where something fell short): its own figure where
    it says one (the inter-node second look's own rounds; a later per-GPU round carries none of the first's riders),
    else a launch's share of the stage."""
    if "again_s" in s:  # its own launch's rounds (bench.validate.checks.inter_node), not the first's again
        return s["again_s"] * bool(s.get("second_looks", 0))
    return s.get("second_look_s", s["predicted_s"] / max(s["launches"], 1)) * s.get("second_looks", 0)


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
