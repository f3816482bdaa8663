"""Exceptions that map to the exit-status contract.

0 ok; 1 the measured thing failed; 2 bad input; 130 interrupted.
"""


class BadInput(Exception):
    """Bad hostfile, config, option or data dir: exit 2 with this one line.

    The message names the file:line or the option, e.g.
    ``hostfiles/x:3: duplicate host 'node1'`` or ``--micro-batch: must be > 0``.
    """


class RunFailed(Exception):
    """The measured thing failed (a rank died, validate FAIL): exit 1."""


class NoRoom(BadInput):
    """The results root's file system cannot hold even the smallest run (bench.core.storage.check_room).

    Bad input before anything ran (exit 2); a sweep that meets it after its
    first point turns it into StorageFailed (the disk filled during the sweep).
    """

    def __init__(self, message: str, path: str, free_bytes: int):
        super().__init__(message)
        self.path, self.free_bytes = path, free_bytes


class StorageFailed(RunFailed):
    """A file of the run could not be written (disk full, read-only, directory gone): exit 1.

    ``record`` is the record that could not be appended, if any: bench prints
    it whole on stdout so that nothing measured is lost. ``kept`` says what
    is already safe (a sweep's finished points).
    """

    def __init__(self, path: str, strerror: str, record: dict | None = None, kept: str | None = None):
        super().__init__(f"{path}: {strerror}")
        self.path, self.strerror, self.record, self.kept = path, strerror, record, kept

    def line(self) -> str:
        said = [f"cannot write {self.path} ({self.strerror})"]
        if self.record is not None:
            said.append("the record it would have held is on stdout: nothing measured is lost")
        if self.kept:
            said.append(self.kept)
        return "; ".join(said)


EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_UNKNOWN = 3  # bench validate: nothing to drain, but a node could not be checked (a scheduler must not trust it)
EXIT_INTERRUPTED = 130
