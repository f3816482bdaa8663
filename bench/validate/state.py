"""The state of one `bench validate` run: its checks so far, and the hosts and GPUs still in it.

Each check adds Check rows: per GPU (node "host:slot"), per node ("host"),
per node pair ("a+b") and for the cluster ("cluster"). A FAIL row of a GPU
leaves that GPU out of the later checks, a FAIL row of a node the whole
node; rows for what was left out say SKIP and why. The drain list is made
from the FAIL rows of nodes and GPUs at the end (bench.validate.drain).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from bench.cluster.hostfile import HostSelection
from bench.cluster.remote import is_local
from bench.core.config import RunConfig
from bench.launch.registry import MULTI_HOST_DEFAULT
from bench.validate.config import LEVELS, ValidateConfig

CLUSTER = "cluster"


@dataclass(slots=True)
class Check:
    check: str
    node: str              # "host", "host:slot", "a+b" or "cluster"
    status: str            # PASS, WARN, FAIL, SKIP
    value: str = ""
    reference: str = ""    # what judged it: a published reference, the peers' median, a floor, or "none"
    reason: str = ""
    duration_s: float = 0.0
    host: str | None = None  # the node the row is about (None: a pair, the cluster, or a node's summary row)
    gpu: int | None = None   # the GPU (slot) the row is about
    figure: float | None = None  # the row's figure as a number, higher is better (images/s, bytes/s, FLOP/s)


@dataclass(slots=True)
class Stage:
    stage: str
    duration_s: float
    ranks: int
    launches: int = 0


class Validation:
    """The state of one validate run: its checks and the hosts and GPUs still taking part."""

    def __init__(self, cfg: ValidateConfig, hosts: HostSelection, resources: dict[str, list[int]], table,
                 vdir: str):
        self.cfg, self.hosts, self.resources, self.table, self.vdir = cfg, hosts, resources, table, vdir
        self.level = LEVELS[cfg.level]
        self.checks: list[Check] = []
        self.stages: list[Stage] = []
        self.failed_hosts: set[str] = set()
        self.failed_gpus: set[tuple[str, int]] = set()
        self.hostname_of: dict[str, str] = {}
        self.inventory: dict[str, dict] = {}
        self.device = "cpu"
        self.figures: dict[str, Any] = {"gpu_images_per_s": {}, "node_images_per_s": {}, "node_busbw": {},
                                        "intra_busbw": {}}
        self.runs: dict[str, str] = {}
        self.launches = 0
        # A GPU that looks like a straggler in the first round is measured again before it is named one; a
        # soak, which measures every GPU round after round, judges each round as it comes.
        self.confirm_stragglers = True

    # ------------------------------------------------------------------ who is still in
    @property
    def good(self) -> list[str]:
        """The hosts still in, in hostfile order (a host whose every GPU failed is out too)."""
        return [h for h in self.resources if h not in self.failed_hosts and self.good_slots(h)]

    def good_slots(self, host: str) -> list[int]:
        return [s for s in self.resources[host] if (host, s) not in self.failed_gpus]

    def good_resources(self) -> dict[str, list[int]]:
        return {h: self.good_slots(h) for h in self.good}

    def add(self, check: str, node: str, status: str, value: str = "", reference: str = "", reason: str = "",
            t0: float | None = None, *, host: str | None = None, gpu: int | None = None,
            figure: float | None = None) -> None:
        self.checks.append(Check(check, node, status, value, reference, reason,
                                 time.time() - t0 if t0 is not None else 0.0, host, gpu, figure))
        if status == "FAIL" and host is not None:
            if gpu is None:
                self.failed_hosts.add(host)
            else:
                self.failed_gpus.add((host, gpu))

    def add_node(self, check: str, host: str, status: str, value: str = "", reference: str = "",
                 reason: str = "", t0: float | None = None, figure: float | None = None) -> None:
        self.add(check, host, status, value, reference, reason, t0, host=host, figure=figure)

    def add_gpu(self, check: str, host: str, slot: int, status: str, value: str = "", reference: str = "",
                reason: str = "", t0: float | None = None, figure: float | None = None) -> None:
        self.add(check, f"{host}:{slot}", status, value, reference, reason, t0, host=host, gpu=slot, figure=figure)

    def skip_left_out(self, check: str, per_gpu: bool = False) -> None:
        """SKIP rows for the hosts (and with per_gpu, the GPUs) earlier checks left out."""
        for host in self.resources:
            if host in self.failed_hosts or not self.good_slots(host):
                self.add(check, host, "SKIP", reason="left out after a FAIL in an earlier check", host=host)
            elif per_gpu:
                for s in self.resources[host]:
                    if (host, s) in self.failed_gpus:
                        self.add(check, f"{host}:{s}", "SKIP", reason="left out after a FAIL in an earlier check",
                                 host=host, gpu=s)

    def failed(self) -> bool:
        return any(c.status == "FAIL" for c in self.checks)

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
        """The one host is this machine (--level prolog): nothing to reach over ssh."""
        return len(self.resources) == 1 and is_local(next(iter(self.resources)))

    def launcher_for(self, hosts: list[str]) -> str:
        """This machine alone runs locally; any other set through the multi-host launcher."""
        return "local" if len(hosts) == 1 and is_local(hosts[0]) else MULTI_HOST_DEFAULT

    def run_config(self, hosts: list[str], steps: int) -> RunConfig:
        lv = self.level
        model, img_size, micro_batch = self.workload
        return RunConfig(model=model, img_size=img_size, dataset="synthetic", synthetic_size=lv.synthetic_size,
                         steps=steps, timing_warmup=lv.timing_warmup, micro_batch=micro_batch, eval=False,
                         launcher=self.launcher_for(hosts), precision=self.cfg.precision, device=self.device,
                         timeout=lv.timeout, out=os.path.join(self.vdir, "runs"))

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
