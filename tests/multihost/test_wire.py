"""Sent by the algorithm against the wire: bench's per-backend factors, checked where the OS counts the bytes.

Each namespace host's vb0 is one end of a veth pair: its tx_bytes is every
byte the host sent, headers included. A bare torch.distributed loop
(tests/multihost/wire_loop.py, no bench code) runs each collective at 8 MB
per rank between 2 and between 3 hosts; the bytes all hosts sent per
iteration, over n x S, must be gloo's factor in bench.core.collectives.SENT
to within the headers (measured 1.001-1.009x). Before, the table held the
ring's figures for every backend: gloo's reduce_scatter (an all-reduce of
the whole input) put 2x the bytes on the wire, its reduce 2x at n = 2.

Then a real 2-host ZeRO-3 run (its reduce-scatters are where the old figure
was wrong): the record's wire bytes per rank and step, read by the ranks
from the same counters, agree with what bench says the algorithm sent.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.core import collectives, results
from tests.conftest import FAST, bench, one_json

pytestmark = [pytest.mark.multihost, pytest.mark.slow]

LOOP = Path(__file__).with_name("wire_loop.py")
PER_RANK = 8 << 20
OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all", "send")
GATHERED = ("all_gather", "reduce_scatter")  # S is n x the per-rank buffer (nccl-tests' size)
HEADERS = (0.99, 1.05)                       # wire / sent: TCP/IP headers and a few acknowledgements


def _loop(cluster, n: int, port: int) -> list[dict]:
    hosts = cluster.hosts[:n]
    procs = [subprocess.Popen(["ip", "netns", "exec", cluster.ns_of(h), sys.executable, str(LOOP), str(r), str(n),
                               hosts[0], str(port), "vb0", str(PER_RANK), "5", ",".join(OPS)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**cluster.env, "OMP_NUM_THREADS": "1"})
             for r, h in enumerate(hosts)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    return [json.loads(out) for out, _ in outs]


@pytest.mark.parametrize("n", [2, 3])
def test_gloos_factors_are_what_its_collectives_put_on_the_wire(cluster, n):
    docs = _loop(cluster, n, 29640 + n)
    size = docs[0]["per_rank_bytes"]
    seen = {}
    for op in OPS:
        s = size * n if op in GATHERED else size
        wire = sum(d["tx"][op] for d in docs)
        if op == "send":  # rank 0 sends to rank 1: the sender's factor, the receiver's 0
            sent = s * (collectives.sent_factor("send", n, "gloo") + collectives.sent_factor("recv", n, "gloo"))
        else:
            sent = n * s * collectives.sent_factor(op, n, "gloo")
        seen[op] = wire / sent
    print(f"\nn={n}: wire / sent by the algorithm: " + ", ".join(f"{op} {v:.4f}" for op, v in seen.items()))
    assert all(HEADERS[0] <= v <= HEADERS[1] for v in seen.values()), seen


def test_a_two_host_run_records_its_wire_bytes_beside_the_sent(cluster, out_dir):
    hostfile = cluster.tmp / "hostfile-wire"
    hostfile.write_text("".join(f"{h} slots=1\n" for h in cluster.hosts[:2]))
    proc = bench("--hostfile", str(hostfile), "--launcher", "pdsh", "--dataset", "synthetic", *FAST,
                 "--zero-stage", "3", "--steps", "8", "--timing-warmup", "2", "--no-eval", "--json",
                 "--out", out_dir, env=cluster.env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    rec = one_json(proc.stdout)
    results.validate(rec)
    comm = rec["figures"]["comm"]
    assert comm["sent_by"].startswith("sent by the algorithm") and "SENT[gloo]" in comm["sent_by"]
    wire = comm["wire"]
    assert [(h["host"], h["ranks"], h["source"], sorted(h["nic"])) for h in wire["per_host"]] == [
        (name, 1, "nic", ["vb0"]) for name in sorted(cluster.hostnames[:2])]
    # What the ranks' counters saw leave each host against what bench says ZeRO-3's algorithms sent.
    ring = sum(v["buffer_bytes"] * collectives.sent_factor(op, 2, "nccl") for op, v in comm["ops_rank0"].items())
    print(f"\nZeRO-3, 2 hosts: sent {comm['bytes_per_step'] / 1e6:.3f} MB, wire {wire['bytes_per_step'] / 1e6:.3f} MB "
          f"per rank and step: {wire['over_sent']:.4f}x (the ring's factors would say {ring / 1e6:.3f} MB: wire "
          f"{wire['bytes_per_step'] / ring:.3f}x of it)")
    assert HEADERS[0] <= wire["over_sent"] <= 1.10, wire
