"""A run's teardown: every resource's stop step, in reverse order of creation, each guarded, timed and
bounded (docs/architecture.md, "Teardown").

Steps go on an ``ExitStack`` *before* their resource starts, so an interrupt in the middle of a start
still stops it; one failing step never skips the others; a watchdog SIGKILLs what is left once the
teardown has run ``TEARDOWN_BOUND_S`` seconds. Resource-agnostic: a step and a last resort are plain
callables (a backend's ``stop``, ``down``, ``kill_now``).
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import ExitStack

log = logging.getLogger("onceproof.runner")

TEARDOWN_BOUND_S = 60.0  # docs/architecture.md, "Teardown": ends within this many s of its start, whatever hangs


class Teardown:
    """The run's resources, torn down in reverse order of creation through an ``ExitStack``.

    Every step is guarded on its own (an exception in ``workload.stop`` must not skip ``cluster.down``),
    timed, and recorded in ``errors``. A watchdog SIGKILLs every process group still registered with
    :meth:`track` once ``TEARDOWN_BOUND_S`` seconds have passed, which unblocks any step waiting on them.
    """

    def __init__(self, stack: ExitStack):
        self.stack = stack
        self.errors: list[str] = []
        self.steps: dict[str, float] = {}
        self.interrupted = False
        self._kills: list = []
        self._watchdog: threading.Timer | None = None

    def push(self, name: str, fn) -> None:
        """Run ``fn()`` at teardown (LIFO); its failure is recorded and the next step still runs."""
        def step():
            t = time.monotonic()
            try:
                fn()
            except BaseException as e:  # noqa: BLE001 - one failed step must not skip the others
                log.exception("teardown step %s failed", name)
                self.errors.append(f"{name}: {e!r}")
            self.steps[name] = round(time.monotonic() - t, 1)
        self.stack.callback(step)

    def track(self, kill) -> None:
        """``kill()`` is the watchdog's last resort for one resource (SIGKILL its process group)."""
        self._kills.append(kill)

    def begin(self) -> None:
        """Start the bounded-time watchdog (called once, when teardown starts)."""
        def last_resort():
            log.error("teardown still running after %.0fs: SIGKILL everything left", TEARDOWN_BOUND_S)
            self.errors.append(f"watchdog: teardown exceeded {TEARDOWN_BOUND_S:.0f}s; killed what was left")
            for k in self._kills:
                try:
                    k()
                except Exception:  # noqa: BLE001 - last resort, keep going
                    pass
        self._watchdog = threading.Timer(TEARDOWN_BOUND_S, last_resort)
        self._watchdog.daemon = True
        self._watchdog.start()

    def end(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
