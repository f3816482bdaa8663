"""What bench and the ranks of one launch say to each other: one TCP connection per rank, one JSON object a line.

    from bench.core.conversation.hub import Hub
    from bench.core.conversation.phone import Phone

    with Hub.open(run_dir, toward=master_addr) as hub:   # bench: listens, writes run_dir/hub.json, beats
        ...; hub.done_count(); hub.ask(ranks, wait_s); hub.ranks[r].status
    phone = Phone.dial(run_dir, rank, host)             # a rank: reads hub.json by name, connects, says hello
    phone.listen(on_orphan, on_request); phone.enter("steps", count, timeout_s); phone.done("ok")

Everything that coordinates a launch goes here, never through --out: which
ranks started (hello), when each began measuring (started), start barriers
(enter, go), a rank's end and its failure report (done), bench's pulse
(beat), and a hung run's stack request and each rank's answer (stacks?,
stacks). On a network filesystem a file one client writes is seen by another
only once its caches let it (NFS keeps a missing name missing for up to 60 s,
listings and attributes for 3-60 s), and every rank polling one directory is
a metadata server's load that grows with ranks x seconds. Here a rank makes
one connection; the shared directory keeps what a person reads later.

The pulse is the connection itself: bench beats every BEAT_S, and a rank
whose connection closes (bench's process died: its kernel closes the socket)
or that hears no beat for ORPHAN_AFTER_S (bench's host or the network gone)
calls on_orphan. A barrier is released by the hub once `count` ranks entered
or ended (a rank that failed or whose connection closed before it entered
counts in, so nobody waits for it), or, for per-rank barriers, once every
rank that said hello is in and none said hello for QUIET_S (ranks that never
started: an import that exited, a node whose Python is broken); after that
the launch is settled and its later barriers do not wait for them again.
bench's hub runs one thread (selectors); the ranks' messages are a few per
rank per launch, its beats one line per rank every BEAT_S.

No cache of a network filesystem touches any of this: the one file is
hub.json, written (temporary name, fsync, rename) before any rank starts,
so no client has looked its name up as missing. Measured
(tests/multihost/test_faults.py, 2026-12-05, load average about 10): bench
SIGKILLed, every rank gone in 0.2 s (local), 3.0 s (Open MPI) and 4.7 s
(pdsh), where the file the ranks reread every 2 s took 22.5-22.6 s; a
host whose link is cut ends its rank on the missing beat after 20 s.
"""

NAME = "hub.json"
BEAT_S = 2.0
ORPHAN_AFTER_S = 20.0
QUIET_S = 20.0        # an independent launch's barrier: no new rank for this long, and every one that started is in
DIAL_S = 20.0         # how long a rank tries to reach bench before it calls itself orphaned
