"""`bench hosts`: the hosts and slots a hostfile and its filters resolve to.

    bench hosts --hostfile hostfiles/tesla
    bench hosts --hostfile hostfiles/tesla --exclude tesla-node5 --json
    bench hosts --hostfile hostfiles/vector --num-gpus 1
    bench hosts                     # this machine: nvidia-smi -L GPUs, else 1 CPU slot

It reads files only (and runs `nvidia-smi -L` without --hostfile): no ssh,
no torch, so it answers at once and shows what a run would use before any
launch.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys

from bench.hostfile import add_host_arguments, resources_from_args

HELP = "show the hosts and slots a hostfile with --include/--exclude/--num-nodes resolves to"

# A physical GPU line of `nvidia-smi -L`: "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)".
# MIG instances are indented "  MIG 1g.10gb Device 0: ..." lines under their GPU and are
# not counted: a slot is what DeepSpeed's launcher puts one rank on.
_GPU_LINE = re.compile(r"GPU [0-9]+: ")
NVIDIA_SMI_TIMEOUT_S = 20


def count_gpus(nvidia_smi_l: str) -> int:
    """Physical GPUs in `nvidia-smi -L` output."""
    return sum(1 for line in nvidia_smi_l.splitlines() if _GPU_LINE.match(line))


def smi_gpu_count() -> tuple[int, str, bool]:
    """(GPUs `nvidia-smi -L` lists, how that was found, whether nvidia-smi failed); torch-free."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return 0, "no nvidia-smi", False
    try:
        proc = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        return 0, f"nvidia-smi -L failed ({type(e).__name__})", True
    if proc.returncode != 0:
        first = (proc.stdout + proc.stderr).strip().splitlines()[:1]
        why = first[0] if first else "no output"
        return 0, f"nvidia-smi -L exited {proc.returncode} ({why})", True
    n = count_gpus(proc.stdout)
    return n, (f"nvidia-smi -L: {n} GPU(s)" if n else "nvidia-smi -L listed no GPU"), False


def local_slot_count() -> tuple[int, str, bool]:
    """(slots of this machine, how they were found, whether nvidia-smi failed).

    GPUs from `nvidia-smi -L`; 1 slot (a CPU rank) without it or when it fails,
    because a driverless node can still run the CPU benchmark.
    """
    n, how, failed = smi_gpu_count()
    if n == 0:
        return 1, f"{how}: 1 {'CPU ' if how == 'no nvidia-smi' else ''}slot", failed
    return n, how, failed


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_host_arguments(parser)
    parser.add_argument("--json", action="store_true",
                        help="print one JSON document on stdout and nothing else")


def _slot_text(slots: list[int]) -> str:
    """[0,1,2,3,6] -> "0-3,6": readable for 8-GPU nodes."""
    parts: list[str] = []
    start = prev = slots[0]
    for s in [*slots[1:], None]:
        if s is not None and s == prev + 1:
            prev = s
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if s is not None:
            start = prev = s
    return ",".join(parts)


def main(args: argparse.Namespace) -> int:
    local = None
    source = args.hostfile
    if args.hostfile is None:
        n, how, failed = local_slot_count()
        local = {"localhost": n}
        source = f"this machine ({how})"
        if failed:
            print(f"bench hosts: {how}", file=sys.stderr)
    resources = resources_from_args(args, local_hosts=local)
    assert resources is not None  # local_hosts given or --hostfile parsed
    world_size = sum(len(s) for s in resources.values())
    if args.json:
        doc = {"resources": resources, "hostfile": args.hostfile,
               "nodes": len(resources), "world_size": world_size}
        print(json.dumps(doc))
        return 0

    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console()
    # Text, not a markup string: a path like "hosts[a]" must print as written.
    console.print(Text(f"hosts: {source}"))
    table = Table()
    table.add_column("host")
    table.add_column("slots")
    table.add_column("count", justify="right")
    for host, slots in resources.items():
        table.add_row(host, _slot_text(slots), str(len(slots)))
    table.add_section()
    table.add_row(f"{len(resources)} node(s)", "world size", str(world_size))
    console.print(table)
    return 0
