"""Where the history store is, and opening it: SQLite in WAL mode on this head's local disk.

    path = where(None)           # --store, else $VITBENCH_HISTORY, else $XDG_STATE_HOME/vitbench/history.sqlite
    conn = open_store(path)      # Unavailable (one line) where it cannot be kept; the tables made or checked

Not on --out, and refused on a filesystem without POSIX locks: clusters put
--out on NFS or Lustre so that every node sees the runs, and there SQLite's
byte-range locks are not kept across hosts (or not at all: NFS mounted nolock
or local_lock, which fail or lie) and WAL's shared-memory index is one host's
only, so two writers on two heads corrupt the file or hang on a lock that
never frees (ReFrame's results database hung so on NFS, reframe PR #3457).
A store shared by several heads is a server's job, not a file's: a
postgresql:// URL (bench.history.pg), the same schema. The check is the filesystem's type as this host mounted it
(bench.cluster.shared_dir.mount_of, the reading --out's preflight does) and a
real POSIX lock taken on a file beside the store.

Two writers at once lose nothing: WAL lets readers go on beside the one
writer, every write is one BEGIN IMMEDIATE transaction, and a writer waits
up to BUSY_S for the other (VITBENCH_HISTORY_BUSY_S) before it says the store
is locked.
"""

from __future__ import annotations

import errno
import fcntl
import os
import sqlite3

from bench.cluster.shared_dir import fs_text, mount_of
from bench.history import schema

ENV, BUSY_ENV, KEEP_ENV = "VITBENCH_HISTORY", "VITBENCH_HISTORY_BUSY_S", "VITBENCH_HISTORY_KEEP_DAYS"
OFF = ("off", "none", "no")
BUSY_S = 30.0
KEEP_DAYS = 400  # a year of nightly validates and a month over; `bench history prune --keep-days` for less
NETWORK = ("nfs", "nfs4", "cifs", "smb3", "smbfs", "lustre", "gpfs", "beegfs", "ceph", "glusterfs", "9p", "afs",
           "virtiofs", "fuse.sshfs", "fuse.s3fs", "fuse.gcsfuse", "fuse.juicefs", "fuse.glusterfs", "fuse.beegfs")
NO_LOCK_OPTIONS = ("nolock", "local_lock=all", "local_lock=posix", "localflock", "noflock")


class Unavailable(Exception):
    """The store cannot be kept here, and why: str() is the one line."""


def default_path() -> str:
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "vitbench", "history.sqlite")


def where(path: str | None) -> str | None:
    """The store's path (or URL): the one given, else $VITBENCH_HISTORY, else the default; None where it is off."""
    chosen = path if path is not None else os.environ.get(ENV)
    if chosen is not None and chosen.strip().lower() in OFF:
        return None
    return chosen or default_path()


def busy_s() -> float:
    try:
        return max(0.0, float(os.environ.get(BUSY_ENV, BUSY_S)))
    except ValueError:
        return BUSY_S


def keep_days() -> float | None:
    """The retention: runs older than this many days are pruned after each write; 0 or 'forever': kept."""
    raw = os.environ.get(KEEP_ENV, str(KEEP_DAYS)).strip().lower()
    if raw in ("0", "forever", "inf"):
        return None
    try:
        return float(raw)
    except ValueError:
        raise Unavailable(f"{KEEP_ENV}={raw!r} is not a number of days (or 'forever')") from None


def check_filesystem(path: str, mountinfo: str = "/proc/self/mountinfo") -> None:
    """Refuse a store on a filesystem that keeps no POSIX locks across hosts (see the module's words)."""
    folder = os.path.dirname(os.path.abspath(path))
    fs = mount_of(folder, mountinfo)
    if fs is not None:
        opts = set(fs.get("options") or [])
        if fs["type"] in NETWORK or fs["type"].startswith("fuse.") and fs["type"] not in ("fuse.lxcfs",):
            raise Unavailable(f"{path} is on {fs_text(fs)}, a network filesystem: SQLite's locks and WAL's shared "
                              "memory are one host's there, so writers on two hosts corrupt the store; give a path "
                              "on this head's local disk (not --out), or a postgresql:// URL for several heads")
        bad = sorted(opts & set(NO_LOCK_OPTIONS))
        if bad:
            raise Unavailable(f"{path} is on {fs_text(fs)}: mounted {', '.join(bad)}, without POSIX locks across "
                              "hosts; give a path on this head's local disk")
    probe = os.path.join(folder, f".{os.path.basename(path)}.lockcheck")
    try:
        fd = os.open(probe, os.O_CREAT | os.O_RDWR, 0o600)
    except OSError as e:
        raise Unavailable(f"cannot write beside {path} ({e.strerror})") from None
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.lockf(fd, fcntl.LOCK_UN)
    except OSError as e:
        if e.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            raise Unavailable(f"{path}: its filesystem takes no POSIX lock ({e.strerror}); give a path on this "
                              "head's local disk") from None
        # EAGAIN/EACCES: another bench holds the probe this instant: the filesystem locks, which is what was asked.
    finally:
        os.close(fd)


def open_store(path: str | None = None, create: bool = True) -> sqlite3.Connection:
    """The store at path (where(path)): checked, in WAL mode, its tables made or their version checked."""
    chosen = where(path)
    if chosen is None:
        raise Unavailable(f"the history store is off ({ENV}=off)")
    if chosen.startswith(("postgresql://", "postgres://")):
        from bench.history.pg import open_url
        return open_url(chosen, Unavailable)
    if "://" in chosen:
        raise Unavailable(f"{chosen.split('://')[0]}:// is not a store bench keeps: give a file path or a "
                          "postgresql:// URL")
    if not create and not os.path.exists(chosen):
        raise Unavailable(f"no history store at {chosen} (bench validate writes one; bench history import DIR "
                          "fills one from results folders)")
    try:
        os.makedirs(os.path.dirname(os.path.abspath(chosen)), exist_ok=True)
    except OSError as e:
        raise Unavailable(f"cannot make the folder of {chosen} ({e.strerror})") from None
    check_filesystem(chosen)
    try:
        conn = sqlite3.connect(chosen, timeout=busy_s(), isolation_level=None)
        conn.execute(f"PRAGMA busy_timeout = {int(busy_s() * 1000)}")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise Unavailable(f"{chosen}: SQLite would not keep it in WAL mode (it said {mode})")
        conn.execute("PRAGMA synchronous = NORMAL")
        schema.ensure(conn, chosen)
    except schema.WrongVersion as e:
        raise Unavailable(str(e)) from None
    except sqlite3.Error as e:
        raise Unavailable(said(e, chosen)) from None
    return conn


def said(e: BaseException, path: str) -> str:
    """A SQLite or OS error as the one line: locked, full, not a database, or its own words."""
    text = str(e)
    low = text.lower()
    if "locked" in low or "busy" in low:
        return f"{path} is locked by another writer past {busy_s():g} s"
    if "full" in low or getattr(e, "errno", None) == errno.ENOSPC:
        return f"{path}'s filesystem is full ({text})"
    if "not a database" in low or "malformed" in low:
        return f"{path} is not a SQLite database bench can read ({text})"
    return f"{path}: {text}"
