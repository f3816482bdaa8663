"""The one interface a GPU vendor implements: what bench asks of a node's accelerators, vendor by vendor.

    from bench.cluster.accel import backend, detect
    acc = detect(inventory)                 # the backend a probed node's GPUs need ("cpu" where it has none)
    acc.visible_devices_env                 # the variable that picks a rank's devices, as the ranks read it
    acc.inventory()                         # {"gpus": [...], "driver_version", "error", ...}: this node, now
    acc.links(10.0); acc.intra(gpus, topo, nvlink, pcie)
    acc.health_live(report); acc.health_saved(report, folder, present, read_text)

Everything a vendor's tools say is read by that vendor's backend (one folder
under bench/cluster/accel/); the rest of bench asks the backend. A backend
answers in bench's own words: an inventory is the probe's dict (gpus, each
a bench.cluster.accel.nvidia.smi.gpu_record: index, name, memory_mib, cc,
cc_source, pci_bus_id, mig), links are the parsed matrix and per-device
links interconnect records as raw "topo" and "nvlink", health is findings
added to a health Report (bench.cluster.health.report) with codes from
bench/data/health_actions.json, a sampler gives the burn's record part
(bench.worker.burn; NVIDIA's columns in bench.cluster.accel.nvidia.sampler.FIELDS).

What a rank needs (the visible-devices variable, the collective backend's
name, the sampler's words) lives in bench.core.accel_names, read from
bench/data/accelerators.json, because ranks import bench.core only; a
backend takes those figures from there, so there is one table.

Adding a vendor: a row in bench/data/accelerators.json, a package
bench/cluster/accel/<name>/ whose class subclasses Accelerator, its line in
bench.cluster.accel.REGISTRY (before "nvidia", which claims any GPUs no
backend before it claims), its module in .importlinter's accel-independent
and vendor-behind-backend contracts. A ROCm torch calls its devices "cuda"
too, so the device type does not say the vendor: the verdict over the nodes'
inventories names their backend (bench.cluster.hetero's "accel"), a launch
carries it (plan.json "accel", bench.launch.node --accel), and each node's
launcher sets that backend's visible-devices variable to the slots. What
still goes by device type: the burn's sampler words (accel_names.GPU_SAMPLER).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol

from bench.core.accel_names import vendor
from bench.core.gpus import GpuSpec, lookup

# PCIe path types of the matrix's legend, nearest first.
PCIE_PATHS = {"PIX": "at most one PCIe bridge", "PXB": "several PCIe bridges", "PHB": "through a PCIe host bridge",
              "NODE": "between host bridges of one NUMA node", "SYS": "across the CPUs' interconnect"}  # fmt: skip


def intra_result(kind: str, n: int, detail: str, evidence: str, **extra) -> dict:
    """The shape of a node's intra kind (bench.cluster.linkkind; Accelerator.intra)."""
    out = {"kind": kind, "gpus": n, "detail": detail, "generation": None, "evidence": evidence,
           "links_per_gpu": None, "link_gbps": None, "nv_pair_links": None, "all_pairs": False,
           "pcie": None}  # fmt: skip
    out.update(extra)
    return out


def slowest_pcie(gpus: list[dict], pcie: dict) -> dict | None:
    """The slowest of the GPUs' PCIe links (bench.core.pcie's, by bus id); None unless every GPU's is known."""
    links = [pcie[g["pci_bus_id"]] for g in gpus if g.get("pci_bus_id") in pcie]
    if len(links) != len(gpus) or not links:
        return None
    return min(links, key=lambda p: (p["speed_gts"] * p["width"], p["width"]))


@dataclass(frozen=True, slots=True)
class Detection:
    """How a backend knows a node is its own: the tool or file a probe asks, and what answered."""

    tool: str                     # the command or sysfs path asked (the vendor's list command, "/sys/bus/pci/devices")
    found: bool                   # the node has this vendor's accelerators
    count: int = 0                # how many the tool listed
    how: str = ""                 # in words, for the operator: "<tool>: 8 GPU(s)"
    failed: bool = False          # the tool is there and failed (a driver fault, not an absent vendor)
    missing: bool = False         # the tool is not installed (no driver: not a failure)


@dataclass(frozen=True, slots=True)
class Links:
    """How a node's accelerators reach each other, as a backend reads it: its matrix and per-device links."""

    matrix: dict | None = None       # {"devices", "links": {dev: {peer: kind}}, "nics", "error"}; None: not read
    per_device: dict | None = None   # {device index: [{"link": n, "gbps": float | None}]}; None: not read
    errors: dict = field(default_factory=dict)      # {"topo" | "nvlink" | ...: why it gave nothing}


