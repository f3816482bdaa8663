"""docs/validate.md's table of checks, made from the registry: a row per check (and per row name a check adds,
matmul, fabric, said as whose), its levels, the launch it rides and what its FAILs say to do.

    python -m bench.validate.checks.docs            # the table
    python -m bench.validate.checks.docs --write    # put it in docs/validate.md, between its two markers

tests/unit/test_checks_registry.py fails when the docs' table differs from this.
"""

from __future__ import annotations

import os
import sys

from bench.validate import checks
from bench.validate.checks.base import LEVEL_NAMES, Check, Row

DOC = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, os.pardir, "docs", "validate.md")
BEGIN = "<!-- the table of checks: made from bench/validate/checks (python -m bench.validate.checks.docs --write) -->"
END = "<!-- end of the table of checks -->"
HEADER = ("| check | levels | launch | what runs | judged against | on a FAIL |", "|---|---|---|---|---|---|")


def _levels(c: Check) -> str:
    return "every level, always" if c.always else ", ".join(lv for lv in LEVEL_NAMES if lv in c.levels)


def _launch(c: Check) -> str:
    phase = c.phase
    return c.launch.words + (f", its {phase.name} phase" if phase is not None and phase.spec is not None else "")


def _fail(c: Check | Row) -> str:
    """What its rows say to do: the action where a FAIL names none (bench.validate.verdicts), and those they name."""
    said = [c.action] if c.action else []
    said += list(getattr(c, "actions", ()))
    return "; ".join(said) or "the row's reason"


def table(registry: tuple[Check, ...] | None = None) -> str:
    lines = list(HEADER)
    for c in registry or checks.REGISTRY:
        lines.append(f"| {c.name} | {_levels(c)} | {_launch(c)} | {c.what} | {c.judged} | {_fail(c)} |")
        for r in c.rows:
            lines.append(f"| {r.name} (rows of {c.name}) | as {c.name} | as {c.name} | {r.what} | {r.judged} | "
                         f"{_fail(r)} |")
    return "\n".join(lines) + "\n"


def in_doc(text: str) -> str | None:
    """The table between the markers of docs/validate.md's text (None: no markers)."""
    if BEGIN not in text or END not in text:
        return None
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n") + "\n"


def written(text: str, registry: tuple[Check, ...] | None = None) -> str:
    """text with the table between its markers made from the registry."""
    head, rest = text.split(BEGIN, 1)
    return f"{head}{BEGIN}\n{table(registry)}{END}{rest.split(END, 1)[1]}"


def main(argv: list[str]) -> int:
    if argv == ["--write"]:
        with open(DOC) as f:
            text = f.read()
        with open(DOC, "w") as f:
            f.write(written(text))
        return 0
    sys.stdout.write(table())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
