"""Each GPU's NVLink fabric state (NVML's fabric info): state, status, health, ClusterUUID, CliqueId, and its findings.

    from bench.cluster.accel.nvidia.fabric_state import from_smi_q, from_gpud, findings
    gpus = from_smi_q(open("nvidia-smi-q.txt").read())    # [GpuFabric], one per Fabric block
    gpus[0].state, gpus[0].clique_id, gpus[0].cluster_uuid  # ('Completed', 2, 'dc6e40c4-...')
    findings(gpus, "nvidia-smi -q")                        # [finding(...)] for the bad states and health bits

Two readings of the same NVML structure (nvmlGpuFabricInfoV): `nvidia-smi -q`'s
Fabric section (State, Status, CliqueId, ClusterUUID and, from the 550-class
drivers, a Health block: Summary, Bandwidth Full/Degraded, Route Recovery in
progress, Route Unhealthy, Access Timeout Recovery True/False, Incorrect
Configuration None or what is wrong), read at whatever indent it is printed
(a block re-indented by hand, a `grep -A` excerpt without its "GPU <bus>" line);
and gpud's fabric-manager component state, whose `extra_info.data` holds the
same fields as JSON (`fabric_states`: gpu_uuid, clique_id, cluster_uuid, state,
status, summary, health{...}).

Judged: a GPU whose fabric state was read (not N/A / Not Supported) and is not
Completed, or whose status is not Success: fabric-not-ready. A health summary
Unhealthy or Limited Capacity, a degraded bandwidth, a route unhealthy, route or
access-timeout recovery in progress, an incorrect configuration: each its own
code. N/A everywhere (a GPU without NVSwitch fabric, a single-node NVSwitch
system before 550) and a single-node NVSwitch system's clique 0 with a zero
ClusterUUID are no finding: they are not in a multi-node domain (`in_domain`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from bench.cluster.findings import finding

ZERO_UUID = "00000000-0000-0000-0000-000000000000"
_NA = {"", "n/a", "[n/a]", "not supported", "[not supported]", "none"}
_GPU = re.compile(r"^GPU\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")
# The health rows as nvidia-smi names them -> the keys gpud uses (and GpuFabric.health's).
HEALTH_ROWS = {"bandwidth": "bandwidth", "route recovery in progress": "route_recovery_in_progress",
               "route unhealthy": "route_unhealthy", "access timeout recovery": "access_timeout_recovery",
               "incorrect configuration": "incorrect_configuration"}  # fmt: skip
# A health key whose value means a fault -> its code; bandwidth's fault is "Degraded", the others' "True",
# incorrect_configuration's anything but None/N/A.
HEALTH_CODES = {"bandwidth": "fabric-bandwidth-degraded", "route_unhealthy": "fabric-route-unhealthy",
                "route_recovery_in_progress": "fabric-route-recovery",
                "access_timeout_recovery": "fabric-access-timeout-recovery",
                "incorrect_configuration": "fabric-incorrect-configuration"}  # fmt: skip


@dataclass(slots=True)
class GpuFabric:
    """One GPU's fabric info; None where the source printed N/A or Not Supported."""

    index: int | None
    bus_id: str | None = None
    uuid: str | None = None
    state: str | None = None            # "Completed", "In Progress", "Not Started"
    status: str | None = None           # "Success", or NVML's failure ("Insufficient Resources", ...)
    clique_id: int | None = None
    cluster_uuid: str | None = None     # None also for the all-zero UUID (gpud omits it)
    summary: str | None = None          # "Healthy", "Unhealthy", "Limited Capacity"
    health: dict[str, str] = field(default_factory=dict)  # HEALTH_CODES' keys -> the value read

    def in_domain(self) -> bool:
        """Whether the GPU says it is in a multi-node NVLink domain: a ClusterUUID, or a clique other than 0."""
        return self.cluster_uuid is not None or bool(self.clique_id)

    def as_dict(self) -> dict:
        return {"gpu_index": self.index, "bus_id": self.bus_id, "uuid": self.uuid, "state": self.state,
                "status": self.status, "clique_id": self.clique_id, "cluster_uuid": self.cluster_uuid,
                "summary": self.summary, "health": dict(self.health)}  # fmt: skip


