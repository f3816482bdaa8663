"""`bench validate`: cluster acceptance test (work in progress)."""

from __future__ import annotations

HELP = "acceptance-test a cluster: preflight, inventory, per-node throughput, bandwidth, a DP run, stragglers"


def add_arguments(p) -> None:
    pass


def main(args) -> int:
    return 0