class Sampler(Protocol):
    """The burn's sampler: every device of the node once per interval, in a thread of local rank 0."""

    error: str | None             # why nothing is sampled on this node (the vendor's library absent), else None

    def open(self) -> bool: ...   # False (error says why) where the vendor's library is absent
    def start(self) -> None: ...
    def stop(self) -> dict: ...   # the record's part: columns per bus id (SAMPLER_FIELDS), findings, events


class Accelerator(ABC):
    """One vendor's accelerators. Subclasses set `name` and implement the methods; the figures a rank
    needs too (visible-devices variable, collective backend, device type) come from bench.core.accel_names."""

    name: str = ""                # "nvidia", "cpu"; the key of bench/data/accelerators.json

    # -- figures shared with the ranks (one table: bench/data/accelerators.json) --------------------------
    @property
    def device(self) -> str:
        """torch's device type for this vendor's accelerators ("cuda", "cpu")."""
        return vendor(self.name)["device"]

    @property
    def visible_devices_env(self) -> str | None:
        """The environment variable that picks a process's devices; None where there is none (CPU)."""
        return vendor(self.name)["visible_devices_env"]

    @property
    def collective_backend(self) -> str:
        """torch.distributed's backend over these devices ("nccl", "gloo")."""
        return vendor(self.name)["collective_backend"]

    @property
    def container_flags(self) -> Mapping[str, tuple[str, ...]]:
        """Per container runtime ("apptainer", "docker"), the flags that give the container these devices."""
        return {k: tuple(v) for k, v in vendor(self.name)["container_flags"].items()}

    @property
    def probe_tools(self) -> tuple[str, ...]:
        """The commands a node answers through (for the operator's messages: what to install or check)."""
        return tuple(vendor(self.name)["probe_tools"])

    # -- the node side ------------------------------------------------------------------------------------
    @abstractmethod
    def detect(self) -> Detection:
        """Ask this node now (torch-free, bounded in time): does it have this vendor's accelerators?"""

    @abstractmethod
    def claims(self, probe_output: Mapping[str, Any]) -> bool:
        """Whether a probe's inventory (bench.cluster.probe's dict, possibly recorded) is this vendor's."""

    @abstractmethod
    def inventory(self) -> dict:
        """This node's accelerators now: {"gpus": [...], "driver_version", "cuda_version", "error", "source"}."""

    @abstractmethod
    def links(self, timeout: float) -> Links:
        """How this node's accelerators reach each other, read now, each tool within `timeout` seconds
        (Links() where the vendor has no links to read)."""

    @abstractmethod
    def health_live(self, report, root: str = "/sys") -> None:
        """Read this node's accelerators' health now into `report` (gpus, findings, read/not_read)."""

    @abstractmethod
    def health_saved(self, report, folder: str, present: set[str], read_text: Callable[[str], str]) -> None:
        """Read the vendor's saved outputs among `present` (file names in `folder`) into `report`, each file
        through `read_text` (bench.cluster.health.saved's: size cap, UTF-8, a one-line BadInput naming it)."""

    @property
    @abstractmethod
    def saved_files(self) -> tuple[str, ...]:
        """The file names of a saved report folder this backend reads (its tools' outputs), in reading order."""

    @property
    def saved_gpu_files(self) -> tuple[str, ...]:
        """Those of saved_files that list the GPUs (a folder without any: the "gpu" source not read)."""
        return self.saved_files

    @abstractmethod
    def sampler(self, every: float) -> Sampler | None:
        """The burn's sampler for this node's devices, None where the vendor has none (CPU)."""

    def intra(self, gpus: list[dict], topo: dict | None, nvlink: dict | None, pcie: dict) -> dict:
        """How two or more of this vendor's GPUs reach each other, as a kind (intra_result's shape), from the
        links() a node gave (topo the matrix, nvlink the per-device links; either None where not read) and the
        GPUs' PCIe links by bus id. A backend that reads no links says unknown."""
        return intra_result("unknown", len(gpus), "the GPU links could not be read",
                            f"the {self.name} backend reads no links between GPUs")

    def peak(self, name: str | None, memory_mib: int | None = None) -> GpuSpec | None:
        """The device's peak figures (bench/data/gpu_specs.json's entry) by its name as the tools print it."""
        return lookup(name, memory_mib=memory_mib) if name else None
