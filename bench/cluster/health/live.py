"""This node's health, read now: GPUs (their backend's sources), kernel log, InfiniBand, DCGM on request, disk.

    from bench.cluster.health.live import collect_live
    report = collect_live(since=time.time() - 3600, folders=["results", "/tmp"], dcgm_level=1)

Runs in seconds (DCGM aside: its level sets its length; dcgm_timeout, by default
twice the level's documented length, bounds it).
Every command is an argv list with a timeout; a failure is a "not_read" reason,
never an exception. Only the kernel log may need more than a user has
(kernel.dmesg_restrict): `dmesg --time-format iso`, then `journalctl -k`, and a
refusal of both is not_read with expected=True and their words. The GPUs are
read by each vendor's backend in turn (bench.cluster.accel: health_live); on
a CPU node the GPU part is not_read with expected=False and the rest still runs. Everything under
`root` (/sys) can be pointed at a copy for a test.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess

from bench.cluster import accel
from bench.cluster.accel.nvidia import dcgm
from bench.cluster.health import host, infiniband, kernel_log
from bench.cluster.health.report import Report
from bench.cluster.interconnect import parse_ibstat

TOOL_TIMEOUT_S = 10.0       # dmesg, journalctl and ibstat answer in well under a second


def run_tool(argv: list[str], timeout: float = TOOL_TIMEOUT_S) -> tuple[str | None, str | None]:
    """(stdout, None) or (None, why in one line); never raises."""
    exe = shutil.which(argv[0])
    if exe is None:
        return None, f"{argv[0]} not installed"
    try:
        p = subprocess.run([exe, *argv[1:]], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None, f"{' '.join(argv)}: no answer within {timeout:g}s"
    except OSError as e:
        return None, f"{' '.join(argv)}: {e.strerror or e}"
    if p.returncode != 0:
        first = ((p.stderr or p.stdout).strip().splitlines() or ["no output"])[0]
        return None, f"{' '.join(argv)} exited {p.returncode}: {first}"
    return p.stdout, None


def _boot_time() -> float | None:
    try:
        with open("/proc/stat") as f:
            return next((float(ln.split()[1]) for ln in f if ln.startswith("btime ")), None)
    except OSError:
        return None


def _kernel_log(r: Report, since: float | None) -> None:
    tries = (["dmesg", "--time-format", "iso"], ["journalctl", "-k", "-q", "--no-pager", "-o", "short-iso"], ["dmesg"])
    why = []
    for argv in tries:
        out, err = run_tool(argv)
        if out is not None:
            found = kernel_log.findings(out, since=since, boot_time=_boot_time())
            r.add(found)
            r.read_ok("kernel-log", f"{' '.join(argv)}: {len(out.splitlines())} line(s), {len(found)} event group(s)")
            return
        why.append(err)
    refused = any("not permitted" in w or "ermission denied" in w for w in why)
    r.not_read("kernel-log", ("permission denied: " if refused else "") + "; ".join(why), True)


def _infiniband(r: Report, root: str, has_gpus: bool) -> None:
    ports = infiniband.read_dir(os.path.join(root, "class", "infiniband"))
    if not ports and shutil.which("ibstat"):
        out, why = run_tool(["ibstat"])
        if why:
            r.not_read("infiniband", why, True)
            return
        ports = parse_ibstat(out or "")
    if not ports:
        r.not_read("infiniband", "no InfiniBand/RoCE hardware (no port under /sys/class/infiniband, no ibstat)", False)
        return
    r.add(infiniband.port_findings(ports) + infiniband.counter_findings(ports)
          + infiniband.gpudirect_findings(ports, has_gpus, root))  # fmt: skip
    r.read_ok("infiniband", f"{len(ports)} port(s); GPUDirect RDMA module: {infiniband.peermem_loaded(root) or 'none'}")


def _dcgm(r: Report, level: int | None, timeout: float | None) -> None:
    if level is None:  # not asked: bench validate runs it as a stage of its own (bench.validate.dcgm)
        return
    text, why, expected = dcgm.run(level, dcgm.timeout_for(level) if timeout is None else timeout)
    dcgm.report_into(r, level, text, why, expected)


def collect_live(*, since: float | None = None, folders=(), dcgm_level: int | None = None,
                 dcgm_timeout: float | None = None, root: str = "/sys") -> dict:  # fmt: skip
    """This node's health report (report.py's shape)."""
    r = Report(socket.gethostname(), since)
    steps = (("gpu", lambda: _gpus(r, root)), ("kernel-log", lambda: _kernel_log(r, since)),
             ("infiniband", lambda: _infiniband(r, root, bool(r.gpus))),
             ("dcgm", lambda: _dcgm(r, dcgm_level, dcgm_timeout)), ("disk", lambda: _disk(r, folders)))  # fmt: skip
    for source, step in steps:
        try:
            step()
        except Exception as e:  # a reader's bug must not cost the other sources; expected=True keeps it an ERROR
            r.not_read(source, f"the reader failed: {type(e).__name__}: {e}", True)
    return r.done()


def _gpus(r: Report, root: str) -> None:
    """The node's accelerators, as each vendor's backend reads them; the first that finds GPUs ends it."""
    for b in accel.vendors():
        b.health_live(r, root)
        if r.gpus:
            return


def _disk(r: Report, folders) -> None:
    if not folders:
        return
    found, read = host.disk_findings(folders)
    r.add(found)
    r.read_ok("disk", "; ".join(f"{k}: {v}" for k, v in read.items()))
