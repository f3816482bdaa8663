"""Which network NCCL used, and over which devices, as its INFO log says (NCCL_DEBUG=INFO, subsystems INIT,NET).

    seen = parse(open("logs/rank0.log").read())   # NetSeen: networks, devices, channels
    seen = read(run_dir, [0, 1, 2, 3])             # every rank's log of a launch, merged
    ok, said = carried(seen, "IB", "mlx5_0")        # (False, "NCCL used network IB over mlx5_0, mlx5_1 ...")

The lines read, as NCCL 2.3 to 2.2x print them (tests/fixtures/nccl/SOURCES.md):
  NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB ib0:10.0.0.1<0>   a transport and its devices
  NET/IB : Using [0]={[0] mlx5_2:1/RoCE, [1] mlx5_3:1/RoCE} ...             fused NICs: one device, two HCAs
  NET/Socket : Using [0]eth0:10.0.0.1<0> [1]eth1:10.0.1.1<0>               the socket transport's interfaces
  NET/IB: [0] mlx5_1:1/IB                                                  NCCL 2.3: one line per device
  NET/IB : No device found.                                                (NCCL then falls back to sockets)
  Using network IBext_v8 / Using internal Network IB                       the transport the communicator took
  Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA                   what carried a channel: device 0
Network names of one family share their device list: a plugin such as
nccl-rdma-sharp-plugins prints its devices under "NET/IB" and its channels
under "NET/IBext_v8".
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

_USING = re.compile(r"NET/([\w .-]+?) : Using (.*)$")
_OLD_DEVICE = re.compile(r"NET/(\w+): \[(\d+)\] ([\w.-]+):")
_ITEM = re.compile(r"\[(\d+)\]\s*(=\{[^}]*\}|[^\s\[;]+)")
_NAME = re.compile(r"([\w.-]+):")
_NO_DEVICE = re.compile(r"NET/([\w .-]+?) : No device found")
_CHOSEN = re.compile(r"Using (?:internal )?[Nn]etwork (.+?)\s*$")
_CHANNEL = re.compile(r"via NET/(.+?)/(\d+)")
_MAX_BYTES = 8 << 20  # NCCL's INIT lines come first; a rank's log past this is its own output


@dataclass
class NetSeen:
    """What a log says of NCCL's network: each transport's devices by index, the transports chosen, the channels."""

    devices: dict[str, dict[int, list[str]]] = field(default_factory=dict)  # family -> index -> HCA/interface names
    chosen: set[str] = field(default_factory=set)           # "IB", "IBext_v8", "Socket"
    channels: set[tuple[str, int]] = field(default_factory=set)  # (network, device index) that carried a channel
    no_device: set[str] = field(default_factory=set)        # transports that found no device

    def merge(self, other: NetSeen) -> None:
        for fam, devs in other.devices.items():
            self.devices.setdefault(fam, {}).update(devs)
        self.chosen |= other.chosen
        self.channels |= other.channels
        self.no_device |= other.no_device

    @property
    def empty(self) -> bool:
        return not (self.devices or self.chosen or self.channels)


def family(net: str) -> str:
    """IB, IBext, IBext_v8 -> "IB" (NCCL's IB transport and plugins built on it); Socket; else the name."""
    return "IB" if net.startswith("IB") else net


def _names(item: str) -> list[str]:
    return _NAME.findall(item) if item.startswith("=") else [_NAME.match(item + ":").group(1)]


def parse(text: str) -> NetSeen:
    seen = NetSeen()
    for line in text.splitlines():
        if "NCCL INFO" not in line:
            continue
        info = line.split("NCCL INFO", 1)[1]
        if m := _USING.search(info):
            listed = m.group(2).split("; OOB")[0]
            devs = {int(i): _names(item) for i, item in _ITEM.findall(listed)}
            if devs:
                seen.devices[family(m.group(1))] = devs
        elif m := _OLD_DEVICE.search(info):
            seen.devices.setdefault(family(m.group(1)), {})[int(m.group(2))] = [m.group(3)]
        elif m := _NO_DEVICE.search(info):
            seen.no_device.add(m.group(1))
        elif m := _CHOSEN.search(info):
            seen.chosen.add(m.group(1))
        for net, idx in _CHANNEL.findall(info):
            seen.channels.add((net, int(idx)))
    return seen


def read(run_dir: str, ranks: list[int]) -> NetSeen:
    """The ranks' logs (logs/rank<R>.log, by name), merged; a log that cannot be read adds nothing."""
    seen = NetSeen()
    for r in ranks:
        try:
            with open(os.path.join(run_dir, "logs", f"rank{r}.log"), "rb") as f:
                seen.merge(parse(f.read(_MAX_BYTES).decode("utf-8", "replace")))
        except OSError:
            continue
    return seen


def used(seen: NetSeen) -> tuple[set[str], set[str]]:
    """(the transports NCCL used, the devices that carried its channels; those it listed where no channel line
    says which)."""
    nets = set(seen.chosen) | {net for net, _ in seen.channels}
    if not nets:  # older NCCL says no "Using network": the IB transport is taken whenever it lists a device
        nets = {"IB"} if "IB" in seen.devices else set(seen.devices)
    devices: set[str] = set()
    for net, idx in seen.channels:
        devices.update(seen.devices.get(family(net), {}).get(idx) or [f"{net} device {idx} (not listed)"])
    if not seen.channels:
        for net in nets:
            for names in seen.devices.get(family(net), {}).values():
                devices.update(names)
    return nets, devices


def carried(seen: NetSeen, want: str, device: str) -> tuple[bool, str]:
    """Whether NCCL's traffic went by transport family `want` ("IB" or "Socket") over `device` alone, and what
    its log says it used, in words."""
    if seen.empty:
        return False, ("NCCL's INFO log names no network (no 'NET/... : Using', 'Using network' or 'via NET/' "
                       "line in the ranks' logs): which device carried the traffic cannot be told")
    nets, devices = used(seen)
    said = (f"NCCL used network {', '.join(sorted(nets)) or '?'} over {', '.join(sorted(devices)) or 'no device'}"
            + (f" ({', '.join(sorted(seen.no_device))}: no device found)" if seen.no_device else ""))
    wrong_net = [n for n in nets if family(n) != want]
    if not nets or wrong_net:
        return False, f"{said}, not its {want} transport"
    if devices != {device}:
        return False, f"{said}, not {device} alone"
    return True, said
