"""The kernel log's GPU events: Xid, NVSwitch SXid, fallen off the bus, RmInitAdapter failed, PCIe AER errors.

    from bench.cluster.health.kernel_log import parse, findings
    events = parse(open("dmesg.txt").read())          # [KernelEvent(kind, number, bus_id, time, text)]
    findings(open("dmesg.txt").read(), since=1737426000.0)   # grouped, one finding per (event, GPU)

Every format a node gives: `dmesg -T` ("[Mon Feb 24 03:12:01 2025] NVRM: ..."),
`dmesg --decode --time-format iso` ("kern  :warn  : 2025-01-21T02:21:37,498559+00:00 ..."),
syslog and `journalctl -k` short ("Dec  2 10:00:00 host kernel: [12345.6] NVRM: ..."),
`journalctl -k` without a time ("kernel: NVRM: ...") and raw dmesg ("[12345.678] ...").
A line's time is absolute where the line has one (dmesg -T and syslog times are
local time, as dmesg and syslog print them; syslog has no year: the latest year
that does not put the line in the future), the boot time plus the uptime where the
caller knows when the node booted, else None. Repeated events are grouped per
(kind, number, GPU) with a count and first/last seen. `since` (epoch seconds) drops
events before it; an event with no time is kept and says that its time is unknown.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import datetime, timezone

from bench.cluster.findings import bus_key, finding, xid_code

SOURCE = "kernel-log"
_BUSRE = r"(?:PCI:)?([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?)"
_XID = re.compile(r"NVRM: Xid \(" + _BUSRE + r"\): (\d+)(?:, ?(.*))?")
_SXID = re.compile(r"SXid \(" + _BUSRE + r"\): (\d+)(?:, ?(.*))?")
_RMINIT = re.compile(r"NVRM: GPU " + _BUSRE + r": RmInitAdapter failed!?\s*(.*)")
_OFF_BUS = re.compile(r"NVRM: GPU (?:at )?" + _BUSRE + r"\b.*fallen off the bus")
_OFF_BUS_START = re.compile(r"NVRM: The NVIDIA GPU " + _BUSRE)
_AER = re.compile(r"(\S+) " + _BUSRE + r": (?:AER: )?PCIe Bus Error: severity=Uncorrected \((Fatal|Non-Fatal)\)(.*)")
_CAUSED_BY = re.compile(r"caused by previous Xid (\d+)")
_AER_DRIVER = re.compile(r"^nvidia " + _BUSRE + r": ")

_ISO = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)\s+(.*)$")
_DMESG_T = re.compile(r"^\[(\w{3} \w{3}\s+\d+ \d\d:\d\d:\d\d \d{4})\]\s?(.*)$")
_SYSLOG = re.compile(r"^(\w{3})\s+(\d{1,2}) (\d\d:\d\d:\d\d) \S+ (.*)$")
_UPTIME = re.compile(r"^\[\s*(\d+\.\d+)\]\s?(.*)$")
_MONTHS = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov",
                                        "Dec"), 1)}  # fmt: skip


@dataclass(frozen=True, slots=True)
class KernelEvent:
    kind: str                # "xid", "sxid", "fallen-off-bus", "rminit-failed", "aer-fatal", "aer-nonfatal"
    number: int | None       # the Xid or SXid number
    bus_id: str | None       # "0000:9b:00.0" (bus_key's spelling) of the GPU, switch or PCIe port
    time: float | None       # epoch seconds; None where the line has no absolute time
    text: str                # the driver's words after the number


def _split(line: str, now: float, boot_time: float | None) -> tuple[float | None, str]:
    """(epoch seconds or None, the message) of one log line, whichever of the formats it is in."""
    m = _ISO.search(line)
    if m and m.start() < 24:  # the decode prefix ("kern  :warn  : ") is at most that long
        stamp = m.group(1).replace(",", ".")
        dt = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        return dt.timestamp(), _strip_kernel(m.group(2))
    m = _DMESG_T.match(line)
    if m:
        return datetime.strptime(" ".join(m.group(1).split()), "%a %b %d %H:%M:%S %Y").timestamp(), m.group(2)
    m = _SYSLOG.match(line)
    if m and m.group(1) in _MONTHS:
        return _syslog_time(m, now), _strip_kernel(m.group(4))
    m = _UPTIME.match(line)
    if m:
        return (boot_time + float(m.group(1)) if boot_time is not None else None), m.group(2)
    return None, _strip_kernel(line.strip())


def _syslog_time(m: re.Match, now: float) -> float:
    year = datetime.fromtimestamp(now).year
    clock = [int(x) for x in m.group(3).split(":")]
    for y in (year, year - 1):  # syslog has no year: the latest that is not in the future
        t = datetime(y, _MONTHS[m.group(1)], int(m.group(2)), *clock).timestamp()
        if t <= now + 86400:
            return t
    return t


def _strip_kernel(msg: str) -> str:
    """Drop "host kernel: " / "kernel: " and a "[ uptime]" stamp after it."""
    msg = re.sub(r"^(?:\S+ )?kernel: ", "", msg)
    return _UPTIME.sub(r"\2", msg) if _UPTIME.match(msg) else msg


def parse(text: str, *, now: float | None = None, boot_time: float | None = None) -> list[KernelEvent]:
    """Every GPU-related event of a kernel log, in log order."""
    now = time.time() if now is None else now
    events: list[KernelEvent] = []
    pending_off_bus: tuple[str, float | None, int] | None = None  # the multi-line form: bus, time, lines left
    aer_port: KernelEvent | None = None  # an AER error on a port, until the kernel names the GPU below it
    for line in text.splitlines():
        if not line.strip():
            continue
        t, msg = _split(line, now, boot_time)
        if pending_off_bus and "fallen off the bus" in msg:
            events.append(KernelEvent("fallen-off-bus", None, pending_off_bus[0], pending_off_bus[1],
                                      "the GPU has fallen off the bus and is not responding"))  # fmt: skip
            pending_off_bus = None
            continue
        if pending_off_bus:
            pending_off_bus = (pending_off_bus[0], pending_off_bus[1], pending_off_bus[2] - 1) if pending_off_bus[2] > 1 \
                else None  # fmt: skip
        if aer_port is not None and (m := _AER_DRIVER.match(msg)):
            # The kernel tells the drivers below the port; "nvidia BUS:" names the GPU the error hit.
            events[events.index(aer_port)] = KernelEvent(aer_port.kind, None, bus_key(m.group(1)), aer_port.time,
                                                         aer_port.text)  # fmt: skip
            aer_port = None
        event = _event(msg, t)
        if event is None:
            if m := _OFF_BUS_START.search(msg):
                pending_off_bus = (bus_key(m.group(1)), t, 3)
            continue
        events.append(event)
        aer_port = event if event.kind.startswith("aer") else aer_port
        if event.kind == "xid" and (m := _CAUSED_BY.search(event.text)):
            # "45, ... caused by previous Xid 149": the driver vouches for an Xid whose own line may be gone.
            events.append(KernelEvent("xid", int(m.group(1)), event.bus_id, t,
                                      f"named by a later Xid {event.number} ('caused by previous Xid {m.group(1)}')"))
    return events


def _event(msg: str, t: float | None) -> KernelEvent | None:
    if m := _XID.search(msg):
        return KernelEvent("xid", int(m.group(2)), bus_key(m.group(1)), t, (m.group(3) or "").strip())
    if m := _SXID.search(msg):
        return KernelEvent("sxid", int(m.group(2)), bus_key(m.group(1)), t, (m.group(3) or "").strip())
    if m := _RMINIT.search(msg):
        return KernelEvent("rminit-failed", None, bus_key(m.group(1)), t, ("RmInitAdapter failed " + m.group(2)).strip())
    if m := _OFF_BUS.search(msg):
        return KernelEvent("fallen-off-bus", None, bus_key(m.group(1)), t, "the GPU has fallen off the bus")
    if m := _AER.search(msg):
        kind = "aer-fatal" if m.group(3) == "Fatal" else "aer-nonfatal"
        return KernelEvent(kind, None, bus_key(m.group(2)), t,
                           f"{m.group(1)} {m.group(2)}: uncorrectable ({m.group(3)}){m.group(4)}")  # fmt: skip
    return None


def _iso(t: float | None) -> str | None:
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="seconds") if t is not None else None


def _sxid_code(texts: list[str]) -> str:
    # The driver prints the severity on one of an SXid's lines ("22013, Non-fatal, Link 44 ...").
    return "sxid-fatal" if any(re.search(r"\bFatal\b", t) for t in texts) else "sxid-nonfatal"


def findings(text: str, *, since: float | None = None, now: float | None = None,
             boot_time: float | None = None) -> list[dict]:  # fmt: skip
    """The log's events as findings, one per (kind, number, device), repeats counted, `since` applied."""
    groups: dict[tuple, list[KernelEvent]] = {}
    for e in parse(text, now=now, boot_time=boot_time):
        if since is not None and e.time is not None and e.time < since:
            continue
        groups.setdefault((e.kind, e.number, e.bus_id), []).append(e)
    xid79 = {bus for (kind, number, bus) in groups if kind == "xid" and number == 79}
    out = []
    for (kind, number, bus), evs in groups.items():
        if kind == "fallen-off-bus" and bus in xid79:
            continue  # the same fault as the Xid 79 already reported for this GPU
        times = [e.time for e in evs if e.time is not None]
        code = xid_code(number) if kind == "xid" else _sxid_code([e.text for e in evs]) if kind == "sxid" else kind
        label = {"xid": f"Xid {number}", "sxid": f"SXid {number}"}.get(kind, kind)
        first, last = (_iso(min(times)), _iso(max(times))) if times else (None, None)
        when = f"{len(evs)}x" + (f", {first}" if first == last else f", {first} to {last}") * bool(times)
        unknown = "" if len(times) == len(evs) else "; time not in the log (kept whatever since says)"
        what = f"{label} on {bus or 'an unnamed device'} ({when}{unknown}): {evs[0].text[:200]}"
        out.append(finding(code, SOURCE, what, bus_id=bus, count=len(evs), first_seen=first, last_seen=last))
    return out
