"""The same store on a PostgreSQL server, by URL: several heads and every node's prolog writing to one place.

    conn = open_url("postgresql://bench@db.example/bench")   # the tables made or their version checked

The schema's statements are the SQLite store's (bench.history.schema: plain
SQL types); this connection speaks the few words the two differ in, so that
the writer and the queries are the same code: `?` parameters as `%s`,
`IS ?` as `IS NOT DISTINCT FROM %s` (PostgreSQL compares NULL only so), and
BEGIN IMMEDIATE (SQLite's one writer at a time) as BEGIN and a transaction
advisory lock, so two writers take turns as they do on SQLite. psycopg 3
(requirements-test.lock) is imported only here, only when a URL is given.
"""

from __future__ import annotations

from bench.history import schema

LOCK_KEY = 560056  # the advisory lock writers take turns by; any number no other program on the server uses


class Conn:
    """A psycopg connection in autocommit mode, with sqlite3.Connection's execute, executemany and close."""

    def __init__(self, conn) -> None:
        self._c = conn

    @staticmethod
    def sql(text: str) -> str:
        return text.replace(" IS ?", " IS NOT DISTINCT FROM ?").replace("?", "%s")

    def execute(self, text: str, params: tuple = ()):
        if text.strip().upper() == "BEGIN IMMEDIATE":
            self._c.execute("BEGIN")
            return self._c.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
        return self._c.execute(self.sql(text), params)

    def executemany(self, text: str, rows: list[tuple]):
        cur = self._c.cursor()
        cur.executemany(self.sql(text), rows)
        return cur

    def table_names(self) -> set[str]:
        return {r[0] for r in self._c.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = "
                                              "current_schema()")}

    def close(self) -> None:
        self._c.close()


def open_url(url: str, unavailable: type[Exception]) -> Conn:
    """The store at url; unavailable(one line) where psycopg is missing, the server refuses or the version differs."""
    try:
        import psycopg
    except ImportError:
        raise unavailable(f"{_safe(url)}: a PostgreSQL store needs psycopg (pip install psycopg, as "
                          "requirements-test.lock pins it)") from None
    try:
        conn = Conn(psycopg.connect(url, autocommit=True, connect_timeout=10))
    except psycopg.Error as e:
        raise unavailable(f"{_safe(url)}: cannot connect ({str(e).strip().splitlines()[0]})") from None
    try:
        schema.ensure(conn, _safe(url))
    except schema.WrongVersion as e:
        conn.close()
        raise unavailable(str(e)) from None
    except psycopg.Error as e:
        conn.close()
        raise unavailable(f"{_safe(url)}: {str(e).strip().splitlines()[0]}") from None
    return conn


def _safe(url: str) -> str:
    """The URL without its password, for a line a person reads."""
    head, sep, rest = url.partition("://")
    if "@" in rest.split("/")[0]:
        cred, _, host = rest.partition("@")
        return f"{head}{sep}{cred.split(':')[0]}@{host}"
    return url
