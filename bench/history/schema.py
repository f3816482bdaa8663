"""The history store's tables and their version.

One schema, one version (meta.schema_version). A store of another version is
refused in one line naming both versions (no silent reading of columns that
mean something else); a store written by this version is read and written.
The SQL is plain (TEXT, INTEGER, DOUBLE PRECISION, no SQLite-only types), so
that the same statements make a PostgreSQL store.

Tables, one row each per:
  runs        record: run_id, kind, status, time (ISO) and t (epoch s), result, exit status, level, the
              identity it was measured with (JSON: validate runs compare only with the same one), its folder
  nodes       node of a validate: its verdict, action, and whether it was in the drain list
  figures     figure of a GPU (kind gpu, subject host:slot), a node's links (intra, inter) or a pair (pair,
              a+b): value and rel, the value over that run's median of the same kind (a night's common shift out)
  checks      row of a validate: check, node, status, host, gpu; value and reason where not PASS or SKIP
  provenance  field of a node in a run: driver, cuda, image, kernel, firmware, torch
"""

from __future__ import annotations

VERSION = 1
KEY = "schema_version"

TABLES = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS runs (run_id TEXT PRIMARY KEY, kind TEXT NOT NULL, status TEXT, time TEXT NOT NULL, "
    "t DOUBLE PRECISION NOT NULL, result TEXT, exit_status INTEGER, level TEXT, identity TEXT, run_dir TEXT)",
    "CREATE TABLE IF NOT EXISTS nodes (run_id TEXT NOT NULL, host TEXT NOT NULL, verdict TEXT, action TEXT, "
    "drained INTEGER NOT NULL, PRIMARY KEY (run_id, host))",
    "CREATE TABLE IF NOT EXISTS figures (run_id TEXT NOT NULL, kind TEXT NOT NULL, subject TEXT NOT NULL, host TEXT, "
    "gpu INTEGER, value DOUBLE PRECISION NOT NULL, rel DOUBLE PRECISION, PRIMARY KEY (run_id, kind, subject))",
    "CREATE TABLE IF NOT EXISTS checks (run_id TEXT NOT NULL, check_name TEXT NOT NULL, node TEXT NOT NULL, "
    "status TEXT NOT NULL, value TEXT, reason TEXT, host TEXT, gpu INTEGER)",
    "CREATE TABLE IF NOT EXISTS provenance (run_id TEXT NOT NULL, host TEXT NOT NULL, field TEXT NOT NULL, "
    "value TEXT, PRIMARY KEY (run_id, host, field))",
    "CREATE INDEX IF NOT EXISTS runs_t ON runs (t)",
    "CREATE INDEX IF NOT EXISTS nodes_host ON nodes (host)",
    "CREATE INDEX IF NOT EXISTS figures_subject ON figures (kind, subject)",
    "CREATE INDEX IF NOT EXISTS checks_run ON checks (run_id)",
)
CHILDREN = ("nodes", "figures", "checks", "provenance")  # every table keyed by run_id, besides runs


class WrongVersion(Exception):
    """A store of a schema version this bench does not read; str() is the one line."""


def table_names(conn) -> set[str]:
    """The store's tables: SQLite's catalogue, or the connection's own (bench.history.pg)."""
    if hasattr(conn, "table_names"):
        return conn.table_names()
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def ensure(conn, where: str) -> int:
    """Make the tables in a new store; check an existing one's version. Returns the version; raises WrongVersion."""
    names = table_names(conn)
    if not names:
        # Made in one write transaction, checked again inside it: two benches making one store at once make it once.
        conn.execute("BEGIN IMMEDIATE")
        try:
            if "meta" not in table_names(conn):
                for sql in TABLES:
                    conn.execute(sql)
                conn.execute("INSERT INTO meta (key, value) VALUES (?, ?)", (KEY, str(VERSION)))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        names = {"meta"}
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (KEY,)).fetchone() if "meta" in names else None
    if row is None:
        raise WrongVersion(f"{where} holds tables but no schema version: not a bench history store")
    try:
        version = int(row[0])
    except ValueError:
        raise WrongVersion(f"{where}: schema version {row[0]!r} is not a number") from None
    if version != VERSION:
        later = "a later bench wrote it: use that bench" if version > VERSION else \
            "an older bench wrote it: import its results folders into a new store (bench history import DIR)"
        raise WrongVersion(f"{where} is history schema version {version}; this bench reads version {VERSION} ({later})")
    return version
