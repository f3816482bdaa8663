"""Issue 41 items 1-3 on the ranks: the pure parts of the copies and the burn, on the rank and in validate.

The rank's sysfs readings against a fake /sys, its node-local turn (flock),
its host copies on CPU; the burn's throughput per interval and its NVML
sampler against a fake pynvml (no GPU here); validate's joining of the two,
its binding words, and the per-node plot.
"""

from __future__ import annotations

import os
import threading
import time
import types

import pytest

from bench.validate import burn as vburn
from bench.validate import copies as vcopies
from bench.validate.config import ValidateConfig
from bench.core.errors import BadInput
from bench.worker import burn as wburn
from bench.worker import binding as wbinding
from bench.worker import copies as wcopies


def _write(path, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def test_cpu_lists_go_both_ways():
    assert wbinding.cpu_list({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8"
    assert wbinding.parse_cpu_list("0-2,5,7-8\n") == {0, 1, 2, 5, 7, 8}
    assert wbinding.cpu_list(set()) == ""


def test_numa_nodes_and_a_gpus_link_come_from_sysfs(tmp_path):
    root = str(tmp_path)
    _write(f"{root}/devices/system/node/node0/cpulist", "0-31\n")
    _write(f"{root}/devices/system/node/node1/cpulist", "32-63\n")
    dev = f"{root}/bus/pci/devices/0000:19:00.0"
    _write(f"{dev}/numa_node", "1\n")
    _write(f"{dev}/max_link_speed", "32.0 GT/s PCIe\n")
    _write(f"{dev}/max_link_width", "16\n")
    assert wbinding.cpu_nodes({2, 3}, root) == [0]
    assert wbinding.cpu_nodes(range(64), root) == [0, 1]
    assert wbinding.pci_device("0000:19:00.0", root) == {"numa_node": 1, "pcie_gen": 5, "pcie_width": 16,
                                                         "pcie_gen_now": None, "pcie_width_now": None,
                                                         "pcie_path": ["0000:19:00.0"]}
    _write(f"{dev}/numa_node", "-1\n")   # the kernel's "not known" (a VM, a one-node machine)
    assert wbinding.pci_device("0000:19:00.0", root)["numa_node"] is None
    assert wbinding.pci_device(None, root) == {"numa_node": None, "pcie_gen": None, "pcie_width": None,
                                               "pcie_gen_now": None, "pcie_width_now": None, "pcie_path": []}
    assert wbinding.cpu_nodes({0}, str(tmp_path / "none")) is None


def test_the_nodes_ranks_take_turns_on_a_node_local_lock(tmp_path):
    path = wcopies.lock_path(str(tmp_path / "vitbench-copies"), "/shared/results/run-7/")
    assert os.path.basename(path).startswith("vitbench-copies-run-7-") and path.endswith(".lock")
    # Named by the kernel, not the hostname: the suite's namespace hosts (and containers) share one machine's memory.
    assert wcopies.machine_id() in path and wcopies.machine_id() == open("/proc/sys/kernel/random/boot_id").read().strip()
    inside, overlap = [], []

    def one() -> None:
        with wcopies.turn(path):
            inside.append(1)
            overlap.append(len(inside))
            time.sleep(0.05)
            inside.pop()

    threads = [threading.Thread(target=one) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlap == [1, 1, 1]


def test_a_cpu_rank_copies_between_host_buffers_and_counts_a_memcpy_twice():
    torch = pytest.importorskip("torch")
    got = wcopies.measure(torch, torch.device("cpu"), host_mb=2, memory_mb=4, iters=2)
    assert set(got) == {"host", "d2d"} and all(x > 0 for x in got.values())


def test_a_cpu_figure_alone_is_its_best_window_and_all_at_once_the_mean_of_one():
    """The host clock counts whatever else ran on the core: a copy slowed for a stretch (here the first 12 copies
    take 5 ms, the rest 1 ms) is the best window's mean alone (a slow path is slow in every window), and the
    mean over the whole stretch all at once (time-sliced ranks: a best window would flatter one)."""
    import types

    calls = []

    def copy() -> None:
        calls.append(1)
        time.sleep(0.005 if len(calls) <= 13 else 0.001)   # the untimed first call, then 12 slow ones (60 ms)

    cpu = types.SimpleNamespace(type="cpu")
    best = wcopies._Timer(None, cpu, windows=3).seconds(copy, iters=1)
    assert best < 0.0015, best     # the last of three 33 ms windows: 1 ms copies (and the sleep's overshoot)
    calls.clear()
    mean = wcopies._Timer(None, cpu, windows=1).seconds(copy, iters=1)
    assert mean > 0.0015, mean     # 60 ms of slow copies in the one 100 ms window: about 2 ms


def test_throughput_per_interval_from_the_step_ends():
    # Steps of 0.25 s for 2 s, then of 0.5 s: 4 steps a second, then 2.
    ends = [0.25 * k for k in range(1, 9)] + [2 + 0.5 * k for k in range(1, 5)]
    got = wburn.intervals(ends, 0.0, 1.0, images=16)
    assert [t for t, _ in got] == [1.0, 2.0, 3.0, 4.0]
    assert [round(x) for _, x in got] == [64, 64, 32, 32]
    # A step longer than the interval: the interval it spans takes its rate.
    assert [round(x) for _, x in wburn.intervals([0.5, 3.0], 0.0, 1.0, images=10)] == [20, 4, 4]
    assert wburn.intervals([], 0.0, 1.0, 1) == []


class _NVMLError(Exception):
    """pynvml's NVMLError: its message and NVML's return code as .value (nvml.h)."""

    def __init__(self, text: str, value: int):
        super().__init__(text)
        self.value = value


def _fake_nvml(clocks: list[int], reasons: list[int]) -> types.SimpleNamespace:
    """pynvml's calls the sampler makes, for two GPUs; the second a GeForce that reads no power (NotSupported)."""
    state = {"k": 0, "ecc": 0}

    def not_supported(*_):
        raise _NVMLError("Not Supported", 3)

    def power(h):
        if h == 1:
            return not_supported()
        return 650_000

    def wait(_set, _ms):
        if state.get("xid_sent"):
            raise _NVMLError("Timeout", 10)
        state["xid_sent"] = True
        return types.SimpleNamespace(device=0, eventData=79)

    def ecc(h, *_):
        state["ecc"] += 1 if h == 0 else 0
        return state["ecc"] - 1 if h == 0 else 0

    return types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetPciInfo=lambda h: types.SimpleNamespace(busId=f"00000000:{0x19 + h:02X}:00.0".encode()),
        NVML_CLOCK_SM=0, NVML_CLOCK_MEM=1, NVML_TEMPERATURE_GPU=0, NVML_MEMORY_ERROR_TYPE_UNCORRECTED=1,
        NVML_VOLATILE_ECC=0, nvmlEventTypeXidCriticalError=8,
        nvmlDeviceGetClockInfo=lambda h, which: clocks[min(state["k"], len(clocks) - 1)] if which == 0 else 2619,
        nvmlDeviceGetTemperature=lambda h, _: 70 + h, nvmlDeviceGetPowerUsage=power,
        nvmlDeviceGetEnforcedPowerLimit=lambda h: 700_000,
        nvmlDeviceGetCurrentClocksEventReasons=lambda h: reasons[min(state["k"], len(reasons) - 1)],
        nvmlDeviceGetTotalEccErrors=ecc, nvmlEventSetCreate=lambda: "set", nvmlDeviceRegisterEvents=lambda *a: None,
        nvmlEventSetWait_v2=wait, _state=state)


def test_the_sampler_reads_every_gpu_of_the_node_and_what_was_raised_meanwhile():
    nvml = _fake_nvml([1980, 1980, 1400], [0, 0, 0x40])
    s = wburn.Sampler(1.0, nvml=nvml)
    assert s.open()
    for k in range(3):
        nvml._state["k"] = k
        s.sample(now=100.0 + k)
    part = s.stop()
    assert part["nvml_error"] is None and set(part["nvml"]) == {"00000000:19:00.0", "00000000:1A:00.0"}
    a, b = part["nvml"]["00000000:19:00.0"], part["nvml"]["00000000:1A:00.0"]
    assert a["sm_mhz"] == [1980, 1980, 1400] and a["reasons"] == [0, 0, 0x40] and a["power_w"] == [650.0] * 3
    assert b["power_w"] == [None] * 3 and b["temp_c"] == [71] * 3      # NotSupported: None, the rest read
    assert part["nvml_unsupported"] == {"00000000:1A:00.0": ["power_w"]} and not part["nvml_findings"]
    assert part["xids"][0]["xid"] == 79 and part["xids"][0]["bus_id"] == "00000000:19:00.0"
    assert part["ecc"]["00000000:19:00.0"]["end"] > part["ecc"]["00000000:19:00.0"]["start"]


def test_without_nvml_the_sampler_says_so():
    s = wburn.Sampler(1.0, nvml=types.SimpleNamespace(nvmlInit=lambda: (_ for _ in ()).throw(
        _NVMLError("NVML Shared Library Not Found", 12))))
    assert not s.open()
    assert s.error.startswith("no NVML here") and "Shared Library" in s.error
    assert s.stop() == {"nvml": None, "nvml_error": s.error, "xids": [], "ecc": {}, "nvml_findings": {},
                        "nvml_lost": [], "nvml_unsupported": {}, "nvml_api": [], "nvml_died": None}


def test_validate_joins_throughput_and_nvml_by_time():
    cols = {"t": [100.0, 101.1, 102.0], "sm_mhz": [1980, 1970, 1400], "reasons": [0, 0, 0x40],
            "temp_c": [60, 61, 88], "power_w": [600, 610, 700], "power_limit_w": [700] * 3, "mem_mhz": [2619] * 3}
    got = vburn.samples([[101.0, 500.0], [102.0, 450.0], [105.0, 440.0]], cols, t0=100.0)
    assert [(s.t, s.sm_mhz, s.reasons, s.throughput) for s in got] == [
        (1.0, 1970, 0, 500.0), (2.0, 1400, 0x40, 450.0), (5.0, None, None, 440.0)]  # none within a second of 105
    assert all(s.sm_mhz is None and s.throughput == 500.0 for s in vburn.samples([[101.0, 500.0]], None, 100.0))
    assert vburn.window_of(180) == 60 and vburn.window_of(20) == pytest.approx(20 / 3)


def test_a_short_cpu_burn_is_judged_on_its_throughput_alone():
    from bench.analysis import burn

    steady = {f"n1:{s}": vburn.samples([[float(t), 100.0 + (t % 2)] for t in range(1, 21)], None, 0.0)
              for s in range(3)}
    steady["n1:3"] = vburn.samples([[float(t), 100.0 if t < 10 else 60.0] for t in range(1, 21)], None, 0.0)
    rows = burn.judge(steady, vburn.window_of(20))
    assert [r.status for r in rows] == ["PASS", "PASS", "PASS", "FAIL"]
    assert "first 6.67 s" in rows[3].line and "SM clock" not in rows[3].line


def test_binding_words_and_the_far_socket():
    far, said = vcopies.binding_said({"cpus": "32-63", "cpu_numa_nodes": [1], "bus_id": "0000:19:00.0",
                                      "numa_node": 0})
    assert far and "another node than its GPU" in said
    near, said = vcopies.binding_said({"cpus": "0-63", "cpu_numa_nodes": [0, 1], "bus_id": "0000:19:00.0",
                                       "numa_node": 0})
    assert not near and "not bound" in said
    assert vcopies.binding_said({"cpus": "0-1", "cpu_numa_nodes": [0], "bus_id": None}) == (
        False, "CPUs 0-1 on NUMA node(s) 0 (no GPU)")
    assert "NUMA node not known" in vcopies.binding_said({"cpus": "0-7", "bus_id": "0000:19:00.0"})[1]


def test_burn_duration_option():
    assert ValidateConfig(level="full").burn_s() == 180
    assert ValidateConfig(level="quick").burn_s() == 0
    assert ValidateConfig(level="quick", burn="20s").burn_s() == 20
    assert ValidateConfig(level="full", burn="off").burn_s() == 0
    with pytest.raises(BadInput, match="--burn: 'warm' is not a duration"):
        ValidateConfig(burn="warm")


def test_the_plot_per_node_draws_throughput_and_nvml(tmp_path):
    pytest.importorskip("matplotlib")
    from bench.render.burn import plots

    cols = {"t": [1.0, 2.0, 3.0], "sm_mhz": [1980, 1980, 1400], "reasons": [0, 0, 0x40], "temp_c": [60, 70, 88],
            "power_w": [600, 650, None], "power_limit_w": [700] * 3, "mem_mhz": [2619] * 3}
    rec = {"measured": {"burn": {
        "gpu-node": {"seconds": 3, "start": 0.0, "nvml": {"00000000:19:00.0": cols}, "nvml_error": None,
                     "gpus": {"0": {"bus_id": "0000:19:00.0", "intervals": [[1.0, 500], [2.0, 490], [3.0, 300]]}}},
        "cpu-node": {"seconds": 3, "start": 0.0, "nvml": None, "nvml_error": "no NVML here",
                     "gpus": {"0": {"bus_id": None, "intervals": [[1.0, 50], [2.0, 49]]}}}}}}
    paths = plots(rec, str(tmp_path))
    assert [os.path.basename(p) for p in paths] == ["burn-gpu-node.png", "burn-cpu-node.png"]
    assert all(os.path.getsize(p) > 1000 for p in paths)
