"""What bench and the ranks of one launch say to each other: one TCP connection per rank, one JSON object a line.

    from bench.core.conversation.hub import Hub
    from bench.core.conversation.phone import Phone

    with Hub.open(run_dir, toward=[master_addr, *hosts], world=8) as hub:   # bench: listens, writes hub.json
        ...; hub.done_count(); hub.ask(ranks, wait_s); hub.ranks[r].status; hub.trouble(); hub.flush_log()
    phone = Phone.dial(run_dir, rank, host)             # a rank: reads hub.json by name, connects, says hello
    phone.listen(on_orphan, on_request); phone.enter("steps", timeout_s, per_rank); phone.done("ok")

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
calls on_orphan. Barriers: bench.core.conversation.barriers (their count is
bench's plan, never a rank's word). bench's hub runs one thread (selectors);
the ranks' messages are a few per rank per launch, its beats one line per
rank every BEAT_S; bench checks the thread on every tick of its watch.

No cache of a network filesystem touches any of this: the one file is
hub.json, written (temporary name, fsync, rename) before any rank starts,
so no client has looked its name up as missing. Measured
(tests/multihost/test_faults.py, 2026-12-05, load average about 10): bench
SIGKILLed, every rank gone in 0.2 s (local), 3.0 s (Open MPI) and 4.7 s
(pdsh), where the file the ranks reread every 2 s took 22.5-22.6 s; a
host whose link is cut ends its rank on the missing beat after 20 s.

The port is reachable from every node, and hub.json sits where every user
who reads --out could look: so hub.json is 0600, and every byte that comes
in is a stranger's until its hello proved it a rank of this launch (hub.py,
wire.py; docs/reliability.md, "Who can reach the hub"). The limits, each
with its reason (measured 2026-12-06 on this project's runs):

- MAX_LINE 1 MiB, a rank's longest message. The largest real ones: a stack
  answer 9.9 KB (4 threads; 60 frames of at most 160 characters each is
  18.6 KB a thread at worst, so 1 MiB holds 56 such threads), a failed
  rank's done report 0.8 KB, a successful rank's figures 8.2 KB (a file,
  not a message). torch's TCPStore caps a value at 8 MiB. A rank never
  sends more: the phone cuts its own (phone.fit).
- What bench keeps of a rank's words: checked copies about that rank
  alone (words.py: a flat progress under 1 KB, a report under 8 KB, the
  latest answer to each stack request, 9.9 KB in real runs), at most
  words.KEPT_MAX 512 KiB a rank (then it is dropped): a line of 1 MiB
  keeps what its schema allows, not its length. The watchdog's liveness
  is each running rank's latest progress (Hub.oldest_progress).
- MAX_HELLO 4 KiB, a line before hello: a hello is under 200 bytes.
- HELLO_S 10 s from accept to hello: a rank sends its hello with its
  connect, and 8,000 ranks' hellos took the hub 0.9 s
  (benchmarks/hub_scale.py). OpenSSH's LoginGraceTime is the model.
- MAX_PENDING 256 connections without a hello at once, PER_PEER 128 from
  one source (an address; an IPv6 /64), the oldest of that source closed
  past PER_PEER, and past MAX_PENDING the oldest of the source holding the
  most (strangers.py): the hub reads
  what came before it accepts more, ACCEPT_BATCH 64 a round, so a rank's
  connection is pending for one round (a storm of 8,000 connects from one
  process included: benchmarks/hub_scale.py); 256 descriptors is a quarter
  of the 1,024 bench adds to the ranks' count when it raises its open-files
  limit. A rank whose connection closes before bench's welcome dials again
  until its launch's start timeout (hub.json's start_s; DIAL_S where bench
  cannot be reached at all): a flood can delay a launch, not end it.
- MAX_OUT 64 KiB waiting to go to one peer: beats do not pile up (one
  waiting is as good as two), so what waits is a go per barrier (at most
  MAX_BARRIERS 64 of at most MAX_NAME 200 characters: under 26 KB), a
  welcome, a stack request. A peer past it stopped reading: it is dropped.
- SNDBUF 32 KiB, the send buffer bench asks the kernel for on every
  accepted connection (Linux doubles it: 64 KiB; less where
  net.core.wmem_max is lower). Without it the kernel grows a socket's
  buffer up to net.ipv4.tcp_wmem's maximum (4 MiB here, more on tuned
  nodes) before bench's own MAX_OUT sees a byte, so what a peer that
  stopped reading holds was up to the kernel's autotuning. With it, what
  one peer holds is at most MAX_OUT + twice SNDBUF (+ what its own receive
  window took), whatever the sysctls say. The hub sends only short lines.
- ACCEPT_PAUSE_S 0.5 s without accepting after an accept that failed with
  no descriptor left and no pending connection to close (the kernel keeps
  the connects queued, 4,096 of them). A pending connection is closed for
  a descriptor only past STRANGER_S 1 s without a hello: a rank's comes with
  its connect, and Linux fails accept for want of a descriptor even when
  nobody waits, so the one just taken must not be the one that goes.
- LOG_LINES 1,000 lines in logs/hub.log, then one line per thousand more,
  for strangers' lines and, apart, for bench's and the ranks' own (a hello
  with the token is no stranger's): a flood of strangers must not fill
  --out's disk, nor push out the evidence. Every field of a line is
  escaped (wire.escape), and a hello whose host holds a control
  character is refused: it never reaches ranks.json.
- SEND_S 20 s for a rank's send to complete (ORPHAN_AFTER_S: a bench that
  reads nothing for that long is as gone as one that does not beat); a
  send cut short breaks the connection (half a line would glue to the next).
- DONE_ACK_S 2 s a rank waits, after its done and its half-close, for
  bench to close in turn (bench read the done) before it exits.

Why not ZeroMQ (pyzmq 27.3, libzmq 4.3.5, tried 2026-12-06): its
MAXMSGSIZE and high-water marks would replace lines.py's framing, but the
hello, the token, the rank checks, the barriers and every field's check
stay ours (CURVE authenticates bench to the ranks, not the ranks to bench,
without keys handed out through the same file as the token); a DEALER
reconnects in silence, so a rank learns that bench died from a socket
monitor, not from the kernel's close (the 0.2-4.7 s above); a ZMTP peer
that never speaks is held 30 s (HANDSHAKE_IVL) with no cap on how many;
at an open-files limit of 64 with 80 clients libzmq lived but spent 0.24 s
of CPU every 2 s retrying. And it is 3.1 MB of compiled code that every
rank imports before torch (import 26-365 ms at load 10; this package's
phone 18 ms). Standard library it stays.
"""

NAME = "hub.json"
BEAT_S = 2.0
ORPHAN_AFTER_S = 20.0
QUIET_S = 20.0        # an independent launch's barrier: no new rank for this long, and every one that started is in
DIAL_S = 20.0         # how long a rank tries to reach bench before it calls itself orphaned
MAX_LINE = 1 << 20
MAX_HELLO = 4096
HELLO_S = 10.0
MAX_PENDING = 256
PER_PEER = 128
ACCEPT_BATCH = 64
MAX_OUT = 64 << 10
SNDBUF = 32 << 10
MAX_BARRIERS = 64
MAX_NAME = 200
ACCEPT_PAUSE_S = 0.5
STRANGER_S = 1.0
LOG_LINES = 1000
SEND_S = 20.0
DONE_ACK_S = 2.0
DUMPING = "being dumped"  # a stack answer's flight_recorder reason until the rank's second answer says what it dumped