def _value(v) -> str | None:
    v = None if v is None else str(v).strip()
    return None if v is None or v.lower() in _NA else v


def _uuid(v) -> str | None:
    v = _value(v)
    return None if v is None or v == ZERO_UUID else v.lower()


def _clique(v) -> int | None:
    v = _value(v)
    return int(v) if v is not None and v.isdigit() else None


def from_smi_q(text: str) -> list[GpuFabric]:
    """Every Fabric block of `nvidia-smi -q` (whole or an excerpt), in order; [] when there is none."""
    out: list[GpuFabric] = []
    bus, index, head, sub = None, -1, None, None   # head: the Fabric line's indent; sub: the Health line's
    for line in text.splitlines():
        if m := _GPU.match(line):
            bus, index, head = m.group(1), index + 1, None
            continue
        indent, stripped = len(line) - len(line.lstrip(" ")), line.strip()
        if stripped == "Fabric":
            if bus is None:          # an excerpt without "GPU <bus>" lines: each Fabric block is the next GPU's
                index += 1
            out.append(GpuFabric(index=index, bus_id=bus))
            head, sub, bus = indent, None, None
            continue
        if head is None or not stripped:
            continue
        if indent <= head:
            head = None
            continue
        key, _, value = (p.strip() for p in stripped.partition(":"))
        g = out[-1]
        if key == "Health" and not value:
            sub = indent
        elif sub is not None and indent > sub:
            if key.lower() == "summary":
                g.summary = _value(value)
            elif key.lower() in HEALTH_ROWS and _value(value) is not None:
                g.health[HEALTH_ROWS[key.lower()]] = value
        else:
            sub = None
            if key == "State":
                g.state = _value(value)
            elif key == "Status":
                g.status = _value(value)
            elif key == "CliqueId":
                g.clique_id = _clique(value)
            elif key == "ClusterUUID":
                g.cluster_uuid = _uuid(value)
    return out


def _gpud_states(text: str) -> tuple[list[dict], dict]:
    """The fabric-manager component's `extra_info.data` of a gpud state dump (whole or an excerpt): its complete
    `fabric_states` objects, and the rest of the component's state ({"health", "reason"}). The data is a JSON
    string inside JSON; an excerpt may cut it in the middle of a GPU's object: the GPUs before the cut are read."""
    about = {k: m.group(1) for k in ("health", "reason") if (m := re.search(rf'"{k}"\s*:\s*"([^"]*)"', text))}
    m = re.search(r'"data"\s*:\s*"', text)
    if not m:
        return [], about
    data = text[m.end():].replace('\\"', '"')
    states, decoder = [], json.JSONDecoder()
    for start in (i.start() for i in re.finditer(r'\{"gpu_uuid"', data)):
        try:
            obj, _ = decoder.raw_decode(data, start)
        except ValueError:
            continue
        if isinstance(obj, dict):
            states.append(obj)
    return states, about


def _gpud_table(text: str) -> list[dict]:
    """gpud scan's table: one "| GPU UUID | ... |" row opens a GPU, the rows after it are its fields."""
    rows = {"gpu uuid": "gpu_uuid", "clique id": "clique_id", "cluster uuid": "cluster_uuid", "state": "state",
            "status": "status", "health summary": "summary", "bandwidth": "bandwidth",
            "route recovery": "route_recovery_in_progress", "route unhealthy": "route_unhealthy",
            "access timeout recovery": "access_timeout_recovery",
            "incorrect configuration": "incorrect_configuration"}  # fmt: skip
    out: list[dict] = []
    for m in re.finditer(r"^\|\s*([A-Za-z ]+?)\s*\|\s*(.*?)\s*\|\s*$", text, re.M):
        key = rows.get(m.group(1).lower())
        if key == "gpu_uuid":
            out.append({"gpu_uuid": m.group(2), "health": {}})
        elif key and out:
            (out[-1]["health"] if key in HEALTH_CODES else out[-1])[key] = m.group(2)
    return out


