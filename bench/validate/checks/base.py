"""What a check of bench validate is: one declaration, from which the stages, the check names, the levels, the
plan's costs and the docs' table are made (bench.validate.checks).

    Check(name="memory", phase=launches.COPIES, runs="bench.validate.copies:memory",
          what="a copy within each GPU's memory ...", judged="its peers ...")

A declaration states only what differs from the defaults, given once here: the levels quick and full, the launch of
the phase it rides, runs "bench.validate.NAME:NAME" (a - in NAME read as _), SKIP rows a row per node, one of
--soak's rounds where its launch is (bench.validate.checks.launches: the per-GPU and the link launch), and a plan of
words only (a stage that launches nothing) where `plan` is a string.

Pure data and small functions of a plan (bench.validate.budget.Planner) or of the options: a check module imports
nothing of bench.validate outside this package (but pairing, which imports nothing), so that bench.validate.config
can be made from the registry without a cycle (.importlinter's checks-registry contract); how it runs is named (`runs`, "module:function", each a function of the Validation) and resolved
by bench.validate.stages. A plan imports what it reads of bench.cluster (preflight's waits, DCGM's documented
lengths) when it is made: importing the registry (bench validate --help) does not pay for it (about 0.2 s).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable

# The levels (bench.validate.config.LEVELS), named here so that a check's own list can be checked against them.
LEVEL_NAMES = ("quick", "full", "prolog", "health")
EVERY_LEVEL = LEVEL_NAMES
FULL_AND_QUICK = ("quick", "full")
# Where a check's SKIP rows go when it is not run: a row per node, and the cluster's row (its own name, or another).
NODES = (("", "nodes"),)
CLUSTER = (("", "cluster"),)
NODES_AND_CLUSTER = NODES + CLUSTER


@dataclass(frozen=True, kw_only=True, slots=True)
class Row:
    """A row of docs/validate.md's table of checks for rows another check adds (matmul: numerics')."""

    name: str       # the rows' name
    what: str       # what runs
    judged: str     # what judges it
    action: str = ""  # its action where it FAILs and names none (bench.validate.verdicts)


@dataclass(frozen=True, kw_only=True, slots=True)
class Launch:
    """A launch (or none) that checks share: who opens it, the words for it, and its phases."""

    name: str       # "head", "inventory", "per-gpu", "links", "own", "none"
    words: str      # the docs' words for it
    soak: bool = False  # every --soak round opens it again: the checks that ride it are the round's


@dataclass(frozen=True, kw_only=True, slots=True)
class Phase:
    """What a rank of a shared launch runs beside its job for the checks that ride it (bench.jobs.phases): the spec
    the ranks get (None: not run, e.g. a burn of 0 s) and its cost and words in the plan of the launch it rides."""

    name: str                                         # the plan.json key and the record's ("copies", "burn")
    launch: Launch
    # (ValidateConfig, device) -> the ranks' spec; None: the launch runs it itself (the numerics job first)
    spec: Callable[[Any, str], dict[str, Any] | None] | None
    cost: Callable[[Any], float]                      # (Planner) -> seconds it adds to the launch
    words: Callable[[Any], str]                       # (Planner) -> what the launch's line adds


@dataclass(frozen=True, kw_only=True, slots=True)
class Check:
    """One check: its name, levels, the launch it rides, how it runs, its SKIP rows, its plan, its docs row."""

    name: str
    what: str                      # its row in the docs' table: what runs
    judged: str                    # and what judges it
    levels: tuple[str, ...] = FULL_AND_QUICK
    phase: Phase | None = None     # the phase of a shared launch that measures it
    launch: Launch | None = None   # the launch it rides (or opens); default: its phase's
    runs: str = ""                 # "module:function" of the Validation that runs and judges it; default NAME:NAME
    always: bool = False           # runs whatever --checks says (preflight, inventory): not a --checks choice
    skip: tuple[tuple[str, str], ...] = NODES  # (row name, "nodes" | "cluster") when not run; "" is its own name
    # (Planner) -> its stage lines in the plan (bench.validate.budget); a string: one stage launching nothing, said so
    plan: Callable[[Any], None] | str | None = None
    by_level: dict[str, Any] = field(default_factory=dict)  # a per-level default of its own (dcgm: the level)
    # What to do when it FAILs a node or GPU and the row names nothing itself: the drain reason's words
    # (bench.validate.verdicts.CHECK_ACTION); "": "drain: see the reason".
    action: str = ""
    actions: tuple[str, ...] = ()  # the actions its rows name themselves (a health finding's, the binding row's)
    rows: tuple[Row, ...] = ()     # rows of other names it adds (docs)

    def __post_init__(self) -> None:
        if self.launch is None:
            if self.phase is None:
                raise TypeError(f"check {self.name}: neither a launch nor a phase")
            object.__setattr__(self, "launch", self.phase.launch)
        if not self.runs:
            own = self.name.replace("-", "_")
            object.__setattr__(self, "runs", f"bench.validate.{own}:{own}")

    @property
    def soak(self) -> bool:
        """One of every --soak round's checks: those of the launches a round opens again."""
        return self.launch.soak

    def planned(self, p: Any) -> None:
        """Its stage lines in the plan of Planner p."""
        if isinstance(self.plan, str):
            p.none(self.name, self.plan)
        elif self.plan is not None:
            self.plan(p)

    def runner(self) -> Callable[[Any], None]:
        """The function that runs it (imported now: bench --help never asks)."""
        module, _, name = self.runs.partition(":")
        return getattr(importlib.import_module(module), name)
