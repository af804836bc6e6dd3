"""SIGINT and SIGTERM as an :class:`Interrupted` exception, installed explicitly.

Why explicitly: a process started in the background by a non-interactive shell (``cmd &`` in a script,
most CI runners) inherits SIGINT as *ignored*, and CPython then does not install its own
KeyboardInterrupt handler (Python docs, ``signal`` module: "SIGINT is translated into a
KeyboardInterrupt exception if the parent process has not changed it"). Such a harness would go on
running after Ctrl-C. SIGTERM (``kill``, CI timeouts) tears down the same way, and says so.
"""

from __future__ import annotations

import signal


class Interrupted(KeyboardInterrupt):
    """Raised in the main thread by SIGINT or SIGTERM; ``str()`` names the signal for the results."""


def _raise(signum, _frame):
    raise Interrupted("interrupted (Ctrl-C)" if signum == signal.SIGINT else "terminated (SIGTERM)")


def install() -> None:
    """Route SIGINT and SIGTERM to :class:`Interrupted`, whatever disposition was inherited."""
    signal.signal(signal.SIGINT, _raise)
    signal.signal(signal.SIGTERM, _raise)


def reason(e: BaseException) -> str:
    """Human reason of an interrupt: the signal for :class:`Interrupted`, Ctrl-C for a plain one."""
    return str(e) if isinstance(e, Interrupted) and str(e) else "interrupted (Ctrl-C)"
