"""`bench probe`: every node's GPUs and libraries, and whether the cluster is uniform.

    bench probe                                   # this node
    bench probe --hostfile hostfiles/tesla        # every host, in parallel, over ssh
    bench probe --hostfile hostfiles/tesla --exclude tesla-node5 --precision fp16 --json

With a hostfile each host runs `<this python> -m bench probe --local --json`
(the same interpreter path, as on a shared filesystem or in one image) and
the answers are joined into one verdict (bench.hetero). Slots named with
--include host:0,1 limit the verdict to those GPUs; the inventory still
shows them all. Exit 0 when every host answered (whatever the verdict
says), 1 when one could not be probed (named on stderr), 2 for bad input.
"""

from __future__ import annotations

import argparse
import json
import sys

from bench.errors import BadInput
from bench.gpus import PRECISIONS, supports
from bench.hostfile import add_host_arguments, resources_from_args

HELP = "inventory every node's GPUs, driver and libraries and flag a heterogeneous cluster"
DEFAULT_TIMEOUT_S = 60.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_host_arguments(parser, num_gpus=False)
    parser.add_argument("--local", action="store_true", help="probe this node only (what each remote host runs)")
    parser.add_argument("--launcher", choices=("ssh", "openmpi", "slurm"), default="ssh",
                        help="reach the hosts over ssh (default), one mpirun rank per host (mpi4py), "
                        "or one srun task per node inside a Slurm allocation")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout and nothing else")
    parser.add_argument("--with-torch", action="store_true",
                        help="import torch for its CUDA, NCCL and arch list even where no GPU was found")
    parser.add_argument("--precision", choices=PRECISIONS, default=None,
                        help="fail the verdict unless every node can train in this precision")
    parser.add_argument("--micro-batch", type=int, default=None, metavar="N",
                        help="per-GPU batch the verdict checks against the smallest GPU memory")
    parser.add_argument("--mem-per-sample-gb", type=float, default=None, metavar="GIB",
                        help="GPU memory one sample of the micro batch needs, in GiB")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="S",
                        help=f"seconds each host may take (default {DEFAULT_TIMEOUT_S:g}: "
                        "importing torch on a cold node is slow)")


def _check(args: argparse.Namespace) -> None:
    if args.local and args.hostfile:
        raise BadInput("--local: cannot be combined with --hostfile (it probes this node only)")
    if args.micro_batch is not None and args.micro_batch < 1:
        raise BadInput(f"--micro-batch: must be >= 1, not {args.micro_batch}")
    if args.mem_per_sample_gb is not None and not args.mem_per_sample_gb > 0:
        raise BadInput(f"--mem-per-sample-gb: must be > 0, not {args.mem_per_sample_gb}")
    if not args.timeout > 0:
        raise BadInput(f"--timeout: must be > 0, not {args.timeout}")


def _why(result) -> str:
    if result.error:
        return result.error
    lines = [ln.strip() for ln in (result.stderr or "").splitlines() if ln.strip()]
    return f"exited {result.rc}" + (f": {lines[-1]}" if lines else "")


def probe_hosts(resources: dict[str, list[int]], timeout: float, with_torch: bool,
                container_exec: str | None = None) -> tuple[list[dict], dict[str, str]]:
    """Inventories of the hosts that answered (host = the hostfile's name), and why the others did not."""
    from bench.container import remote_python
    from bench.remote import run_on_hosts

    argv = [*remote_python(container_exec), "-m", "bench", "probe", "--local", "--json"] + (
        ["--with-torch"] if with_torch else [])
    try:
        results = run_on_hosts(list(resources), argv, timeout=timeout)
    except ValueError as e:  # a host name that must not reach ssh; the hostfile parser should have said so
        raise BadInput(f"--hostfile: {e}") from None
    nodes, unreachable = [], {}
    for host, r in results.items():
        if not r.ok:
            unreachable[host] = _why(r)
            continue
        try:
            inv = json.loads(r.stdout)["nodes"][0]
        except (ValueError, KeyError, IndexError, TypeError):
            first = (r.stdout.strip().splitlines() or ["nothing"])[0][:200]
            unreachable[host] = f"answered no probe JSON (stdout began: {first!r})"
            continue
        inv["host"] = host
        inv["slots"] = resources[host]
        nodes.append(inv)
    return nodes, unreachable


