"""Where a rank runs and where its GPU sits: its CPUs, their NUMA nodes, the GPU's bus id, NUMA node and PCIe link.

    b = binding(torch, device)    # {"cpus": "0-31", "cpu_numa_nodes": [0], "bus_id": "0000:19:00.0", "numa_node": 0,
                                  #  "pcie_gen": 5, "pcie_width": 16, "pcie_gen_now": 5, "pcie_width_now": 16, ...}

Read from sysfs (a fake root in tests): /sys/devices/system/node for the CPUs'
nodes, /sys/bus/pci/devices/<bus> for the GPU's node and (bench.core.pcie)
its link, the least of every link on its way up, maximum and now. Beside
validate's copies (bench.worker.copies) and the burn's rows.
"""

from __future__ import annotations

import os
import re

from bench.core import pcie


def cpu_list(cpus) -> str:
    """{0, 1, 2, 5} -> "0-2,5" (the kernel's cpulist form)."""
    out, run = [], []
    for c in sorted(cpus):
        if run and c != run[-1] + 1:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
            run = []
        run.append(c)
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def parse_cpu_list(text: str) -> set[int]:
    out: set[int] = set()
    for part in (text or "").strip().split(","):
        if "-" in part:
            a, b = part.split("-", 1)
            out.update(range(int(a), int(b) + 1))
        elif part.strip().isdigit():
            out.add(int(part))
    return out


def cpu_nodes(cpus, root: str = "/sys") -> list[int] | None:
    """The NUMA nodes of these CPUs (/sys/devices/system/node/node<N>/cpulist); None where sysfs has none."""
    base = os.path.join(root, "devices", "system", "node")
    try:
        names = [n for n in os.listdir(base) if re.fullmatch(r"node\d+", n)]
    except OSError:
        return None
    cpus = set(cpus)
    found = {int(n[4:]) for n in names if parse_cpu_list(pcie.read_text(os.path.join(base, n, "cpulist")) or "") & cpus}
    return sorted(found) if names else None


def pci_device(bus_id: str | None, root: str = "/sys") -> dict:
    """A GPU's NUMA node and PCIe link as sysfs gives them: {"numa_node", "pcie_gen", "pcie_width" (the most its
    way up to the root port can run at: bench.core.pcie), "pcie_gen_now", "pcie_width_now" (what it trained to),
    "pcie_path"}, None each where not known (numa_node -1 is the kernel's 'not known')."""
    if not bus_id:
        return {"numa_node": None, "pcie_gen": None, "pcie_width": None, "pcie_gen_now": None,
                "pcie_width_now": None, "pcie_path": []}
    numa = pcie.read_text(os.path.join(root, "bus", "pci", "devices", bus_id.lower(), "numa_node"))
    up = pcie.link(bus_id, root)
    return {"numa_node": int(numa) if numa and numa.lstrip("-").isdigit() and int(numa) >= 0 else None,
            "pcie_gen": up["gen"], "pcie_width": up["width"], "pcie_gen_now": up["gen_now"],
            "pcie_width_now": up["width_now"], "pcie_path": up["path"]}


def bus_id_of(torch, device) -> str | None:
    """The GPU's PCI address as sysfs names it (0000:19:00.0); None on a CPU rank."""
    if device.type != "cuda":
        return None
    p = torch.cuda.get_device_properties(device)
    return f"{p.pci_domain_id:04x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0"


def binding(torch, device, root: str = "/sys") -> dict:
    """Where the rank runs and where its GPU sits: its CPUs, their NUMA nodes, the GPU's bus id, NUMA node, link."""
    cpus = os.sched_getaffinity(0)
    bus = bus_id_of(torch, device)
    return {"cpus": cpu_list(cpus), "cpu_numa_nodes": cpu_nodes(cpus, root), "bus_id": bus, **pci_device(bus, root)}
