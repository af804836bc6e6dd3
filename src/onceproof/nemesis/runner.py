"""Executes a fault schedule in a background thread and records every op in ``nemesis.jsonl``.

Ops: ``{"type": "invoke", "f": <fault>}`` then ``{"type": "info", "f": <fault>, "outcome": ...,
"target": ..., "evidence": {...}}`` (Jepsen records nemesis completions as ``info``). The first fault
waits until the pipeline has committed its first batch, so no fault hits a pipeline still starting.

Recovery between faults: every later fault also waits (at most ``recover_max_s``) until the pipeline
has committed a batch *after the previous fault ended*. Jepsen overlaps faults freely; here every fault
must show evidence that it took effect, and most of the windows it aims at (an in-flight sink task, the
pre-commit and commit-notification windows, the commit window) exist only in a running micro-batch. A
fault invoked while the driver is still restarting from the previous one can wait out its whole hold
with no batch to hit (seen in CI: ``commit-delay:notify`` right after a commit-window kill on a loaded
machine). The wait is recorded in the invoke op (``recovered_after_s``, or ``stalled_s`` when the
pipeline did not recover in time and the fault went ahead anyway).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable

from onceproof.nemesis.fault import Fault, NemesisContext, perform
from onceproof.store.history import HistoryWriter

log = logging.getLogger("onceproof.nemesis")


class NemesisRunner:
    """Runs ``schedule`` (``[(at_s, name)]``) against ``faults`` until done or :meth:`stop_and_heal`.

    ``recover_max_s`` (s) bounds the wait for a committed batch between two faults (module docstring);
    ``rng_keys`` and ``holds``, per op, its target RNG's key and its own hold (s; ``None``: ``ctx.hold_s``).
    """

    def __init__(self, faults: dict[str, Fault], schedule: list[tuple[float, str]], ctx: NemesisContext,
                 history: HistoryWriter, seed: int, on_op: Callable[[dict], None] | None = None,
                 recover_max_s: float = 90.0, rng_keys: list[str | None] | None = None,
                 holds: list[float | None] | None = None):
        self.faults, self.schedule, self.ctx, self.history = faults, schedule, ctx, history
        self.rng_keys = rng_keys or []
        self.holds = holds or []  # per op, its own hold (s) or None: ctx.hold_s
        self.seed, self.recover_max_s = seed, recover_max_s
        self.on_op = on_op or (lambda op: None)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.ops: list[dict] = []
        self.started_at: float | None = None  # time.monotonic() at the first committed batch: the plan's 0 s
        # (recovery waits ended so far in s, time.monotonic() when the current wait began or None): one
        # tuple, replaced whole by the nemesis thread, so fault_time_s never sees half an update
        self._waits: tuple[float, float | None] = (0.0, None)
        self.in_flight: str | None = None  # the spec being invoked right now
        self._healed = False

    def start(self, progress: Callable[[], int | None]) -> None:
        """Start once the pipeline has committed a batch. ``progress()`` (polled every 0.5 s) is the
        latest committed batchId (Spark's ``commits/N``), ``None`` before the first."""
        self._thread = threading.Thread(target=self._run, args=(progress,), name="nemesis", daemon=True)
        self._thread.start()

    def fault_time_s(self) -> float | None:
        """Seconds since the nemesis started, less the time spent waiting for the pipeline to recover
        between faults; ``None`` before the start. The run's budget counts this
        (``onceproof.nemesis.schedule.keep_running``): a driver that takes 77 s to commit again after a
        commit-window kill (seen in CI) must not cut off the faults after it."""
        if self.started_at is None:
            return None
        waited_s, since = self._waits
        now = time.monotonic()
        current = now - since if since is not None else 0.0
        return now - self.started_at - waited_s - current

    def _wait_progress(self, progress: Callable[[], int | None], after: int | None,
                       max_s: float | None) -> tuple[float, bool] | None:
        """Wait until ``progress()`` is past ``after`` (any batch when ``after`` is ``None``), at most
        ``max_s`` s (``None``: no bound; the run's own budget ends a pipeline that never commits).
        Returns (waited s, recovered), or ``None`` when the run is stopping."""
        t = time.monotonic()
        while True:
            now = progress()
            if now is not None and (after is None or now > after):
                return round(time.monotonic() - t, 2), True
            if max_s is not None and time.monotonic() - t >= max_s:
                return round(time.monotonic() - t, 2), False
            if self._stop.wait(0.5):
                return None

    def _run(self, progress: Callable[[], int | None]) -> None:
        if self._wait_progress(progress, None, None) is None:
            return
        t0 = self.started_at = time.monotonic()
        last = progress()
        for i, (at_s, name) in enumerate(self.schedule):
            if self._stop.wait(max(0.0, t0 + at_s - time.monotonic())):
                return
            # one RNG per op: a fault that draws more or fewer numbers cannot shift the targets of the
            # ops after it, so a seed replays concrete targets (broker id, sink partition); a schedule
            # file (onceproof shrink) carries each op's key, so a subset of a schedule keeps its targets
            rng_key = (self.rng_keys[i] if i < len(self.rng_keys) else None) or f"targets-{self.seed}-{i}"
            invoke = {"process": "nemesis", "type": "invoke", "f": name, "planned_s": at_s, "rng": rng_key}
            if i > 0:
                since = time.monotonic()
                self._waits = (self._waits[0], since)
                waited = self._wait_progress(progress, last, self.recover_max_s)
                self._waits = (self._waits[0] + time.monotonic() - since, None)
                if waited is None:
                    return
                invoke["recovered_after_s" if waited[1] else "stalled_s"] = waited[0]
            # its offset from the plan's 0 s: at_s, later by the previous fault's length and the wait above
            invoke["elapsed_s"] = round(time.monotonic() - t0, 3)
            fault = self.faults[name]
            self.in_flight = name
            self.history.append(invoke)
            hold = self.holds[i] if i < len(self.holds) else None
            ctx = self.ctx if hold is None else dataclasses.replace(self.ctx, hold_s=hold)  # stop shared
            op = self.history.append(perform(fault, ctx, name, rng_key, cut_short="interrupted by the end of the run"))
            self.ops.append(op)
            self.in_flight = None
            self.on_op(op)
            last = progress()

    def close(self) -> None:
        """Start no new fault; one in flight goes on to its end (each fault bounds its own length) and
        stays in effect until :meth:`stop_and_heal`. For the end of the run's budget: cutting the last
        fault short would leave it unexercised and the verdict ``unknown`` for want of a few seconds."""
        self._stop.set()

    def stop_and_heal(self, join_timeout_s: float = 120.0) -> list[str]:
        """Stop injecting, wait for an in-flight fault (≤ ``join_timeout_s`` s), then heal every fault.

        Returns the heal errors. A second call heals again only if the first one left errors or the
        teardown flag (``ctx.teardown``) changed nothing to do; it never raises.
        """
        self._stop.set()
        self.ctx.stop.set()
        if self._thread is not None:
            self._thread.join(timeout=join_timeout_s)
            if self._thread.is_alive():
                log.warning("a fault was still in flight after %.0fs; healing anyway", join_timeout_s)
        if self._healed:
            return []
        errors = []
        for name, f in self.faults.items():
            try:
                f.heal(self.ctx)
                self.history.append({"process": "nemesis", "type": "info", "f": "heal", "fault": name})
            except Exception as e:  # noqa: BLE001 - keep healing the others
                errors.append(f"{name}: {e!r}")
        self._healed = not errors
        return errors
