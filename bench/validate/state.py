"""The state of one `bench validate` run: its checks so far, and the hosts and GPUs still in it.

Each check adds Check rows: per GPU (node "host:slot"), per node ("host"),
per node pair ("a+b") and for the cluster ("cluster"). A row is PASS, WARN,
FAIL (measured, and bad: drain it), ERROR (could not be measured: a launch
that did not start, a stage that timed out, a tool that crashed) or SKIP
(not selected, or nothing here to check). A FAIL or ERROR row of a GPU
leaves that GPU out of the later checks, of a node the whole node; rows for
what was left out say SKIP and why. The drain list is made from the FAIL
rows of nodes and GPUs at the end (bench.validate.drain); each node's
verdict from all its rows (bench.validate.verdicts).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from bench.cluster.hostfile import HostSelection
from bench.cluster.remote import is_local
from bench.core.config import RunConfig
from bench.launch.registry import LOCAL, MULTI_HOST_DEFAULT, get
from bench.cluster.topology import Tree
from bench.validate import budget, pairing, passes
from bench.validate.config import LEVELS, ValidateConfig

CLUSTER = "cluster"
# Worst first: a row's status, and the order in which a summary picks its worst row.
STATUSES = ("FAIL", "ERROR", "WARN", "PASS", "SKIP")
RANK = {"FAIL": 4, "ERROR": 3, "WARN": 2, "PASS": 1, "SKIP": 0}
OUT = ("FAIL", "ERROR")   # a GPU or node with such a row is left out of the later checks
LEFT_OUT = "left out after"  # how a SKIP row for a GPU or node left out begins
NOT_RUN = "not run"          # how a SKIP row of a check asked for but stopped before it ran begins (--fail-fast...)


@dataclass(slots=True)
class Check:
    check: str
    node: str              # "host", "host:slot", "a+b" or "cluster"
    status: str            # PASS, WARN, FAIL, ERROR, SKIP (STATUSES)
    value: str = ""
    reference: str = ""    # what judged it: a published reference, the peers' median, a floor, or "none"
    reason: str = ""
    duration_s: float = 0.0
    host: str | None = None  # the node the row is about (None: a pair, the cluster, or a node's summary row)
    gpu: int | None = None   # the GPU (slot) the row is about
    figure: float | None = None  # the row's figure as a number, higher is better (images/s, bytes/s, FLOP/s)
    action: str = ""         # what to do about it, where the row knows (a health finding's table line)

    def as_dict(self) -> dict[str, Any]:
        """dataclasses.asdict(self) without its deep copy, which every field (a str, number or None) does not
        need: a tenth of the time, for the 40,000 rows of 8,000 GPUs."""
        return {name: getattr(self, name) for name in self.__slots__}


@dataclass(frozen=True, slots=True)
class Measured:
    """What one launch measured for a check that rides it, kept for that check to judge (the per-GPU launch's
    copies and burn: bench.validate.runs.keep_phases): the resources it covered, one entry per rank, its folder and
    the launch's error (None: it ran)."""

    resources: dict[str, list[int]]
    ranks: tuple[dict[str, Any], ...]
    run_dir: str | None = None
    error: dict[str, Any] | None = None

    def of(self, res: dict[str, list[int]]) -> Measured:
        """The same, narrowed to the GPUs of res."""
        keep = {(h, s) for h, slots in res.items() for s in slots}
        return Measured(self.resources, tuple(r for r in self.ranks if (r["host"], r["slot"]) in keep),
                        self.run_dir, self.error)


@dataclass(slots=True)
class Stage:
    stage: str
    duration_s: float
    ranks: int
    launches: int = 0
    startup_s: float | None = None  # of duration_s, the launches' start-up: until their last rank began to measure