def from_gpud(text: str) -> tuple[list[GpuFabric], dict]:
    """The GPUs of gpud's accelerator-nvidia-fabric-manager state (its JSON, whole or cut) or of `gpud scan`'s
    fabric table, and gpud's own verdict ({"health", "reason"}; {} from a table)."""
    states, about = _gpud_states(text)
    if not states:
        states = _gpud_table(text)
    out = []
    for i, s in enumerate(states):
        health = s.get("health") if isinstance(s.get("health"), dict) else {}
        out.append(GpuFabric(index=i, uuid=_value(s.get("gpu_uuid")), state=_value(s.get("state")),
                             status=_value(s.get("status")), clique_id=_clique(s.get("clique_id")),
                             cluster_uuid=_uuid(s.get("cluster_uuid")), summary=_value(s.get("summary")),
                             health={k: str(v) for k, v in health.items()
                                     if k in HEALTH_CODES and _value(v) is not None}))  # fmt: skip
    return out, about


def gpud_findings(about: dict, source: str) -> list[dict]:
    """gpud's own verdict where it names a Fabric Manager that is not active (HGX: NVSwitch traffic needs it;
    GB200 runs it on the switch trays, and gpud does not say so there)."""
    reason = about.get("reason", "")
    if about.get("health") == "Unhealthy" and re.search(r"fabric manager .*not active", reason, re.I):
        return [finding("fabric-manager-inactive", source, f"gpud: {about['health']}: {reason}")]
    return []


def _fault(key: str, value: str) -> bool:
    v = value.strip().lower()
    if key == "bandwidth":
        return v == "degraded" or v == "true"
    if key == "incorrect_configuration":
        return v not in _NA and v not in ("false", "no")
    return v == "true"


def findings(gpus: list[GpuFabric], source: str) -> list[dict]:
    """The findings of each GPU's fabric info, tied to its index and bus id."""
    out: list[dict] = []
    for g in gpus:
        def add(code: str, what: str, g=g) -> None:
            out.append(finding(code, source, f"GPU {g.index}{f' {g.uuid}' if g.uuid else ''}: {what}",
                               bus_id=g.bus_id, gpu_index=g.index))  # fmt: skip

        where = f" (CliqueId {g.clique_id}, ClusterUUID {g.cluster_uuid or 'none'})"
        if (g.state and g.state.lower() != "completed") or (g.state and g.status and g.status.lower() != "success"):
            add("fabric-not-ready", f"Fabric State: {g.state}, Status: {g.status}{where}")
        faults = {k: v for k, v in g.health.items() if _fault(k, v)}
        for key, value in faults.items():
            add(HEALTH_CODES[key], f"Fabric Health {key.replace('_', ' ')}: {value}{where}")
        if g.summary and g.summary.lower() in ("unhealthy", "limited capacity") and not faults:
            code = "fabric-unhealthy" if g.summary.lower() == "unhealthy" else "fabric-limited-capacity"
            add(code, f"Fabric Health Summary: {g.summary}" +
                (f", {', '.join(f'{k} {v}' for k, v in g.health.items())}" if g.health else "") + where)
    return out


def to_report(r, gpus: list[GpuFabric], source: str, about: dict | None = None) -> None:
    """Into a health Report (report.Report): the GPUs' fabric info as its "fabric", their findings, what was read."""
    r.fabric = [g.as_dict() for g in gpus]
    r.add(findings(gpus, source) + gpud_findings(about or {}, source))
    given = [g for g in gpus if g.state is not None]
    if given:    # N/A on every GPU (no NVSwitch fabric, a driver without the query): nothing read, nothing judged
        domains = sorted({f"{g.cluster_uuid}/{g.clique_id}" for g in given if g.in_domain()})
        r.read_ok("fabric", f"{len(given)} of {len(gpus)} GPU(s) with a fabric state from {source}"
                            + (f", NVLink domain(s) {', '.join(domains)}" if domains else ", none in a multi-node "
                               "NVLink domain"))  # fmt: skip
