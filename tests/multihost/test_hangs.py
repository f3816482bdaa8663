"""Hung runs across the namespace hosts: which rank, on which host, where, and in which collective.

One fixture starts the runs together (their waits overlap: the suite's budget;
conftest.stalls runs them beside test_faults.wait_out's), each stalled from
outside bench's code:

  data      a sitecustomize only node3 sees (tests/faults.py, on_one_host) blocks bench's data
            loading from the 3rd batch on: rank 2 sleeps inside bench/worker/data.py
  sigstop   rank 1's process SIGSTOPped once the run trains
  tc        every packet to and from one host of a 2-host cluster of its own dropped (a FIFO of
            length 0 on both ends of its veth) once the run trains

each twice: "long", the collective timeout longer than --timeout, so bench's watchdog fires
while every rank is still silent (as NCCL ranks waiting in a CUDA stream are); and "default",
where the waiting ranks' own collective timeouts report first. Then:

- the one-line failure (stderr `bench: failed: hung at step N: ...`) names the stalled rank and
  its host first, and where it was; `ranks_at` says the same per rank, the others "waiting" in
  the same all_reduce #N;
- bench exits within its watchdog + 15 s of the stall (for "long": --timeout + 15 s);
- no process of the run is left on any host (test_faults.py's orphan checks).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bench.core import results
from bench.launch.cleanup import is_our_rank
from tests import hostile
from tests.faults import block_data_loading, on_one_host
from tests.multihost.test_faults import SECRET, Run, _seed_earlier, _wait_nothing_left

pytestmark = [pytest.mark.multihost, pytest.mark.slow]

LONG_T = 15          # "long" runs' --timeout (= their watchdog; the first step may take bench's 120 s)
LONG_COLLECTIVE = 600                                       # ... and their collective timeout
DEFAULT_T = 10       # "default" runs: collective timeout max(30, T) = 30 s, watchdog 30 + 15 s
GRACE_S = 15         # past the watchdog: the stack request (a few s), the stop, cleanup over ssh
START_LIMIT_S = 900
TIMINGS: dict[str, float] = {}
SEEN: dict[str, dict] = {}  # per run: the failure line, bench's own timeline, ranks_at in short (printed at the end)


@dataclass
class Hang:
    run: Run
    cluster: object
    watchdog_s: float
    fault: str
    fault_at: float | None = None     # monotonic: the stall (for "data": the first progress, which is before it)
    exited_at: float | None = None
    pids: dict[int, tuple[str, int]] = field(default_factory=dict)
    rec: dict | None = None
    left: list[str] = field(default_factory=list)
    earlier: tuple = ()               # (path, bytes) of an earlier run's results.jsonl in the same --out
    ended: threading.Event = field(default_factory=threading.Event)   # bench exited
    forged: dict | None = None        # what tests/hostile.py's forger saw ("sigstop, long": issue 46)
    head_ssh: list[str] = field(default_factory=list)  # pdsh's ssh clients still running when bench exited

    @property
    def took_s(self) -> float:
        return (self.exited_at or time.monotonic()) - (self.fault_at or 0.0)

    def line(self) -> str:
        """The one failure line bench printed."""
        lines = [x for x in self.run.stderr.splitlines() if x.startswith("bench: failed: ")]
        assert len(lines) == 1, self.run.stderr[-3000:]
        return lines[0]


def _tc(argv: list[str], check: bool = True) -> None:
    r = subprocess.run(argv, capture_output=True, text=True)
    assert r.returncode == 0 or not check, r.stderr


def _drop(cluster, host: str) -> None:
    """Every packet to and from `host` dropped: a FIFO of length 0 on both ends of its veth (netem is missing)."""
    _tc(["ip", "netns", "exec", cluster.ns_of(host), "tc", "qdisc", "add", "dev", "vb0", "root", "pfifo", "limit", "0"])
    _tc(["tc", "qdisc", "add", "dev", cluster.veth_of(host), "root", "pfifo", "limit", "0"])


def _undrop(cluster, host: str) -> None:
    _tc(["ip", "netns", "exec", cluster.ns_of(host), "tc", "qdisc", "del", "dev", "vb0", "root"], check=False)
    _tc(["tc", "qdisc", "del", "dev", cluster.veth_of(host), "root"], check=False)


def _forge(h: Hang) -> None:
    """tests/hostile.py's forger at h's hub until bench exits: hellos for every rank and for ranks outside the world,
    each with a done ok, a barrier of count 0 and a progress; then a progress every 0.1 s."""
    doc = hostile.hub_of(h.run.run_dir)

    def forge() -> None:
        h.forged = hostile.with_token(doc["addr"], doc["port"], doc["token"], h.run.world, until=h.ended)

    threading.Thread(target=forge, daemon=True).start()


def _ssh_of(run_dir: str) -> list[str]:
    """ssh clients on this machine (the head) whose command names the run's directory: pdsh's, one per host. Each
    runs in a session of its own (pdsh's ssh module calls setsid), out of the launcher's group that bench stops;
    before bench stopped them by PID, the one to the dropped host waited on after bench had exited."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if os.path.basename(argv[0]) == b"ssh" and run_dir.encode() in b" ".join(argv):
            out.append(f"{pid}: {b' '.join(argv)[:160].decode(errors='replace')}")
    return out


def _waiter(h: Hang) -> threading.Thread:
    """Drains bench's output and notes when it exits (each run on its own, while the others go on)."""
    def wait() -> None:
        h.run.stdout, h.run.stderr = h.run.proc.communicate()
        h.exited_at = time.monotonic()
        h.head_ssh = _ssh_of(h.run.run_dir)
        h.ended.set()
    t = threading.Thread(target=wait, daemon=True)
    t.start()
    return t


@pytest.fixture(scope="module")
def hangs(stalls) -> dict[str, Hang]:
    return stalls.part("hangs")


def run_hangs(cluster, pair, tmp: Path, faulted: threading.Event | None = None) -> dict[str, Hang]:
    """The six hung runs to their end; `pair`: hosts of their own for the tc runs (the dropped host must not cut
    the other runs). `faulted` is set once every run's fault is in: from there on they only wait."""
    cut = pair.hosts[1]
    long = ("--collective-timeout", str(LONG_COLLECTIVE))
    runs: dict[str, Hang] = {}
    with contextlib.ExitStack() as stack:
        site = stack.enter_context(on_one_host(cluster, cluster.hosts[2], {"sitecustomize.py": block_data_loading(3)}))
        specs = {"data, long": (cluster, LONG_T, long, "data"), "data, default": (cluster, DEFAULT_T, (), "data"),
                 "sigstop, long": (cluster, LONG_T, long, "sigstop"),
                 "sigstop, default": (cluster, DEFAULT_T, (), "sigstop"),
                 "tc, long": (pair, LONG_T, long, "tc"), "tc, default": (pair, DEFAULT_T, (), "tc")}
        # Every run still going is stopped, whatever went wrong. In a CI run the fixture failed and its kill raised
        # on the first run: the others could train on through the rest of the suite (57 minutes; a speed test
        # after them failed).
        stack.callback(lambda: [h.run.stop() for h in runs.values()])
        stack.callback(_undrop, pair, cut)
        waiters: dict[str, threading.Thread] = {}

        def start(names: list[str]) -> None:
            for name in names:
                c, t, extra, fault = specs[name]
                env = {"PYTHONPATH": site} if fault == "data" else None
                out = tmp / name.replace(", ", "-")
                earlier = _seed_earlier(out)
                h = Hang(Run(c, out, timeout=t, extra=extra, env=env), c,
                         float(t) if extra else max(t, max(30, t) + 15.0), fault, earlier=earlier)
                runs[name] = h
                waiters[name] = _waiter(h)

        # The two tc runs first, the other four once they train: sixteen ranks starting at once on 2 cores
        # took one run's engine past bench's 120 s wait for a first step (a CI run), which is not what is tested.
        start([n for n in specs if specs[n][3] == "tc"])
        started = time.monotonic()
        deadline = started + START_LIMIT_S
        tcs = list(runs.values())
        while any(h.fault_at is None for h in runs.values()) or len(runs) < len(specs):
            if len(runs) < len(specs) and all(h.fault_at is not None for h in tcs):
                start([n for n in specs if n not in runs])
            assert time.monotonic() < deadline, {n: h.fault_at for n, h in runs.items()}
            for name, h in runs.items():
                assert h.exited_at is None or h.fault_at is not None, (name, h.run.stderr[-3000:])
                if h.fault_at is not None or h.fault == "tc" or (pids := h.run.poll_training()) is None:
                    continue
                h.pids, h.fault_at = pids, time.monotonic()
                TIMINGS[f"{name}: launch -> training"] = h.fault_at - started
                if h.fault == "sigstop":
                    os.kill(pids[1][1], signal.SIGSTOP)
                if name == "sigstop, long":  # from the stall on, a forger who read hub.json (as root: it is 0600)
                    _forge(h)
            if all(h.fault_at is None and (h.run.poll_training() is not None) for h in tcs):
                _drop(pair, cut)  # both tc runs train: one cut for both
                for h in tcs:
                    h.pids, h.fault_at = h.run.poll_training(), time.monotonic()
            time.sleep(0.2)
        if faulted is not None:
            faulted.set()
        for name, h in runs.items():
            waiters[name].join(timeout=max(1.0, h.fault_at + h.watchdog_s + GRACE_S + 120 - time.monotonic()))
            TIMINGS[f"{name}: stall -> exit"] = h.took_s
        for name, h in runs.items():
            with contextlib.suppress(ValueError):
                h.rec = json.loads(h.run.stdout)
                err = h.rec.get("error") or {}
                SEEN[name] = {"line": err.get("reason"), "after_watchdog_s": (err.get("hang") or {}).get(
                    "seconds_after_watchdog"), "ranks_at": [
                    {k: e.get(k) for k in ("rank", "at", "source", "collective", "step", "frame", "error")}
                    for e in err.get("ranks_at") or []]}
            if h.fault == "sigstop" and h.pids and is_our_rank(h.pids[1][1], h.run.run_dir):
                os.kill(h.pids[1][1], signal.SIGKILL)  # only if bench failed to: never leave a stopped process
        for name, h in runs.items():
            # The cut host's rank cannot be stopped by bench: it stops itself once bench's beat stops reaching it.
            h.left = _wait_nothing_left(h.cluster, h.run.run_dir, h.pids, 60 if h.fault == "tc" else 30)
    return runs


def _check_common(h: Hang) -> dict:
    assert h.exited_at is not None, f"bench still running {h.took_s:.0f} s after the stall"
    assert h.run.proc.returncode == 1, h.run.stderr[-3000:]
    assert h.rec is not None, h.run.stdout[-2000:]
    results.validate(h.rec)
    assert h.rec["status"] == "failed"
    assert h.took_s <= h.watchdog_s + GRACE_S, (h.took_s, h.watchdog_s)
    assert h.left == [], h.left
    assert h.head_ssh == [], h.head_ssh  # bench exits once nothing it started is left, here too
    assert "Traceback" not in h.run.stderr
    assert results.read(os.path.join(h.run.run_dir, "results.jsonl")).records == [h.rec]
    earlier, earlier_bytes = h.earlier
    assert earlier.read_bytes() == earlier_bytes
    for p in Path(h.run.run_dir).rglob("*"):  # the stacks and flight records too: no secret from the environment
        if p.is_file():
            assert SECRET.encode() not in p.read_bytes(), p
    err = h.rec["error"]
    assert err["reason"] == h.line()[len("bench: failed: "):]
    return err


def _at(err: dict) -> dict[int, dict]:
    return {e["rank"]: e for e in err["ranks_at"]}


def _waited_together(err: dict, ranks: list[int]) -> tuple[str, int]:
    """The ranks were all in one all_reduce: its (op, number)."""
    at = _at(err)
    found = {(at[r]["collective"]["op"], at[r]["collective"]["seq"]) for r in ranks if at[r]["at"] == "waiting"}
    assert len(found) == 1 and all(at[r]["at"] == "waiting" for r in ranks), err["ranks_at"]
    ((op, seq),) = found
    assert op == "all_reduce" and seq > 0
    return op, seq


@pytest.mark.parametrize("variant", ["long", "default"])
def test_blocked_data_loading_is_named_with_its_frame(hangs, cluster, variant):
    h = hangs[f"data, {variant}"]
    err = _check_common(h)
    host = cluster.hostnames[2]
    assert err["rank"] == 2 and err["host"] == host, err
    op, seq = _waited_together(err, [0, 1])
    line = h.line()
    m = re.fullmatch(rf"bench: failed: hung at step 3: rank 2 on {host} was in data loading "
                     rf"\(bench/worker/data\.py:\d+\); 2 ranks waited in {op} #{seq}", line)
    assert m, line
    me = _at(err)[2]
    assert me["at"] == "outside" and me["odd"] and me["source"] == "stack" and me["step"] == 3, me
    assert me["frame"].startswith("bench/worker/data.py:") and "crop_flip" in me["code"], me
    others = [_at(err)[r] for r in (0, 1)]
    # long: they answered the stack request, still waiting; default: their own timeout ended them first.
    assert {o["source"] for o in others} == ({"stack"} if variant == "long" else {"report"}), others
    assert not any(o["odd"] for o in others)
    # torch's flight recorder, dumped by the answering ranks: rank 2 issued one collective less.
    if variant == "long":
        assert "flight recorder" in me.get("behind", ""), me


@pytest.mark.parametrize("variant", ["long", "default"])
def test_sigstopped_rank_is_named_as_stopped(hangs, cluster, variant):
    h = hangs[f"sigstop, {variant}"]
    err = _check_common(h)
    host = cluster.hostnames[1]
    assert err["rank"] == 1 and err["host"] == host, err
    op, seq = _waited_together(err, [0, 2])
    assert re.fullmatch(rf"bench: failed: hung at step \d+: rank 1 on {host} did not answer: its process was stopped "
                        rf"\(state T: SIGSTOP, or a debugger\); 2 ranks waited in {op} #{seq}", h.line()), h.line()
    me = _at(err)[1]
    assert me["at"] == "no answer" and me["odd"] and me["process_state"].startswith("T"), me
    assert h.pids[1][1] in err["killed"][cluster.hosts[1]], err  # stopped by bench, by PID, on its host


@pytest.mark.parametrize("variant", ["long", "default"])
def test_dropped_host_is_named_unreachable(hangs, variant):
    h = hangs[f"tc, {variant}"]
    err = _check_common(h)
    pair = h.cluster
    host = pair.hostnames[1]
    assert err["rank"] == 1 and err["host"] == host, err
    assert pair.hosts[1] in err["unreachable"], err
    # Both wait in an all_reduce; a rank can be one collective ahead (its last message in, its peer's lost).
    at = _at(err)
    assert all(at[r]["at"] == "waiting" and at[r]["collective"]["op"] == "all_reduce" for r in (0, 1)), at
    assert abs(at[0]["collective"]["seq"] - at[1]["collective"]["seq"]) <= 1, at
    assert re.match(rf"bench: failed: hung at step \d+: rank 1 on {host}: its host stopped answering \(.+\)"
                    rf".*waited in all_reduce #\d+", h.line()), h.line()
    # The host that was not cut answered the stack request ("long") or reported its own timeout ("default"); the
    # cut one's gloo may give up first (its socket's read times out) and report, or still be waiting.
    assert at[0]["source"] == ("stack" if variant == "long" else "report"), at


def teardown_module(module) -> None:
    if TIMINGS:
        print("\nhangs, seconds: " + json.dumps({k: round(v, 1) for k, v in TIMINGS.items()}))
    for name, seen in SEEN.items():
        print(f"{name}: {json.dumps(seen)}")
