"""The health report of one node: what was read, what could not be, and every finding, in one JSON-able dict.

    from bench.cluster.health.report import Report
    r = Report("node1", since=None)
    r.read_ok("kernel-log", "dmesg --time-format iso: 2113 lines")
    r.not_read("dcgm", "dcgmi not installed", expected=False)
    r.add([finding(...)]); r.gpus = [{"index": 0, "bus_id": "00000000:07:00.0", "name": "NVIDIA A10"}]
    report = r.done()

The report's keys:
  host       the node's host name
  since      the `since` bound as ISO 8601 UTC, or None (kernel-log events before it are dropped)
  gpus       [{"index", "bus_id", "name"}]: the node's GPUs as their backend read them (bench.cluster.accel:
             the vendor's library, its tool's query or table), [] if none
  read       {source: what was read, in words}: the GPU backend's sources (bench.cluster.accel.nvidia's:
             health_live, health_saved), "kernel-log", "infiniband", "dcgm", "disk"
  not_read   [{"source", "reason", "expected"}]: a source that gave nothing. expected=False: nothing
             here to check (no GPU, no InfiniBand hardware, dcgmi not installed, a file not in the
             folder); expected=True: it should have been readable and was not (permission denied,
             a tool that crashed or timed out, the vendor's library present but failing)
  copies     [{"test", "kind", "method", "gpu", "gpu_index", "peer", "gbps", "name", "bus_id", "pcie_gen",
             "pcie_gen_max", "pcie_width", "pcie_width_max"}]: copy figures a saved nvbandwidth.txt gave (GB/s;
             kind h2d, d2h, h2d_bidir, d2d_read, local, ...; gpu the runtime's ordinal, gpu_index the backend's index
             by bus id; peer the other GPU of a device-to-device figure), [] if none
  fabric     [{"gpu_index", "bus_id", "uuid", "state", "status", "clique_id", "cluster_uuid", "summary",
             "health"}]: each GPU's NVLink fabric info where its backend read one (NVIDIA's fabric_state), else []
  findings   [{"code", "source", "severity", "action", "meaning", "what", "gpu_index", "bus_id",
             "port", "count", "first_seen", "last_seen", "reference"}], worst first:
               code        the table's code (bench/data/health_actions.json), e.g. "xid-79", "row-remap-pending"
               source      which reader found it ("kernel-log", "dcgm", a GPU backend's source, ...)
               severity    "fail" (drain the node), "warn" (degraded or to watch), "info" (seen, not a fault)
               action      drain, reset-gpu, reseat, replace-gpu, reboot, check-fabric, free-space,
                           restart-app, watch
               meaning     the table's one line for the code
               what        one line: what was read, with the value
               gpu_index   the GPU's index where the finding is about one and the index is known, else None
               bus_id      its PCI bus id as sysfs spells it ("0000:9b:00.0"), else None
               port        an InfiniBand port ("mlx5_2/1") for port findings, else None
               count       how many times a kernel-log event was seen, else None
               first_seen, last_seen   ISO 8601 UTC of the first and last such event, None if unknown
               reference   the table's source for the meaning and the action
"""

from __future__ import annotations

from datetime import datetime, timezone

from bench.cluster.findings import attach_gpus, sort_key


def iso(t: float | None) -> str | None:
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="seconds") if t is not None else None


class Report:
    """The report being built: sources add what they read, what they could not, and their findings."""

    def __init__(self, host: str, since: float | None):
        self.host, self.since = host, since
        self.gpus: list[dict] = []
        self.copies: list[dict] = []
        self.fabric: list[dict] = []
        self.links: dict = {}   # bus id -> the GPU's readings (GpuHealth) for later readers; not in the report
        self._read: dict[str, str] = {}
        self._not_read: list[dict] = []
        self._findings: list[dict] = []

    def read_ok(self, source: str, what: str) -> None:
        self._read[source] = what

    def not_read(self, source: str, reason: str, expected: bool) -> None:
        self._not_read.append({"source": source, "reason": " ".join(str(reason).split()), "expected": expected})

    def add(self, findings: list[dict]) -> None:
        self._findings.extend(findings)

    def done(self) -> dict:
        findings = sorted(attach_gpus(self._findings, self.gpus), key=sort_key)
        return {"host": self.host, "since": iso(self.since), "gpus": self.gpus, "read": self._read,
                "not_read": self._not_read, "copies": self.copies, "fabric": self.fabric,
                "findings": findings}  # fmt: skip
