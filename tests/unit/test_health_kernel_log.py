"""The kernel log's GPU events, read from recorded logs of unhealthy nodes (tests/fixtures/health/SOURCES.md),
in each format a node prints: dmesg -T, dmesg --decode --time-format iso, syslog, journalctl -k, raw uptime."""

from __future__ import annotations

from datetime import datetime, timezone

from bench.cluster.health.kernel_log import findings, parse
from tests.health_fixtures import HEALTH, codes, text


def log(name: str) -> str:
    return text(HEALTH / name)


def test_xid119_gsp_timeouts_on_one_gpu_are_one_finding_that_resets_that_gpu():
    got = findings(log("dmesg_xid119_gsp-rpc-timeout_xe9680.txt"))
    assert codes(got) == [("xid-119", "fail", "reset-gpu", None)]
    f = got[0]
    assert f["bus_id"] == "0000:9b:00.0" and f["count"] == 5
    # dmesg -T prints local time: the first and last of the five, as this machine reads them.
    first = datetime(2025, 2, 23, 16, 24, 18).timestamp()
    last = datetime(2025, 2, 23, 16, 30, 13).timestamp()
    assert f["first_seen"] == datetime.fromtimestamp(first, timezone.utc).isoformat(timespec="seconds")
    assert f["last_seen"] == datetime.fromtimestamp(last, timezone.utc).isoformat(timespec="seconds")


def test_since_drops_the_events_before_it_and_counts_only_the_later_ones():
    since = datetime(2025, 2, 23, 16, 25, 0).timestamp()
    got = findings(log("dmesg_xid119_gsp-rpc-timeout_xe9680.txt"), since=since)
    assert [f["count"] for f in got] == [2]   # 16:27:12 and 16:30:13
    assert findings(log("dmesg_xid119_gsp-rpc-timeout_xe9680.txt"), since=last_plus_one()) == []


def last_plus_one() -> float:
    return datetime(2025, 2, 23, 16, 30, 14).timestamp()


def test_an_event_without_a_time_is_kept_whatever_since_says_and_says_its_time_is_unknown():
    got = findings(log("dmesg_xid63_row-remapper_line.txt"), since=4e9)
    assert codes(got) == [("xid-63", "warn", "reset-gpu", None)]
    assert got[0]["first_seen"] is None and "time not in the log" in got[0]["what"]
    assert got[0]["bus_id"] == "0000:10:1c.0"


def test_iso_decoded_dmesg_groups_629_xid13_and_7_xid43_as_the_applications_faults():
    got = findings(log("dmesg-decode-iso_xid13-xid43_repeated.txt"))
    assert codes(got) == [("xid-13", "info", "restart-app", None), ("xid-43", "info", "restart-app", None)]
    assert [f["count"] for f in got] == [629, 7]
    assert got[1]["first_seen"] == "2025-01-21T02:21:33+00:00" and got[1]["last_seen"] == "2025-01-21T04:41:44+00:00"


def test_iso_times_are_absolute_and_since_applies_to_them():
    since = datetime(2025, 1, 21, 4, 0, tzinfo=timezone.utc).timestamp()
    got = findings(log("dmesg-decode-iso_xid13-xid43_repeated.txt"), since=since)
    # 300 of the Xid 13 lines and two Xid 43 (04:13:34, 04:41:44) are after 04:00 (grep -c over the file)
    assert [(f["code"], f["count"]) for f in got] == [("xid-13", 300), ("xid-43", 2)]


def test_xid43_xid31_xid94_on_three_gpus_each_name_their_own_gpu():
    got = findings(log("dmesg-T-grep-NVRM_xid43-xid31-xid94_excerpt.txt"))
    assert [(f["code"], f["severity"], f["action"], f["bus_id"]) for f in got] == [
        ("xid-43", "info", "restart-app", "0000:00:05.0"),
        ("xid-31", "info", "restart-app", "0000:00:07.0"),
        ("xid-94", "warn", "restart-app", "0000:00:08.0"),
    ]


