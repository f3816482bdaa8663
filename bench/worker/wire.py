"""What this host put on the wire while its ranks trained, from the OS's own counters.

    w = Wire.for_backend("gloo")     # on one rank per host (local rank 0)
    w.start(); ... the steady steps ...; w.stop()
    w.result()                       # {"bytes", "source", "nic": {...}, "ib": {...}} or {"bytes": None, "reason"}

Two counters, both per host and cumulative since boot, so a host reads them
once before the steady steps and once after:

  NIC  /sys/class/net/<iface>/statistics/tx_bytes of the interfaces the ranks
       talk on: GLOO_SOCKET_IFNAME (exact names) or NCCL_SOCKET_IFNAME
       (NCCL's rules: a prefix, `=name` exact, `^prefix` excluded) when set,
       else every interface but loopback and bridges (a bridge counts again
       what its ports send). Whole frames: TCP/IP and Ethernet headers in.
  IB   /sys/class/infiniband/<dev>/ports/<p>/counters/port_xmit_data, in units
       of 4 bytes (the port's octets / 4): RDMA traffic (NCCL's IB and RoCE
       transports), which the NIC counters never see.

IPoIB traffic shows on both (the ib0 interface and its port), so the host's
figure is the larger of the two sums, never their sum; `source` says which.
What neither can see: traffic between ranks of one host (loopback, shared
memory, NVLink, PCIe), and what they see besides the training: any other
process's traffic on those interfaces in the window (ssh, NFS, another job).
An HCA without extended counters keeps port_xmit_data in 32 bits, and it
stops at its maximum: a port read at that maximum is named in `saturated`
(its figure is then too low).
"""

from __future__ import annotations

import glob
import os
from typing import Any

_NET = "/sys/class/net"
_IB = "/sys/class/infiniband"
IB_UNIT = 4           # port_xmit_data counts 4-byte words
_IB32_MAX = 2**32 - 1


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def _selected(names: list[str], spec: str | None, nccl: bool) -> list[str]:
    """The interfaces a socket ifname variable names (NCCL's prefix rules or gloo's exact names)."""
    if not spec:
        return [n for n in names if n != "lo" and not os.path.isdir(os.path.join(_NET, n, "bridge"))]
    tokens = [t for t in spec.split(",") if t]
    if not nccl:
        return [n for n in names if n in tokens]
    if spec.startswith("^"):
        excluded = [t.lstrip("^") for t in tokens]
        return [n for n in names if n != "lo" and not any(n.startswith(t) for t in excluded)]
    out = []
    for n in names:
        for t in tokens:
            if (t.startswith("=") and n == t[1:]) or (not t.startswith("=") and n.startswith(t)):
                out.append(n)
                break
    return out


def nic_counters(backend: str, environ: dict[str, str] | None = None) -> dict[str, int]:
    env = os.environ if environ is None else environ
    names = sorted(os.listdir(_NET)) if os.path.isdir(_NET) else []
    spec = env.get("NCCL_SOCKET_IFNAME") if backend == "nccl" else env.get("GLOO_SOCKET_IFNAME")
    out = {}
    for n in _selected(names, spec, backend == "nccl"):
        v = _read_int(os.path.join(_NET, n, "statistics", "tx_bytes"))
        if v is not None:
            out[n] = v
    return out


def ib_counters() -> dict[str, int]:
    """Each IB port's transmitted bytes (port_xmit_data x 4), by 'device/port'."""
    out = {}
    for path in sorted(glob.glob(os.path.join(_IB, "*", "ports", "*", "counters", "port_xmit_data"))):
        v = _read_int(path)
        if v is not None:
            parts = path.split(os.sep)
            out[f"{parts[-5]}/{parts[-3]}"] = v
    return out


class Wire:
    def __init__(self, backend: str, environ: dict[str, str] | None = None) -> None:
        self.backend = backend
        self._env = environ
        self._start: tuple[dict[str, int], dict[str, int]] | None = None
        self._stop: tuple[dict[str, int], dict[str, int]] | None = None

    def _read(self) -> tuple[dict[str, int], dict[str, int]]:
        return nic_counters(self.backend, self._env), ib_counters()

    def start(self) -> None:
        self._start = self._read()

    def stop(self) -> None:
        if self._start is not None:
            self._stop = self._read()

    def result(self) -> dict[str, Any]:
        if self._start is None or self._stop is None:
            return {"bytes": None, "reason": "the counters were not read around the steady steps"}
        (nic0, ib0), (nic1, ib1) = self._start, self._stop
        nic = {k: nic1[k] - nic0[k] for k in nic0 if k in nic1}
        ib = {k: (ib1[k] - ib0[k]) * IB_UNIT for k in ib0 if k in ib1}
        if not nic and not ib:
            return {"bytes": None, "reason": "no network interface or InfiniBand port counter to read on this host"}
        nic_sum, ib_sum = sum(nic.values()), sum(ib.values())
        out: dict[str, Any] = {"bytes": max(nic_sum, ib_sum), "source": "ib" if ib_sum > nic_sum else "nic",
                               "nic": nic, "ib": ib}
        saturated = [k for k in ib1 if ib1[k] == _IB32_MAX]
        if saturated:
            out["saturated"] = saturated
        return out
