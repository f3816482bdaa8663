"""A node hot at once, judged (bench.analysis.burn) on sample series built from real readings.

No public per-second recording of a node's GPUs throttling under load was found (tests/fixtures/health/SOURCES.md,
"Throttle samples"). The series here are built, and only built, from the two real `nvidia-smi -q` recordings of
8x H100 nodes with active clock event reasons: each GPU's readings as recorded (SM and memory clock, temperature,
power draw and limit, the active reasons as NVML's bits) and its recorded maximum SM clock ("Max Clocks"). A
burn of 180 one-second samples holds a GPU at its maximum clock with no reason active for the first 90 s and at
its recorded reading for the last 90 s. No throughput was recorded, so none is made up: the samples carry none and
the judging uses the SM clock, as it does for any series without throughput (and says so in its line).
"""

from __future__ import annotations

from bench.analysis import burn
from bench.cluster.findings import entry
from bench.cluster.accel.nvidia.smi_query import _blocks
from tests.health_fixtures import HEALTH, text

BRAKE = HEALTH / "nvidia-smi-q_h100x8_hw-slowdown-power-brake-active.txt"     # all 8: HW slowdown + power brake
CAPPED = HEALTH / "nvidia-smi-q_h100x8_gpu2-sw-power-cap-sw-thermal-active.txt"  # GPU 2: SW cap, brake, SW thermal
_BITS = {("SW Power Cap",): 0x4, ("HW Slowdown",): 0x8, ("SW Thermal Slowdown",): 0x20,
         ("HW Slowdown", "HW Thermal Slowdown"): 0x40, ("HW Slowdown", "HW Power Brake Slowdown"): 0x80}


def _num(v: str) -> float:
    return float(v.split()[0])


def readings(path) -> list[dict]:
    """Per GPU of a recording: its sample as recorded, and its maximum SM clock."""
    out = []
    for bus, d in _blocks(text(path)):
        reasons = sum(bit for key, bit in _BITS.items() if d.get(("Clocks Event Reasons", *key)) == "Active")
        out.append({"bus": bus, "max_sm": _num(d[("Max Clocks", "SM")]),
                    "sample": dict(sm_mhz=_num(d[("Clocks", "SM")]), mem_mhz=_num(d[("Clocks", "Memory")]),
                                   temp_c=_num(d[("Temperature", "GPU Current Temp")]),
                                   power_w=_num(d[("GPU Power Readings", "Power Draw")]),
                                   power_limit_w=_num(d[("GPU Power Readings", "Current Power Limit")]),
                                   reasons=reasons)})  # fmt: skip
    return out


