"""bench validate at any size with nothing launched: what its launches would answer, for N nodes of 8 H200s.

    cluster = Cluster(nodes=1000)            # cluster.bad: {host: what is wrong with it}, one node in a hundred
    cluster.hostfile(tmp)                    # node0000 slots=8 ...
    cluster.install(monkeypatch.setattr)     # preflight, inventory and the runs answer from here
    rec = stages.validate(ValidateConfig(level="full", out=...), HostSelection(hostfile=...))

Every function bench.validate calls to reach the nodes is replaced by one
returning what the real one returns, in its shape: preflight's HostCheck
per host (bench.cluster.preflight), the inventories of probe_any
(bench.cluster.inventory), and the records of bench.validate.runs' four
launches (bench.jobs.alone, bench.jobs.numerics, bench.jobs.comm,
bench.jobs.train). The link launch's rows come from bench's own
rows_from_summary over a summary shaped as bench.worker.comm's rank 0
writes it: that is the head's work after the ranks, so it is not faked.

Recorded real outputs stand for a node:
  inventory  8x NVIDIA H200 (tests/fixtures/gpu/nvidia-smi-query_h200x8.csv and
             nvidia-smi-topo_h200x8.txt, one node of tant2tls/Deepseek-serving), its
             InfiniBand ports from tests/fixtures/net/ibstat_cx7-ndr400-ib_2-cas.txt (an H20
             node's ConnectX-7 NDR400), torch 2.11+cu126's arch list
             (torch-arch-list_pt2.10-2.11_cu126-cu128.txt)
  health     a healthy node: the full `nvidia-smi -q` of an 8x A100-SXM4-80GB node
             (nvidia-smi-q_a100-sxm4-80gb_x8.txt: no H100/H200 `-q` recording is clean), the same
             ibstat, DCGM 3.1's all-pass `dcgmi diag -j` of 8 GPUs; the unhealthy one has DCGM 3.3.8's
             H100 x8 diag in its place, whose GPU Memory test failed on all 8 (tests/fixtures/health)
The figures are made up, near the published ones where bench has one
(NVSwitch 8x H200 busbw, H200 bf16 matmul), with a seeded jitter of 1%.

One node in a hundred (node 7, 107, 207, ...) is bad, each in turn: a
slow GPU (slot 3 at 60% of its peers' speed), a slow NIC (every pair with
it at a quarter), a numerics mismatch (slot 5's loss differs from step 6
on), a health finding (DCGM's memory test fails every GPU of it).
`expected_drain()` is what the drain list should hold for them.

The fabric (Fabric): leaf switches of 32 nodes in hostfile order, each
look at a pair (one round of the link launch) its own draw: a pair runs at
the least of its nodes' NICs and, across leaves, of its leaves' uplinks
times the fabric's oversubscription; a flaky NIC drops to half speed in a
share of looks; every look moves by a lognormal noise. `topology(folder)`
writes the leaves as Slurm's topology.conf.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Callable

FIX = Path(__file__).resolve().parent / "fixtures"
KINDS = ("slow-gpu", "slow-nic", "numerics", "health")
GPUS = 8
SLOW_SLOT, WRONG_SLOT = 3, 5
STEP_S = {"quick": 0.06, "full": 0.12}         # a steady step of ViT-B/16 fp32 (micro batch 32, 64) on an H200
MATMUL_FLOPS = 780e12                          # bf16, beside the published 794.5 TFLOP/s
GPU_TIMING = ("on GPUs NCCL moves the bytes on its own streams, overlapped with compute: a host clock sees only "
              "the launch, so no communication time is claimed (bytes are counted exactly)")


def planted(nodes: int) -> dict[str, str]:
    """{host: kind} of the bad nodes: node 7 of every hundred, the kinds in turn."""
    return {host(i): KINDS[(i // 100) % len(KINDS)] for i in range(7, nodes, 100)}


def host(i: int) -> str:
    return f"node{i:04d}"


def expected_drain(bad: dict[str, str]) -> set[tuple[str, int | None, str]]:
    """(host, gpu, check) of every drain entry the planted faults should give (the list is in check order)."""
    rows = {"slow-gpu": [(SLOW_SLOT, "throughput")], "slow-nic": [(None, "inter-node")],
            "numerics": [(WRONG_SLOT, "numerics")], "health": [(g, "health") for g in range(GPUS)]}
    return {(h, gpu, check) for h, kind in bad.items() for gpu, check in rows[kind]}


# --------------------------------------------------------------------------- one node, from recorded outputs
@cache
def _torch_info() -> dict[str, Any]:
    text = (FIX / "gpu" / "torch-arch-list_pt2.10-2.11_cu126-cu128.txt").read_text()
    version = re.search(r"__version__\n'([^']+)'", text)[1]
    arch = re.findall(r"'(sm_\d+)'", text.split("get_arch_list()", 1)[1].split("$", 1)[0])
    return {"version": version, "cuda": version.split("+cu")[1][:2] + "." + version.split("+cu")[1][2:],
            "nccl": None, "arch_list": arch, "cuda_available": True, "device_count": GPUS}


@cache
def node_template() -> str:
    """One H200 node's inventory as bench probe --local --json gives it (JSON, for a fresh copy per host)."""
    from bench.cluster.accel.nvidia.topo import parse_topo_matrix
    from bench.cluster.interconnect import classify, parse_ibstat
    from bench.cluster.probe import library_versions, node_inventory
    from bench.cluster.accel.nvidia.smi import parse_query_csv

    smi = parse_query_csv((FIX / "gpu" / "nvidia-smi-query_h200x8.csv").read_text())
    inv = node_inventory("node", smi, versions=library_versions(), torch_info=_torch_info(),
                         system={"cpu": {"model": "Intel(R) Xeon(R) Platinum 8480+", "physical_cores": 112,
                                         "logical_cores": 224}, "memory_gib": 2015.6})
    topo = parse_topo_matrix((FIX / "gpu" / "nvidia-smi-topo_h200x8.txt").read_text())
    ports = parse_ibstat((FIX / "net" / "ibstat_cx7-ndr400-ib_2-cas.txt").read_text())
    inv["interconnect"] = classify(inv["gpus"], topo, None, ports, [], None)
    return json.dumps(inv)


