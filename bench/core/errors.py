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


EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130
