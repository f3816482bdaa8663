"""A GPU rank's copies (issue 48 item 3): its host link the least of every link on its way up, maximum and now;
each kind all at once behind its own barrier over a window; its pinned buffers freed where torch can.

No GPU here. The link: fake sysfs trees holding recorded files only (tests/fixtures/net/SOURCES.md: a GPU card at
Gen5 x16 under an upstream port trained to Gen4 x8, nokyan/resources#512; NCCL's spellings of a Gen4 x16 card in
a Gen3 port); folders whose files were not recorded hold none. The copies: a stand-in for the part of torch.cuda
they use (tensors whose copy_ advances a clock by bytes / rate, events that read that clock, streams), to check
the flow (barriers, their order, the buffers made before the first, the window, the record's words on the pinned
memory) and not any figure; the figures are benchmarks/gpu-check.sh's on a GPU.
"""

from __future__ import annotations

import contextlib
import os
import types

import pytest

from bench.analysis import copies as judge_copies
from bench.core import pcie
from bench.worker import binding, gpu_copies
from bench.worker import copies as wcopies


def _tree(root, devices: dict[str, dict[str, str]], chain: list[str]) -> None:
    """sysfs: devices/pci0000:00/<chain...> with each device's recorded files, and bus/pci/devices links."""
    d = root / "devices" / "pci0000:00"
    (root / "bus" / "pci" / "devices").mkdir(parents=True)
    for name in chain:
        d = d / name
        d.mkdir(parents=True)
        for f, v in devices.get(name, {}).items():
            (d / f).write_text(v + "\n")
        (root / "bus" / "pci" / "devices" / name).symlink_to(os.path.relpath(d, root / "bus" / "pci" / "devices"))


# nokyan/resources#512 (pktpls, 2025-07-16), as `tail -v -n +1 .../*_link_*` printed them.
RESOURCES_512 = {
    "0000:01:00.0": {"current_link_speed": "16.0 GT/s PCIe", "current_link_width": "8",
                     "max_link_speed": "32.0 GT/s PCIe", "max_link_width": "16"},
    "0000:03:00.0": {"current_link_speed": "32.0 GT/s PCIe", "current_link_width": "16",
                     "max_link_speed": "32.0 GT/s PCIe", "max_link_width": "16"},
}


def test_a_gpu_s_link_is_the_least_on_its_way_up_its_maximum_and_what_it_trained_to(tmp_path):
    _tree(tmp_path, RESOURCES_512, ["0000:00:01.1", "0000:01:00.0", "0000:02:00.0", "0000:03:00.0"])
    got = pcie.link("00000000:03:00.0", str(tmp_path))   # NVML's spelling of the bus id
    assert (got["gen"], got["width"], got["gen_now"], got["width_now"]) == (5, 16, 4, 8)
    assert got["path"] == ["0000:03:00.0", "0000:02:00.0", "0000:01:00.0", "0000:00:01.1"]
    b = binding.pci_device("0000:03:00.0", str(tmp_path))
    assert (b["pcie_gen"], b["pcie_width"], b["pcie_gen_now"], b["pcie_width_now"]) == (5, 16, 4, 8)
    # Before issue 48 the rank read its own max_link_* alone: Gen5 x16, and nothing of the x8 it trained to.


def test_a_gen4_card_in_a_gen3_port_is_judged_as_gen3(tmp_path):
    """NCCL's kvDictPciGen spellings (tests/fixtures/net/SOURCES.md): the card's "16.0 GT/s PCIe", the port's older
    "8 GT/s"; the port's max is the slot's."""
    _tree(tmp_path, {"0000:00:01.0": {"max_link_speed": "8 GT/s", "max_link_width": "16"},
                     "0000:01:00.0": {"max_link_speed": "16.0 GT/s PCIe", "max_link_width": "16"}},
          ["0000:00:01.0", "0000:01:00.0"])
    got = pcie.link("0000:01:00.0", str(tmp_path))
    assert (got["gen"], got["width"], got["gen_now"], got["width_now"]) == (3, 16, None, None)
    assert pcie.link("not-a-bus", str(tmp_path))["path"] == [] and pcie.link(None)["gen"] is None


def test_the_copy_s_line_shows_the_link_s_maximum_and_what_it_ran_at():
    """NVIDIA/nvbandwidth#6's slow H100 (14.2 GB/s against 57) with the link of nokyan/resources#512 beside it: the
    reference is the maximum's (Gen5 x16), the line says what the link trained to."""
    (row,) = judge_copies.judge([{"gpu": "n:0", "model": "NVIDIA H100 80GB HBM3", "kind": "h2d", "gbps": 14.2,
                                  "pcie_gen": 5, "pcie_width": 16, "pcie_now": (4, 8)}])
    assert row.status == "FAIL" and "H2D 14.20 GB/s over PCIe Gen5 x16 (running at Gen4 x8)," in row.line
    assert "published for PCIe gen5 x16 H2D" in row.line
    (same,) = judge_copies.judge([{"gpu": "n:0", "model": "NVIDIA H100 80GB HBM3", "kind": "h2d", "gbps": 56.7,
                                   "pcie_gen": 5, "pcie_width": 16, "pcie_now": (5, 16)}])
    assert "over PCIe Gen5 x16," in same.line and "running" not in same.line
    (cpu,) = judge_copies.judge([{"gpu": "c:0", "model": "cpu", "kind": "host", "gbps": 5.0, "pcie_gen": None,
                                  "pcie_width": None, "pcie_now": (None, None)}])
    assert "PCIe" not in cpu.line