@cache
def health_templates() -> tuple[str, str]:
    """(a healthy node's report, one whose DCGM diag fails GPU 0), as bench.cluster.health gives them (JSON)."""
    from bench.cluster.health.saved import from_dir

    files = {"nvidia-smi-q.txt": FIX / "gpu" / "nvidia-smi-q_a100-sxm4-80gb_x8.txt",
             "ibstat.txt": FIX / "net" / "ibstat_cx7-ndr400-ib_2-cas.txt"}
    passed = FIX / "health" / "dcgmi-diag-j_dcgm3.1.0_8gpu_all-pass_dcgm-jsonresulttests.txt"
    good = {**files, "dcgmi-diag.json": passed}
    sick = {**files, "dcgmi-diag.txt": FIX / "health" / "dcgmi-diag-r3_dcgm3.3.8_h100x8_gpu-memory-fail-cuinit.txt"}
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, saved in (("good", good), ("sick", sick)):
            folder = Path(tmp) / name
            folder.mkdir()
            for to, src in saved.items():
                shutil.copy(src, folder / to)
            out.append(json.dumps(from_dir(str(folder), since=None)))
    return out[0], out[1]


# --------------------------------------------------------------------------- the fabric
# One look's spread (the standard deviation of the log of a pair's looks). NCCL between two nodes: 1%, the jitter
# these fixtures always had (nccl-tests' runs repeat within a few percent). Here: 0.30, measured on the suite's
# namespace hosts over gloo (bench/validate/looks.py, LOOK_FLOOR): the noisiest links bench runs on, a fabric model
# with it errs towards false alarms.
LOOK_NOISE_NCCL = 0.01
LOOK_NOISE_HERE = 0.30
@cache
def _spine_of(lo: int, hi: int, spines: int) -> int:
    return random.Random(f"spine {lo}-{hi}").randrange(spines) if spines > 1 else 0