def test_syslog_xid48_and_xid64_fail_one_gpu_and_rminitadapter_fails_another():
    got = findings(log("syslog_xid48-dbe_xid64-retirement-failed_rminitadapter_excerpt.txt"), now=datetime(2024, 12, 3).timestamp())
    assert [(f["code"], f["severity"], f["action"], f["bus_id"], f["count"]) for f in got] == [
        ("rminit-failed", "fail", "reboot", "0000:0a:00.0", 3),
        ("xid-48", "fail", "reset-gpu", "0000:07:00.0", 1),
        ("xid-64", "fail", "reset-gpu", "0000:07:00.0", 1),
    ]
    # syslog has no year: the latest one that does not put the line in the future.
    assert got[1]["first_seen"] == datetime.fromtimestamp(datetime(2024, 12, 2, 11, 38, 47).timestamp(),
                                                          timezone.utc).isoformat(timespec="seconds")


def test_old_xid79_form_without_pid_and_the_fatal_aer_before_it_both_name_the_gpu():
    got = findings(log("dmesg_xid79_aer-surprise-down_fallen-off-bus_tesla_excerpt.txt"))
    assert [(f["code"], f["severity"], f["action"], f["bus_id"]) for f in got] == [
        ("aer-fatal", "fail", "reseat", "0000:02:00.0"),   # reported on the root port, tied to the GPU below it
        ("xid-79", "fail", "reboot", "0000:02:00.0"),
    ]
    assert "Surprise" not in got[0]["what"] and "pcieport 0000:00:02.0" in got[0]["what"]


def test_raw_uptime_stamps_become_absolute_only_with_the_boot_time():
    events = parse(log("dmesg_xid79_aer-surprise-down_fallen-off-bus_tesla_excerpt.txt"))
    assert {e.time for e in events} == {None}
    events = parse(log("dmesg_xid79_aer-surprise-down_fallen-off-bus_tesla_excerpt.txt"), boot_time=1_000_000.0)
    assert [e.time for e in events if e.kind == "xid"] == [1_000_000.0 + 74889.644138]


def test_fallen_off_the_bus_in_three_lines_without_an_xid_is_found():
    got = findings(log("dmesg_fallen-off-bus-no-xid_multiline_10de-26b5.txt"))
    assert [(f["code"], f["severity"], f["action"], f["bus_id"]) for f in got] == [
        ("fallen-off-bus", "fail", "reboot", "0000:b3:00.0")]


def test_journalctl_xid45_names_the_nvlink5_xids_that_caused_it_on_each_gpu():
    got = findings(log("journalctl-k_xid45-caused-by-xid145-xid149_excerpt.txt"))
    by = {(f["code"], f["bus_id"]): f for f in got}
    assert (by[("xid-149", "0000:dc:00.0")]["severity"], by[("xid-149", "0000:dc:00.0")]["action"]) == ("fail", "reset-gpu")
    assert {bus for code, bus in by if code == "xid-145"} == {"0000:ed:00.0", "0000:ba:00.0", "0000:97:00.0"}
    assert {bus for code, bus in by if code == "xid-45"} == {"0000:dc:00.0", "0000:ed:00.0", "0000:ba:00.0", "0000:97:00.0"}
    assert by[("xid-45", "0000:dc:00.0")]["severity"] == "info" and by[("xid-45", "0000:dc:00.0")]["count"] == 2


def test_nvswitch_sxid22013_printed_as_non_fatal_is_a_warning_on_the_switch():
    got = findings(log("dmesg_sxid22013_nvswitch-minion-dlreq_h100-ppcie_excerpt.txt"))
    assert [(f["code"], f["severity"], f["action"], f["bus_id"], f["count"]) for f in got] == [
        ("sxid-nonfatal", "warn", "watch", "0000:04:00.0", 8)]


def test_an_xid_the_table_does_not_list_is_the_unknown_xid_fallback_with_its_number():
    got = findings("[ 12.5] NVRM: Xid (PCI:0000:9b:00): 999, pid=1, name=x, something")
    assert codes(got) == [("xid-unknown", "warn", "watch", None)] and "Xid 999" in got[0]["what"]
