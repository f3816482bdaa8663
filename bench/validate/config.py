"""What `bench validate` checks and how much: its options (ValidateConfig), levels and check names.

    cfg = ValidateConfig(level="full", checks=("throughput", "numerics"))
    LEVELS[cfg.level].micro_batch      # 64

Levels: quick (the micro ViT, a few steps: minutes), full (the study's
ViT-B/16 and batch, every node pair), prolog (this node only, in seconds:
a Slurm job prolog), health (the nodes' own counters and kernel log only,
no GPU time: a HealthCheckProgram or epilog, safe beside running jobs).
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass

from bench.analysis.compare import parse_threshold
from bench.cluster import accel
from bench.core.errors import BadInput
from bench.core.options import csv_parser, moment, opt, seconds
from bench.core.precision import PRECISIONS
from bench.core.site import SiteLaunch
from bench.validate import checks as registry
from bench.validate.levels import LEVELS, THIS_NODE, Level  # noqa: F401 - re-exported

_GPU_FILES = ", ".join(f for b in accel.vendors() for f in b.saved_files)   # --health-from's help: the backends' files

# Every check a run can ask for (--checks), in the order the stages run; preflight and inventory always run
# (the registry, bench.validate.checks).
CHECKS = registry.choices()
LAUNCHERS = ("local", "pdsh", "openmpi", "slurm")   # --launcher: how the nodes are reached, as bench run's
# --dcgm: run `dcgmi diag -r N` where dcgmi answers; auto picks N by level (bench.validate.checks.dcgm.AUTO).
DCGM = ("auto", "off", "1", "2", "3")
DCGM_AUTO = registry.get("dcgm").by_level
DCGM_MAX_S = 86400  # a day, where level 3 runs about 15 minutes: more is a typo (1e9999 is inf: no wait takes it)
# A rail is an interface (IFNAMSIZ: 15 characters) or an HCA (IB_DEVICE_NAME_MAX: 63); neither holds a character
# NCCL's lists give a meaning (",", "^", "=", ":") or a shell would. Letters, digits, "_", "-", "." are what
# drivers and udev name them with (mlx5_0, ibp12s0, enp1s0f0np0, bond0.100).
RAIL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")




def _ratio(text: str) -> float:
    """--oversubscription: R or R:1, at least 1 and finite (the uplinks carry 1/R of what the leaf's nodes can send)."""
    t = text.strip()
    t = t[:-2] if t.endswith(":1") else t
    try:
        r = float(t)
    except ValueError:
        r = float("nan")
    if not (1 <= r < 1000):
        raise argparse.ArgumentTypeError(f"{text!r} is not an oversubscription (R or R:1, R from 1: e.g. 2 or 2:1)")
    return r


@dataclass(frozen=True, kw_only=True, slots=True)
class ValidateConfig(SiteLaunch):
    """What bench validate checks and how (the hosts are a HostSelection; how ranks start, SiteLaunch's)."""

    level: str = opt("quick: short runs (synthetic data, few steps, ring pairs; vit-micro-p4-32 on CPU ranks, "
                     "vit-b16-224 on GPUs); full: vit-b16-224 at the study's batch, more steps, every node pair; "
                     "prolog: this node only, in seconds (Slurm prolog); health: the nodes' own counters and kernel "
                     "log only, no GPU time (HealthCheckProgram, epilog)",
                     default="quick", choices=tuple(LEVELS))
    launcher: str | None = opt("how the nodes are reached: local (this node alone), pdsh (ssh; the default with "
                               "--hostfile), openmpi (mpirun), slurm (srun steps; the default in an allocation)",
                               default=None, choices=LAUNCHERS)
    health_from: str | None = opt(f"judge one node from its saved reports in DIR ({_GPU_FILES}, dmesg.txt, "
                                  "ibstat.txt, infiniband/, dcgmi-diag.txt or "
                                  ".json): the health check's verdict and exit status, nothing launched",
                                  default=None, metavar="DIR")
    since_job: bool = opt("health: report only the kernel-log events raised since this Slurm job started (an "
                          "epilog; default: since boot)", default=False)
    since: float | None = opt("health: report only the kernel-log events since TIME (ISO 8601 or Unix seconds; "
                              "e.g. after a GPU reset)", default=None, parse=moment, metavar="TIME")
    dcgm: str = opt("run DCGM's diagnostic (dcgmi diag -r N) on every node where dcgmi is installed, all at once, "
                    "as a stage of its own: auto (level 1 at quick, 3 at full; at health only when a level is given; "
                    "prolog has no DCGM stage), off, or a level 1-3", default="auto", choices=DCGM)
    dcgm_timeout: float | None = opt("seconds (or 90s, 20m) a node's dcgmi diag may run before that node is unknown "
                                     "(default: twice NVIDIA's documented length of the level: 120 s at 1, 240 s at "
                                     "2, 1800 s at 3)", default=None, metavar="S", parse=seconds)
    checks: tuple[str, ...] | None = opt(f"run only these checks ({', '.join(CHECKS)}); "
                                         f"{' and '.join(registry.always())} always run, the others are SKIPped "
                                         "with this reason (default: every check of the level)",
                                         default=None, parse=csv_parser(str, dedupe=True), metavar="LIST")
    reference: str | None = opt("reference table (default bench/data/reference_throughput.json)", default=None,
                                metavar="FILE")
    numerics_reference: str | None = opt("reference loss curves to compare the numerics job with, besides the "
                                         "peers (default: the curves shipped in bench/data)", default=None,
                                         metavar="FILE")
    save_numerics_reference: str | None = opt("write the curves this run agreed on (per platform) to FILE, for "
                                              "--numerics-reference on other nodes (e.g. the prolog)", default=None,
                                              metavar="FILE")
    precision: str = opt("training precision", default="fp32", choices=PRECISIONS)
    junit: str | None = opt("write one JUnit test case per check per node", default=None, metavar="FILE")
    out: str = opt("results root; writes OUT/validate-<id>/", default="results")
    fail_fast: bool = opt("stop after the first check with a FAIL (the rest SKIP)", default=False)
    keep_going: bool = opt("after a host fails preflight, check the others (unknown or drain, with the reason, and "
                           "the rest judged; --no-keep-going stops there, in seconds)", default=True)
    max_drain: str = opt("the most nodes bench drains at once: N, a share (10%) or 'all'; past it bench drains none "
                         "itself (the cause may be the fabric, the launcher or bench), marks them held in the drain "
                         "file and exits 1 (default: 10% of the nodes, at least 2)", default="10%",
                         metavar="N|SHARE|all")
    topology: str | None = opt("where nodes hang in the fabric: Slurm's topology.conf (read as slurmctld reads it) "
                               "or a saved ibnetdiscover output; node pairs cross leaf switches, and a pair is "
                               "judged beside the pairs of its own leaves (default: `scontrol show topology` inside "
                               "a Slurm allocation, else ibnetdiscover where it is on PATH, else none)",
                               default=None, metavar="FILE")
    oversubscription: float | None = opt("the fabric's design: pairs across leaf switches run at 1/R of those "
                                         "inside one (2 or 2:1; 1: non-blocking), the norm across leaves where "
                                         "they measure a quarter slower; default: an ibnetdiscover topology's "
                                         "ports, else their fastest mode as measured", default=None, parse=_ratio,
                                         metavar="R")
    pairs_seed: int = opt("the seed of the ring's order where no topology says the leaves, and of the full level's "
                          "random node pairs past 16 nodes (the plan and the record keep it: the same seed measures "
                          "the same pairs)", default=1, metavar="N")
    rails: tuple[str, ...] | None = opt("the rails check: these NICs, each on its own, same names on every node: "
                                        "an HCA (NCCL's IB transport on it alone; on CPU its network interface) or "
                                        "an interface (NCCL's socket transport on it); default: the Active "
                                        "InfiniBand/RoCE HCAs every node has, when two or more", default=None,
                                        parse=lambda text: tuple(t.strip() for t in text.split(",")),
                                        metavar="LIST")
    repeats: int = opt("measure each GPU's throughput and each link this many times; a GPU is judged by its median "
                       "(3 tell a whole-node straggler), a link FAILs only when every time; without it the level's "
                       "own per-GPU rounds (full: 3 where its first names a GPU or node; the plan says why)",
                       default=1, metavar="N")
    baseline: str | None = opt("an earlier validate run (its folder, or a results folder holding it): each GPU's "
                               "throughput and each node's bandwidth that fell by more than --threshold and the "
                               "spread is a FAIL (bench compare's rule)", default=None, metavar="DIR")
    threshold: str = opt("with --baseline: the fall that is a regression", default="5%", metavar="SHARE")
    drain: bool = opt("Slurm: drain every node the verdict drains (scontrol update State=DRAIN, the reason "
                      "prefixed 'bench validate:'); not from a Prolog, whose exit status drains", default=False)
    resume: bool = opt("Slurm: return to service (undrain) every node that is healthy now and that bench drained "
                       "(its reason starts 'bench validate:'); a node drained for another reason stays drained",
                       default=False, flag="--undrain", aliases=("--resume",))
    drain_file: str | None = opt("write the hosts to drain, one a line (an empty file when none)", default=None,
                                 metavar="FILE")
    all: bool = opt("show every row of the table (default: a summary per check and every row that is not PASS)",
                    default=False)
    soak: str | None = opt("burn-in: repeat the throughput, numerics and link checks in rounds for this long "
                           "(90s, 30m, 2h, 1h30m), each round recorded as it ends; the same command again resumes",
                           default=None, metavar="DURATION")
    burn: str | None = opt("every GPU of a node trains at once for this long after its timed steps (90s, 3m; 0: "
                           "off), its clocks, temperature, power and throttle reasons sampled each second, in each "
                           "--soak round too (default: 3m at --level full, off at quick)", default=None,
                           metavar="DURATION")
    soak_keep_going: bool = opt("with --soak: go on after a round with a FAIL (default: stop there)", default=False)

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise BadInput(f"--level: must be one of {', '.join(LEVELS)}, got {self.level!r}")
        if self.launcher is not None and self.launcher not in LAUNCHERS:
            raise BadInput(f"--launcher: must be one of {', '.join(LAUNCHERS)}, got {self.launcher!r}")
        if self.dcgm not in DCGM:
            raise BadInput(f"--dcgm: must be one of {', '.join(DCGM)}, got {self.dcgm!r}")
        parse_threshold(self.threshold)  # refused now, not after the checks ran
        if self.since_job and self.since is not None:
            raise BadInput("--since-job: give --since-job or --since TIME, not both")
        if self.health_from is not None and (self.soak is not None or self.drain or self.resume):
            raise BadInput("--health-from: judges saved reports; --soak, --drain and --undrain need live nodes")
        if not 1 <= self.repeats <= 20:
            raise BadInput(f"--repeats: must be 1..20, got {self.repeats}")
        if self.precision not in PRECISIONS:
            raise BadInput(f"--precision: must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        if self.soak is not None and self.level in THIS_NODE:
            raise BadInput(f"--soak: a burn-in trains on the cluster's GPUs, not at --level {self.level}")
        if self.soak_keep_going and self.soak is None:
            raise BadInput("--soak-keep-going: needs --soak DURATION")
        max_drain_of(self.max_drain, 1)  # refused now, not after the checks ran
        if self.burn is not None:
            duration(self.burn, "--burn", zero=True)
        self._check_rails()
        self.check_launch()
        if self.dcgm_timeout is not None and not 0 < self.dcgm_timeout <= DCGM_MAX_S:  # nan and inf fail too
            raise BadInput(f"--dcgm-timeout: must be 0 < S <= {DCGM_MAX_S} seconds, got {self.dcgm_timeout:g}")
        unknown = [c for c in self.checks or () if c not in CHECKS]
        if unknown:
            raise BadInput(f"--checks: {unknown[0]!r} is not a check; choose from {', '.join(CHECKS)}")
        # A check outside the level would be SKIPped and the run PASS with nothing asked for measured.
        outside = [c for c in self.checks or () if c not in LEVELS[self.level].checks]
        if outside:
            raise BadInput(f"--checks: {outside[0]!r} is not part of --level {self.level}, whose checks are "
                           f"{', '.join(LEVELS[self.level].checks)}")
        self._check_ignored()

    def _check_rails(self) -> None:
        for i, name in enumerate(self.rails or ()):
            if name in self.rails[:i]:
                raise BadInput(f"--rails: {name!r} twice in {','.join(self.rails)!r}: each rail is measured once")
            if not name:
                raise BadInput(f"--rails: an empty name in {','.join(self.rails or ())!r}")
            if not RAIL_NAME.match(name):
                raise BadInput(f"--rails: {name!r} is no interface or HCA name (letters, digits, '_', '-', '.'; "
                               "63 characters at most)")

    def _check_ignored(self) -> None:
        """A flag this run would ignore is refused: the run would pass with what it asked for never done."""
        asked = (("--burn", self.burn is not None and self.burn_s() > 0, "burn"),
                 ("--rails", self.rails is not None, "rails"),
                 ("--dcgm", self.dcgm not in ("auto", "off"), "dcgm"))
        for flag, given, check in asked:
            if given and not self.wanted(check):
                why = (f"--level {self.level} has no {check} check (its checks: "
                       f"{', '.join(LEVELS[self.level].checks)})" if check not in LEVELS[self.level].checks
                       else f"--checks {','.join(self.checks or ())} leaves the {check} check out")
                raise BadInput(f"{flag}: nothing would use it: {why}")
        if self.dcgm_timeout is not None and not self.wanted("dcgm"):
            raise BadInput(f"--dcgm-timeout: no DCGM diagnostic runs (--dcgm {self.dcgm} at --level {self.level}"
                           + (f", --checks {','.join(self.checks)}" if self.checks else "") + ")")

    def wanted(self, check: str) -> bool:
        """Whether this run runs `check` (its level's checks, narrowed by --checks; dcgm where a level is chosen)."""
        return check in LEVELS[self.level].checks and (self.checks is None or check in self.checks) and \
            (check != "dcgm" or self.dcgm_level() is not None)

    def burn_s(self) -> float:
        """The burn's seconds: --burn, else the level's (0: off)."""
        return duration(self.burn, "--burn", zero=True) if self.burn is not None else LEVELS[self.level].burn_s

    def dcgm_level(self) -> int | None:
        """The DCGM diagnostic level to run where dcgmi answers; None: none."""
        if self.dcgm == "off":
            return None
        return DCGM_AUTO[self.level] if self.dcgm == "auto" else int(self.dcgm)

    def drain_limit(self, nodes: int) -> int | None:
        """How many of `nodes` bench may drain at once (--max-drain); None: no limit."""
        return max_drain_of(self.max_drain, nodes)


def max_drain_of(text: str, nodes: int) -> int | None:
    """--max-drain's limit for a cluster of `nodes`: "all" -> None; "N" -> N; "P%" -> P% of the nodes, at
    least 2 (two nodes failing together is still a node's fault more often than the fabric's)."""
    t = text.strip()
    if t == "all":
        return None
    try:
        if t.endswith("%"):
            share = float(t[:-1]) / 100
            if not 0 < share <= 1:
                raise ValueError
            return max(2, int(share * nodes))
        n = int(t)
        if n < 0:
            raise ValueError
        return n
    except ValueError:
        raise BadInput(f"--max-drain: a node count, a share like 10% or 'all', got {text!r}") from None


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str, option: str, zero: bool = False) -> float:
    """'2h', '30m', '90s', '1h30m' or plain seconds -> seconds ('off' and 0 where zero); BadInput naming option."""
    t = text.strip().lower()
    if zero and t == "off":
        return 0.0
    if re.fullmatch(r"\d+(\.\d+)?", t):
        seconds = float(t)
    elif re.fullmatch(r"(\d+(\.\d+)?[smhd])+", t):
        seconds = sum(float(n) * _UNITS[u] for n, _, u in re.findall(r"(\d+(\.\d+)?)([smhd])", t))
    else:
        raise BadInput(f"{option}: {text!r} is not a duration (e.g. 90s, 30m, 2h, 1h30m)")
    if seconds < 0 or (seconds == 0 and not zero):
        raise BadInput(f"{option}: {text!r} must be longer than 0")
    return seconds