@dataclass
class Fabric:
    """What the links between nodes do (shares of the published figure); the defaults are a healthy 1:1 fabric.

    Above the leaves: each leaf has `uplinks` uplinks and routes statically, its nodes in `uplinks` runs of
    leaf_size / uplinks (node k of a leaf through uplink k * uplinks // leaf_size); `spines` spines, a leaf pair's
    path through one of them chosen by the pair (spine_of: a seeded draw per leaf pair, as ECMP hashes); a leaf
    pair's own path (`path`), and a node slow only towards one leaf (`towards`)."""

    leaf_size: int = 32
    uplink: dict[int, float] = field(default_factory=dict)   # leaf index -> its uplinks' share
    oversub: float = 1.0                                      # pairs across leaves at this share (2:1 -> 0.5)
    nic: dict[str, float] = field(default_factory=dict)      # host -> its NIC's share
    flaky: dict[str, float] = field(default_factory=dict)    # host -> the share of looks its NIC runs at half
    noise: float = 0.01                                       # one look's relative standard deviation (lognormal)
    uplinks: int = 4
    port: dict[tuple[int, int], float] = field(default_factory=dict)   # (leaf, uplink) -> that uplink's share
    spines: int = 1
    spine: dict[int, float] = field(default_factory=dict)   # spine index -> its share
    path: dict[tuple[int, int], float] = field(default_factory=dict)   # (leaf, leaf), lower first -> its share
    towards: dict[str, tuple[int, float]] = field(default_factory=dict)  # host -> (leaf, share towards it)

    def leaf(self, host_index: int) -> int:
        return host_index // self.leaf_size

    def uplink_of(self, host_index: int) -> int:
        return (host_index % self.leaf_size) * self.uplinks // self.leaf_size

    def spine_of(self, la: int, lb: int) -> int:
        return _spine_of(min(la, lb), max(la, lb), self.spines)

    def above(self, a: int, b: int, hosts: list[str]) -> float:
        """The share the path between two nodes on different leaves allows (1.0 inside a leaf)."""
        la, lb = self.leaf(a), self.leaf(b)
        if la == lb:
            return 1.0
        share = min(self.uplink.get(la, 1.0), self.uplink.get(lb, 1.0),
                    self.port.get((la, self.uplink_of(a)), 1.0), self.port.get((lb, self.uplink_of(b)), 1.0),
                    self.spine.get(self.spine_of(la, lb), 1.0), self.path.get((min(la, lb), max(la, lb)), 1.0))
        for i, other in ((a, lb), (b, la)):
            leaf, s = self.towards.get(hosts[i], (None, 1.0))
            share = min(share, s if leaf == other else 1.0)
        return share * self.oversub

    def share(self, a: int, b: int, hosts: list[str], rng: random.Random) -> float:
        """One look at the pair (a, b) of host indices: its share of the published figure."""
        nics = [self.nic.get(hosts[i], 1.0) * (0.5 if rng.random() < self.flaky.get(hosts[i], 0.0) else 1.0)
                for i in (a, b)]
        return min(*nics, self.above(a, b, hosts)) * math.exp(rng.gauss(0.0, self.noise))