def probe_any(launcher: str, resources: dict[str, list[int]], timeout: float,
              with_torch: bool = False, container_exec: str | None = None) -> tuple[list[dict], dict[str, str]]:
    """Inventories over ssh, MPI or srun: the way the job itself will reach the nodes."""
    if launcher == "openmpi":
        from bench.probe_launch import probe_via_mpi
        return probe_via_mpi(resources, timeout, container_exec=container_exec)
    if launcher == "slurm":
        from bench.probe_launch import probe_via_srun
        return probe_via_srun(resources, timeout, container_exec=container_exec)
    return probe_hosts(resources, timeout, with_torch, container_exec)


def selected(inv: dict) -> dict:
    """The inventory limited to the GPUs its slots select: what a run would use."""
    slots = inv.get("slots")
    if slots is None or not inv.get("gpus"):
        return inv
    return {**inv, "gpus": [g for g in inv["gpus"] if g.get("index") in slots]}


def main(args: argparse.Namespace) -> int:
    from bench.hetero import verdict
    from bench.probe import local_inventory

    _check(args)
    if args.launcher == "slurm" and not args.hostfile:
        from bench.launch import slurm_hosts
        resources = resources_from_args(args, local_hosts=slurm_hosts())  # the allocation is the hostfile
    else:
        resources = resources_from_args(args)
    if resources is None:
        nodes, unreachable = [local_inventory(with_torch=True if args.with_torch else None)], {}
    else:
        nodes, unreachable = probe_any(args.launcher, resources, args.timeout, args.with_torch)
    v = verdict([selected(n) for n in nodes], args.precision, args.micro_batch, args.mem_per_sample_gb)
    for host, why in unreachable.items():
        # A verdict over the hosts that answered must not read OK for the cluster.
        v["findings"].append({"level": "fail", "code": "not-probed", "hosts": [host],
                              "message": f"{host} could not be probed ({why}): nothing is known of its GPUs"})  # fmt: skip
        v["level"] = "fail"
    if args.json:
        print(json.dumps({"nodes": nodes, "unreachable": unreachable, "verdict": v}))
    else:
        render(nodes, unreachable, v)
    for host, why in unreachable.items():
        print(f"bench probe: [{host}] not probed: {why}", file=sys.stderr)
    return 1 if unreachable else 0


def _yes(flag: bool | None) -> str:
    return "?" if flag is None else ("yes" if flag else "NO")


def render(nodes: list[dict], unreachable: dict[str, str], v: dict) -> None:
    """Nodes x GPUs table and the verdict, from the same dicts --json prints."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(title=Text(f"bench probe: {len(nodes)} node(s), {v['gpus']} GPU(s)"), title_justify="left")
    for col in ("host", "GPU", "model", "memory", "CC", "driver", "torch has it", "fp16", "bf16"):
        table.add_column(col, justify="right" if col in ("GPU", "memory") else "left")
    for inv in nodes:
        host = inv.get("host", "?")
        if not inv.get("gpus"):
            table.add_row(Text(host), "-", "no GPU", "", "", "", "", "", "")
        for g in inv.get("gpus") or []:
            used = inv.get("slots") is None or g.get("index") in inv["slots"]
            table.add_row(
                Text(host), str(g.get("index")) + ("" if used else " (not in slots)"),
                Text(g.get("model") or f"{g.get('name')} (not in table)"),
                f"{g['memory_mib']} MiB" if g.get("memory_mib") else "?",
                Text((g.get("cc") or "?") + (" (table)" if g.get("cc_source") == "table" else "")),
                Text(inv.get("driver_version") or "?"), _yes(g.get("torch_built_for")),
                _yes(supports(g.get("cc"), "fp16")), _yes(supports(g.get("cc"), "bf16")),
            )  # fmt: skip
    for host, why in unreachable.items():
        table.add_row(Text(host), "-", "NOT PROBED", "", "", "", "", "", "")
    console = Console()
    console.print(table)
    for inv in nodes:
        if not inv.get("gpus"):
            console.print(Text(f"[{inv.get('host')}] no GPU: {inv.get('gpu_error') or 'none found'}"))
    head = f"verdict: {v['level'].upper()}, " + ("uniform" if v["uniform"] else "heterogeneous")
    head += f"; precisions every node supports: {', '.join(v['precisions']) or 'none'}"
    console.print(Text(head, style={"ok": "green", "warn": "yellow", "fail": "bold red"}[v["level"]]))
    for f in v["findings"]:
        console.print(Text(f"  {f['level'].upper():4} {f['code']} [{', '.join(f['hosts'])}] {f['message']}"))