class _Clock:
    t = 0.0


class _Tensor:
    def __init__(self, n: int, where: str, log: list):
        self.n, self.where, self.log = n, where, log

    def fill_(self, _):
        self.log.append(("fill", self.where))

    def copy_(self, src, non_blocking=False):
        rate = {("device", "pinned"): 45e9, ("pinned", "device"): 50e9}.get((self.where, src.where), 2000e9)
        _Clock.t += self.n / rate


class _Event:
    def __init__(self, enable_timing=True):
        self.at = None

    def record(self):
        self.at = _Clock.t

    def synchronize(self):
        pass

    def elapsed_time(self, end):
        return (end.at - self.at) * 1e3


class _Stream:
    def wait_stream(self, _):
        pass


def fake_torch(host_empty: bool, log: list):
    def empty(n, dtype=None, pin_memory=False, device=None):
        log.append(("alloc", "pinned" if pin_memory else "device"))
        return _Tensor(n, "pinned" if pin_memory else "device", log)

    cuda = types.SimpleNamespace(Stream=lambda device: _Stream(), synchronize=lambda device=None: None,
                                 current_stream=lambda device: _Stream(), stream=lambda s: contextlib.nullcontext(),
                                 Event=_Event, empty_cache=lambda: log.append(("empty_cache", "device")))
    c = types.SimpleNamespace(**({"_host_emptyCache": lambda: log.append(("empty_cache", "pinned"))}
                                 if host_empty else {}))
    return types.SimpleNamespace(uint8="uint8", empty=empty, cuda=cuda, _C=c,
                                 __version__="2.14.1+cu130" if host_empty else "2.7.1+cu126")


def test_each_kind_all_at_once_is_timed_behind_its_own_barrier_over_a_window(tmp_path, monkeypatch):
    log: list = []
    monkeypatch.setattr(gpu_copies, "WINDOW_S", 0.05)
    spec = {"host_mb": 256, "memory_mb": 1024, "iters": 10,
            "barrier": {"name": "v-copies-1", "count": 16, "timeout_s": 60}}

    def wait(barrier, rank, per_rank):
        log.append(("barrier", barrier["name"]))
        return 0.0

    got = wcopies._gpu_phases(fake_torch(True, log), "cuda:0", spec, 3, str(tmp_path / "lock"), wait,
                              lambda *a: None, str(tmp_path))
    barriers = [x for _, x in ((k, w) for k, w in log if k == "barrier")]
    assert barriers == ["v-copies-1-alone", "v-copies-1-together-h2d", "v-copies-1-together-d2h",
                        "v-copies-1-together-both", "v-copies-1-together-d2d"]
    first = log.index(("barrier", "v-copies-1-alone"))
    assert all(k in ("alloc", "fill") for k, _ in log[:first])   # buffers made and filled before any barrier
    assert got["alone"]["h2d"] == pytest.approx(45.0) and got["together"]["d2h"] == pytest.approx(50.0)
    assert got["together"]["both"] == pytest.approx(2 * (256 << 20) / ((256 << 20) / 45e9 + (256 << 20) / 50e9)
                                                     / 1e9)
    assert got["together"]["d2d"] == pytest.approx(4000.0)   # 2000 GB/s copied: read and write counted
    assert all(n >= gpu_copies.MIN_COPIES for n in got["together_copies"].values())
    assert got["pinned"] == "pinned buffers freed (torch._C._host_emptyCache)" and log[-1] == ("empty_cache", "pinned")
    assert "each kind behind its own barrier, the median copy of a 0.05 s window" in got["timed"]


def test_a_torch_without_host_empty_cache_says_its_pinned_buffers_stay():
    """torch 2.7.1 (the Pascal image's) has no torch._C._host_emptyCache (its torch/_C/__init__.pyi); 2.14.1 has."""
    log: list = []
    c = gpu_copies.GpuCopies(fake_torch(False, log), "cuda:0", host_mb=1, memory_mb=1)
    assert c.free() == ("pinned buffers kept in torch 2.7.1+cu126's host cache (it has no "
                        "torch._C._host_emptyCache)")
    assert ("empty_cache", "device") in log and ("empty_cache", "pinned") not in log