class Validation:
    """The state of one validate run: its checks and the hosts and GPUs still taking part."""

    def __init__(self, cfg: ValidateConfig, hosts: HostSelection, resources: dict[str, list[int]], table,
                 vdir: str, launcher: str = MULTI_HOST_DEFAULT):
        self.cfg, self.hosts, self.resources, self.table, self.vdir = cfg, hosts, resources, table, vdir
        self.launcher = launcher  # how the nodes are reached: slurm, openmpi, pdsh, or local (this node alone)
        self.level = LEVELS[cfg.level]
        self.checks: list[Check] = []
        self.stages: list[Stage] = []
        self.failed_hosts: set[str] = set()
        self.failed_gpus: set[tuple[str, int]] = set()
        # Why each host or GPU left the later checks: "a FAIL in throughput", "an ERROR in preflight".
        self.left_out: dict[str | tuple[str, int], str] = {}
        self.hostname_of: dict[str, str] = {}
        self.inventory: dict[str, dict] = {}
        self.health_reports: dict[str, dict] = {}  # saved reports (--health-from); live ones come in the inventory
        self.device = "cpu"
        self.figures: dict[str, Any] = {"gpu_images_per_s": {}, "node_images_per_s": {}, "node_busbw": {},
                                        "intra_busbw": {}}
        self.runs: dict[str, str] = {}
        # Worked out once from self.figures for checks that read it for every node or pair (links.floor: the
        # median GPU's step); what writes those figures empties it.
        self.derived: dict[str, Any] = {}
        # The inter-node check's pairs, measured in the intra-node check's launch (bench.validate.links).
        self.links_ahead: dict[str, Any] | None = None
        self.launches = 0
        self.startup_s = 0.0   # every launch's start-up so far (bench.validate.runs), apart from its checks
        # Measured in an earlier stage's launch, for a later stage to judge: the numerics job run first by the
        # per-GPU runs or the link launch, the link rows measured with the numerics job (bench.validate.numerics).
        self.numerics_ahead: dict[str, Any] | None = None
        self.intra_ahead: dict[str, Any] | None = None
        # The phases the per-GPU launch ran beside its steps, by name ("copies", "burn": bench.validate.checks'
        # phases), for the checks that ride them (bench.validate.copies, bench.validate.burn judge them).
        self.phases_ahead: dict[str, Measured] = {}
        # A GPU that looks like a straggler in the first round is measured again before it is named one; a
        # soak, which measures every GPU round after round, judges each round as it comes.
        self.confirm_stragglers = True
        # Where each node hangs in the fabric (bench.validate.tree.find: --topology, Slurm's, ibnetdiscover's);
        # None: pairs cannot be chosen to cross leaf switches. topology_tried: what each source said instead.
        self.tree: Tree | None = None
        self.topology_tried: tuple[str, ...] = ()

    @property
    def leaf_of(self) -> dict[str, str] | None:
        """Each node's leaf switch (by the topology's names), or None without a topology."""
        return None if self.tree is None else self.tree.leaf_of

    @leaf_of.setter
    def leaf_of(self, leaf_of: dict[str, str] | None) -> None:
        self.tree = None if leaf_of is None else Tree(leaf_of=dict(leaf_of), up={}, source="given")

    # ------------------------------------------------------------------ who is still in
    @property
    def good(self) -> list[str]:
        """The hosts still in, in hostfile order (a host whose every GPU failed is out too)."""
        return [h for h in self.resources if not self.is_out(h)]

    def is_out(self, host: str) -> bool:
        """Left out: a FAIL or ERROR of the node, or of every GPU it has. A host selected with no slot at all (a
        node judged from saved reports that name no GPU) is still in."""
        return host in self.failed_hosts or (bool(self.resources[host]) and not self.good_slots(host))

    def good_slots(self, host: str) -> list[int]:
        return [s for s in self.resources[host] if (host, s) not in self.failed_gpus]

    def good_resources(self) -> dict[str, list[int]]:
        return {h: self.good_slots(h) for h in self.good}

    def add(self, check: str, node: str, status: str, value: str = "", reference: str = "", reason: str = "",
            t0: float | None = None, *, host: str | None = None, gpu: int | None = None,
            figure: float | None = None, action: str = "") -> None:
        self.checks.append(Check(check, node, status, value, reference, reason,
                                 time.time() - t0 if t0 is not None else 0.0, host, gpu, figure, action))
        if status in OUT and host is not None:
            key: str | tuple[str, int] = host if gpu is None else (host, gpu)
            self.left_out.setdefault(key, f"{'a FAIL' if status == 'FAIL' else 'an ERROR'} in {check}")
            if gpu is None:
                self.failed_hosts.add(host)
            else:
                self.failed_gpus.add((host, gpu))

    def add_node(self, check: str, host: str, status: str, value: str = "", reference: str = "",
                 reason: str = "", t0: float | None = None, figure: float | None = None, action: str = "") -> None:
        self.add(check, host, status, value, reference, reason, t0, host=host, figure=figure, action=action)

    def add_gpu(self, check: str, host: str, slot: int, status: str, value: str = "", reference: str = "",
                reason: str = "", t0: float | None = None, figure: float | None = None, action: str = "") -> None:
        self.add(check, f"{host}:{slot}", status, value, reference, reason, t0, host=host, gpu=slot, figure=figure,
                 action=action)

    def why_out(self, host: str, slot: int | None = None) -> str:
        """The SKIP reason of a host (or GPU) an earlier check left out."""
        why = self.left_out.get(host if slot is None else (host, slot))
        if why is None and slot is None:  # every GPU of the node left out, each for its own reason
            why = "; ".join(dict.fromkeys(self.left_out.get((host, s), "?") for s in self.resources[host]))
        return f"{LEFT_OUT} {why or 'an earlier check'}"

    def skip_left_out(self, check: str, per_gpu: bool = False) -> None:
        """SKIP rows for the hosts (and with per_gpu, the GPUs) earlier checks left out."""
        for host in self.resources:
            if self.is_out(host):
                self.add(check, host, "SKIP", reason=self.why_out(host), host=host)
            elif per_gpu:
                for s in self.resources[host]:
                    if (host, s) in self.failed_gpus:
                        self.add(check, f"{host}:{s}", "SKIP", reason=self.why_out(host, s), host=host, gpu=s)

    def failed(self) -> bool:
        """A FAIL or an ERROR so far (--fail-fast stops there)."""
        return any(c.status in OUT for c in self.checks)

    def identity(self) -> dict[str, Any]:
        """What this run measured with: validate runs are compared (bench compare, --baseline) only where it is
        the same. Which checks ran is not part of it: a GPU's figure is the same whatever else was checked."""
        model, img_size, micro_batch = self.workload
        return {"level": self.cfg.level, "precision": self.cfg.precision, "model": model, "micro_batch": micro_batch,
                "steps": self.level.steps, **({"img_size": img_size} if img_size else {})}

    @property
    def workload(self) -> tuple[str, int | None, int]:
        """(model, image size or None for the preset's, micro batch) of the per-GPU and data-parallel runs: the
        level's on CPU, its GPU-bound one on GPUs (config.Level's cuda_* fields)."""
        lv = self.level
        if self.device == "cuda":
            return lv.cuda_model, lv.cuda_img_size, lv.cuda_micro_batch
        return lv.model, None, lv.micro_batch

    # ------------------------------------------------------------------ how its jobs run
    @property
    def this_node_only(self) -> bool:
        """This machine alone (--level prolog, health), or a hostfile of it under pdsh: nothing to reach."""
        return self.launcher_for(list(self.resources)) == LOCAL

    def launcher_for(self, hosts: list[str]) -> str:
        """The launcher the nodes are reached by; a set of this machine alone runs local ranks where that
        launcher says so (pdsh: nothing to reach over ssh; srun and mpirun still place the ranks, binding the
        allocation's GPUs)."""
        kind = get(self.launcher)
        if not kind.remote or (kind.local_for_this_node and len(hosts) == 1 and is_local(hosts[0])):
            return LOCAL
        return self.launcher

    def leaves(self, hosts: list[str]) -> list[str | None] | None:
        """Each host's leaf switch (None: not in the topology), or None without a topology."""
        return None if self.tree is None else self.tree.leaves(hosts, self.hostname_of)

    @property
    def pair_passes(self) -> int:
        """How many times the first link launch goes over the pair rounds: the level's looks x --repeats."""
        return self.level.pair_looks * self.cfg.repeats

    @property
    def again_passes(self) -> int:
        """How many times the second look goes over its pairs: the level's again_looks (else pair_looks) x --repeats."""
        return (self.level.again_looks or self.level.pair_looks) * self.cfg.repeats

    def pair_schedule(self, hosts: list[str]) -> list[list[tuple[int, int]]]:
        """The first link launch's rounds: the level's pair rounds over its passes, those across leaf switches in
        fewer where the level says so (bench.validate.pairing.passes)."""
        across = None if self.level.across_looks is None else self.level.across_looks * self.cfg.repeats
        return passes.passes(self.pair_rounds(hosts), self.pair_passes, across, self.leaves(hosts))

    def pair_rounds(self, hosts: list[str]) -> list[list[tuple[int, int]]]:
        """The level's first rounds of node pairs over hosts (bench.validate.pairing.first_rounds)."""
        return pairing.first_rounds(self.level.pairs, len(hosts), self.cfg.pairs_seed, self.level.matchings,
                                    self.leaves(hosts))

    def launch_timeout(self, hosts: dict[str, list[int]] | list[str]) -> float:
        """The level's launch timeout grown with the launch's nodes and ranks (bench.validate.budget)."""
        ranks = sum(len(self.resources[h]) for h in hosts) if isinstance(hosts, list) else \
            sum(len(s) for s in hosts.values())
        return budget.launch_timeout(self.cfg.timeout or self.level.timeout, len(hosts), ranks)

    def pairing_plan(self) -> dict[str, Any]:
        """How the first rounds of pairs were chosen, for the record: a run is repeated pair for pair from it."""
        hosts = self.good or list(self.resources)
        leaves = self.leaves(hosts)
        return {"kind": self.level.pairs, "nodes": len(hosts), "rounds": len(self.pair_rounds(hosts)),
                "how": pairing.describe(self.level.pairs, len(hosts), self.level.matchings, leaves),
                "seed": self.cfg.pairs_seed, "matchings": self.level.matchings,
                "leaves": None if leaves is None else len({x for x in leaves if x is not None}),
                "topology": None if self.tree is None else self.tree.source,
                "order": pairing.describe_order(self.level.pairs, len(hosts), leaves, self.cfg.pairs_seed)}

    def run_config(self, hosts: list[str], steps: int) -> RunConfig:
        lv = self.level
        model, img_size, micro_batch = self.workload
        return RunConfig(model=model, img_size=img_size, dataset="synthetic", synthetic_size=lv.synthetic_size,
                         steps=steps, timing_warmup=lv.timing_warmup, micro_batch=micro_batch, eval=False,
                         launcher=self.launcher_for(hosts), precision=self.cfg.precision, device=self.device,
                         timeout=self.launch_timeout(hosts), out=os.path.join(self.vdir, "runs"),
                         container_exec=self.cfg.container_exec, master_addr=self.master_addr_for(hosts))

    def master_addr_for(self, hosts: list[str]) -> str | None:
        """--master-addr for a launch its first node leads, else None (the launch's first host): SiteLaunch's."""
        return self.cfg.master_addr_of(next(iter(self.resources), None), list(hosts))

    def gpu_name(self, host: str, slot: int) -> str:
        """The GPU model of a slot (as the probe named it), or the node's CPU model for CPU ranks."""
        inv = self.inventory.get(host) or {}
        for g in inv.get("gpus") or []:
            if g.get("index") == slot:
                return g.get("name") or "?"
        cpu = (inv.get("cpu") or {}).get("model")
        return f"CPU {cpu}" if cpu else "CPU"

    def interconnect(self, host: str) -> dict:
        return (self.inventory.get(host) or {}).get("interconnect") or {}
