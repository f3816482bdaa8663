"""The state of one `bench validate` run: its options, levels, checks so far, and the hosts still in it.

The checks are bench.experiments.node_checks and cluster_checks; the order
they run in and the record are bench.experiments.validate.

A host that FAILs a check leaves `good` and is SKIPped by the later ones.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from bench.cluster.hostfile import HostSelection
from bench.cluster.remote import is_local
from bench.core.config import RunConfig
from bench.core.errors import BadInput, RunFailed
from bench.core.options import opt
from bench.core.precision import PRECISIONS
from bench.jobs import train
from bench.launch.registry import MULTI_HOST_DEFAULT

CLUSTER = "cluster"


@dataclass(frozen=True, slots=True)
class Level:
    model: str
    micro_batch: int
    steps: int
    timing_warmup: int
    synthetic_size: int
    dp_steps: int
    fallback_size: int   # bytes, when no single-node run said how large the gradient is
    iters: int           # timed iterations per size: the median of these is a row's time
    comm_warmup: int
    confirm: int         # how many more times a node that looks slow is measured before it is called so
    timeout: float


LEVELS = {
    # The smallest preset on synthetic data; messages of its gradient's size (1.8 MB).
    "quick": Level("vit-micro-p4-32", 16, 40, 5, 1024, 30, 1 << 20, 20, 5, 2, 240.0),
    # The study's model and batch; messages of ViT-B/16's gradient (344 MB in fp32).
    "full": Level("vit-b16-224", 64, 50, 10, 10000, 60, 64 << 20, 20, 5, 2, 900.0),
}


@dataclass(frozen=True, kw_only=True, slots=True)
class ValidateConfig:
    """What bench validate checks and how (the hosts are a HostSelection)."""

    level: str = opt("quick: tiny runs (vit-micro-p4-32, synthetic, few steps); full: ViT-B/16, more steps",
                     default="quick", choices=tuple(LEVELS))
    reference: str | None = opt("reference table (default bench/data/reference_throughput.json)", default=None,
                                metavar="FILE")
    precision: str = opt("training precision", default="fp32", choices=PRECISIONS)
    junit: str | None = opt("write one JUnit test case per check per node", default=None, metavar="FILE")
    out: str = opt("results root; writes OUT/validate-<id>/", default="results")
    fail_fast: bool = opt("stop after the first check with a FAIL (the rest SKIP)", default=False)
    keep_going: bool = opt("after a host fails preflight, still check the others (default: stop there, in seconds)",
                           default=False)
    repeats: int = opt("measure each node's throughput and bandwidth this many times; a node FAILs only when it "
                       "fails every time, WARNs when it fails some", default=1, metavar="N")
    baseline: str | None = opt("an earlier validate run (its folder, or a results folder holding it): each node's "
                               "throughput and bandwidth that fell by more than --threshold and the spread is a "
                               "FAIL (bench compare's rule)", default=None, metavar="DIR")
    threshold: str = opt("with --baseline: the fall that is a regression", default="5%", metavar="SHARE")

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise BadInput(f"--level: must be one of {', '.join(LEVELS)}, got {self.level!r}")
        if not 1 <= self.repeats <= 20:
            raise BadInput(f"--repeats: must be 1..20, got {self.repeats}")
        if self.precision not in PRECISIONS:
            raise BadInput(f"--precision: must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")


@dataclass(slots=True)
class Check:
    check: str
    node: str
    status: str            # PASS, WARN, FAIL, SKIP
    value: str = ""
    reference: str = ""
    reason: str = ""
    duration_s: float = 0.0


class Validation:
    """The state of one validate run: its checks and the hosts still taking part."""

    def __init__(self, cfg: ValidateConfig, hosts: HostSelection, resources: dict[str, list[int]], table,
                 vdir: str):
        self.cfg, self.hosts, self.resources, self.table, self.vdir = cfg, hosts, resources, table, vdir
        self.level = LEVELS[cfg.level]
        self.checks: list[Check] = []
        self.good: list[str] = list(resources)
        self.hostname_of: dict[str, str] = {}
        self.inventory: dict[str, dict] = {}
        self.device = "cpu"
        self.figures: dict[str, Any] = {"node_step_s": {}, "node_images_per_s": {}, "node_busbw": {}}
        self.runs: dict[str, str] = {}

    def add(self, check: str, node: str, status: str, value: str = "", reference: str = "", reason: str = "",
            t0: float | None = None) -> None:
        self.checks.append(Check(check, node, status, value, reference, reason,
                                 time.time() - t0 if t0 is not None else 0.0))
        if status == "FAIL" and node in self.good:
            self.good.remove(node)

    def skip_excluded(self, check: str, why: dict[str, str]) -> None:
        for host in self.resources:
            if host not in self.good and not any(c.check == check and c.node == host for c in self.checks):
                self.add(check, host, "SKIP", reason=why.get(host, "excluded after a FAIL in an earlier check"))

    def failed(self) -> bool:
        return any(c.status == "FAIL" for c in self.checks)

    def launcher_for(self, hosts: list[str]) -> str:
        """This machine alone runs locally; any other set through the multi-host launcher."""
        return "local" if len(hosts) == 1 and is_local(hosts[0]) else MULTI_HOST_DEFAULT

    def run_config(self, hosts: list[str], steps: int) -> RunConfig:
        lv = self.level
        return RunConfig(model=lv.model, dataset="synthetic", synthetic_size=lv.synthetic_size, steps=steps,
                         timing_warmup=lv.timing_warmup, micro_batch=lv.micro_batch, eval=False,
                         launcher=self.launcher_for(hosts), precision=self.cfg.precision, device=self.device,
                         timeout=lv.timeout, out=os.path.join(self.vdir, "runs"))


def run_one(v: Validation, hosts: dict[str, list[int]], steps: int,
            start_barrier: dict[str, Any] | None = None) -> dict[str, Any]:
    """A short training run on these hosts/slots, recorded as `bench run` records it.

    bench.jobs.train.run without its preflight and probe (done once here, not
    once per node). Failures come back as a failed dict, never raised.
    """
    cfg = v.run_config(list(hosts), steps)
    inventory = [v.inventory[h] for h in hosts if h in v.inventory]
    try:
        return train.run(cfg, v.hosts.only(hosts), quiet=True, inspected=(inventory, v.figures.get("verdict") or {}),
                         start_barrier=start_barrier)
    except (RunFailed, BadInput) as e:
        return {"status": "failed", "error": {"where": "bench run", "reason": str(e).splitlines()[0]}}