# --------------------------------------------------------------------------- the cluster and its launches' answers
class Cluster:
    """N nodes of 8 GPUs; the functions bench validate reaches them with, answering as the real ones would.
    synthetic_s, synthetic_cpu_s: the wall and CPU seconds spent making answers (not bench's work: a
    benchmark takes them off)."""

    def __init__(self, nodes: int, seed: int = 0, fabric: Fabric | None = None, bad: dict[str, str] | None = None):
        self.hosts = [host(i) for i in range(nodes)]
        self.index = {h: i for i, h in enumerate(self.hosts)}
        self.bad = planted(nodes) if bad is None else bad
        self.seed = seed
        self.fabric = fabric  # None: every pair at the published figure, jittered 1% (the planted slow NIC aside)
        self._look_rng = random.Random(f"{seed}:looks")  # every look its own draw, in the order bench asks
        self.synthetic_s = self.synthetic_cpu_s = 0.0
        self.launches: list[str] = []
        self.rows_s = self.rows_cpu_s = 0.0  # bench's own time inside the link launches: rows_from_summary
        self._refs: dict[tuple, Any] = {}

    def hostfile(self, folder: str) -> str:
        path = os.path.join(folder, f"hosts-{len(self.hosts)}")
        with open(path, "w") as f:
            f.write("".join(f"{h} slots={GPUS}\n" for h in self.hosts))
        return path

    def topology(self, folder: str) -> str:
        """The fabric's leaves as Slurm's topology.conf: leafNN for each 32 nodes, one spine above them all."""
        size = (self.fabric or Fabric()).leaf_size
        path = os.path.join(folder, f"topology-{len(self.hosts)}.conf")
        leaves = range(0, len(self.hosts), size)
        with open(path, "w") as f:
            for k, start in enumerate(leaves):
                end = min(start + size, len(self.hosts)) - 1
                f.write(f"SwitchName=leaf{k:02d} Nodes=node[{start:04d}-{end:04d}]\n")
            f.write(f"SwitchName=spine0 Switches=leaf[00-{len(leaves) - 1:02d}]\n")
        return path

    def install(self, setattr_: Callable[[Any, str, Any], None]) -> None:
        """Replace every way bench.validate reaches the nodes (setattr_: monkeypatch.setattr's signature)."""
        from bench.validate import nodes, runs

        for module, name in ((nodes, "check_hosts"), (nodes, "probe_any"), (runs, "alone"), (runs, "numerics"),
                             (runs, "comm"), (runs, "training")):
            setattr_(module, name, self._timed(getattr(self, name)))

    def _timed(self, fn):
        def answer(*args, **kwargs):
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.synthetic_s += time.perf_counter() - t0
                self.synthetic_cpu_s += time.process_time() - c0
        return answer

    def _rng(self, *key) -> random.Random:
        return random.Random(f"{self.seed}:{':'.join(map(str, key))}")

    # ------------------------------------------------------------------ preflight and inventory
    def check_hosts(self, hosts: list[str], timeout: float, run_root: str | None = None, via: str = "ssh",
                    container_exec: str | None = None):
        from bench.cluster.preflight import HostCheck
        from bench.cluster.probe import library_versions

        versions = library_versions()
        return [HostCheck(h, hostname=h, python="3.12.3", versions=versions, elapsed=0.05) for h in hosts]

    def probe_any(self, via: str, resources: dict[str, list[int]], timeout: float, with_torch: bool = False,
                  container_exec: str | None = None, health=None) -> tuple[list[dict], dict[str, str]]:
        good, sick = health_templates()
        nodes = []
        for h, slots in resources.items():
            inv = json.loads(node_template())
            inv.update(host=h, hostname=h, slots=slots)
            if health is not None:
                inv["health"] = {**json.loads(sick if self.bad.get(h) == "health" else good), "host": h}
            nodes.append(inv)
        return nodes, {}

    # ------------------------------------------------------------------ the per-GPU runs and the numerics job
    def _numerics_entries(self, v, resources: dict[str, list[int]]) -> list[dict]:
        from bench.validate.runs import numerics_spec

        spec = numerics_spec(v)
        losses = [2.302585 * 0.93 ** k for k in range(spec.steps)]
        inv = json.loads(node_template())
        stack = {"torch": _torch_info()["version"], "machine": "x86_64", "device": inv["gpus"][0]["name"],
                 "capability": "9.0", "cuda": _torch_info()["cuda"], "cudnn": 90100}
        out, rank = [], 0
        for h, slots in resources.items():
            rng = self._rng("matmul", h)
            for s in slots:
                wrong = self.bad.get(h) == "numerics" and s == WRONG_SLOT
                flops = MATMUL_FLOPS * (1 + 0.01 * rng.uniform(-1, 1))
                best = 2 * spec.matmul_n ** 3 / flops
                times = sorted(best * (1 + 0.02 * rng.random()) for _ in range(spec.matmul_iters))
                times[0] = best
                out.append({"rank": rank, "host": h, "slot": s, "hostname": h, "stack": stack,
                            "losses": [x * (1.000001 if wrong and k >= 6 else 1) for k, x in enumerate(losses)],
                            "params_sha256": "e3b0" * 16 if not wrong else "d00d" * 16,
                            "matmul_exact": {"n": spec.matmul_check_n, "wrong": 0, "rerun_equal": True,
                                             "checked": "row and column sums against exact float64 sums; the "
                                                        "product again"},
                            "matmul": {"n": spec.matmul_n, "dtype": "bf16", "iters": spec.matmul_iters,
                                       "times_s": times, "flops_per_s": flops,
                                       "median_flops_per_s": 2 * spec.matmul_n ** 3 / times[len(times) // 2],
                                       "figure": "the best of the timed iterations"},
                            "device_index": s, "status": "ok"})
                rank += 1
        return out

    def _copies_entries(self, v, resources: dict[str, list[int]]) -> list[dict]:
        """Each H200's copies as bench.worker.copies reports them: near nvbandwidth's H100 PCIe gen5 figures, its
        memory copy at 80% of the datasheet's 4.8 TB/s; all at once the same (a switch per GPU)."""
        out, rank = [], 0
        for h, slots in resources.items():
            rng = self._rng("copies", h)
            for s in slots:
                j = [1 + 0.01 * rng.uniform(-1, 1) for _ in range(4)]
                figs = {"h2d": 55.0 * j[0], "d2h": 52.0 * j[1], "both": 100.0 * j[2], "d2d": 3840.0 * j[3]}
                out.append({"rank": rank, "host": h, "slot": s, "status": "ok", "hostname": h, "local_rank": s,
                            "phases": {"alone": figs, "together": dict(figs)},
                            "binding": {"cpus": "0-55" if s < 4 else "56-111", "cpu_numa_nodes": [s // 4],
                                        "bus_id": f"0000:{0x19 + s:02x}:00.0", "numa_node": s // 4, "pcie_gen": 5,
                                        "pcie_width": 16}})
                rank += 1
        return out

    def _burn_entries(self, v, resources: dict[str, list[int]]) -> list[dict]:
        """Each rank's burn as bench.worker.burn reports it, every 10 s (not 1: 8,000 GPUs' worth of samples), steady
        clocks, no throttle reason; local rank 0 with its node's NVML columns."""
        seconds, every = v.cfg.burn_s(), 10.0
        ts = [every * (k + 1) for k in range(int(seconds // every))]
        out, rank = [], 0
        for h, slots in resources.items():
            for s in slots:
                e = {"rank": rank, "host": h, "slot": s, "status": "ok", "hostname": h, "local_rank": s,
                     "start": 0.0, "interval_s": every, "bus_id": f"0000:{0x19 + s:02x}:00.0", "steps": 1,
                     "intervals": [[t, 533.0] for t in ts]}
                if s == slots[0]:
                    col = {"t": ts, "sm_mhz": [1980] * len(ts), "mem_mhz": [3201] * len(ts),
                           "temp_c": [60] * len(ts), "power_w": [600.0] * len(ts), "power_limit_w": [700.0] * len(ts),
                           "reasons": [0] * len(ts)}
                    e.update(nvml={f"00000000:{0x19 + x:02X}:00.0": col for x in slots}, nvml_error=None, xids=[],
                             ecc={})
                out.append(e)
                rank += 1
        return out

    def alone(self, v, resources: dict[str, list[int]], tag: str, steps: int | None = None,
              with_numerics: bool = False, extras: bool = False) -> dict[str, Any]:
        v.launches += 1
        self.launches.append(tag)
        lv = v.level
        step = STEP_S[v.cfg.level] if v.cfg.level in STEP_S else STEP_S["quick"]
        n = (steps or lv.steps) - lv.timing_warmup
        out, rank = [], 0
        for h, slots in resources.items():
            rng = self._rng(tag, h)
            for s in slots:
                mean = step * (1 / 0.6 if self.bad.get(h) == "slow-gpu" and s == SLOW_SLOT else 1)
                mean *= 1 + 0.01 * rng.uniform(-1, 1)
                step_s = [mean * (1 + 0.005 * rng.uniform(-1, 1)) for _ in range(n)]
                out.append({"rank": rank, "host": h, "slot": s, "status": "ok",
                            "figures": {"images_per_s": v.workload[2] * len(step_s) / sum(step_s)},
                            "hostname": h, "device": "NVIDIA H200", "step_s": step_s, "params": 85806346})
                rank += 1
        rec = {"kind": "alone", "status": "ok", "run_dir": os.path.join(v.vdir, "runs", f"{tag}-{v.launches}"),
               "alone": out}
        if with_numerics:
            rec["numerics"] = self._numerics_entries(v, resources)
        if extras:
            rec["copies"] = self._copies_entries(v, resources)
            if v.cfg.burn_s() > 0:
                rec["burn"] = self._burn_entries(v, resources)
        return rec

    def numerics(self, v, resources: dict[str, list[int]], spec) -> dict[str, Any]:
        v.launches += 1
        self.launches.append("numerics")
        return {"kind": "numerics", "status": "ok", "run_dir": os.path.join(v.vdir, "runs", "numerics"),
                "ranks": self._numerics_entries(v, resources)}

    # ------------------------------------------------------------------ the links
    def _busbw(self, v, members: list[str], per_host: dict[str, int], name: str) -> float:
        """What an all-reduce over these hosts' GPUs reaches: the published figure for the slowest end (its
        node's own NVSwitch inside one node), a quarter where a slow NIC is among them; each look of a pair drawn
        from the fabric where there is one, else the pair's own 1% jitter."""
        scope = "intra" if len(members) == 1 else "inter"
        refs = []
        for h in members:
            key = (scope, per_host[h])  # every node is the same recorded H200 node: one answer per scope and size
            if key not in self._refs:
                self._refs[key] = v.table.link_for(scope, v.inventory.get(h) or {}, gpus_per_node=per_host[h])
            refs.append(self._refs[key])
        base = min(r.busbw for r in refs if r is not None) if any(refs) else 100e9
        slow = scope == "inter" and any(self.bad.get(h) == "slow-nic" for h in members)
        base *= 0.25 if slow else 1
        if self.fabric is not None and len(members) == 2:
            a, b = (self.index[h] for h in members)
            return base * self.fabric.share(a, b, self.hosts, self._look_rng)
        if self.fabric is not None and len(members) > 2:  # the whole set's ring: its slowest NIC and uplink
            leaves = {self.fabric.leaf(self.index[h]) for h in members}
            f = self.fabric
            path = min([f.uplink.get(x, 1.0) for x in leaves] + list(f.port.values()) + list(f.spine.values())
                       + list(f.path.values())) * f.oversub if len(leaves) > 1 else 1
            return base * min(path, *(self.fabric.nic.get(h, 1.0) for h in members))
        return base * (1 + 0.01 * self._rng("bw", name).uniform(-1, 1))

    def comm(self, v, resources: dict[str, list[int]], groups: list[list[int]], names: list[str],
             rounds: list[list[int]], sizes: list[int], tag: str, with_numerics: bool = False) -> dict[str, Any]:
        """bench comm's record: its rows from bench's own rows_from_summary over the summary rank 0 writes."""
        from bench.analysis.comm_figures import rows_from_summary
        from bench.validate.runs import ranks_of

        v.launches += 1
        self.launches.append(tag)
        host_of = {r: h for h, rs in ranks_of(resources).items() for r in rs}
        per_host = {h: len(s) for h, s in resources.items()}
        mine: dict[int, list[dict]] = {r: [] for r in host_of}
        for ri, round_groups in enumerate(rounds):
            for gi in round_groups:
                members = list(dict.fromkeys(host_of[r] for r in groups[gi]))
                n = len(groups[gi])
                bus = self._busbw(v, members, per_host, names[gi])
                rows = []
                for size in sizes:
                    t = size / (bus * n / (2 * (n - 1)))  # all_reduce: busbw = algbw * 2(n-1)/n
                    rows.append({"size": size, "count": size // 4, "times_s": [t] * v.level.iters,
                                 "back_to_back": 1, "wrong": 0})
                for r in groups[gi]:
                    mine[r].append({"group": gi, "round": ri, "rows": rows})
        summary = {"world_size": len(host_of), "backend": "nccl", "groups": groups, "rounds": rounds,
                   "ranks": [{"rank": r, "host": host_of[r], "device": "NVIDIA H200", "status": "ok",
                              "groups": mine[r]} for r in sorted(host_of)]}
        self._bench(lambda: summary.update(rows=rows_from_summary(summary, "all_reduce", names)))
        rec = {"kind": "comm", "status": "ok", "run_dir": os.path.join(v.vdir, "runs", f"{tag}-{v.launches}"),
               "rows": summary["rows"], "wrong": 0}
        if with_numerics:
            rec["numerics"] = self._numerics_entries(v, resources)
        return rec

    def _bench(self, fn) -> None:
        """Run bench's own work inside an answer: its seconds are bench's, not the answer's."""
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        self.rows_s, self.rows_cpu_s = self.rows_s + wall, self.rows_cpu_s + cpu
        self.synthetic_s, self.synthetic_cpu_s = self.synthetic_s - wall, self.synthetic_cpu_s - cpu

    # ------------------------------------------------------------------ the data-parallel run
    def training(self, v, resources: dict[str, list[int]], steps: int) -> dict[str, Any]:
        """bench run's record and the summary.json it leaves (the keys bench validate reads, in their shapes)."""
        v.launches += 1
        self.launches.append("training")
        lv = v.level
        world = sum(len(s) for s in resources.values())
        step = STEP_S[v.cfg.level] if v.cfg.level in STEP_S else STEP_S["quick"]
        mb = v.workload[2]
        loss = [2.302585 * 0.97 ** k for k in range(steps)]
        # What every rank's record shares, encoded once: the file is what json.dumps of the whole would write.
        same = json.dumps({"warmup_steps": lv.timing_warmup, "loss": loss, "comm_timing": GPU_TIMING,
                           "comm_backend": "nccl", "comm_steps": [
                               {"ops": {"all_reduce": {"calls": 1, "buffer_bytes": 343225384,
                                                       "sent_bytes": 343225384, "seconds": None}}, "seconds": None}
                               for _ in range(steps)],
                           "peak_memory_bytes": 21 << 30, "memory_kind": "cuda max_memory_allocated"})[1:]
        ranks, slowest, rank = [], 0.0, 0
        for h, slots in resources.items():
            rng = self._rng("dp", h)
            for local, _ in enumerate(slots):
                step_s = [step * 1.08 * (1 + 0.005 * rng.uniform(-1, 1)) for _ in range(steps - lv.timing_warmup)]
                slowest = max(slowest, sum(step_s))
                own = {"rank": rank, "local_rank": local, "host": h, "status": "ok",
                       "images_per_s": mb * len(step_s) / sum(step_s), "step_s": step_s}
                ranks.append(json.dumps(own)[:-1] + ", " + same)
                rank += 1
        run_dir = os.path.join(v.vdir, "runs", f"training-{v.launches}")
        os.makedirs(run_dir, exist_ok=True)
        with open(os.path.join(run_dir, "summary.json"), "w") as f:
            f.write(f'{{"world_size": {world}, "ranks": [{", ".join(ranks)}], "total_steps": {steps}, '
                    '"model": {"timm_name": "vit_base_patch16_224", "params": 85806346}}')
        ips = mb * world * (steps - lv.timing_warmup) / slowest
        return {"kind": "run", "status": "ok", "run_dir": run_dir,
                "figures": {"world_size": world, "images_per_s": ips,
                            "loss": {"first": loss[0], "last": loss[-1], "curve": loss},
                            "sanity": {"loss_finite": True, "loss_fell": True, "world_size_as_planned": True}}}


# --------------------------------------------------------------------------- the inter-node check alone
LEVEL = "the level's"  # judge_only's across_looks: the level's own


def inter_only(fabric: Fabric, nodes: int, seed: int, level: str = "full", pair_looks: int | None = None,
               across_looks: int | None | str = LEVEL) -> dict:
    """bench.validate.pairs.inter_node alone over `nodes` of these nodes (8 H200s each, leaves of fabric.leaf_size
    known to bench), every look answered from the fabric model directly (no launch, no rows_from_summary over the
    ranks: validate's scale tests time that); pair_looks: the level's looks at each pair, where not its own. Returns
    {node: its inter-node Check}."""
    v = judge_only(fabric, nodes, seed, level, pair_looks, across_looks=across_looks)
    return {c.node: c for c in v.checks if c.check == "inter-node" and c.host is not None}


def judge_only(fabric: Fabric, nodes: int, seed: int, level: str = "full", pair_looks: int | None = None,
               topology: bool = True, unplaced: tuple[str, ...] = (), across_looks: int | None | str = LEVEL,
               oversubscription: float | None = None, design: float | None = None,
               uplinks: dict[str, tuple[str, ...]] | None = None, device: str = "cuda"):
    """As inter_only, the Validation after it (every row: inter-node's, fabric's). topology=False: bench knows no
    leaves; unplaced: hosts the topology does not place (their hostfile name is not the topology's); across_looks:
    the passes that look at the pairs across leaves (Level.across_looks; None: every pass), where not the level's;
    oversubscription: the fabric's design as the user gives it (--oversubscription); design: as the topology says
    it (Tree.design: ibnetdiscover's ports); uplinks: each leaf's ports up as the topology names them; device: "cpu"
    judges the looks as gloo's between CPU ranks (bench.validate.looks.LOOK_FLOOR)."""
    import dataclasses

    from bench.analysis import references
    from bench.cluster.hostfile import HostSelection
    from bench.validate import config, pairs, runs
    from bench.validate.state import Validation

    cluster = Cluster(nodes, seed=seed, fabric=fabric, bad={})
    hosts = cluster.hosts
    cfg = config.ValidateConfig(level=level, checks=("inter-node",), pairs_seed=seed + 1,
                                oversubscription=oversubscription)
    v = Validation(cfg, HostSelection(), {h: list(range(GPUS)) for h in hosts}, references.load(), "/nonexistent")
    if pair_looks is not None:
        v.level = dataclasses.replace(v.level, pair_looks=pair_looks)
    if across_looks != LEVEL:
        v.level = dataclasses.replace(v.level, across_looks=across_looks)
    v.device = device
    node = json.loads(node_template())
    v.inventory = {h: node for h in hosts}
    if topology:
        v.leaf_of = {h: f"leaf{fabric.leaf(i):02d}" for i, h in enumerate(hosts) if h not in unplaced}
        if design is not None or uplinks is not None:
            v.tree = dataclasses.replace(v.tree, design=None if design is None else (design, "the fixture's"),
                                         uplinks=uplinks or {})

    def comm(v_, resources, groups, names, rounds, sizes, tag, with_numerics=False):
        per_host = {h: len(s) for h, s in resources.items()}
        base = v_.table.link_for("inter", node, gpus_per_node=GPUS).busbw  # every node the same H200 node
        index, rng = cluster.index, cluster._look_rng

        def bw(name: str) -> float:
            if name == "all":
                return cluster._busbw(v_, list(resources), per_host, name)
            a, b = name.split("+")
            return base * fabric.share(index[a], index[b], hosts, rng)
        return {"rows": [{"group": names[gi], "wrong": 0, "busbw": bw(names[gi])} for rnd in rounds for gi in rnd]}

    saved = runs.comm
    runs.comm = comm
    try:
        pairs.inter_node(v)
    finally:
        runs.comm = saved
    return v
