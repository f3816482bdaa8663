"""Ctrl-C and SIGTERM while a launch runs: both stop it; neither cuts short the stop of its ranks.

    with sigterm_interrupts() as got: ...   # SIGTERM raises KeyboardInterrupt like Ctrl-C; got[0] names the signal
    with shielded(): stop_group(...)        # SIGINT and SIGTERM ignored while the ranks are being stopped
"""

from __future__ import annotations

import contextlib
import signal


@contextlib.contextmanager
def sigterm_interrupts():
    """SIGTERM (kill, `timeout`, a scheduler) stops the run like Ctrl-C; yields [signal name]."""
    got = ["SIGINT"]

    def handler(signum, frame):
        got[0] = signal.Signals(signum).name
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: leave signals alone
        yield got
        return
    try:
        yield got
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def shielded():
    """Ignore SIGINT and SIGTERM while the ranks are being stopped."""
    try:
        previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:
        yield
        return
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
