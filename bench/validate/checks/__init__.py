"""bench validate's checks, one module each, registered here in the order they run; everything that lists the
checks is made from this registry: bench.validate.stages' STAGES and SKIP rows, bench.validate.config's CHECKS
(--checks' choices and help), each level's checks and --dcgm auto's levels, --soak's rounds, the per-GPU launch's
phases (bench.validate.runs), the plan's stages (bench.validate.budget) and docs/validate.md's table of checks
(bench.validate.checks.docs; tests/unit/test_checks_registry.py fails when the docs differ).

    from bench.validate import checks
    checks.names()                     # ("preflight", "inventory", "health", ..., "scaling")
    checks.of_level("prolog")          # ("health", "numerics", "intra-node")
    checks.get("copies").phase.name    # "copies": a phase of the per-GPU launch

Adding a check: a module here declaring CHECK (bench.validate.checks.base.Check: its levels, the launch it rides,
the function that runs and judges it, its SKIP rows, its plan, its docs row: only what differs from base's
defaults), and its line in REGISTRY.
"""

from __future__ import annotations

from bench.validate.checks import (burn, copies, dcgm, health, inter_node, intra_node, inventory, memory, numerics,
                                   preflight, rails, scaling, stragglers, throughput, training)
from bench.validate.checks.base import LEVEL_NAMES, Check, Phase

REGISTRY: tuple[Check, ...] = (
    preflight.CHECK,
    inventory.CHECK,
    health.CHECK,
    dcgm.CHECK,
    throughput.CHECK,
    numerics.CHECK,
    copies.CHECK,
    memory.CHECK,
    burn.CHECK,
    intra_node.CHECK,
    inter_node.CHECK,
    rails.CHECK,
    training.CHECK,
    stragglers.CHECK,
    scaling.CHECK,
)


def names(registry: tuple[Check, ...] | None = None) -> tuple[str, ...]:
    """Every check, in the order they run."""
    return tuple(c.name for c in registry or REGISTRY)


def always(registry: tuple[Check, ...] | None = None) -> tuple[str, ...]:
    """The checks that run whatever --checks says (preflight, inventory)."""
    return tuple(c.name for c in registry or REGISTRY if c.always)


def choices(registry: tuple[Check, ...] | None = None) -> tuple[str, ...]:
    """What --checks may name: every check but those that always run."""
    return tuple(c.name for c in registry or REGISTRY if not c.always)


def of_level(level: str, registry: tuple[Check, ...] | None = None) -> tuple[str, ...]:
    """A level's checks (those --checks may name), in order."""
    return tuple(c.name for c in registry or REGISTRY if not c.always and level in c.levels)


def get(name: str, registry: tuple[Check, ...] | None = None) -> Check:
    return next(c for c in registry or REGISTRY if c.name == name)


def soak_round(registry: tuple[Check, ...] | None = None) -> tuple[Check, ...]:
    """The checks of every --soak round, in order."""
    return tuple(c for c in registry or REGISTRY if c.soak)


def phases(wanted, launch_name: str, registry: tuple[Check, ...] | None = None) -> tuple[Phase, ...]:
    """The phases of a shared launch that the wanted checks ride, each once, in the registry's order."""
    seen: dict[str, Phase] = {}
    for c in registry or REGISTRY:
        if c.phase is not None and c.phase.launch.name == launch_name and wanted(c.name):
            seen.setdefault(c.phase.name, c.phase)
    return tuple(seen.values())


def problems(registry: tuple[Check, ...] | None = None) -> list[str]:
    """What is wrong with a registry (tests): a name twice, a level no level has, a check in no level."""
    out, seen = [], set()
    for c in registry or REGISTRY:
        if c.name in seen:
            out.append(f"{c.name}: registered twice")
        seen.add(c.name)
        out += [f"{c.name}: no level {lv!r}" for lv in c.levels if lv not in LEVEL_NAMES]
        if not c.levels:
            out.append(f"{c.name}: in no level")
    return out