def series(first: dict, last: dict, seconds: int = 180) -> list[burn.Sample]:
    return [burn.Sample(t=float(t), **(first if t < seconds // 2 else last)) for t in range(seconds)]


def at_max(r: dict) -> dict:
    """The GPU at its recorded maximum SM clock with no reason active, its other readings as recorded."""
    return dict(r["sample"], sm_mhz=r["max_sm"], reasons=0)


def test_the_recordings_read_as_the_sources_say():
    brake, capped = readings(BRAKE), readings(CAPPED)
    assert len(brake) == len(capped) == 8
    assert {(r["sample"]["sm_mhz"], r["sample"]["reasons"], r["max_sm"]) for r in brake} == {(86.0, 0x88, 1980.0)}
    assert brake[0]["sample"] == dict(sm_mhz=86.0, mem_mhz=2619.0, temp_c=29.0, power_w=67.74, power_limit_w=700.0,
                                      reasons=0x88)
    assert capped[2]["bus"] == "00000000:75:00.0"
    assert capped[2]["sample"] == dict(sm_mhz=1980.0, mem_mhz=2619.0, temp_c=39.0, power_w=118.01, power_limit_w=700.0,
                                       reasons=0x4 | 0x20 | 0x80)


def test_a_node_whose_power_brake_slows_every_gpu_warns_each_as_the_node_s_power():
    rows = burn.judge({f"h100:{i}": series(at_max(r), r["sample"]) for i, r in enumerate(readings(BRAKE))})
    assert [(r.status, r.code) for r in rows] == [("WARN", "burn-fell-behind")] * 8
    b = rows[0].summary
    assert (b.by, b.first, b.last, round(b.clock_drop, 3), b.peak_temp_c) == ("SM clock", 1980.0, 86.0, 0.957, 29.0)
    assert b.throttled == 0.5 and b.by_reason == {"hw_slowdown": 0.5, "hw_power_brake": 0.5}
    assert rows[0].line == ("h100:0: first minute 1980 MHz (SM clock: no throughput sampled), last 86 (-95.7%, "
                            "noise line 2.0%); throttled 50% of 180 samples (hw_slowdown 50%, hw_power_brake 50%); "
                            "SM clock -96%; peak 29 C; power up to 10% of its limit; fell behind its first minute, "
                            "as its 7 peers did (their median -95.7%): the node's cooling or power")


def test_reasons_active_at_full_clock_are_counted_and_do_not_fail_a_gpu_that_kept_its_speed():
    """The capped recording's GPU 2 ran at 1980 MHz with SW power cap, power brake and SW thermal all active: the
    last two are throttles, the power cap is counted apart (issue 48)."""
    gpus = readings(CAPPED)
    rows = burn.judge({f"h100:{i}": series(at_max(r), r["sample"]) if i == 2 else series(r["sample"], r["sample"])
                       for i, r in enumerate(gpus)})
    assert [r.status for r in rows] == ["PASS"] * 8
    b = rows[2].summary
    assert (b.first, b.last, b.clock_drop, b.throttled, b.at_power_limit) == (1980.0, 1980.0, 0.0, 0.5, 0.5)
    assert b.by_reason == {"sw_thermal": 0.5, "hw_power_brake": 0.5}
    assert "throttled 50% of 180 samples" in rows[2].line and "peak 39 C" in rows[2].line
    assert "at its power limit 50% (SW power cap: normal under load)" in rows[2].line


def test_one_gpu_its_peers_do_not_follow_fails():
    """Two recordings joined: the capped node's 8 GPUs held at their maximum clock, and GPU 5 ending at the brake
    recording's GPU 0 reading (86 MHz, HW slowdown and power brake)."""
    gpus, braked = readings(CAPPED), readings(BRAKE)[0]["sample"]
    rows = burn.judge({f"h100:{i}": series(at_max(r), braked if i == 5 else at_max(r)) for i, r in enumerate(gpus)})
    assert [(r.gpu, r.status, r.code) for r in rows if r.status != "PASS"] == [("h100:5", "FAIL",
                                                                                "burn-throttled-alone")]
    assert rows[5].line.endswith("fell behind its first minute and its 7 peers did not (their median +0.0%)")


def test_a_gpu_alone_on_its_node_can_only_warn_and_the_codes_are_the_health_table_s():
    (r,) = burn.judge({"solo:0": series(at_max(readings(BRAKE)[0]), readings(BRAKE)[0]["sample"])})
    assert (r.status, r.code) == ("WARN", "burn-fell-behind") and "no other GPU of the node" in r.line
    assert entry("burn-fell-behind")["severity"] == "warn" and entry("burn-throttled-alone")["severity"] == "fail"


def test_throughput_when_sampled_is_what_is_judged_and_a_fall_within_noise_passes():
    """Throughput here is the recorded SM clock's, one per interval (so that no figure is made up): the judging
    takes the samples' throughput over the clock where every sample has one."""
    r = readings(BRAKE)[0]
    steady = [burn.Sample(t=float(t), sm_mhz=r["max_sm"], throughput=r["max_sm"]) for t in range(180)]
    (v,) = burn.judge({"a": steady})
    assert (v.status, v.summary.by, v.summary.fall) == ("PASS", "throughput", 0.0)
